//! Reconstruction benchmark (`descl bench sfm`): every Strecha scene is reconstructed from
//! scratch by `descl sfm`'s library path with each method (DoG frames, exhaustive pairs,
//! geometric verification, `colmap mapper`) and by COLMAP's own SIFT pipeline
//! (`feature_extractor` + `exhaustive_matcher` + `mapper`) as the same-run peer, then aligned
//! to the ground-truth cameras ([`crate::sfm::evaluate`]: centres by Umeyama's similarity,
//! rotations by the rotation that fits the orientations).
//!
//! Why a suite of its own: two-view pose AUC says whether a descriptor finds a pair's
//! geometry; a reconstruction also needs tracks that chain across many images, and the count
//! of 3-D points and the camera-centre error after bundle adjustment are what an SfM user sees.
//! Both pipelines run with COLMAP's defaults: one camera per image (SIMPLE_RADIAL, focal from
//! EXIF or the default prior), principal point held at the image centre, at most
//! [`crate::sfm::SFM_MAX_KEYPOINTS`] features per image; descl's side runs `descl sfm`'s own
//! detector defaults ([`crate::sfm::sfm_detector`]), so the suite measures what a user of
//! `descl sfm` gets.
//!
//! Each pipeline runs several times ([`DEFAULT_SFM_RUNS`], `descl bench --sfm-runs`) and the
//! row is the run with the median centre error, every run beside it. Every run repeats the whole
//! pipeline with its index k as the seed of everything random in it. COLMAP's CPU SIFT
//! descriptors and matches differ from run to run (same keypoints, other descriptor bytes and
//! match counts on Herz-Jesus-P8, measured 2026-11-26), and its reconstructions with them moved
//! 0.053–0.070 % on fountain-P11. descl's features are deterministic, but its verification is
//! a random draw too: run k verifies with [`crate::geometry::RansacConfig::seed`] k (run 0 is
//! `descl sfm`'s default draw) and maps with mapper seed k. Until 2026-11-29 descl's runs
//! mapped one database again, and showed no spread; one imperceptible change of the input (the
//! grey image rounded to 8 bits) moved castle-P19 from 0.45 to 0.61 % (docs/BENCHMARKS.md,
//! "Grey weights"), as wide as pycolmap's runs.

use crate::describe::Describer;
use crate::detect::DetectorConfig;
use crate::error::{Error, Result};
use crate::eval::pose::PoseScene;
use crate::io::colmap_model::Reconstruction;
use crate::matching::pairs::file_names;
use crate::pipeline::{Extractor, COLMAP_MAX_IMAGE_SIZE};
use crate::progress::Progress;
use crate::sfm::mapper::COLMAP_FILTER_MAX_REPROJ_ERROR_PX;
use crate::sfm::mapper::{run_colmap, run_mapper, MapperKind as Mapper, MapperOptions};
use crate::sfm::{build_database, evaluate, GroundTruthCamera, Mapped, SfmAccuracy, SfmConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Method name of the same-run peer: COLMAP's own SIFT extraction, matching and mapping.
pub const COLMAP_SIFT_PIPELINE: &str = "colmap-sift";

/// Runs per pipeline and scene unless a benchmark asks for another count (see the module doc
/// for what a run repeats).
pub const DEFAULT_SFM_RUNS: usize = 3;

/// One run of a pipeline on a scene, aligned to the ground truth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SfmRun {
    /// None when no model could be aligned (`error` says why).
    pub accuracy: Option<SfmAccuracy>,
    pub error: Option<String>,
    /// Wall time of what this run repeated (the mapper; for COLMAP's pipeline, its extraction
    /// and matching as well), seconds.
    pub seconds: f64,
    /// CPU time of the same work ([`CpuClock`]: user + system, every thread of this process and
    /// every child process it waited for), seconds; None in reports before 2026-11-28 (late).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// The initial-pair angle `descl sfm` fell back to ([`crate::sfm::map`]) when COLMAP's
    /// defaults made no model; None when they made one (and always for COLMAP's pipeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_init_min_tri_angle_deg: Option<f64>,
    /// The focal-prior factor `descl sfm` fell back to ([`crate::sfm::FALLBACK_FOCAL_PRIOR_FACTOR`])
    /// when no run from the database's own focal lengths made a model; None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_focal_prior_factor: Option<f64>,
    /// `Mapper.filter_max_reproj_error` of the run `descl sfm`'s mapping kept (COLMAP's 4 px
    /// since 2026-11-28; before, a tight first filter of 1 px when that registered every
    /// image); COLMAP's default, 4 px, for COLMAP's pipeline; None in reports written before
    /// 2026-11-26 (evening) and for a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_max_reproj_error_px: Option<f64>,
    /// The filter `descl sfm`'s mapping refined its model at ([`crate::sfm::refine_filter_px`]);
    /// None for COLMAP's pipeline, a model not refined, and reports before 2026-11-28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refined_at_px: Option<f64>,
    /// The mapper's random seed of this run (`--random_seed`, pycolmap's `random_seed` and
    /// `set_random_seed`): the run's index. None in reports before 2026-11-29.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Wall seconds of each stage of this run's pipeline (descl's shared database: its
    /// extraction and matching, the same in every run); None for a run whose pipeline failed
    /// before it could be timed and in reports before 2026-11-29.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<StageSeconds>,
}

