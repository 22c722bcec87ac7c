//! Reconstruction benchmark (`descl bench sfm`): every Strecha scene is reconstructed from
//! scratch by `descl sfm`'s library path with each method (DoG frames, exhaustive pairs,
//! geometric verification, `colmap mapper`) and by COLMAP's own SIFT pipeline
//! (`feature_extractor` + `exhaustive_matcher` + `mapper`) as the same-run peer, then aligned
//! to the ground-truth cameras (Umeyama, [`crate::sfm::evaluate`]).
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
//! row is the run with the median centre error, every run beside it. What a run repeats is what
//! varies: descl's database is deterministic (one extraction, OpenCV's USAC seeded), so its
//! runs map that one database again (`colmap mapper`'s own run-to-run change was ≤ 0.001 % of
//! the extent on the Strecha scenes); COLMAP's CPU SIFT descriptors and matches differ from run
//! to run (same keypoints, other descriptor bytes and match counts on Herz-Jesus-P8, measured
//! 2026-11-26), and its reconstructions with them moved 0.053–0.070 % on fountain-P11, as much
//! as descriptors differ, so its runs repeat the whole pipeline.

use crate::describe::Describer;
use crate::detect::DetectorConfig;
use crate::error::{Error, Result};
use crate::eval::pose::PoseScene;
use crate::io::colmap_model::Reconstruction;
use crate::matching::pairs::file_names;
use crate::pipeline::{Extractor, COLMAP_MAX_IMAGE_SIZE};
use crate::progress::Progress;
use crate::sfm::mapper::{run_colmap, run_mapper, MapperKind as Mapper, MapperOptions};
use crate::sfm::mapper::{COLMAP_FILTER_MAX_REPROJ_ERROR_PX, COLMAP_INIT_MIN_TRI_ANGLE_DEG};
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
}

/// What a pipeline's runs repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// One database, mapped in every run (the database is deterministic).
    Mapper,
    /// The database is built again in every run (it is not).
    Pipeline,
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

    /// The reconstruction made of `runs` (at least one), after a shared database that took
    /// `database_seconds` (0 when each run built its own).
    fn of_runs(
        runs: Vec<SfmRun>,
        database_seconds: f64,
        database_cpu_seconds: f64,
    ) -> SceneReconstruction {
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
            seconds: database_seconds + first,
            cpu_seconds: first_cpu.map(|c| database_cpu_seconds + c),
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

/// Aligns a finished run, turning a failure into a reported run.
fn outcome(
    recon: Result<Mapped>,
    truth: &[GroundTruthCamera],
    started: Instant,
    cpu: CpuClock,
) -> SfmRun {
    let fallback = recon
        .as_ref()
        .ok()
        .and_then(|m| m.angle_fallback().then_some(m.init_min_tri_angle_deg));
    let focal = recon.as_ref().ok().and_then(Mapped::focal_prior_factor);
    let filter = recon.as_ref().ok().map(|m| m.filter_max_reproj_error_px);
    let refined = recon.as_ref().ok().and_then(|m| m.refined_at_px);
    let accuracy = recon.and_then(|m| evaluate(&m.reconstruction, truth));
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
        fallback_init_min_tri_angle_deg: fallback,
        fallback_focal_prior_factor: focal,
        filter_max_reproj_error_px: filter,
        refined_at_px: refined,
    }
}

/// descl's side: `descl sfm --reconstruct`'s mapping with `mapper`, fallback included.
fn map_as_descl_sfm(mapper: Mapper) -> impl Fn(&Path, &Path, &Path, u64) -> Result<Mapped> {
    move |db, images, out, seed| {
        crate::sfm::map(db, images, out, &mapper_options(mapper, seed), false)
    }
}

