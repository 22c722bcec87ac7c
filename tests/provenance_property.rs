//! The property behind issue 24: any sequence of staged runs — `descl extract` (whole, or one
//! shard, with or without `--resume`, under changing settings), `descl match --images`
//! (whole or one shard) and `descl sfm merge` — either ends in a refused merge, or merges
//! into exactly the database that one clean run with the features' settings gives (table by
//! table). Never a database that mixes results of different settings with exit code 0.
//!
//! And whatever came before, a whole `descl extract --resume` and a whole `descl match` make
//! the folders consistent again: their merge succeeds and equals the clean run (stale results
//! are redone, never reused).
//!
//! Sequences are drawn from a seeded generator (reproducible; the seed and the steps are in
//! the failure message).

mod common;

use common::{descl, run};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Small images keep each run well under a second.
const SIZE: [&str; 2] = ["--max-image-size", "320"];
const IMAGES: usize = 4;
const SEQUENCES: u64 = 20;
/// Random steps per sequence, before the whole `extract --resume`, `match` and merge.
const STEPS: usize = 6;

/// Extraction settings a user may change between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Settings {
    model: &'static str,
    keypoints: u32,
}

const SETTINGS: [Settings; 3] = [
    Settings {
        model: "sift",
        keypoints: 300,
    },
    Settings {
        model: "sift",
        keypoints: 200,
    },
    Settings {
        model: "rootsift",
        keypoints: 300,
    },
];

#[derive(Debug, Clone, Copy)]
enum Step {
    Extract {
        settings: Settings,
        shard: Option<u32>,
        resume: bool,
    },
    Match {
        shard: Option<u32>,
    },
    Merge,
}

/// xorshift64*: reproducible draws without a crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }
}

fn draw(rng: &mut Rng) -> Step {
    let shard = |rng: &mut Rng| match rng.below(4) {
        k @ 0..=1 => Some(k as u32),
        _ => None,
    };
    match rng.below(7) {
        0..=2 => Step::Extract {
            settings: SETTINGS[rng.below(SETTINGS.len() as u64) as usize],
            shard: shard(rng),
            resume: rng.below(2) == 0,
        },
        3..=4 => Step::Match { shard: shard(rng) },
        _ => Step::Merge,
    }
}

fn extract(imgs: &Path, out: &Path, s: Settings, shard: Option<u32>, resume: bool) -> bool {
    let k = s.keypoints.to_string();
    let mut cmd = descl();
    cmd.arg("extract")
        .arg(imgs)
        .arg("--out")
        .arg(out)
        .args(SIZE)
        .args(["-m", s.model, "--max-keypoints", &k]);
    if let Some(i) = shard {
        cmd.args(["--shard", &format!("{i}/2")]);
    }
    if resume {
        cmd.arg("--resume");
    }
    run(&mut cmd).0
}

fn match_set(feats: &Path, out: &Path, shard: Option<u32>) -> bool {
    let mut cmd = descl();
    cmd.args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(feats)
        .arg("--out-dir")
        .arg(out);
    if let Some(i) = shard {
        cmd.args(["--shard", &format!("{i}/2")]);
    }
    run(&mut cmd).0
}

/// The settings every features file in `feats` records (None when mixed or empty).
fn features_settings(feats: &Path) -> Option<Settings> {
    let mut found: Option<Settings> = None;
    for e in std::fs::read_dir(feats).ok()? {
        let p = e.ok()?.path();
        if p.extension().is_none_or(|x| x != "npz") || descl::io::npz_folder::is_pair_file(&p) {
            continue;
        }
        let meta = descl::io::features::read_features_meta(&p).ok()?;
        let prov = meta.provenance?;
        let s = SETTINGS.iter().copied().find(|s| {
            s.model == prov.settings.model
                && s.keypoints as usize == prov.settings.detector.max_keypoints
        })?;
        match found {
            Some(f) if f != s => return None,
            _ => found = Some(s),
        }
    }
    found
}

