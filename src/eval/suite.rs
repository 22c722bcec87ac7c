//! A benchmark run: which suites, where their data is, and the methods ([`Describer`]s, the
//! same describe path as `descl extract`) → one [`BenchReport`]. `descl bench` maps its flags
//! to a [`BenchConfig`] and calls [`run`]; finding the datasets in their releases' layouts and
//! dispatching the suites lives here, not in the binary.

use crate::describe::Describer;
use crate::detect::{DetectorConfig, DetectorKind, Selection, DEFAULT_CONTRAST_THRESHOLD};
use crate::error::{Error, Result};
use crate::eval::report::{group_sequences, BenchReport, HPatchesReport, Machine, Settings};
use crate::eval::runner::{self, Timing, HOMOGRAPHY_RANSAC_PX, POSE_RANSAC_PX};
use crate::eval::sequences::HomographySequence;
use crate::eval::{hpatches, phototour, pose, reconstruction, robustness, sequences};
use crate::progress::Progress;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The benchmark suites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Suite {
    /// HPatches sequences + Oxford Affine: MMA at 1..10 px, homography accuracy.
    Sequences,
    /// The dev sequences' reference images against JPEG-compressed and blurred copies of
    /// themselves (identity homography) and copies turned and magnified about the centre, with
    /// the sequences' protocol ([`robustness`]).
    Robustness,
    /// Oxford matching score and repeatability for DoG and Harris-Affine frames.
    MatchingScore,
    /// Relative pose on Strecha scenes: AUC at 5/10/20°, mAA@10.
    Pose,
    /// HPatches patches (hpatches-release layout): verification, matching, retrieval mAP.
    Hpatches,
    /// UBC PhotoTour: FPR at 95 % recall on the 100k pairs of each dataset.
    Phototour,
    /// Reconstruction of each Strecha scene with `colmap mapper`, against the ground-truth
    /// cameras, with COLMAP's own SIFT pipeline as the peer ([`reconstruction`]).
    Sfm,
}

impl Suite {
    /// The suite's name on the command line (`descl bench NAME`), for messages.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Sequences => "sequences",
            Suite::Robustness => "robustness",
            Suite::MatchingScore => "matching-score",
            Suite::Pose => "pose",
            Suite::Hpatches => "hpatches",
            Suite::Phototour => "phototour",
            Suite::Sfm => "sfm",
        }
    }
}

/// Dataset folders (each in its release's layout); None = not available (none given and no
/// data root): a suite run without [`BenchConfig::skip_missing`] that has none of its folders
/// is an error, as is a folder that is missing or not a folder.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataPaths {
    pub hpatches_sequences: Option<PathBuf>,
    pub oxford: Option<PathBuf>,
    /// Folder of Strecha scenes (`SCENE/images`, `SCENE/cameras`).
    pub strecha: Option<PathBuf>,
    pub hpatches_patches: Option<PathBuf>,
    /// Folder with splits.json and the task CSVs.
    pub hpatches_tasks: Option<PathBuf>,
    /// Folder holding liberty/, notredame/, yosemite/.
    pub phototour: Option<PathBuf>,
}

impl DataPaths {
    /// The standard folder names under a data root (`../shared/data`, `$DESCL_DATA`).
    pub fn under(root: &Path) -> DataPaths {
        DataPaths {
            hpatches_sequences: Some(root.join("hpatches-sequences")),
            oxford: Some(root.join("oxford")),
            strecha: Some(root.join("strecha")),
            hpatches_patches: Some(root.join("hpatches-release")),
            hpatches_tasks: Some(root.join("hpatches-tasks")),
            phototour: Some(root.join("phototour")),
        }
    }
}