/// COLMAP's side: its mapper with its defaults, nothing else.
fn map_as_colmap(db: &Path, images: &Path, out: &Path, seed: u64) -> Result<Mapped> {
    let started = Instant::now();
    let reconstruction = run_mapper(db, images, out, &mapper_options(Mapper::Colmap, seed))?;
    Ok(Mapped {
        mapper: "colmap".into(),
        init_min_tri_angle_deg: COLMAP_INIT_MIN_TRI_ANGLE_DEG,
        filter_max_reproj_error_px: COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
        registrable_images: crate::io::colmap::count_registrable_images(
            db,
            crate::sfm::mapper::COLMAP_MAPPER_MIN_NUM_MATCHES,
        )?,
        refined_at_px: None,
        refinement_error: None,
        models: Vec::new(),
        attempts: vec![crate::sfm::MapAttempt {
            mapper: Mapper::Colmap,
            filter_max_reproj_error_px: COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
            init_min_tri_angle_deg: COLMAP_INIT_MIN_TRI_ANGLE_DEG,
            focal_prior_factor: None,
            registered: Some(reconstruction.images.len()),
            num_points: Some(reconstruction.num_points),
            error: None,
            kept: true,
            seconds: started.elapsed().as_secs_f64(),
        }],
        reconstruction,
    })
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
/// `database(images, folder)` builds a database, once or in every run as `repeat` says, and
/// `map` maps it in every run, run k with mapper seed k; each model is aligned to the scene's
/// ground truth. A database that cannot be built is a failed run, not an error of the benchmark.
fn reconstruct(
    scene: &PoseScene,
    method: &str,
    work: &SfmWork,
    runs: usize,
    repeat: Repeat,
    map: impl Fn(&Path, &Path, &Path, u64) -> Result<Mapped>,
    mut database: impl FnMut(&Path, &Path) -> Result<PathBuf>,
) -> Result<SceneReconstruction> {
    let images = image_dir(scene)?;
    let truth = ground_truth(scene);
    let (dir, _temporary) = work.folder(&scene.name, method)?;
    let run_dir = |k: usize| -> Result<PathBuf> {
        let d = dir.join(format!("run-{k}"));
        std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        Ok(d)
    };
    let started = Instant::now();
    let cpu = CpuClock::start();
    let shared = match repeat {
        Repeat::Mapper => match database(images, &dir) {
            Ok(db) => Some(db),
            Err(e) => {
                return Ok(SceneReconstruction {
                    accuracy: None,
                    error: Some(e.to_string()),
                    seconds: started.elapsed().as_secs_f64(),
                    cpu_seconds: cpu.elapsed(),
                    runs: Vec::new(),
                })
            }
        },
        Repeat::Pipeline => None,
    };
    let database_seconds = started.elapsed().as_secs_f64();
    let database_cpu_seconds = cpu.elapsed().unwrap_or(0.0);
    let mut done = Vec::with_capacity(runs.max(1));
    for k in 0..runs.max(1) {
        let t = Instant::now();
        let run_cpu = CpuClock::start();
        let folder = run_dir(k)?;
        let recon = match &shared {
            Some(db) => Ok(db.clone()),
            None => database(images, &folder),
        }
        .and_then(|db| map(&db, images, &folder.join("sparse"), k as u64));
        done.push(outcome(recon, &truth, t, run_cpu));
    }
    Ok(SceneReconstruction::of_runs(
        done,
        database_seconds,
        database_cpu_seconds,
    ))
}

/// Reconstructs `scene` with `describer` on DoG frames (`det`, its `max_keypoints` per image)
/// through `descl sfm`'s path, in its folder of `work`; its one database is mapped by
/// `mapper` in each of `runs` runs.
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
    reconstruct(
        scene,
        describer.name(),
        work,
        runs,
        Repeat::Mapper,
        map_as_descl_sfm(mapper),
        |images, dir| {
            let db = dir.join("database.db");
            build_database(
                images,
                &db,
                false,
                &SfmConfig::default(),
                &extractor,
                progress,
            )?;
            Ok(db)
        },
    )
}

/// Reconstructs `scene` with COLMAP's own CPU SIFT pipeline, at most `max_features` per image,
/// the whole pipeline in each of `runs` runs.
pub fn reconstruct_with_colmap_sift(
    scene: &PoseScene,
    max_features: usize,
    work: &SfmWork,
    runs: usize,
) -> Result<SceneReconstruction> {
    reconstruct(
        scene,
        COLMAP_SIFT_PIPELINE,
        work,
        runs,
        Repeat::Pipeline,
        map_as_colmap,
        |images, dir| colmap_sift_database(images, dir, max_features, false),
    )
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
    ])?;
    run_colmap(&[
        "exhaustive_matcher".as_ref(),
        "--database_path".as_ref(),
        db.as_os_str(),
        "--SiftMatching.use_gpu".as_ref(),
        "0".as_ref(),
    ])?;
    Ok(db)
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
        }
    }

    #[test]
    fn the_row_is_the_run_with_the_median_centre_error_failed_runs_counting_as_worst() {
        // Errors 0.3 %, failed, 0.1 %: ordered 0.1, 0.3, failed; the middle one is 0.3 %.
        let r = SceneReconstruction::of_runs(
            vec![run(Some(0.003), 30), run(None, 0), run(Some(0.001), 10)],
            5.0,
            6.0,
        );
        let a = r.accuracy.as_ref().unwrap();
        assert_eq!(a.median_centre_error_rel, 0.003);
        // Its other fields are that run's, not a blend.
        assert_eq!(a.num_points, 30);
        assert!(r.error.is_none());
        // One pipeline's time: the database and the first run.
        assert_eq!(r.seconds, 7.0);
        assert_eq!(r.cpu_seconds, Some(9.0));
        assert_eq!(r.centre_errors_rel(), vec![Some(0.003), None, Some(0.001)]);
        // Two runs: the better middle one.
        let r = SceneReconstruction::of_runs(
            vec![run(Some(0.002), 20), run(Some(0.001), 10)],
            0.0,
            0.0,
        );
        assert_eq!(r.accuracy.unwrap().num_points, 10);
        // Two of three failed: the median run is a failure, and says why.
        let r = SceneReconstruction::of_runs(
            vec![run(None, 0), run(Some(0.001), 10), run(None, 0)],
            0.0,
            0.0,
        );
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