/// Wall seconds of a reconstruction pipeline's three stages, as pycolmap names them: what the
/// issue's time target compares stage by stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StageSeconds {
    /// Decoding the images, detecting and describing their features.
    pub extract: f64,
    /// Matching the pairs and verifying their geometry.
    #[serde(rename = "match")]
    pub matching: f64,
    /// The mapper (with descl sfm's fallbacks where it made them).
    pub map: f64,
}

/// A same-run peer of the sfm suite: another tool's own SIFT pipeline, run as its users run
/// it, on the same images. Each is one method row of the report, named [`Peer::method`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Peer {
    /// COLMAP's CLI (Debian's 3.8): `feature_extractor`, `exhaustive_matcher`, `mapper`.
    Colmap,
    /// pycolmap (PyPI, COLMAP 4): `extract_features`, `match_exhaustive`,
    /// `incremental_mapping`.
    PycolmapIncremental,
    /// pycolmap's global mapper (GLOMAP inside COLMAP 4): the same database, `global_mapping`.
    PycolmapGlobal,
}

/// Method name of pycolmap's own pipeline with its incremental mapper.
pub const PYCOLMAP_INCREMENTAL_PIPELINE: &str = "pycolmap-sift-incremental";

/// Method name of pycolmap's own pipeline with its global mapper.
pub const PYCOLMAP_GLOBAL_PIPELINE: &str = "pycolmap-sift-global";

impl Peer {
    /// Every peer, in the order the suite runs them.
    pub const ALL: [Peer; 3] = [
        Peer::PycolmapIncremental,
        Peer::PycolmapGlobal,
        Peer::Colmap,
    ];

    /// The peer's method name in the report.
    pub fn method(self) -> &'static str {
        match self {
            Peer::Colmap => COLMAP_SIFT_PIPELINE,
            Peer::PycolmapIncremental => PYCOLMAP_INCREMENTAL_PIPELINE,
            Peer::PycolmapGlobal => PYCOLMAP_GLOBAL_PIPELINE,
        }
    }

    /// The peer whose method name is `method`, if any.
    pub fn of_method(method: &str) -> Option<Peer> {
        Peer::ALL.into_iter().find(|p| p.method() == method)
    }

    /// Whether the peer runs in pycolmap (`$DESCL_PYTHON`).
    pub fn needs_pycolmap(self) -> bool {
        self != Peer::Colmap
    }

    /// What the peer runs, for the report: its steps and the settings that are not the
    /// tool's defaults.
    pub fn settings(self, max_features: usize) -> String {
        let common = format!(
            "SIFT on the CPU, max_num_features {max_features}, one camera per image as the tool's default reader makes them, exhaustive matching, mapper seed = run index"
        );
        match self {
            Peer::Colmap => format!(
                "colmap feature_extractor + exhaustive_matcher + mapper; {common}"
            ),
            Peer::PycolmapIncremental => format!(
                "pycolmap.extract_features + match_exhaustive + incremental_mapping (defaults); {common} (random_seed and set_random_seed)"
            ),
            Peer::PycolmapGlobal => format!(
                "pycolmap.extract_features + match_exhaustive + global_mapping (defaults); {common} (random_seed and set_random_seed)"
            ),
        }
    }
}

