//! A state machine over one working folder (issue 44, item 5): random sequences of `descl
//! extract`, `descl match --images`, `descl sfm merge`, image replacements, deleted features
//! files, commands killed at a random point and two commands run at once.
//!
//! The folder holds `images/` (three small images), `feats/` (npz features), `matches/` and
//! `merged.db`. Each step is chosen by a seeded RNG (`StdRng::seed_from_u64`).
//!
//! The invariant, after every command:
//! - one that exits 0 wrote what a from-scratch run on the current inputs writes:
//!   - extract: every features file of its share equals (frames, descriptors) a fresh
//!     `descl extract` of the current images with the same settings;
//!   - match: every pair file equals (matches, distances, inliers, model) a fresh match of a
//!     copy of the current features folder;
//!   - merge: every table of the database equals that of a fresh extract, match and merge of
//!     the current images with the settings the features record (a merge refuses stale
//!     features, matches and replaced images, so a merge that succeeds must equal it);
//! - one that exits non-zero says why on stderr, naming a path of the working folder;
//! - no command panics.
//!
//! For two commands at once, an output may equal the reference of either one's settings, or
//! that of the inputs before the two started (a reader racing a writer). A killed command is
//! not judged. References are cached per (image bytes, settings) for the whole test run.
//!
//! `DESCL_STATE_SEQUENCES=N` and `DESCL_STATE_SEED=S` run N sequences from seed S (sequence k
//! uses seed S + k, so `DESCL_STATE_SEED=S+k DESCL_STATE_SEQUENCES=1` replays it, up to the
//! timing of kills). A failure prints the seed and the sequence so far.

mod common;

use common::{descl, gray_image, COLMAP_TABLES};
use descl::describe::Descriptors;
use descl::frame::Frame;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const NAMES: [&str; 3] = ["0000.png", "0001.png", "0002.png"];
/// Sequences and base seed of the default (CI) run.
const CI_SEQUENCES: u64 = 20;
const CI_SEED: u64 = 44;

/// Operation combinations known to break the invariant (issue 44), tolerated so that CI
/// passes while they are open: (name, does this failure belong to it).
type KnownIssue = (&'static str, fn(&[Op], &str) -> bool);
const KNOWN_ISSUES: &[KnownIssue] = &[];

/// Extraction settings: the describer and the keypoint budget.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Settings {
    rootsift: bool,
    max_keypoints: usize,
}

impl Settings {
    fn random(rng: &mut StdRng) -> Settings {
        Settings {
            rootsift: rng.gen_bool(0.5),
            max_keypoints: if rng.gen_bool(0.5) { 300 } else { 200 },
        }
    }

    fn args(self) -> Vec<String> {
        let m = if self.rootsift { "rootsift" } else { "sift" };
        vec![
            "-m".into(),
            m.into(),
            "--max-keypoints".into(),
            self.max_keypoints.to_string(),
        ]
    }

    /// The settings a features file records.
    fn of_file(path: &Path) -> Option<Settings> {
        let s = descl::io::features::read_features_meta(path)
            .ok()?
            .provenance?
            .settings;
        Some(Settings {
            rootsift: s.model == "rootsift",
            max_keypoints: s.detector.max_keypoints,
        })
    }
}

#[derive(Clone, Debug)]
enum Op {
    Extract {
        s: Settings,
        shard: Option<usize>,
        resume: bool,
    },
    Match,
    Merge,
    /// Replace image `slot` with picture `variant` (other bytes).
    Replace {
        slot: usize,
        variant: u32,
    },
    DeleteFeatures {
        slot: usize,
    },
    Kill {
        op: Box<Op>,
        after_ms: u64,
    },
    Both(Box<Op>, Box<Op>),
}

impl Op {
    /// A command; an extraction mostly with the sequence's `main` settings (so that later
    /// matches and merges have a consistent set to work on).
    fn random_command(rng: &mut StdRng, main: Settings) -> Op {
        match rng.gen_range(0..10) {
            0..=4 => Op::Extract {
                s: if rng.gen_bool(0.7) {
                    main
                } else {
                    Settings::random(rng)
                },
                shard: [None, None, Some(0), Some(1)][rng.gen_range(0..4)],
                resume: rng.gen_bool(0.5),
            },
            5..=7 => Op::Match,
            _ => Op::Merge,
        }
    }