/// A benchmark run's settings.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub suites: Vec<Suite>,
    /// Skip suites whose data is missing (else a missing folder is an error).
    pub skip_missing: bool,
    pub data: DataPaths,
    /// HPatches split (a, b, c, full, illum, view).
    pub split: String,
    /// Keypoints per image (strongest DoG responses).
    pub max_keypoints: usize,
    /// Keypoints per image of the reconstruction suite (and COLMAP's features per image).
    pub sfm_max_keypoints: usize,
    /// Runs per pipeline and scene in the reconstruction suite (at least 1;
    /// [`reconstruction::DEFAULT_SFM_RUNS`]; what a run repeats: [`reconstruction`]).
    pub sfm_runs: usize,
    /// The mapper of descl's side of the sfm suite (COLMAP's pipeline maps with `colmap
    /// mapper` always).
    pub sfm_mapper: crate::sfm::mapper::MapperKind,
    /// Keep the sfm suite's databases and models in `DIR/SCENE/METHOD` (None: temporary
    /// folders, removed).
    pub sfm_keep: Option<PathBuf>,
    /// The same-run peers of the sfm suite ([`reconstruction::Peer`]): None runs every peer
    /// whose tool is there (a missing pycolmap skips its rows, said in the report); a list
    /// given runs those, and a missing tool is an error.
    pub sfm_peers: Option<Vec<reconstruction::Peer>>,
    /// The command recorded in the report (for people to re-run).
    pub command: String,
}

/// A suite's data folder that is not there: `dir` missing or not a folder, or None (not
/// given, no data root). Skipped with a note under [`BenchConfig::skip_missing`] (`descl
/// bench all`: every suite whose data is present), else an error naming the folder and the
/// suite: a suite asked for and run on nothing would report nothing and exit 0.
fn missing(
    cfg: &BenchConfig,
    progress: &dyn Progress,
    suite: Suite,
    what: &str,
    dir: Option<&Path>,
) -> Result<()> {
    let suite = suite.name();
    let why = match dir {
        Some(d) if d.exists() => format!(
            "{}: not a folder ({what}, the data of the {suite} suite)",
            d.display()
        ),
        Some(d) => format!(
            "{}: no such folder ({what}, the data of the {suite} suite)",
            d.display()
        ),
        None => format!(
            "the {suite} suite has no data: no folder for {what} was given and there is no data root (${} or ../shared/data)",
            crate::data::DATA_ENV
        ),
    };
    if cfg.skip_missing {
        progress.note(&format!("{why}: skipped"));
        Ok(())
    } else {
        Err(Error::InvalidInput(why))
    }
}

fn existing(dir: &Option<PathBuf>) -> Option<&Path> {
    dir.as_deref().filter(|d| d.is_dir())
}

fn load_sequences(root: &Path) -> Result<Vec<HomographySequence>> {
    sequences::list_sequences(root)?
        .iter()
        .map(|p| sequences::load_sequence(p))
        .collect()
}