/// One method's reconstruction of one scene, run [`SfmRun`]s times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SceneReconstruction {
    /// The median run's accuracy against the ground truth (runs ordered by median centre
    /// error, failed runs last; of an even count the better middle one): a run that happened,
    /// not a blend of several. None when that run aligned no model (fewer than three
    /// registered images, or the mapper failed: `error` says why).
    pub accuracy: Option<SfmAccuracy>,
    pub error: Option<String>,
    /// Wall time of one whole pipeline (extract, match, map: the first run), seconds.
    pub seconds: f64,
    /// CPU time of the same pipeline ([`SfmRun::cpu_seconds`]); None in earlier reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Every run, in the order they ran. Empty in reports written before 2026-11-26 (one run,
    /// the fields above) and when descl's database could not be built.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<SfmRun>,
}

impl SceneReconstruction {
    /// Each run's median centre error as a fraction of the scene's extent (None: failed run).
    pub fn centre_errors_rel(&self) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| r.accuracy.as_ref().map(|a| a.median_centre_error_rel))
            .collect()
    }

    /// The initial-pair angle of each run that `descl sfm`'s fallback made
    /// ([`crate::sfm::map`]), as recorded.
    pub fn fallback_angles(&self) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.fallback_init_min_tri_angle_deg)
            .collect()
    }

    /// The focal-prior factor of each run that `descl sfm`'s focal fallback made.
    pub fn fallback_focal_priors(&self) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.fallback_focal_prior_factor)
            .collect()
    }

    /// The mapper filter of each run that recorded one (`descl sfm`'s runs,
    /// [`crate::sfm::map`]), pixels.
    pub fn filters_px(&self) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.filter_max_reproj_error_px)
            .collect()
    }

    /// The refinement filter of each run that was refined ([`crate::sfm::map`]), pixels.
    pub fn refined_px(&self) -> Vec<f64> {
        self.runs.iter().filter_map(|r| r.refined_at_px).collect()
    }

    /// The reconstruction made of `runs` (at least one), each a whole pipeline.
    fn of_runs(runs: Vec<SfmRun>) -> SceneReconstruction {
        let key = |r: &SfmRun| {
            r.accuracy
                .as_ref()
                .map_or(f64::INFINITY, |a| a.median_centre_error_rel)
        };
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| key(&runs[a]).total_cmp(&key(&runs[b])));
        let median = order
            .get(order.len().saturating_sub(1) / 2)
            .map(|&i| &runs[i]);
        let first = runs.first().map_or(0.0, |r| r.seconds);
        let first_cpu = runs.first().and_then(|r| r.cpu_seconds);
        SceneReconstruction {
            accuracy: median.and_then(|r| r.accuracy.clone()),
            error: median.map_or_else(|| Some("no run".into()), |r| r.error.clone()),
            seconds: first,
            cpu_seconds: first_cpu,
            runs,
        }
    }
}

/// CPU time since a start: user + system time of every thread of this process and of every
/// child process it has waited for (`getrusage` `RUSAGE_SELF` + `RUSAGE_CHILDREN`).
///
/// Why beside the wall time: the time target is wall time on the user's machine, but wall
/// time measured on a shared machine grows with whatever else runs there, unevenly between
/// the two pipelines; CPU time grows far less, so a ratio of CPU times that agrees with the
/// ratio of wall times says the latter was not an accident of the load. Both pipelines run
/// their heavy work either in this process (descl's extraction and matching) or in child
/// processes it waits for (every `colmap` command), so both are counted whole.
#[derive(Debug, Clone, Copy)]
struct CpuClock(Option<f64>);

impl CpuClock {
    fn start() -> CpuClock {
        CpuClock(process_cpu_seconds())
    }