    fn random(rng: &mut StdRng, main: Settings, variants: &[u32; 3]) -> Op {
        match rng.gen_range(0..20) {
            0..=11 => Op::random_command(rng, main),
            12..=13 => {
                let slot = rng.gen_range(0..3);
                let variant = (variants[slot] + rng.gen_range(1..4)) % 4;
                Op::Replace { slot, variant }
            }
            14 => Op::DeleteFeatures {
                slot: rng.gen_range(0..3),
            },
            15..=17 => Op::Kill {
                op: Box::new(Op::random_command(rng, main)),
                after_ms: rng.gen_range(0..=400),
            },
            _ => Op::Both(
                Box::new(Op::random_command(rng, main)),
                Box::new(Op::random_command(rng, main)),
            ),
        }
    }

    fn is_extract(&self) -> bool {
        matches!(self, Op::Extract { .. })
    }
}

/// Image `slot` as picture `variant` (0..4): each (slot, variant) has its own width.
fn picture(slot: usize, variant: u32) -> image::GrayImage {
    gray_image(320 + 16 * slot as u32 + 4 * variant, 240, false)
}

fn hash_bytes(parts: &[&[u8]]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The files of `dir` (not recursive) by name, sorted.
fn files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .filter(|e| e.path().is_file())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Hash of every file (name and bytes) of `dir`.
fn hash_dir(dir: &Path) -> u64 {
    let all: Vec<Vec<u8>> = files(dir)
        .into_iter()
        .flat_map(|(n, p)| [n.into_bytes(), std::fs::read(p).unwrap()])
        .collect();
    hash_bytes(&all.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// What is compared of one pair file.
type PairSig = (
    Vec<[u32; 2]>,
    Vec<f32>,
    Option<Vec<bool>>,
    Option<[[f64; 3]; 3]>,
);

fn pair_files(dir: &Path) -> BTreeMap<String, PairSig> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".npz"))
        .map(|(n, p)| {
            let m = descl::io::matches::read_matches(&p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (n, (m.pairs, m.distances, m.inliers, m.model))
        })
        .collect()
}

/// Runs a command that must succeed (a reference run).
fn must(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reference run {cmd:?} failed: {err}");
}

/// From-scratch outputs, cached for the whole test run.
#[derive(Default)]
struct Refs {
    dir: PathBuf,
    n: usize,
    features: HashMap<(u64, Settings), (Vec<Frame>, Descriptors)>,
    /// By features folder hash: the pair files, or the fresh run's refusal.
    matches: HashMap<u64, Result<BTreeMap<String, PairSig>, String>>,
    merges: HashMap<(Vec<u64>, Settings), Vec<Vec<String>>>,
}

impl Refs {
    fn fresh_dir(&mut self) -> PathBuf {
        self.n += 1;
        self.dir.join(format!("r{}", self.n))
    }

    fn extract(&self, images: &Path, out: &Path, s: Settings) {
        must(
            descl()
                .arg("extract")
                .arg(images)
                .arg("--out")
                .arg(out)
                .args(s.args()),
        );
    }

    /// The fresh features of the image with bytes `hash` in `images`.
    fn features(&mut self, images: &Path, hash: u64, s: Settings) -> &(Vec<Frame>, Descriptors) {
        if !self.features.contains_key(&(hash, s)) {
            let out = self.fresh_dir();
            self.extract(images, &out, s);
            for name in NAMES {
                let h = hash_bytes(&[&std::fs::read(images.join(name)).unwrap()]);
                let stem = name.replace(".png", ".npz");
                let f = descl::io::features::read_features(&out.join(stem)).unwrap();
                self.features.insert((h, s), (f.frames, f.descriptors));
            }
        }
        &self.features[&(hash, s)]
    }

    /// A fresh match of a copy of the features folder `feats`.
    fn matches(&mut self, feats: &Path) -> Result<BTreeMap<String, PairSig>, String> {
        let key = hash_dir(feats);
        if !self.matches.contains_key(&key) {
            let (copy, out) = (self.fresh_dir(), self.fresh_dir());
            std::fs::create_dir_all(&copy).unwrap();
            for (n, p) in files(feats) {
                std::fs::copy(p, copy.join(n)).unwrap();
            }
            let o = descl()
                .args(["match", "--exhaustive", "--images"])
                .arg(&copy)
                .arg("--out-dir")
                .arg(&out)
                .output()
                .unwrap();
            let r = if o.status.success() {
                Ok(pair_files(&out))
            } else {
                Err(String::from_utf8_lossy(&o.stderr).into_owned())
            };
            self.matches.insert(key, r);
        }
        self.matches[&key].clone()
    }

    /// The database tables of a fresh extract, match and merge of `images` with `s`.
    fn merge(&mut self, images: &Path, s: Settings) -> Vec<Vec<String>> {
        let key = (image_hashes(images), s);
        if !self.merges.contains_key(&key) {
            let out = self.fresh_dir();
            let (feats, m, db) = (out.join("f"), out.join("m"), out.join("x.db"));
            self.extract(images, &feats, s);
            must(
                descl()
                    .args(["match", "--exhaustive", "--images"])
                    .arg(&feats)
                    .arg("--out-dir")
                    .arg(&m),
            );
            must(&mut merge_command(&feats, &m, images, &db));
            self.merges.insert(key.clone(), db_tables(&db));
        }
        self.merges[&key].clone()
    }
}

fn image_hashes(images: &Path) -> Vec<u64> {
    NAMES
        .iter()
        .map(|n| hash_bytes(&[&std::fs::read(images.join(n)).unwrap()]))
        .collect()
}

fn db_tables(db: &Path) -> Vec<Vec<String>> {
    COLMAP_TABLES
        .iter()
        .map(|(t, c)| common::db_rows(db, t, c))
        .collect()
}

fn merge_command(feats: &Path, matches: &Path, images: &Path, db: &Path) -> Command {
    let mut c = descl();
    c.args(["sfm", "merge", "--features"])
        .arg(feats)
        .arg("--matches")
        .arg(matches)
        .arg("--images")
        .arg(images)
        .arg("--database")
        .arg(db)
        .arg("--overwrite");
    c
}

/// What a judged command may equal when it ran beside another one.
#[derive(Default)]
struct Alternatives {
    /// (settings, shard) of the extractions whose files may be there.
    extracts: Vec<(Settings, Option<usize>)>,
    /// Features folders a match may have read.
    feats: Vec<PathBuf>,
    /// Settings a merge may have read.
    merges: Vec<Settings>,
}

/// The working folder.
struct Folder {
    root: PathBuf,
    images: PathBuf,
    feats: PathBuf,
    matches: PathBuf,
    db: PathBuf,
    variants: [u32; 3],
}

impl Folder {
    fn new(root: &Path) -> Folder {
        let images = root.join("images");
        std::fs::create_dir_all(&images).unwrap();
        let f = Folder {
            root: root.to_path_buf(),
            images,
            feats: root.join("feats"),
            matches: root.join("matches"),
            db: root.join("merged.db"),
            variants: [0; 3],
        };
        for (slot, name) in NAMES.iter().enumerate() {
            picture(slot, 0).save(f.images.join(name)).unwrap();
        }
        f
    }

    fn command(&self, op: &Op) -> Command {
        let mut c = descl();
        match op {
            Op::Extract { s, shard, resume } => {
                c.arg("extract")
                    .arg(&self.images)
                    .arg("--out")
                    .arg(&self.feats)
                    .args(s.args());
                if let Some(i) = shard {
                    c.args(["--shard", &format!("{i}/2")]);
                }
                if *resume {
                    c.arg("--resume");
                }
            }
            Op::Match => {
                c.args(["match", "--exhaustive", "--images"])
                    .arg(&self.feats)
                    .arg("--out-dir")
                    .arg(&self.matches);
            }
            Op::Merge => c = merge_command(&self.feats, &self.matches, &self.images, &self.db),
            _ => unreachable!("not a command: {op:?}"),
        }
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        c
    }

    /// The settings the features files record.
    fn feature_settings(&self) -> Vec<Settings> {
        let mut v: Vec<Settings> = files(&self.feats)
            .iter()
            .filter_map(|(_, p)| Settings::of_file(p))
            .collect();
        let mut distinct = Vec::new();
        for s in v.drain(..) {
            if !distinct.contains(&s) {
                distinct.push(s);
            }
        }
        distinct
    }

    fn check_extract(&mut self, refs: &mut Refs, alts: &Alternatives) -> Result<(), String> {
        for (slot, name) in NAMES.iter().enumerate() {
            let owners: Vec<Settings> = alts
                .extracts
                .iter()
                .filter(|(_, shard)| shard.is_none_or(|i| slot % 2 == i))
                .map(|(s, _)| *s)
                .collect();
            if owners.is_empty() {
                continue;
            }
            let path = self.feats.join(name.replace(".png", ".npz"));
            let f = descl::io::features::read_features(&path)
                .map_err(|e| format!("after a successful extract: {e}"))?;
            let hash = hash_bytes(&[&std::fs::read(self.images.join(name)).unwrap()]);
            let same = owners.iter().any(|s| {
                let r = refs.features(&self.images, hash, *s);
                r.0 == f.frames && r.1 == f.descriptors
            });
            if !same {
                return Err(format!(
                    "{}: not what a fresh extract of the current image with {owners:?} writes \
                     ({} keypoints)",
                    path.display(),
                    f.frames.len()
                ));
            }
        }
        Ok(())
    }

    fn check_match(&mut self, refs: &mut Refs, alts: &Alternatives) -> Result<(), String> {
        let got = pair_files(&self.matches);
        let fresh: Vec<_> = alts.feats.iter().map(|f| refs.matches(f)).collect();
        if fresh.iter().all(Result::is_err) {
            return Err(format!(
                "match succeeded where a fresh match of the same features refuses: {}",
                fresh[0].as_ref().unwrap_err().trim()
            ));
        }
        let fresh: Vec<_> = fresh.into_iter().filter_map(Result::ok).collect();
        for name in fresh.iter().flat_map(|f| f.keys()).chain(got.keys()) {
            let g = got.get(name);
            if !fresh.iter().any(|f| f.get(name) == g) {
                return Err(format!(
                    "{}: not what a fresh match of the current features writes ({})",
                    self.matches.join(name).display(),
                    g.map_or("missing".into(), |g| format!("{} matches", g.0.len()))
                ));
            }
        }
        Ok(())
    }

    fn check_merge(&mut self, refs: &mut Refs, alts: &Alternatives) -> Result<(), String> {
        let got = db_tables(&self.db);
        if alts.merges.is_empty() {
            return Err("merge succeeded over no readable features".into());
        }
        if alts
            .merges
            .iter()
            .any(|s| refs.merge(&self.images, *s) == got)
        {
            return Ok(());
        }
        let fresh = refs.merge(&self.images, alts.merges[0]);
        let table = (0..got.len()).find(|&t| got[t] != fresh[t]).unwrap();
        Err(format!(
            "{}: table {} differs from a fresh extract+match+merge with {:?} ({} rows, fresh {})",
            self.db.display(),
            COLMAP_TABLES[table].0,
            alts.merges,
            got[table].len(),
            fresh[table].len()
        ))
    }

    /// Judges a finished command: `None` exit status when it was killed.
    fn judge(
        &mut self,
        refs: &mut Refs,
        op: &Op,
        status: Option<bool>,
        stderr: &str,
        alts: &Alternatives,
    ) -> Result<(), String> {
        if std::env::var_os("DESCL_STATE_VERBOSE").is_some() {
            eprintln!(
                "    {op:?}: {status:?}\n      {}",
                stderr.trim().replace('\n', "\n      ")
            );
        }
        if stderr.contains("panicked") {
            return Err(format!("panic: {stderr}"));
        }
        match status {
            None => Ok(()),
            Some(false) => {
                let root = self.root.to_string_lossy();
                if stderr.trim().is_empty() || !stderr.contains(root.as_ref()) {
                    Err(format!(
                        "failed without naming a path of the folder: {stderr:?}"
                    ))
                } else {
                    Ok(())
                }
            }
            Some(true) => match op {
                Op::Extract { .. } => self.check_extract(refs, alts),
                Op::Match => self.check_match(refs, alts),
                Op::Merge => self.check_merge(refs, alts),
                _ => unreachable!(),
            },
        }
    }

    /// The alternatives of one command run alone.
    fn alone(&self, op: &Op) -> Alternatives {
        let extracts = match op {
            Op::Extract { s, shard, .. } => vec![(*s, *shard)],
            _ => vec![],
        };
        Alternatives {
            extracts,
            feats: vec![self.feats.clone()],
            merges: self.feature_settings(),
        }
    }

    fn spawn(&self, op: &Op) -> Child {
        self.command(op).spawn().unwrap()
    }

    /// Waits for `child`: (exit status, or None when `kill` found it running; stderr).
    fn finish(mut child: Child, kill: bool) -> (Option<bool>, String) {
        let killed = kill && child.try_wait().unwrap().is_none();
        if killed {
            child.kill().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            if killed {
                None
            } else {
                Some(out.status.success())
            },
            err,
        )
    }

    /// Applies `op`; Err describes a broken invariant.
    fn step(&mut self, refs: &mut Refs, op: &Op) -> Result<(), String> {
        match op {
            Op::Extract { .. } | Op::Match | Op::Merge => {
                let (status, err) = Folder::finish(self.spawn(op), false);
                let alts = self.alone(op);
                self.judge(refs, op, status, &err, &alts)
            }
            Op::Replace { slot, variant } => {
                self.variants[*slot] = *variant;
                picture(*slot, *variant)
                    .save(self.images.join(NAMES[*slot]))
                    .unwrap();
                Ok(())
            }
            Op::DeleteFeatures { slot } => {
                let _ = std::fs::remove_file(self.feats.join(NAMES[*slot].replace(".png", ".npz")));
                Ok(())
            }
            Op::Kill { op, after_ms } => {
                let child = self.spawn(op);
                std::thread::sleep(std::time::Duration::from_millis(*after_ms));
                let (status, err) = Folder::finish(child, true);
                let alts = self.alone(op);
                self.judge(refs, op, status, &err, &alts)
            }
            Op::Both(a, b) => {
                // The features before the two started, for a reader racing a writer.
                let before = refs.fresh_dir();
                std::fs::create_dir_all(&before).unwrap();
                for (n, p) in files(&self.feats) {
                    std::fs::copy(p, before.join(n)).unwrap();
                }
                let merges_before = self.feature_settings();
                let children = [self.spawn(a), self.spawn(b)];
                let results = children.map(|c| Folder::finish(c, false));
                let mut alts = Alternatives::default();
                for op in [a, b] {
                    alts.extracts.extend(self.alone(op).extracts);
                }
                alts.feats = vec![self.feats.clone()];
                alts.merges = self.feature_settings();
                if a.is_extract() || b.is_extract() {
                    alts.feats.push(before);
                    alts.merges.extend(merges_before);
                }
                for (op, (status, err)) in [a, b].into_iter().zip(results) {
                    self.judge(refs, op, status, &err, &alts)?;
                }
                Ok(())
            }
        }
    }
}

/// Runs the sequence of `seed`: Err(report) on a broken invariant not in [`KNOWN_ISSUES`].
fn sequence(refs: &mut Refs, seed: u64) -> Result<usize, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut folder = Folder::new(dir.path());
    if std::env::var_os("DESCL_STATE_KEEP").is_some() {
        eprintln!("seed {seed}: folder {} kept", dir.keep().display());
    }
    let steps = rng.gen_range(5..=8);
    let main = Settings::random(&mut rng);
    let mut done: Vec<Op> = Vec::new();
    for i in 0..steps {
        let op = if i == 0 {
            Op::Extract {
                s: main,
                shard: None,
                resume: false,
            }
        } else {
            Op::random(&mut rng, main, &folder.variants)
        };
        if std::env::var_os("DESCL_STATE_VERBOSE").is_some() {
            eprintln!("  step {}: {op:?}", i + 1);
        }
        done.push(op.clone());
        let result = folder.step(refs, &op);
        if std::env::var_os("DESCL_STATE_VERBOSE").is_some() {
            let feats: Vec<_> = files(&folder.feats)
                .iter()
                .map(|(n, p)| (n.clone(), Settings::of_file(p)))
                .collect();
            eprintln!("  after step {}: {feats:?}", i + 1);
        }
        if let Err(e) = result {
            let history: String = done
                .iter()
                .enumerate()
                .map(|(k, o)| format!("\n  {}. {o:?}", k + 1))
                .collect();
            if let Some((name, _)) = KNOWN_ISSUES.iter().find(|(_, f)| f(&done, &e)) {
                eprintln!("seed {seed}: known issue {name} (issue 44): {e}");
                return Ok(i + 1);
            }
            return Err(format!(
                "seed {seed} (replay: DESCL_STATE_SEED={seed} DESCL_STATE_SEQUENCES=1), \
                 step {}: {e}\nsequence:{history}",
                i + 1
            ));
        }
    }
    Ok(steps)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

#[test]
fn random_histories_keep_every_output_equal_to_a_fresh_run() {
    let n = env_u64("DESCL_STATE_SEQUENCES", CI_SEQUENCES);
    let seed = env_u64("DESCL_STATE_SEED", CI_SEED);
    let refs_dir = tempfile::tempdir().unwrap();
    let mut refs = Refs {
        dir: refs_dir.path().to_path_buf(),
        ..Refs::default()
    };
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let mut steps = 0;
    for k in 0..n {
        match sequence(&mut refs, seed.wrapping_add(k)) {
            Ok(s) => steps += s,
            Err(e) => {
                eprintln!("COUNTEREXAMPLE {e}\n");
                failures.push(e);
            }
        }
    }
    eprintln!(
        "state machine: {n} sequences from seed {seed}, {steps} steps passed, {} failed, {:.0} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