/// Runs the suites of `cfg` for `methods` (distinct names) on the same DoG frames.
pub fn run(
    cfg: &BenchConfig,
    methods: &[Describer],
    progress: &dyn Progress,
) -> Result<BenchReport> {
    let mut names: Vec<&str> = methods.iter().map(Describer::name).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::InvalidInput(format!(
            "two methods have the same name: {names:?}"
        )));
    }
    if let Some(peer) = names
        .iter()
        .find_map(|n| reconstruction::Peer::of_method(n))
        .filter(|_| cfg.suites.contains(&Suite::Sfm))
    {
        return Err(Error::InvalidInput(format!(
            "a method is named {:?}, the name of an sfm suite's peer",
            peer.method()
        )));
    }
    let det = DetectorConfig {
        kind: DetectorKind::Dog,
        max_keypoints: cfg.max_keypoints,
        contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
        ..DetectorConfig::default()
    };
    // descl's mapper for the sfm suite, described (pycolmap's imported) before any work: one
    // that cannot run stops a run that asked for the suite, and skips it with a note where
    // suites are skipped when missing (`descl bench all`).
    let sfm_mapper: Option<std::result::Result<String, String>> =
        match cfg.suites.contains(&Suite::Sfm) {
            false => None,
            true => match cfg.sfm_mapper.describe() {
                Ok(d) => Some(Ok(d)),
                Err(e) if cfg.skip_missing => Some(Err(e.to_string())),
                Err(e) => return Err(e),
            },
        };
    let mut report = BenchReport {
        descl_version: env!("CARGO_PKG_VERSION").to_string(),
        command: cfg.command.clone(),
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        machine: Machine::current(),
        settings: Settings {
            detector: "DoG (OpenCV SIFT detector, default thresholds)".into(),
            max_keypoints: cfg.max_keypoints,
            magnification: det.magnification,
            matcher: "mutual nearest neighbour, no ratio test".into(),
            homography_ransac: format!(
                "USAC MAGSAC++ score, inner + iterative LO, {HOMOGRAPHY_RANSAC_PX} px"
            ),
            pose_ransac: format!("USAC MAGSAC {POSE_RANSAC_PX} px / mean focal, recoverPose"),
            sfm_max_keypoints: cfg
                .suites
                .contains(&Suite::Sfm)
                .then_some(cfg.sfm_max_keypoints),
            sfm_selection: cfg
                .suites
                .contains(&Suite::Sfm)
                .then_some(Selection::Colmap),
            sfm_runs: cfg
                .suites
                .contains(&Suite::Sfm)
                .then_some(cfg.sfm_runs.max(1)),
            sfm_mapper: sfm_mapper.as_ref().and_then(|m| m.as_ref().ok().cloned()),
            sfm_peers: Vec::new(),
            sfm_skipped: Vec::new(),
        },
        methods: methods.iter().map(|m| m.name().to_string()).collect(),
        sequences: BTreeMap::new(),
        robustness: BTreeMap::new(),
        pose: BTreeMap::new(),
        matching_score: BTreeMap::new(),
        hpatches: BTreeMap::new(),
        phototour: BTreeMap::new(),
        sfm: BTreeMap::new(),
        timing: Timing::default(),
    };
    // Why descl's side of the sfm suite cannot run (`descl bench all`'s note; `sfm`).
    let sfm_mapper_missing = sfm_mapper.and_then(Result::err);
    let sfm_peers = match cfg.suites.contains(&Suite::Sfm) {
        true => sfm_peers(cfg, &mut report.settings)?,
        false => Vec::new(),
    };
    let mut timing = Timing::default();
    for suite in [
        Suite::Sequences,
        Suite::Robustness,
        Suite::MatchingScore,
        Suite::Pose,
        Suite::Hpatches,
        Suite::Phototour,
        Suite::Sfm,
    ] {
        if !cfg.suites.contains(&suite) {
            continue;
        }
        let mut run = Run {
            suite,
            cfg,
            methods,
            det: &det,
            timing: &mut timing,
            report: &mut report,
            progress,
            sfm_peers: &sfm_peers,
            sfm_mapper_missing: sfm_mapper_missing.as_deref(),
        };
        match suite {
            Suite::Sequences => run.sequences()?,
            Suite::Robustness => run.robustness()?,
            Suite::MatchingScore => run.matching_score()?,
            Suite::Pose => run.pose()?,
            Suite::Hpatches => run_hpatches(cfg, methods, run.report, progress)?,
            Suite::Phototour => run.phototour()?,
            Suite::Sfm => run.sfm()?,
        }
    }
    report.timing = timing;
    Ok(report)
}

/// The sfm suite's peers that will run, recorded in `settings` with their versions and
/// settings; a pycolmap peer without pycolmap is skipped (said in `settings.sfm_skipped`)
/// unless `cfg.sfm_peers` asked for it, then an error before any work.
fn sfm_peers(cfg: &BenchConfig, settings: &mut Settings) -> Result<Vec<reconstruction::Peer>> {
    use reconstruction::Peer;
    let asked = cfg.sfm_peers.is_some();
    let wanted = cfg.sfm_peers.clone().unwrap_or_else(|| Peer::ALL.to_vec());
    let pycolmap = match wanted.iter().any(|p| p.needs_pycolmap()) {
        true => Some(crate::eval::pycolmap_peer::version()),
        false => None,
    };
    let mut peers = Vec::new();
    for peer in wanted {
        let tool = match (peer.needs_pycolmap(), &pycolmap) {
            (false, _) => colmap_version(),
            (true, Some(Ok(v))) => format!("pycolmap {v}"),
            (true, Some(Err(e))) if asked => {
                return Err(Error::InvalidInput(format!(
                    "sfm peer {}: {e}",
                    peer.method()
                )))
            }
            (true, Some(Err(e))) => {
                settings.sfm_skipped.push(format!(
                    "{}: skipped, pycolmap cannot run here ({e})",
                    peer.method()
                ));
                continue;
            }
            (true, None) => continue,
        };
        settings.sfm_peers.push(crate::eval::report::PeerSettings {
            method: peer.method().to_string(),
            tool,
            settings: peer.settings(cfg.sfm_max_keypoints),
        });
        peers.push(peer);
    }
    Ok(peers)
}