    /// Seconds since [`CpuClock::start`]; None where `getrusage` failed.
    fn elapsed(&self) -> Option<f64> {
        Some(process_cpu_seconds()? - self.0?)
    }
}

/// User + system seconds of this process and its waited-for children (None off Unix).
#[cfg(not(unix))]
fn process_cpu_seconds() -> Option<f64> {
    None
}

/// User + system seconds of this process and its waited-for children.
#[cfg(unix)]
fn process_cpu_seconds() -> Option<f64> {
    Some(rusage_seconds(libc::RUSAGE_SELF)? + children_cpu_seconds()?)
}

/// User + system seconds of the child processes this process has waited for.
#[cfg(unix)]
fn children_cpu_seconds() -> Option<f64> {
    rusage_seconds(libc::RUSAGE_CHILDREN)
}

/// User + system seconds that `getrusage(who)` reports.
#[cfg(unix)]
fn rusage_seconds(who: libc::c_int) -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage struct into the pointer, which points at a
    // zero-initialised rusage of the right size; it is read only when the call succeeded.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so the struct is initialised (and it was zeroed before).
    let u = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(secs(u.ru_utime) + secs(u.ru_stime))
}

/// The mapper settings of both pipelines in run `seed`: COLMAP's defaults (principal point
/// fixed), `--random_seed` the run's index (run 0 is COLMAP's default seed). COLMAP's
/// pipeline always maps with `colmap mapper`; descl's with `mapper`.
fn mapper_options(mapper: Mapper, seed: u64) -> MapperOptions {
    MapperOptions {
        mapper,
        num_threads: None,
        refine: false,
        refine_principal_point: false,
        init_min_tri_angle_deg: None,
        filter_max_reproj_error_px: None,
        random_seed: Some(seed),
        hold_intrinsics: false,
    }
}

/// The ground-truth cameras of a scene, by image file name.
pub fn ground_truth(scene: &PoseScene) -> Vec<GroundTruthCamera> {
    file_names(&scene.images)
        .iter()
        .zip(&scene.cameras)
        .map(|(name, c)| GroundTruthCamera::from_strecha(c, name))
        .collect()
}

/// The folder holding a scene's images (all images of a Strecha scene share one).
fn image_dir(scene: &PoseScene) -> Result<&Path> {
    scene
        .images
        .first()
        .and_then(|p| p.parent())
        .ok_or_else(|| Error::InvalidInput(format!("scene {}: no images", scene.name)))
}

/// What one run of a pipeline made: its model (with what `descl sfm`'s mapping chose) and
/// its stages' seconds.
struct Made {
    reconstruction: Reconstruction,
    /// The fallback initial-pair angle, when `descl sfm`'s mapping fell back to it.
    fallback_angle: Option<f64>,
    /// The fallback focal-prior factor, likewise.
    focal_prior_factor: Option<f64>,
    filter_px: Option<f64>,
    refined_px: Option<f64>,
    stages: StageSeconds,
}

impl Made {
    /// A model a tool's own mapper made with its defaults.
    fn plain(reconstruction: Reconstruction, filter_px: f64, stages: StageSeconds) -> Made {
        Made {
            reconstruction,
            fallback_angle: None,
            focal_prior_factor: None,
            filter_px: Some(filter_px),
            refined_px: None,
            stages,
        }
    }

    /// What `descl sfm`'s mapping made.
    fn of_mapped(m: Mapped, stages: StageSeconds) -> Made {
        Made {
            fallback_angle: m.angle_fallback().then_some(m.init_min_tri_angle_deg),
            focal_prior_factor: m.focal_prior_factor(),
            filter_px: Some(m.filter_max_reproj_error_px),
            refined_px: m.refined_at_px,
            reconstruction: m.reconstruction,
            stages,
        }
    }
}