#[test]
fn any_sequence_of_staged_runs_is_refused_or_equals_a_clean_run() {
    let Some(data) = common::data_root_or_skip("any_sequence_of_staged_runs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for i in 0..IMAGES {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(
            data.join("strecha/fountain-P11/images").join(&name),
            imgs.join(&name),
        )
        .unwrap();
    }
    // The clean database of each settings: one whole extract, one whole match, one merge.
    let mut clean: HashMap<Settings, PathBuf> = HashMap::new();
    let mut clean_db = |s: Settings| -> PathBuf {
        clean
            .entry(s)
            .or_insert_with(|| {
                let tag = format!("clean-{}-{}", s.model, s.keypoints);
                let (f, m, db) = (
                    dir.path().join(format!("{tag}-f")),
                    dir.path().join(format!("{tag}-m")),
                    dir.path().join(format!("{tag}.db")),
                );
                assert!(extract(&imgs, &f, s, None, false));
                assert!(match_set(&f, &m, None));
                let (ok, err) = common::merged(&f, &m, &db);
                assert!(ok, "clean merge: {err}");
                db
            })
            .clone()
    };
    let (mut merged, mut refused) = (0, 0);
    for seed in 1..=SEQUENCES {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
        let run_dir = dir.path().join(format!("seq{seed}"));
        let (f, m) = (run_dir.join("f"), run_dir.join("m"));
        std::fs::create_dir_all(&run_dir).unwrap();
        let mut done: Vec<Step> = Vec::new();
        let mut last = SETTINGS[0];
        let tail = |s: Settings| {
            [
                Step::Extract {
                    settings: s,
                    shard: None,
                    resume: true,
                },
                Step::Match { shard: None },
                Step::Merge,
            ]
        };
        let mut k = 0;
        while k < STEPS + 3 {
            let step = if k < STEPS {
                draw(&mut rng)
            } else {
                tail(last)[k - STEPS]
            };
            let must_merge = k + 1 == STEPS + 3;
            k += 1;
            done.push(step);
            match step {
                Step::Extract {
                    settings,
                    shard,
                    resume,
                } => {
                    last = settings;
                    extract(&imgs, &f, settings, shard, resume);
                }
                Step::Match { shard } => {
                    if f.is_dir() {
                        match_set(&f, &m, shard);
                    }
                }
                Step::Merge => {
                    if !(f.is_dir() && m.is_dir()) {
                        continue;
                    }
                    let db = run_dir.join(format!("step{k}.db"));
                    let (ok, err) = common::merged(&f, &m, &db);
                    if !ok {
                        assert!(
                            !must_merge,
                            "seed {seed}, steps {done:?}: a whole extract --resume and match did not repair the folders: {err}"
                        );
                        refused += 1;
                        eprintln!(
                            "seed {seed}: step {k} refused: {}",
                            err.lines().next().unwrap_or("")
                        );
                        assert!(!db.exists(), "seed {seed}: a refused merge left {db:?}");
                        assert!(!err.contains("panicked"), "seed {seed}: {err}");
                        continue;
                    }
                    merged += 1;
                    let settings = features_settings(&f).unwrap_or_else(|| {
                        panic!("seed {seed}, steps {done:?}: merged features of mixed settings")
                    });
                    eprintln!("seed {seed}: step {k} merged ({settings:?})");
                    let reference = clean_db(settings);
                    let same =
                        std::panic::catch_unwind(|| common::assert_same_databases(&db, &reference));
                    assert!(
                        same.is_ok(),
                        "seed {seed}, steps {done:?}: the merged database differs from a clean run's"
                    );
                }
            }
        }
    }
    eprintln!("{merged} merges equal to a clean run, {refused} refused");
    // The draws must exercise both outcomes, or the property says nothing.
    assert!(
        merged > 0 && refused > 0,
        "{merged} merged, {refused} refused"
    );
}