/// The first line of `colmap help` ("COLMAP 3.8 -- Structure-from-Motion …"), up to " --"; or
/// "colmap" when it prints none.
fn colmap_version() -> String {
    crate::sfm::mapper::run_colmap_stdout(&["help".as_ref()])
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split(" --").next().unwrap_or(l).trim().to_string())
        })
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "colmap".into())
}

/// One run's shared state, for the image-level suites.
struct Run<'a> {
    /// The suite running, named in messages about its data.
    suite: Suite,
    cfg: &'a BenchConfig,
    methods: &'a [Describer],
    det: &'a DetectorConfig,
    timing: &'a mut Timing,
    report: &'a mut BenchReport,
    progress: &'a dyn Progress,
    /// The sfm suite's peers that run ([`sfm_peers`]).
    sfm_peers: &'a [reconstruction::Peer],
    /// Why descl's mapper cannot run, where the suite is then skipped (`skip_missing`).
    sfm_mapper_missing: Option<&'a str>,
}

impl Run<'_> {
    fn missing(&self, what: &str, dir: Option<&Path>) -> Result<()> {
        missing(self.cfg, self.progress, self.suite, what, dir)
    }

    /// The dev homography sequences by group (`hpatches`, `oxford`): those whose folder exists.
    /// A group without a folder (None) is left out; a folder given that is not there is
    /// [`missing`], and so is the suite's data when neither group has a folder.
    fn sequence_groups(&self) -> Result<BTreeMap<String, Vec<HomographySequence>>> {
        let mut groups = BTreeMap::new();
        for (name, dir) in [
            ("hpatches", &self.cfg.data.hpatches_sequences),
            ("oxford", &self.cfg.data.oxford),
        ] {
            match (existing(dir), dir) {
                (Some(d), _) => {
                    groups.insert(name.to_string(), load_sequences(d)?);
                }
                (None, Some(d)) => self.missing(&format!("the {name} sequences"), Some(d))?,
                (None, None) => {}
            }
        }
        if self.cfg.data.hpatches_sequences.is_none() && self.cfg.data.oxford.is_none() {
            self.missing("the HPatches or Oxford sequences", None)?;
        }
        Ok(groups)
    }

    fn robustness(&mut self) -> Result<()> {
        let groups = self.sequence_groups()?;
        if groups.is_empty() {
            return Ok(());
        }
        self.progress.start("robustness", 0);
        let res =
            runner::run_robustness(&groups, self.methods, self.det, self.timing, self.progress)?;
        self.progress.finish();
        for (m, pairs) in res {
            self.report.robustness.insert(m, robustness::group(&pairs));
        }
        Ok(())
    }

    fn sequences(&mut self) -> Result<()> {
        let groups = self.sequence_groups()?;
        if groups.is_empty() {
            return Ok(());
        }
        self.progress.start("sequences", 0);
        let res =
            runner::run_sequences(&groups, self.methods, self.det, self.timing, self.progress)?;
        self.progress.finish();
        for (m, by_group) in res {
            self.report.sequences.insert(m, group_sequences(&by_group));
        }
        Ok(())
    }

    fn matching_score(&mut self) -> Result<()> {
        let Some(root) = existing(&self.cfg.data.oxford) else {
            return self.missing("Oxford Affine", self.cfg.data.oxford.as_deref());
        };
        let seqs = load_sequences(root)?;
        // descl's detectors, each beside VLFeat's implementation of it (the reference).
        for kind in [
            DetectorKind::Dog,
            DetectorKind::VlfeatDog,
            DetectorKind::HarrisAffine,
            DetectorKind::VlfeatHarrisAffine,
        ] {
            self.progress.start("match score", 0);
            let d = DetectorConfig { kind, ..*self.det };
            match runner::run_matching_score(&seqs, self.methods, &d, self.timing, self.progress) {
                Ok(r) => {
                    self.report.matching_score.insert(kind.to_string(), r);
                }
                // A detector this build cannot run is reported, not fatal.
                Err(Error::InvalidInput(why)) if kind != DetectorKind::Dog => self
                    .progress
                    .note(&format!("matching score: skipping {kind}: {why}")),
                Err(e) => return Err(e),
            }
            self.progress.finish();
        }
        Ok(())
    }

    /// The Strecha scenes (folders with `cameras/`), sorted; None when the data is missing.
    fn strecha_scenes(&self) -> Result<Option<Vec<pose::PoseScene>>> {
        let Some(root) = existing(&self.cfg.data.strecha) else {
            self.missing("Strecha scenes", self.cfg.data.strecha.as_deref())?;
            return Ok(None);
        };
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(|e| Error::io(root, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("cameras").is_dir())
            .collect();
        dirs.sort();
        dirs.iter()
            .map(|d| pose::load_scene(d))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    fn pose(&mut self) -> Result<()> {
        let Some(scenes) = self.strecha_scenes()? else {
            return Ok(());
        };
        self.progress.start("pose", 0);
        self.report.pose =
            runner::run_pose(&scenes, self.methods, self.det, self.timing, self.progress)?;
        self.progress.finish();
        Ok(())
    }

    fn sfm(&mut self) -> Result<()> {
        if let Some(why) = self.sfm_mapper_missing {
            self.progress.note(&format!("sfm: {why}: skipped"));
            return Ok(());
        }
        if !crate::sfm::mapper::colmap_available() {
            let why = format!(
                "sfm: cannot run {} (install COLMAP or set DESCL_COLMAP)",
                crate::sfm::mapper::colmap_exe().display()
            );
            if self.cfg.skip_missing {
                self.progress.note(&format!("{why}: skipped"));
                return Ok(());
            }
            return Err(Error::InvalidInput(why));
        }
        let Some(scenes) = self.strecha_scenes()? else {
            return Ok(());
        };
        let det = DetectorConfig {
            max_keypoints: self.cfg.sfm_max_keypoints,
            kind: self.det.kind,
            magnification: self.det.magnification,
            ..crate::sfm::sfm_detector()
        };
        let work = match &self.cfg.sfm_keep {
            Some(dir) => reconstruction::SfmWork::Keep(dir),
            None => reconstruction::SfmWork::Temporary,
        };
        let (progress, colmap_features) = (self.progress, self.cfg.sfm_max_keypoints);
        let runs = self.cfg.sfm_runs.max(1);
        for scene in &scenes {
            for m in self.methods {
                self.sfm_row(scene, m.name(), || {
                    reconstruction::reconstruct_with(
                        scene,
                        m,
                        &det,
                        &work,
                        runs,
                        self.cfg.sfm_mapper,
                        progress,
                    )
                })?;
            }
            for &peer in self.sfm_peers {
                self.sfm_row(scene, peer.method(), || {
                    reconstruction::reconstruct_with_peer(scene, peer, colmap_features, &work, runs)
                })?;
            }
        }
        Ok(())
    }

    /// One row of the sfm suite: `method` reconstructs `scene`, filed in the report.
    fn sfm_row(
        &mut self,
        scene: &pose::PoseScene,
        method: &str,
        reconstruct: impl FnOnce() -> Result<reconstruction::SceneReconstruction>,
    ) -> Result<()> {
        self.progress
            .note(&format!("sfm {}: reconstructing with {method}", scene.name));
        let r = reconstruct()?;
        self.report
            .sfm
            .entry(method.to_string())
            .or_default()
            .insert(scene.name.clone(), r);
        Ok(())
    }

    fn phototour(&mut self) -> Result<()> {
        let Some(root) = existing(&self.cfg.data.phototour) else {
            return self.missing("UBC PhotoTour", self.cfg.data.phototour.as_deref());
        };
        for m in self.methods {
            let mut results = Vec::new();
            for set in phototour::DATASETS {
                let dir = root.join(set);
                if !dir.is_dir() {
                    continue;
                }
                self.progress.start(&format!("ubc {set}"), 0);
                self.progress.message(m.name());
                let mut describe = |p: &ndarray::Array3<f32>| m.describe_patches(p);
                let pairs = dir.join(phototour::TEST_PAIRS_FILE);
                results.push(phototour::evaluate(
                    &dir,
                    &pairs,
                    &mut describe,
                    self.progress,
                )?);
                self.progress.finish();
            }
            self.report.phototour.insert(m.name().to_string(), results);
        }
        Ok(())
    }
}

fn run_hpatches(
    cfg: &BenchConfig,
    methods: &[Describer],
    report: &mut BenchReport,
    progress: &dyn Progress,
) -> Result<()> {
    let (Some(tasks), Some(release)) = (&cfg.data.hpatches_tasks, &cfg.data.hpatches_patches)
    else {
        let what = match cfg.data.hpatches_patches {
            None => "the hpatches-release patches",
            Some(_) => "the HPatches task files (splits.json)",
        };
        return missing(cfg, progress, Suite::Hpatches, what, None);
    };
    let splits_file = tasks.join("splits.json");
    if !release.is_dir() || !splits_file.is_file() {
        let why = format!(
            "hpatches needs the release folder {} and {}",
            release.display(),
            splits_file.display()
        );
        if cfg.skip_missing {
            progress.note(&format!("{why}: skipped"));
            return Ok(());
        }
        return Err(Error::InvalidInput(why));
    }
    let splits = hpatches::load_splits(&splits_file)?;
    let split = splits
        .get(&cfg.split)
        .ok_or_else(|| Error::format(&splits_file, format!("no split `{}`", cfg.split)))?;
    let file = |stem: &str| tasks.join(format!("{stem}_split-{}.csv", split.name));
    for m in methods {
        progress.start("hpatches", 0);
        progress.message(m.name());
        let mut describe = |p: &ndarray::Array3<f32>| m.describe_patches(p);
        let descr = hpatches::describe_sequences(release, &split.test, &mut describe, progress)?;
        progress.finish();
        let (p, i, e) = (
            file("verif_pos"),
            file("verif_neg_intra"),
            file("verif_neg_inter"),
        );
        let verification = if p.is_file() && i.is_file() && e.is_file() {
            let (vp, vi, ve) = (
                hpatches::read_verification_pairs(&p)?,
                hpatches::read_verification_pairs(&i)?,
                hpatches::read_verification_pairs(&e)?,
            );
            Some(hpatches::verification(
                &descr,
                (&p, &vp),
                (&i, &vi),
                (&e, &ve),
            )?)
        } else {
            progress.note(&format!(
                "hpatches: no verification pair files ({}), verification skipped",
                p.display()
            ));
            None
        };
        progress.start("matching", 0);
        let matching = hpatches::matching(&descr, &split.test, progress)?;
        progress.finish();
        let (q, d) = (file("retr_queries"), file("retr_distractors"));
        let retrieval = if q.is_file() && d.is_file() {
            let (lq, ld) = (
                hpatches::read_patch_list(&q)?,
                hpatches::read_patch_list(&d)?,
            );
            progress.start("retrieval", 0);
            let r = hpatches::retrieval(&descr, (&q, &lq), (&d, &ld), progress)?;
            progress.finish();
            Some(r)
        } else {
            None
        };
        report.hpatches.insert(
            m.name().to_string(),
            HPatchesReport {
                split: split.name.clone(),
                verification,
                matching,
                retrieval,
            },
        );
    }
    Ok(())
}