/// Aligns a finished run, turning a failure into a reported run.
fn outcome(
    made: Result<Made>,
    truth: &[GroundTruthCamera],
    started: Instant,
    cpu: CpuClock,
    seed: u64,
) -> SfmRun {
    let (accuracy, made) = match made {
        Ok(m) => (evaluate(&m.reconstruction, truth), Some(m)),
        Err(e) => (Err(e), None),
    };
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = cpu.elapsed();
    let (accuracy, error) = match accuracy {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(e.to_string())),
    };
    SfmRun {
        accuracy,
        error,
        seconds,
        cpu_seconds,
        fallback_init_min_tri_angle_deg: made.as_ref().and_then(|m| m.fallback_angle),
        fallback_focal_prior_factor: made.as_ref().and_then(|m| m.focal_prior_factor),
        filter_max_reproj_error_px: made.as_ref().and_then(|m| m.filter_px),
        refined_at_px: made.as_ref().and_then(|m| m.refined_px),
        seed: Some(seed),
        stages: made.map(|m| m.stages),
    }
}

/// Seconds since `t`.
fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Where a scene's reconstructions are built: a temporary folder under the system's, removed
/// afterwards or by the next run when this one is killed (`eval::scratch`), or (`descl bench --sfm-keep DIR`) `DIR/SCENE/METHOD`, kept for inspection
/// (databases, models), which must not exist yet: an earlier run's files are never mixed in.
pub enum SfmWork<'a> {
    Temporary,
    Keep(&'a Path),
}

impl SfmWork<'_> {
    fn folder(&self, scene: &str, method: &str) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
        match self {
            SfmWork::Temporary => {
                let dir = crate::eval::scratch::sfm_scratch_folder(&std::env::temp_dir())?;
                Ok((dir.path().to_path_buf(), Some(dir)))
            }
            SfmWork::Keep(root) => {
                let d = root.join(scene).join(method.replace(['/', '\\'], "_"));
                if d.exists() {
                    return Err(Error::InvalidInput(format!(
                        "{}: already exists; --sfm-keep builds each scene's and method's folder \
                         fresh (remove it or keep into another folder)",
                        d.display()
                    )));
                }
                std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
                Ok((d, None))
            }
        }
    }
}

/// Reconstructs `scene` `runs` times (at least once) in `method`'s folder of `work`:
/// `run(images, run_folder, seed)` makes the whole reconstruction, run k with seed k; each
/// model is aligned to the scene's ground truth. What cannot be run is a failed run, not an
/// error of the benchmark.
fn reconstruct(
    scene: &PoseScene,
    method: &str,
    work: &SfmWork,
    runs: usize,
    run: impl Fn(&Path, &Path, u64) -> Result<Made>,
) -> Result<SceneReconstruction> {
    let images = image_dir(scene)?;
    let truth = ground_truth(scene);
    let (dir, _temporary) = work.folder(&scene.name, method)?;
    let mut done = Vec::with_capacity(runs.max(1));
    for k in 0..runs.max(1) {
        let t = Instant::now();
        let run_cpu = CpuClock::start();
        let folder = dir.join(format!("run-{k}"));
        std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
        let made = run(images, &folder, k as u64);
        done.push(outcome(made, &truth, t, run_cpu, k as u64));
    }
    Ok(SceneReconstruction::of_runs(done))
}

/// Reconstructs `scene` with `describer` on DoG frames (`det`, its `max_keypoints` per image)
/// through `descl sfm`'s path, in its folder of `work`, in each of `runs` runs: run k builds
/// its database with verification seed k and maps it with `mapper` (with `descl sfm`'s
/// fallbacks) at mapper seed k.
pub fn reconstruct_with(
    scene: &PoseScene,
    describer: &Describer,
    det: &DetectorConfig,
    work: &SfmWork,
    runs: usize,
    mapper: Mapper,
    progress: &dyn Progress,
) -> Result<SceneReconstruction> {
    let extractor = Extractor::with_describer(describer.try_clone()?, *det)
        .max_image_size(COLMAP_MAX_IMAGE_SIZE);
    let run = |images: &Path, dir: &Path, seed: u64| {
        let mut config = SfmConfig::default();
        config.pair.ransac.seed = seed;
        let db = dir.join("database.db");
        let summary = build_database(images, &db, false, &config, &extractor, progress)?;
        let t = Instant::now();
        let options = mapper_options(mapper, seed);
        let mapped = crate::sfm::map(&db, images, &dir.join("sparse"), &options, false)?;
        let stages = StageSeconds {
            extract: summary.seconds.features,
            matching: summary.seconds.pairs,
            map: since(t),
        };
        Ok(Made::of_mapped(mapped, stages))
    };
    reconstruct(scene, describer.name(), work, runs, run)
}

/// Reconstructs `scene` with `peer`'s own SIFT pipeline, at most `max_features` per image,
/// the whole pipeline in each of `runs` runs.
pub fn reconstruct_with_peer(
    scene: &PoseScene,
    peer: Peer,
    max_features: usize,
    work: &SfmWork,
    runs: usize,
) -> Result<SceneReconstruction> {
    let run = |images: &Path, dir: &Path, seed: u64| match peer {
        Peer::Colmap => colmap_run(images, dir, max_features, seed),
        Peer::PycolmapIncremental | Peer::PycolmapGlobal => {
            let global = peer == Peer::PycolmapGlobal;
            let (reconstruction, stages) =
                crate::eval::pycolmap_peer::run(images, dir, max_features, seed, global)?;
            Ok(Made::plain(
                reconstruction,
                COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
                stages,
            ))
        }
    };
    reconstruct(scene, peer.method(), work, runs, run)
}

/// Reconstructs `scene` with COLMAP's own CPU SIFT pipeline (the [`Peer::Colmap`] row).
pub fn reconstruct_with_colmap_sift(
    scene: &PoseScene,
    max_features: usize,
    work: &SfmWork,
    runs: usize,
) -> Result<SceneReconstruction> {
    reconstruct_with_peer(scene, Peer::Colmap, max_features, work, runs)
}

/// One run of COLMAP's CLI pipeline in `dir`, each stage timed: its mapper with its defaults
/// and seed `seed`, nothing else.
fn colmap_run(images: &Path, dir: &Path, max_features: usize, seed: u64) -> Result<Made> {
    let db = dir.join("colmap.db");
    let t = Instant::now();
    colmap_extract(images, &db, max_features, false)?;
    let extract = since(t);
    let t = Instant::now();
    colmap_match(&db)?;
    let matching = since(t);
    let t = Instant::now();
    let options = mapper_options(Mapper::Colmap, seed);
    let reconstruction = run_mapper(&db, images, &dir.join("sparse"), &options)?;
    let stages = StageSeconds {
        extract,
        matching,
        map: since(t),
    };
    Ok(Made::plain(
        reconstruction,
        COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
        stages,
    ))
}

/// COLMAP's own SIFT pipeline on `images` (CPU): [`colmap_sift_database`], then `mapper`;
/// database and model under `work`.
pub fn colmap_sift_pipeline(
    images: &Path,
    work: &Path,
    max_features: usize,
    single_camera: bool,
    options: &MapperOptions,
) -> Result<Reconstruction> {
    let db = colmap_sift_database(images, work, max_features, single_camera)?;
    run_mapper(&db, images, &work.join("colmap-sparse"), options)
}

/// COLMAP's own SIFT features and matches of `images` (CPU) in `work/colmap.db`:
/// `feature_extractor` (at most `max_features` per image, one camera for all images when
/// `single_camera`, otherwise its defaults), then `exhaustive_matcher`.
pub fn colmap_sift_database(
    images: &Path,
    work: &Path,
    max_features: usize,
    single_camera: bool,
) -> Result<PathBuf> {
    let db = work.join("colmap.db");
    colmap_extract(images, &db, max_features, single_camera)?;
    colmap_match(&db)?;
    Ok(db)
}

/// `colmap feature_extractor` on the CPU into `db`.
fn colmap_extract(
    images: &Path,
    db: &Path,
    max_features: usize,
    single_camera: bool,
) -> Result<()> {
    let max = max_features.to_string();
    let single = if single_camera { "1" } else { "0" };
    run_colmap(&[
        "feature_extractor".as_ref(),
        "--database_path".as_ref(),
        db.as_os_str(),
        "--image_path".as_ref(),
        images.as_os_str(),
        "--ImageReader.single_camera".as_ref(),
        single.as_ref(),
        "--SiftExtraction.use_gpu".as_ref(),
        "0".as_ref(),
        "--SiftExtraction.max_num_features".as_ref(),
        max.as_ref(),
    ])
}

/// `colmap exhaustive_matcher` on the CPU in `db`.
fn colmap_match(db: &Path) -> Result<()> {
    run_colmap(&[
        "exhaustive_matcher".as_ref(),
        "--database_path".as_ref(),
        db.as_os_str(),
        "--SiftMatching.use_gpu".as_ref(),
        "0".as_ref(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(centre_error_rel: Option<f64>, points: usize) -> SfmRun {
        SfmRun {
            accuracy: centre_error_rel.map(|e| SfmAccuracy {
                registered: 8,
                total: 8,
                median_rotation_error_deg: 0.3,
                median_centre_error: e,
                median_centre_error_rel: e,
                median_direction_error_deg: Some(0.2),
                mean_reprojection_error: 0.5,
                num_points: points,
            }),
            error: centre_error_rel
                .is_none()
                .then(|| "colmap mapper registered no model".to_string()),
            seconds: 2.0,
            cpu_seconds: Some(3.0),
            fallback_init_min_tri_angle_deg: None,
            fallback_focal_prior_factor: None,
            filter_max_reproj_error_px: None,
            refined_at_px: None,
            seed: None,
            stages: None,
        }
    }

    #[test]
    fn the_row_is_the_run_with_the_median_centre_error_failed_runs_counting_as_worst() {
        // Errors 0.3 %, failed, 0.1 %: ordered 0.1, 0.3, failed; the middle one is 0.3 %.
        let r = SceneReconstruction::of_runs(vec![
            run(Some(0.003), 30),
            run(None, 0),
            run(Some(0.001), 10),
        ]);
        let a = r.accuracy.as_ref().unwrap();
        assert_eq!(a.median_centre_error_rel, 0.003);
        // Its other fields are that run's, not a blend.
        assert_eq!(a.num_points, 30);
        assert!(r.error.is_none());
        // One pipeline's time: the first run's, each run being a whole pipeline.
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.cpu_seconds, Some(3.0));
        assert_eq!(r.centre_errors_rel(), vec![Some(0.003), None, Some(0.001)]);
        // Two runs: the better middle one.
        let r = SceneReconstruction::of_runs(vec![run(Some(0.002), 20), run(Some(0.001), 10)]);
        assert_eq!(r.accuracy.unwrap().num_points, 10);
        // Two of three failed: the median run is a failure, and says why.
        let r =
            SceneReconstruction::of_runs(vec![run(None, 0), run(Some(0.001), 10), run(None, 0)]);
        assert!(r.accuracy.is_none());
        assert_eq!(
            r.error.as_deref(),
            Some("colmap mapper registered no model")
        );
    }

    #[test]
    fn a_report_of_one_run_reads_back_without_runs() {
        let old = r#"{"accuracy":null,"error":"no model","seconds":1.5}"#;
        let r: SceneReconstruction = serde_json::from_str(old).unwrap();
        assert!(r.runs.is_empty());
        assert!(r.centre_errors_rel().is_empty());
        assert!(r.cpu_seconds.is_none());
    }

    #[cfg(unix)]
    #[test]
    fn cpu_clock_counts_this_process_and_its_waited_children() {
        // Busy work in this process moves the clock (the test harness runs other tests on
        // other threads of this process, which move it too: only lower bounds hold).
        let clock = CpuClock::start();
        let wall = Instant::now();
        let mut x = 0u64;
        while clock.elapsed().unwrap() < 0.1 && wall.elapsed().as_secs_f64() < 20.0 {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        assert!(clock.elapsed().unwrap() >= 0.1, "{:?}", clock.elapsed());
        // A child that burns CPU and is waited for counts too (an idle `sleep` would not):
        // checked on the children's share alone.
        let before = children_cpu_seconds().unwrap();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let child = children_cpu_seconds().unwrap() - before;
        assert!(child > 0.02, "{child}");
    }
}
