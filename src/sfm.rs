//! Structure-from-motion export: a folder of images through the one pair path
//! ([`crate::image_set::run`]) into a COLMAP database ([`ColmapWriter`]) that `colmap mapper`
//! reconstructs from; and the ground-truth evaluation of a reconstruction. The extractor is a
//! parameter, so any [`crate::describe::Describer`] serves.

use crate::detect::{DetectorConfig, Selection, COLMAP_PEAK_CONTRAST_THRESHOLD};
use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::Intrinsics;
use crate::image::image_inputs;
use crate::image_set::{self, SetConfig, SetImage};
use crate::io::colmap::CameraModel;
use crate::io::colmap_model::{
    model_folders, read_model, run_bundle_adjuster, run_mapper, run_point_filtering,
    run_point_triangulator, BundleTermination, MapperOptions, Reconstruction,
    COLMAP_FILTER_MAX_REPROJ_ERROR_PX, COLMAP_INIT_MIN_TRI_ANGLE_DEG,
};
use crate::io::output::{ColmapOptions, ColmapWriter};
use crate::io::plan::{read_plan, ExtractPlan, MatchPlan, EXTRACT_PLAN_FILE, MATCH_PLAN_FILE};
use crate::io::writer::Writer;
use crate::matching::pairs::PairMode;
use crate::matching::two_view::PairConfig;
use crate::names::name_stem;
use crate::progress::Progress;
use crate::provenance::{FeaturesId, PairProvenance};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::matching::two_view::{COLMAP_MAX_ERROR_PX, COLMAP_MIN_NUM_INLIERS};

/// The initial-pair angle `descl sfm` maps with when COLMAP's defaults make no model: half of
/// COLMAP's [`COLMAP_INIT_MIN_TRI_ANGLE_DEG`], at COLMAP's full inlier minimum. COLMAP relaxes
/// a failed initialisation itself (`IncrementalMapperController::Run`: the inlier minimum
/// halved, then the angle halved, twice), so it tries 100 inliers at 16°, 50 at 16°, 50 at 8°,
/// 25 at 8° and 25 at 4°, never 100 at 8°. On forward street motion (opensfm_lund, 29 images,
/// 2026-11-26) every one of those made no model, while 100 inliers at 8° chose a pair of well
/// matched images that grew into a model of all 29.
pub const FALLBACK_INIT_MIN_TRI_ANGLE_DEG: f64 = COLMAP_INIT_MIN_TRI_ANGLE_DEG / 2.0;

/// The focal length [`map`] starts cameras of unknown focal length from (no EXIF, no flag:
/// `prior_focal_length = 0`) when no run from the database's own priors made a model, as a
/// factor of max(width, height): OpenSfM's `default_focal_prior`, a 61° field of view across
/// the long side where COLMAP's 1.2 ([`crate::geometry::DEFAULT_FOCAL_FACTOR`]) is a 45° one.
/// Images without EXIF are often video frames from wide cameras, and with a focal prior far
/// too long COLMAP's initial two-view reconstruction of forward motion goes wrong. Measured on
/// opensfm_lund (29 street frames, no EXIF, a lens of about 740–750 px, 0.73 · 1024) with the
/// database of `descl-hynet-sdgm-real25all-b1024` (2026-11-26): from COLMAP's 1229 px the
/// mapper made no model at 16° or 8°; from 870 px (this factor) COLMAP's defaults registered
/// all 29 frames, as they did from 860 and 1000 px (from 748 px, 24).
pub const FALLBACK_FOCAL_PRIOR_FACTOR: f64 = 0.85;

/// File name of the database copy that [`map`]'s focal-prior fallback maps from, inside one
/// of its staging folders.
const FOCAL_FALLBACK_DATABASE: &str = "focal-prior.db";

/// The reprojection-error filter of [`map`]'s final refinement on images whose longest side is
/// at most [`SFM_REFINE_FILTER_REFERENCE_SIDE_PX`], pixels, a quarter of COLMAP's
/// [`COLMAP_FILTER_MAX_REPROJ_ERROR_PX`]; larger images get it scaled ([`refine_filter_px`]).
/// descl's databases hold pairs verified at COLMAP's 4 px two-view threshold, so the mapper's
/// tracks keep observations 1–4 px off in every bundle adjustment; the refinement drops those
/// past this filter from the finished 4 px model and bundle-adjusts it once more.
///
/// Chosen on the SfM validation scenes (2026-11-28, docs/BENCHMARKS.md "SfM validation
/// scenes", `docs/bench/sfm-mapping-policy-2026-11-28.json`), median camera-centre error in %
/// of the extent over 2–4 mapper runs, the sfm default model, COLMAP's 4 px model → refined
/// at 1 px: fountain-P11 0.055 → 0.045, Herz-Jesus-P8 0.068 → 0.058, castle-P19 0.77 → 0.41,
/// castle-P30 0.30 → 0.35 (the one scene it loses); COLMAP's own database refined the same
/// way: 0.059 → 0.047, 0.063 → 0.056, 0.73 → 0.53 and 0.295 → 0.345. It replaced a first mapper
/// run at 1 px (the previous policy), which needed about twice a 4 px run's time and registered
/// from the tight observations only: as accurate on three scenes, it lost castle-P30 by more
/// (RootSIFT 0.573 against the refinement's 0.382 and the plain 4 px run's 0.295 %) and an
/// unseen scene by 0.179 against 0.094 %.
///
/// Off by default since 2026-11-28 (`MapperOptions::refine`, `descl sfm --refine`): with the
/// one default model's databases it made the cameras worse on all three validation scenes
/// (median of seeds 0–2, plain 4 px → refined: castle-P19 0.384 → 0.526, castle-P30 0.351 →
/// 0.364, Herz-Jesus-P25 0.070 → 0.071) while still helping the two dev scenes it was chosen
/// on (fountain-P11 0.053 → 0.047, Herz-Jesus-P8 0.075 → 0.056);
/// `docs/bench/sfm-refinement-2026-11-28.json`.
pub const SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX: f64 = 1.0;

/// The longest image side at which [`SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX`] was measured:
/// the Strecha and castle scenes' 1536 px. Reprojection errors are in pixels and grow with
/// the image: on Herz-Jesus-P8 upscaled ×2 (3072 px) the same descl database's mean
/// reprojection error went from 0.28 to 0.50 px; refined at 1 / 2 px its centre error was
/// 0.065 / 0.068 % against 0.078 % unrefined (2026-11-27).
pub const SFM_REFINE_FILTER_REFERENCE_SIDE_PX: f64 = 1536.0;

/// [`map`]'s refinement filter for a database whose images' longest side is `side` pixels
/// (the median over its cameras, [`crate::io::colmap::median_camera_side`]):
/// [`SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX`] scaled by `side` /
/// [`SFM_REFINE_FILTER_REFERENCE_SIDE_PX`], never below it (smaller images keep 1 px), so that
/// the filter means the same fraction of the image at every size. None when that reaches
/// COLMAP's own [`COLMAP_FILTER_MAX_REPROJ_ERROR_PX`] (images of 6144 px and more): then
/// there is nothing to refine.
pub fn refine_filter_px(side: u32) -> Option<f64> {
    let px = SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX
        * (f64::from(side) / SFM_REFINE_FILTER_REFERENCE_SIDE_PX).max(1.0);
    (px < COLMAP_FILTER_MAX_REPROJ_ERROR_PX).then_some(px)
}

/// COLMAP's `min_model_size` (`IncrementalMapperController` option): a model of fewer images
/// is discarded when another was made, unless [`MIN_MODEL_FRACTION`] of the images is fewer.
pub const COLMAP_MIN_MODEL_SIZE: usize = 10;
/// The share of the images COLMAP's `min_model_size` rule is capped at (its 0.8).
pub const MIN_MODEL_FRACTION: f64 = 0.8;
/// The fewest images any model has: its initial pair.
const INITIAL_PAIR_IMAGES: usize = 2;

/// The fewest images a mapper run's largest model must hold for [`map`] to keep the run, of a
/// database of `registrable` images: COLMAP's `min_model_size` rule, which COLMAP applies to a
/// second model only, applied by descl to the largest. A smaller one is an initial pair that
/// little else joined: pycolmap 4.2.1 returned 2 of opensfm_lund's 29 frames at two seeds,
/// which would have stopped the fallbacks and been reported as the reconstruction.
pub fn min_model_images(registrable: usize) -> usize {
    let fraction = (MIN_MODEL_FRACTION * registrable as f64).floor() as usize;
    COLMAP_MIN_MODEL_SIZE.min(fraction).max(INITIAL_PAIR_IMAGES)
}

/// First characters of [`map`]'s staging folders inside its output folder (hidden, and not a
/// number, so never read as a model).
const MAP_STAGING_PREFIX: &str = ".descl-tmp-map-";

/// One mapper run of [`map`] (`colmap mapper`, or pycolmap's) and what it made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapAttempt {
    /// The mapper of the run.
    pub mapper: crate::io::colmap_model::Mapper,
    /// `Mapper.filter_max_reproj_error`, pixels.
    pub filter_max_reproj_error_px: f64,
    /// `Mapper.init_min_tri_angle`, degrees.
    pub init_min_tri_angle_deg: f64,
    /// None: cameras started from the database's focal lengths; a factor: cameras of unknown
    /// focal length started from factor · max(width, height) ([`FALLBACK_FOCAL_PRIOR_FACTOR`]).
    pub focal_prior_factor: Option<f64>,
    /// Images of its largest model (None: it made no model).
    pub registered: Option<usize>,
    /// 3-D points of its largest model, as the mapper made it (before any triangulation
    /// again: [`Mapped::reconstruction`] has the final count).
    pub num_points: Option<usize>,
    /// Why it made no model (the mapper's message).
    pub error: Option<String>,
    /// Whether its models are the ones [`map`] kept in the output folder.
    pub kept: bool,
    /// Wall time of the run, seconds.
    pub seconds: f64,
}

impl MapAttempt {
    /// The run's settings for a message: "filter 4 px, angle 8°" (", focal prior 0.85 ·
    /// max(w, h)" for the focal-prior fallback).
    pub fn settings(&self) -> String {
        let focal = self
            .focal_prior_factor
            .map(|k| format!(", focal prior {k} · max(w, h)"))
            .unwrap_or_default();
        format!(
            "filter {} px, angle {}°{focal}",
            px_text(self.filter_max_reproj_error_px),
            self.init_min_tri_angle_deg
        )
    }
}

/// A filter for a message: two decimals where they hold it to 1 % (`2.6 px`, not
/// `2.6041666666666665 px`), more where they do not (`0.0001 px`, not `0 px`); no trailing
/// zeros.
pub fn px_text(px: f64) -> String {
    let decimals = (2..=12)
        .find(|&d| {
            let shown: f64 = format!("{px:.d$}").parse().unwrap_or(px);
            (shown - px).abs() <= 0.01 * px.abs()
        })
        .unwrap_or(12);
    let s = format!("{px:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A reconstruction by [`map`] and the mapper settings that made it.
#[derive(Debug, Clone)]
pub struct Mapped {
    /// The mapper that ran, with its version where it reports one: "colmap", "pycolmap
    /// 4.2.1" ([`crate::io::colmap_model::Mapper::describe`]).
    pub mapper: String,
    /// The largest model of the kept run, in the output folder.
    pub reconstruction: Reconstruction,
    /// `Mapper.init_min_tri_angle` of the run that made the model, degrees.
    pub init_min_tri_angle_deg: f64,
    /// `Mapper.filter_max_reproj_error` of the run that made the model, pixels.
    pub filter_max_reproj_error_px: f64,
    /// Images of the database with a verified pair of at least
    /// [`crate::io::colmap_model::COLMAP_MAPPER_MIN_NUM_MATCHES`] inliers: the most a model
    /// can register.
    pub registrable_images: usize,
    /// The filter of the kept model's refinement ([`refine_filter_px`]: its observations past
    /// it dropped, one more bundle adjustment, its points triangulated again at COLMAP's 4 px
    /// with the cameras held fixed), when it was refined. This model's alone: the run's other
    /// models are refined each on its own ([`Mapped::models`]).
    pub refined_at_px: Option<f64>,
    /// Why the kept model's refinement failed, when it did (the model is then the mapper's
    /// own). A smaller model's failure is not here but in [`Mapped::models`].
    pub refinement_error: Option<String>,
    /// Every mapper run, in the order they ran; exactly one is `kept`.
    pub attempts: Vec<MapAttempt>,
    /// How each model of the kept run was refined, in the output folder's numeric order
    /// (empty for a model COLMAP's mapper made alone, as `descl bench sfm`'s peer).
    pub models: Vec<ModelRefinement>,
}

impl Mapped {
    /// Whether the model was made at a later initial-pair angle than the first run's (the
    /// [`FALLBACK_INIT_MIN_TRI_ANGLE_DEG`] fallback), because the first angle made no model.
    pub fn angle_fallback(&self) -> bool {
        self.attempts
            .first()
            .is_some_and(|a| a.init_min_tri_angle_deg != self.init_min_tri_angle_deg)
    }

    /// The focal-prior factor of the kept run ([`FALLBACK_FOCAL_PRIOR_FACTOR`]), when no run
    /// from the database's own focal lengths made a model.
    pub fn focal_prior_factor(&self) -> Option<f64> {
        self.attempts
            .iter()
            .find(|a| a.kept)
            .and_then(|a| a.focal_prior_factor)
    }

    /// Whether a fallback made the model: the angle, the focal prior or both.
    pub fn fallback(&self) -> bool {
        self.angle_fallback() || self.focal_prior_factor().is_some()
    }

    /// The runs that were not kept (no model, fewer images, or as many as an earlier run),
    /// for a note: "filter 1 px, angle 16°: 15/33 images; ...".
    pub fn passed_over(&self) -> Vec<String> {
        self.attempts
            .iter()
            .filter(|a| !a.kept)
            .map(|a| {
                let made = match a.registered {
                    Some(n) => format!("{n}/{} images", self.registrable_images),
                    None => "no model".to_string(),
                };
                format!("{}: {made}", a.settings())
            })
            .collect()
    }
}

/// Where the time of `descl sfm`'s stages went (`seconds.stages` of its `--json`, so a user
/// sees which stage to speed up): the extractor's decode + detect (thread-seconds) and
/// describe, the pairs' matching and verification (thread-seconds), and with a reconstruction
/// each mapper run ([`MapAttempt::seconds`]) and the rest of the mapper stage (the
/// refinement of the kept run's models).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SfmStageSeconds {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_detect_thread_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub describe: Option<f64>,
    /// Each mapper run's wall time, in the order they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapper_runs: Option<Vec<f64>>,
    pub matching_thread_seconds: f64,
    /// The mapper stage's wall time less its runs' (at least 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refinement: Option<f64>,
    pub verification_thread_seconds: f64,
}

impl SfmStageSeconds {
    /// The stages of a set run, and of its mapping when there was one: what [`map`] returned
    /// and the wall time of the whole mapper stage, seconds.
    pub fn new(set: &image_set::StageSeconds, mapping: Option<(&Mapped, f64)>) -> SfmStageSeconds {
        let runs = mapping.map(|(m, _)| m.attempts.iter().map(|a| a.seconds).collect::<Vec<_>>());
        SfmStageSeconds {
            decode_detect_thread_seconds: set.extraction.map(|e| e.decode_detect),
            describe: set.extraction.map(|e| e.describe),
            refinement: mapping
                .zip(runs.as_ref())
                .map(|((_, stage), runs)| (stage - runs.iter().sum::<f64>()).max(0.0)),
            mapper_runs: runs,
            matching_thread_seconds: set.matching,
            verification_thread_seconds: set.verification,
        }
    }
}

impl std::fmt::Display for SfmStageSeconds {
    /// One line for people, the stages in the JSON's (alphabetical) order:
    /// `describe 1.2, mapper_runs [3.4, 5.6], …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let one = |k: &str, v: Option<f64>| v.map(|v| format!("{k} {v:.1}"));
        let runs = self.mapper_runs.as_ref().map(|runs| {
            let r: Vec<String> = runs.iter().map(|r| format!("{r:.1}")).collect();
            format!("mapper_runs [{}]", r.join(", "))
        });
        let parts: Vec<String> = [
            one(
                "decode_detect_thread_seconds",
                self.decode_detect_thread_seconds,
            ),
            one("describe", self.describe),
            runs,
            one(
                "matching_thread_seconds",
                Some(self.matching_thread_seconds),
            ),
            one("refinement", self.refinement),
            one(
                "verification_thread_seconds",
                Some(self.verification_thread_seconds),
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// One model of [`map`]'s kept run, as it was moved into the output folder: refined, or the
/// mapper's own and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRefinement {
    /// The model's folder in the output folder.
    pub path: PathBuf,
    /// Whether it is the largest model, the one [`Mapped::reconstruction`] holds.
    pub largest: bool,
    /// The filter it was refined at ([`refine_filter_px`]); None: it is the mapper's own
    /// (nothing was refined, or its refinement failed: `error`).
    pub refined_at_px: Option<f64>,
    /// Why its refinement failed.
    pub error: Option<String>,
    /// How its refinement's bundle adjustment ended (COLMAP's report), when it ran and
    /// reported it. A bundle adjustment that did not converge still refines the model.
    pub bundle_adjustment: Option<BundleTermination>,
}

/// The database copy of [`map`]'s focal-prior fallback, in a new staging folder of `out`: a
/// consistent snapshot of `database` (`VACUUM INTO` from a read-only connection, so a
/// journal or write-ahead log beside it cannot leave the copy stale) whose cameras of unknown
/// focal length start from [`FALLBACK_FOCAL_PRIOR_FACTOR`] · max(w, h). None, and nothing
/// copied, when no camera's focal length is unknown.
fn focal_fallback_database(
    database: &Path,
    out: &Path,
) -> Result<Option<(tempfile::TempDir, PathBuf)>> {
    if crate::io::colmap::count_unknown_focal_cameras(database)? == 0 {
        return Ok(None);
    }
    let dir = crate::io::atomic::staging_dir(out, MAP_STAGING_PREFIX)?;
    let copy = dir.path().join(FOCAL_FALLBACK_DATABASE);
    crate::io::colmap::snapshot(database, &copy)?;
    crate::io::colmap::set_unknown_focal_priors(&copy, FALLBACK_FOCAL_PRIOR_FACTOR)?;
    Ok(Some((dir, copy)))
}

/// A run of [`map`] whose largest model holds fewer than [`min_model_images`] of the
/// `registrable` images counts as one that made no model (its staging folder dropped), so that
/// the fallbacks run.
fn large_enough(
    (mut attempt, model): (MapAttempt, Option<(tempfile::TempDir, Reconstruction)>),
    registrable: usize,
) -> (MapAttempt, Option<(tempfile::TempDir, Reconstruction)>) {
    let least = min_model_images(registrable);
    match model {
        Some((_, r)) if r.images.len() < least => {
            attempt.error = Some(format!(
                "its largest model holds {} of the {registrable} registrable images, fewer than {least} (COLMAP's min_model_size rule, applied to the largest model)",
                r.images.len()
            ));
            attempt.registered = None;
            attempt.num_points = None;
            (attempt, None)
        }
        model => (attempt, model),
    }
}

/// One `colmap mapper` run of [`map`] from `database` into a fresh staging folder of `out`:
/// what it made, and its staging folder and largest model when it made one. Only a failed
/// initialisation ([`Error::NoModel`]) is an attempt without a model; any other error is
/// passed on.
fn map_once(
    database: &Path,
    images: &Path,
    out: &Path,
    options: &MapperOptions,
    filter: f64,
    angle: f64,
    focal_prior_factor: Option<f64>,
) -> Result<(MapAttempt, Option<(tempfile::TempDir, Reconstruction)>)> {
    let staging = crate::io::atomic::staging_dir(out, MAP_STAGING_PREFIX)?;
    let run = MapperOptions {
        init_min_tri_angle_deg: Some(angle),
        filter_max_reproj_error_px: Some(filter),
        ..options.clone()
    };
    let mut attempt = MapAttempt {
        mapper: options.mapper,
        filter_max_reproj_error_px: filter,
        init_min_tri_angle_deg: angle,
        focal_prior_factor,
        registered: None,
        num_points: None,
        error: None,
        kept: false,
        seconds: 0.0,
    };
    let started = std::time::Instant::now();
    let result = run_mapper(database, images, staging.path(), &run);
    attempt.seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(r) => {
            attempt.registered = Some(r.images.len());
            attempt.num_points = Some(r.num_points);
            Ok((attempt, Some((staging, r))))
        }
        Err(Error::NoModel(why)) => {
            attempt.error = Some(why);
            Ok((attempt, None))
        }
        Err(e) => Err(e),
    }
}

/// Runs the mapper of `options` (`colmap mapper`, or pycolmap's) on `database` into `out`
/// (`descl sfm --reconstruct`, `descl sfm map`, and descl's side of `descl bench sfm`). With neither setting in `options`:
///
/// 1. at COLMAP's own defaults (4 px filter, 16° initial-pair angle), and when those make no
///    model at all, once more at [`FALLBACK_INIT_MIN_TRI_ANGLE_DEG`] (COLMAP's own relaxation
///    works inside that run too: 50 inliers at 8°, then 4° and 25 inliers, so 8° is where its
///    search starts);
/// 2. when no run made a model, no angle was given and some camera's focal length is unknown,
///    both angles once more on a copy of the database whose cameras of unknown focal length
///    start from [`FALLBACK_FOCAL_PRIOR_FACTOR`] · max(w, h) (the database itself keeps its
///    priors; the kept run's [`MapAttempt::focal_prior_factor`] says so);
/// 3. the first run that made a model is kept, and with [`MapperOptions::refine`] (off by
///    default: [`SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX`] says why) refined at [`refine_filter_px`] (1 px up to
///    1536 px images, scaled above): observations past it dropped, one more global bundle
///    adjustment, its points triangulated again at 4 px with the cameras held fixed. Each of
///    the run's models is refined on its own: one whose refinement fails is kept as the
///    mapper made it, the others refined all the same. The largest model's failure is
///    [`Mapped::refinement_error`]; every model's outcome is in [`Mapped::models`].
///
/// A setting given in `options` is used as given: an angle leaves out both fallbacks (angle
/// and focal prior), a filter the refinement (the runs are at that filter). Only a failed
/// initialisation ([`Error::NoModel`]) moves on to the next run; a missing colmap, a bad
/// database or a crash is passed on as it is.
///
/// `out` must pass [`check_sparse_dir`]; with `overwrite`, earlier models there (numbered
/// folders holding `images.bin`) are removed first. All of it happens under `out`'s lock: each run maps into a staging folder inside
/// `out`, and only the kept run's models are moved in, so a failed or killed run leaves no
/// model of a run that was not kept.
pub fn map(
    database: &Path,
    images: &Path,
    out: &Path,
    options: &MapperOptions,
    overwrite: bool,
) -> Result<Mapped> {
    check_sparse_dir(out, overwrite)?;
    // pycolmap is imported here, so a Python without it is refused before the output folder
    // is made or any mapper runs.
    let mapper = options.mapper.describe()?;
    // Before the folder is made: a database without two registrable images leaves none.
    let registrable = crate::io::colmap::count_registrable_images(
        database,
        crate::io::colmap_model::COLMAP_MAPPER_MIN_NUM_MATCHES,
    )?;
    if registrable < 2 {
        return Err(Error::NoModel(format!(
            "{}: {registrable} images with a verified pair of at least {} inliers; a model needs two",
            database.display(),
            crate::io::colmap_model::COLMAP_MAPPER_MIN_NUM_MATCHES
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    // The lock is a file beside the folder: named from its canonical path, so that `.` and
    // the same folder spelt in full take the same lock.
    let canonical = out.canonicalize().map_err(|e| Error::io(out, e))?;
    let _lock = crate::io::atomic::OutputLock::acquire(&canonical, "map into another folder")?;
    // Checked again under the lock: another run may have mapped here since.
    check_sparse_dir(out, overwrite)?;
    if overwrite {
        let old_models = model_folders(out)?;
        // The database or the images inside an earlier model's folder would go with it.
        for (what, path) in [("database", database), ("image folder", images)] {
            let Ok(path) = path.canonicalize() else {
                continue;
            };
            for old in &old_models {
                if old.canonicalize().is_ok_and(|o| path.starts_with(&o)) {
                    return Err(Error::InvalidInput(format!(
                        "{}: the {what} {} is inside this earlier model, which --overwrite would remove; move it or map into another folder",
                        old.display(),
                        path.display()
                    )));
                }
            }
        }
        for old in old_models {
            std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
        }
    }
    // Staging folders (or files) of a killed run (no run holds this folder's lock now).
    crate::io::atomic::remove_stale_staging(out, MAP_STAGING_PREFIX)?;
    let angles = match options.init_min_tri_angle_deg {
        Some(a) => vec![a],
        None => vec![
            COLMAP_INIT_MIN_TRI_ANGLE_DEG,
            FALLBACK_INIT_MIN_TRI_ANGLE_DEG,
        ],
    };
    let filter = options
        .filter_max_reproj_error_px
        .unwrap_or(COLMAP_FILTER_MAX_REPROJ_ERROR_PX);
    let refine_px = match (options.refine, options.filter_max_reproj_error_px) {
        (true, None) => refine_filter_px(crate::io::colmap::median_camera_side(database)?),
        _ => None,
    };
    let mut attempts: Vec<MapAttempt> = Vec::new();
    // (index into attempts, its staging folder, its largest model)
    let mut made: Option<(usize, tempfile::TempDir, Reconstruction)> = None;
    for &angle in &angles {
        let (attempt, model) = large_enough(
            map_once(database, images, out, options, filter, angle, None)?,
            registrable,
        );
        attempts.push(attempt);
        if let Some((staging, r)) = model {
            made = Some((attempts.len() - 1, staging, r));
            break;
        }
    }
    // No model from the database's focal priors: a copy with a wide camera's, at each angle
    // (not when the angle was given: then nothing falls back). The copy lives in a staging
    // folder until the end of this run (the refinement triangulates from it). A failure to
    // make the copy does not hide the runs before it: it joins the no-model report.
    let mut mapped_from = database.to_path_buf();
    let (_focal_copy, focal_fallback_error) =
        if made.is_none() && options.init_min_tri_angle_deg.is_none() {
            match focal_fallback_database(database, out) {
                Ok(Some((dir, copy))) => {
                    let factor = FALLBACK_FOCAL_PRIOR_FACTOR;
                    for &angle in &angles {
                        let (attempt, model) = large_enough(
                            map_once(&copy, images, out, options, filter, angle, Some(factor))?,
                            registrable,
                        );
                        attempts.push(attempt);
                        if let Some((staging, r)) = model {
                            made = Some((attempts.len() - 1, staging, r));
                            mapped_from = copy.clone();
                            break;
                        }
                    }
                    (Some(dir), None)
                }
                Ok(None) => (None, None),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, None)
        };
    let Some((index, staging, mapped)) = made else {
        return Err(no_model_error(database, &attempts, focal_fallback_error));
    };
    let (models, _refined) = refine_models(
        &mapped_from,
        images,
        staging.path(),
        &mapped.path,
        out,
        refine_px,
        options,
    )?;
    let largest = models.iter().find(|m| m.outcome.largest).ok_or_else(|| {
        Error::InvalidInput(format!(
            "{}: the mapper's largest model is not among its models",
            mapped.path.display()
        ))
    })?;
    let (refined_at_px, refinement_error) =
        (largest.outcome.refined_at_px, largest.outcome.error.clone());
    let reconstruction_path = largest.outcome.path.clone();
    for m in &models {
        std::fs::rename(&m.from, &m.outcome.path).map_err(|e| Error::io(&m.outcome.path, e))?;
    }
    // Read from its place in `out`, so that its path is the one reported.
    let reconstruction = read_model(&reconstruction_path)?;
    attempts[index].kept = true;
    let kept = &attempts[index];
    Ok(Mapped {
        mapper,
        refined_at_px,
        refinement_error,
        init_min_tri_angle_deg: kept.init_min_tri_angle_deg,
        filter_max_reproj_error_px: kept.filter_max_reproj_error_px,
        reconstruction,
        registrable_images: registrable,
        models: models.into_iter().map(|m| m.outcome).collect(),
        attempts,
    })
}

/// The mapper's name for a message ("colmap", "pycolmap").
fn mapper_name(attempts: &[MapAttempt]) -> &'static str {
    match attempts.first().map(|a| a.mapper) {
        Some(crate::io::colmap_model::Mapper::Pycolmap) => "pycolmap",
        _ => "colmap",
    }
}

/// [`map`]'s error when no run made a model: every run and why, and why the focal-prior
/// fallback did not run when it could not.
fn no_model_error(
    database: &Path,
    attempts: &[MapAttempt],
    focal_fallback_error: Option<String>,
) -> Error {
    let why: Vec<String> = attempts
        .iter()
        .map(|a| {
            format!(
                "{}: {}",
                a.settings(),
                a.error.as_deref().unwrap_or("no model")
            )
        })
        .collect();
    let skipped = focal_fallback_error
        .map(|e| format!("; the focal-prior fallback did not run: {e}"))
        .unwrap_or_default();
    // COLMAP 3.8's mapper fails where pycolmap's maps (forward motion without EXIF,
    // crate::io::pycolmap): name the way out.
    let hint = match mapper_name(attempts) {
        "colmap" => {
            "; pycolmap's newer mapper may map it: --mapper pycolmap (pip install pycolmap)"
        }
        _ => "",
    };
    Error::NoModel(format!(
        "{} mapper made no model of {}: {}{skipped}{hint}",
        mapper_name(attempts),
        database.display(),
        why.join("; ")
    ))
}

/// One model of [`map`]'s kept run: the folder it is moved into the output folder from (its
/// refinement, or the mapper's own), and how its refinement went.
struct StagedModel {
    from: PathBuf,
    outcome: ModelRefinement,
}

/// [`map`]'s refinement of each model in `mapped` (a staging folder of `out`) on its own, at
/// `px` (None: none refined). Returns each model's source and outcome, and the staging
/// folder holding the refined ones (kept until they are moved). A model whose refinement
/// fails keeps the mapper's version; its outcome says why. `largest` is the mapper's largest
/// model (a folder of `mapped`).
fn refine_models(
    database: &Path,
    images: &Path,
    mapped: &Path,
    largest: &Path,
    out: &Path,
    px: Option<f64>,
    options: &MapperOptions,
) -> Result<(Vec<StagedModel>, Option<tempfile::TempDir>)> {
    let done = match px {
        Some(_) => Some(crate::io::atomic::staging_dir(out, MAP_STAGING_PREFIX)?),
        None => None,
    };
    let mut models = Vec::new();
    for folder in model_folders(mapped)? {
        let Some(name) = folder.file_name() else {
            continue;
        };
        let mut outcome = ModelRefinement {
            path: out.join(name),
            largest: folder == largest,
            refined_at_px: None,
            error: None,
            bundle_adjustment: None,
        };
        let mut from = folder.clone();
        if let (Some(px), Some(done)) = (px, &done) {
            let target = done.path().join(name);
            let step = RefineStep {
                database,
                images,
                work: done.path(),
                px,
                options,
            };
            let (result, termination) = step.refine(&folder, &target, &outcome.path);
            outcome.bundle_adjustment = termination;
            match result {
                Ok(()) => {
                    outcome.refined_at_px = Some(px);
                    from = target;
                }
                Err(why) => outcome.error = Some(why),
            }
        }
        models.push(StagedModel { from, outcome });
    }
    Ok((models, done))
}

/// Folder names inside [`refine_models`]'s staging folder for the steps before the last, one
/// model folder each (the refined models themselves are numbered, as the mapper's).
const REFINE_FILTERED_DIR: &str = "filtered";
const REFINE_ADJUSTED_DIR: &str = "adjusted";

/// What [`refine_models`]'s refinement of one model works with.
struct RefineStep<'a> {
    database: &'a Path,
    images: &'a Path,
    /// The staging folder its intermediate models go into.
    work: &'a Path,
    px: f64,
    options: &'a MapperOptions,
}

impl RefineStep<'_> {
    /// Refines the model in `model` into `target`: its observations past `px` dropped
    /// ([`run_point_filtering`]), one global bundle adjustment ([`run_bundle_adjuster`]), then
    /// its tracks triangulated again from the database at COLMAP's 4 px with the cameras held
    /// fixed ([`run_point_triangulator`]): the poses of a bundle adjustment on the closest
    /// observations, about the points of a 4 px model. Returns the outcome, whose error names
    /// the model as `named` (its folder in the output) and the step that failed, and how the
    /// bundle adjustment ended when it ran. A solver failure fails the refinement; a solver
    /// that did not converge does not.
    fn refine(
        &self,
        model: &Path,
        target: &Path,
        named: &Path,
    ) -> (std::result::Result<(), String>, Option<BundleTermination>) {
        let Some(name) = model.file_name() else {
            return (
                Err(format!("{}: not a model folder", model.display())),
                None,
            );
        };
        let filtered = self.work.join(REFINE_FILTERED_DIR).join(name);
        let adjusted = self.work.join(REFINE_ADJUSTED_DIR).join(name);
        if let Err(e) = run_point_filtering(model, &filtered, self.px) {
            let px = px_text(self.px);
            let why = format!(
                "{}: dropping observations past {px} px: {e}",
                named.display()
            );
            return (Err(why), None);
        }
        let termination = match run_bundle_adjuster(&filtered, &adjusted, self.options) {
            Ok(a) => a.termination,
            Err(e) => {
                return (
                    Err(format!("{}: bundle adjustment: {e}", named.display())),
                    None,
                )
            }
        };
        if termination == Some(BundleTermination::Failure) {
            let why = format!(
                "{}: bundle adjustment: COLMAP's solver reported \"Failure\"",
                named.display()
            );
            return (Err(why), termination);
        }
        let triangulated =
            run_point_triangulator(self.database, self.images, &adjusted, target, self.options);
        let result = triangulated
            .map(|_| ())
            .map_err(|e| format!("{}: triangulating its points again: {e}", named.display()));
        (result, termination)
    }
}

/// The folder of [`map`]'s models when none is given: `<database stem>-sparse` beside the
/// database (`scene.db` → `scene-sparse`).
pub fn default_sparse_dir(database: &Path) -> PathBuf {
    let stem = database
        .file_stem()
        .map_or("colmap".into(), |s| s.to_string_lossy());
    database.with_file_name(format!("{stem}-sparse"))
}

/// Checks, before any work, what `descl sfm IMAGES` writes: a run must not fail at its end for
/// its output or its mapper. The database must be new (or `overwrite`) and writable; with a
/// reconstruction into `sparse`, that folder must take the models ([`check_sparse_dir`]) and
/// COLMAP must run.
pub fn check_outputs(database: &Path, sparse: Option<&Path>, overwrite: bool) -> Result<()> {
    if database.exists() && !overwrite {
        return Err(Error::InvalidInput(format!(
            "{}: database already exists (pass --overwrite to replace it)",
            database.display()
        )));
    }
    crate::io::atomic::check_writable(database)?;
    let Some(sparse) = sparse else {
        return Ok(());
    };
    check_sparse_dir(sparse, overwrite)?;
    require_colmap("--reconstruct")
}

/// That `colmap` ([`crate::io::colmap_model::colmap_exe`]) starts, checked before any work by
/// the commands that map (`what`: "--reconstruct", "descl sfm map"): the mapping and its
/// fallbacks need it, whichever mapper maps.
pub fn require_colmap(what: &str) -> Result<()> {
    if !crate::io::colmap_model::colmap_available() {
        return Err(Error::InvalidInput(format!(
            "{what}: cannot run `{}`; install COLMAP (Debian: apt install colmap) or set DESCL_COLMAP to its executable",
            crate::io::colmap_model::colmap_exe().display()
        )));
    }
    Ok(())
}

/// Whether `out` can take [`map`]'s models, checked by `descl sfm` before any extraction and
/// by [`map`] itself: a folder or nothing yet (not a file), holding no entry named as the
/// mapper names its models (0, 1, …) other than, with `overwrite`, earlier models (numbered
/// folders with `images.bin`, which [`map`] then removes).
pub fn check_sparse_dir(out: &Path, overwrite: bool) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{}: not a folder (the mapper's models go into a folder)",
            out.display()
        )));
    }
    if !out.exists() {
        return Ok(());
    }
    let models = model_folders(out)?;
    for taken in numbered_entries(out)? {
        let model = models.contains(&taken);
        if model && overwrite {
            continue;
        }
        return Err(Error::InvalidInput(if model {
            format!(
                "{}: holds a model of an earlier run; pass --overwrite to replace it, remove it or map into another folder",
                taken.display()
            )
        } else {
            format!(
                "{}: named as the mapper names its models, but not one; remove it or map into another folder",
                taken.display()
            )
        }));
    }
    Ok(())
}

/// Entries of `dir` named as `colmap mapper` names its models (a number), model or not.
fn numbered_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Settings of `descl sfm`.
#[derive(Debug, Clone)]
pub struct SfmConfig {
    pub pair: PairConfig,
    pub pairs: PairMode,
    pub camera_model: CameraModel,
    /// One camera shared by all images (same camera, same size) instead of one per image.
    pub single_camera: bool,
}

impl Default for SfmConfig {
    /// `descl sfm`'s defaults: exhaustive pairs, one SIMPLE_RADIAL camera per image, pairs
    /// verified at COLMAP's two-view threshold ([`COLMAP_MAX_ERROR_PX`] = 4 px). COLMAP's
    /// mapper re-estimates its initial pair's essential matrix at 4 px from the inliers a
    /// database stores. Measured 2026-11-26 (docs/BENCHMARKS.md, "What limits Herz-Jesus-P8's
    /// camera centres", now in docs/log/BENCHMARKS-log.md): 1 px gives the Strecha scenes lower centre errors (Herz-Jesus-P8
    /// 0.062 against 0.086 % of the extent, fountain-P11 0.042 against 0.051 %), but at 1 or
    /// 2 px opensfm_lund (forward street motion) gets no model even at [`map`]'s 8° fallback
    /// (29/29 at 4 px), and at 1 px skull01 registers 15 of 33 images instead of 19. The
    /// accuracy is taken in the mapper instead: [`map`] refines its 4 px model at 1 px
    /// (scaled with the image, [`refine_filter_px`]).
    fn default() -> Self {
        let mut pair = PairConfig::default();
        pair.ransac.threshold_px = COLMAP_MAX_ERROR_PX;
        SfmConfig {
            pair,
            pairs: PairMode::Exhaustive,
            camera_model: CameraModel::SimpleRadial,
            single_camera: false,
        }
    }
}

/// What `descl sfm` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct SfmSummary {
    pub database: PathBuf,
    pub images: Vec<SetImage>,
    pub pairs: usize,
    /// Pairs with a verified model, i.e. at least `pair.min_inliers` inliers (written to
    /// two_view_geometries).
    pub verified_pairs: usize,
    pub mean_matches: f64,
    pub mean_inliers: f64,
    /// Images that could not be read and pairs that could not be matched, with the reason.
    pub skipped: Vec<String>,
    /// Wall time of the features and of the pairs, seconds.
    pub seconds: image_set::StageSeconds,
    /// The matching and verification settings asked for (with `geometry: essential`, pairs of
    /// an image whose focal length is only COLMAP's guess are verified with F:
    /// [`PairConfig::for_intrinsics`]).
    pub pair_config: PairConfig,
}

impl SfmSummary {
    /// What became of the pairs, for people: "N verified (mean … matches, … inliers per pair)";
    /// without a geometry no pair is verified, and "0 verified (… 0 inliers per pair)" would
    /// read as every verification failing, so it says so.
    pub fn pairs_text(&self) -> String {
        match self.pair_config.geometry {
            Some(_) => format!(
                "{} verified (mean {:.0} matches, {:.0} inliers per pair)",
                self.verified_pairs, self.mean_matches, self.mean_inliers
            ),
            None => format!(
                "not verified (--geometry none; mean {:.0} matches per pair)",
                self.mean_matches
            ),
        }
    }
}

/// Keypoints per image of `descl sfm` and `descl bench sfm`: COLMAP's
/// `SiftExtraction.max_num_features` default, so COLMAP's own pipeline, the same-run peer of
/// the sfm suite, runs with its own defaults too.
pub const SFM_MAX_KEYPOINTS: usize = 8192;

/// `descl sfm`'s detector defaults, the best measured SfM settings (docs/BENCHMARKS.md, the
/// sfm suite): DoG at COLMAP's peak threshold, [`SFM_MAX_KEYPOINTS`] chosen as COLMAP chooses
/// its features ([`Selection::Colmap`]). On fountain-P11 these gave 14.2k 3-D points and a
/// 0.040 % camera-centre error against 2.1k points with `descl extract`'s 2048 strongest at
/// OpenCV's threshold. `descl bench sfm` runs exactly these.
pub fn sfm_detector() -> DetectorConfig {
    DetectorConfig {
        max_keypoints: SFM_MAX_KEYPOINTS,
        contrast_threshold: COLMAP_PEAK_CONTRAST_THRESHOLD,
        selection: Selection::Colmap,
        ..DetectorConfig::default()
    }
}

/// Camera knowledge of an image for COLMAP: focal length from EXIF when present, else COLMAP's
/// 1.2·max(w, h) prior.
pub fn colmap_camera(path: &Path, f: &Features) -> Result<image_set::CameraInfo> {
    let (w, h) = (f.meta.image_width, f.meta.image_height);
    let exif = Intrinsics::from_exif(path, w, h).ok().flatten();
    Ok((
        Some(exif.unwrap_or_else(|| Intrinsics::default_prior(w, h))),
        exif.is_some(),
    ))
}

/// Extracts, matches, verifies and writes the COLMAP database for the images of `image_dir`.
/// `db` must not exist unless `overwrite`; it is checked before any work starts.
pub fn build_database<E>(
    image_dir: &Path,
    db: &Path,
    overwrite: bool,
    cfg: &SfmConfig,
    extract: &E,
    progress: &dyn Progress,
) -> Result<SfmSummary>
where
    E: image_set::Load + ?Sized,
{
    let writer = ColmapWriter::create(
        db,
        overwrite,
        ColmapOptions {
            camera_model: cfg.camera_model,
            single_camera: cfg.single_camera,
        },
    )?;
    let inputs = image_inputs(image_dir)?;
    // COLMAP labels planar and panoramic pairs from a homography fit (`TwoViewConfig::of`).
    let pair_config = PairConfig {
        planar_check: true,
        ..cfg.pair.clone()
    };
    let set = SetConfig {
        pairs: cfg.pairs.clone(),
        pair: pair_config.clone(),
        store_images: true,
        shard: Default::default(),
        // Extracted features stay in memory: extraction is too costly to repeat.
        max_resident_images: None,
        // A database of part of the set is no result; the database is written whole or not.
        all_or_nothing: true,
    };
    let run = image_set::run(
        &inputs,
        &set,
        extract,
        colmap_camera,
        Box::new(writer),
        progress,
    )?;
    let n_pairs = run.pairs.len().max(1) as f64;
    let matched: Vec<_> = run.pairs.iter().filter(|p| p.error.is_none()).collect();
    let mut skipped: Vec<String> = run
        .images
        .iter()
        .filter_map(|i| i.error.as_ref().map(|e| format!("{}: {e}", i.name)))
        .collect();
    skipped.extend(
        run.pairs
            .iter()
            .filter_map(|p| p.error.as_ref().map(|e| format!("{} – {}: {e}", p.a, p.b))),
    );
    Ok(SfmSummary {
        database: run.output,
        pairs: run.pairs.len(),
        verified_pairs: matched.iter().filter(|p| p.model.is_some()).count(),
        mean_matches: matched.iter().filter_map(|p| p.matches).sum::<usize>() as f64 / n_pairs,
        mean_inliers: matched
            .iter()
            .map(|p| p.inliers.or(p.matches).unwrap_or(0))
            .sum::<usize>() as f64
            / n_pairs,
        images: run.images,
        skipped,
        seconds: run.seconds,
        pair_config,
    })
}

/// Where `descl sfm merge` reads a sharded run's outputs.
#[derive(Debug, Clone)]
pub struct MergeInputs {
    /// Features files (`descl extract --out DIR`, all shards into one folder).
    pub features: PathBuf,
    /// Matches files (`descl match --images FEATURES --out-dir DIR --planar-check`).
    pub matches: PathBuf,
    /// The images, for EXIF focal lengths (default: the image paths the features files record).
    pub images: Option<PathBuf>,
    /// Merge what is there when images or pairs of the runs' plans are missing (or a folder
    /// has no plan, or an image file is not found), reporting them, instead of refusing.
    pub allow_partial: bool,
}

/// What `descl sfm merge` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct MergeSummary {
    /// The COLMAP database, or the folder of hloc's files.
    pub output: PathBuf,
    pub images: usize,
    pub pairs: usize,
    pub verified_pairs: usize,
    /// Matches files made without the planar check: their pairs keep F/E labels (COLMAP would
    /// label a planar one 6).
    pub pairs_without_planar_check: usize,
    /// Images of the extract plan without a features file (merged with `allow_partial`).
    pub missing_images: Vec<String>,
    /// Pairs of the match plan without a matches file (merged with `allow_partial`).
    pub missing_pairs: Vec<[String; 2]>,
    /// Images with features that the match plan did not include (matched before their extract
    /// shard ran; merged with `allow_partial`, without pairs).
    pub images_not_matched: Vec<String>,
    /// Folders without a run plan (merged with `allow_partial`).
    pub without_plan: Vec<PathBuf>,
    /// Images whose file was not found (at the path their features record, or under
    /// `--images`): merged with `allow_partial`, without their EXIF focal length and without the
    /// check that they are the images the features were extracted from.
    pub images_not_found: Vec<String>,
    /// How the merged features differ from the ones `descl sfm` extracts
    /// ([`differences_from_sfm`]; empty when they are made as `descl sfm` makes them, or when
    /// the features record no settings): the database is then not the one `descl sfm` writes for
    /// these images, which a user who extracted with `descl extract`'s defaults should be told.
    pub differs_from_sfm: Vec<String>,
}

impl MergeSummary {
    /// Whether something was left out or not checked (only with `allow_partial`).
    pub fn is_partial(&self) -> bool {
        !self.missing_images.is_empty()
            || !self.missing_pairs.is_empty()
            || !self.images_not_matched.is_empty()
            || !self.without_plan.is_empty()
            || !self.images_not_found.is_empty()
    }
}

/// One features file of the merge: its image's name, and where the image is.
struct MergeImage {
    name: String,
    image: PathBuf,
    file: PathBuf,
}

/// The features files of `inputs.features` in the set's order (by image name, as `descl sfm`
/// lists a folder), checked to record one set of extraction settings (the extract plan's, when
/// there is one), and that model; only their metadata is read here, the rest one file at a time
/// when stored, so that memory does not grow with the set. Images of the plan without a
/// features file go into `summary.missing_images`; the image files are checked by
/// [`check_merge_images`].
fn merge_images(
    inputs: &MergeInputs,
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<(Vec<MergeImage>, String)> {
    use rayon::prelude::*;
    let files = crate::io::npz_folder::npz_files(&inputs.features, false)?;
    if files.is_empty() {
        return Err(crate::Error::InvalidInput(format!(
            "{}: no features files (.npz from `descl extract`)",
            inputs.features.display()
        )));
    }
    let plan: Option<ExtractPlan> = read_plan(&inputs.features, EXTRACT_PLAN_FILE)?;
    progress.start("read features", files.len() as u64);
    let metas: Vec<crate::features::FeatureMeta> = files
        .par_iter()
        .map(|p| {
            let r = crate::io::features::read_features_meta(p);
            progress.inc(1);
            r
        })
        .collect::<Result<_>>()?;
    progress.finish();
    // Every file records its provenance, and one set's: the plan's settings, or else the
    // first file's.
    if let Some((file, _)) = files
        .iter()
        .zip(&metas)
        .find(|(_, m)| m.provenance.is_none())
    {
        return Err(crate::Error::InvalidInput(format!(
            "{}: no provenance recorded (written by an older descl or another tool): extract it again",
            file.display()
        )));
    }
    let plan_file = inputs.features.join(EXTRACT_PLAN_FILE);
    let made = crate::provenance::set_identity(
        files.iter().map(PathBuf::as_path).zip(&metas),
        plan.as_ref().map(|p| (plan_file.as_path(), &p.settings)),
    )?;
    let mut images = Vec::with_capacity(files.len());
    for (file, meta) in files.into_iter().zip(metas) {
        // The image's name in its set (its path under the image folder), checked before it
        // names a database row or a file under --images.
        let name = meta.set_name();
        crate::names::check_name(&name).map_err(|why| {
            crate::Error::format(&file, format!("recorded image name {name:?}: {why}"))
        })?;
        let image = match &inputs.images {
            Some(dir) => dir.join(&name),
            None => PathBuf::from(&meta.image),
        };
        images.push((MergeImage { name, image, file }, meta));
    }
    images.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if let Some(w) = images.windows(2).find(|w| w[0].0.name == w[1].0.name) {
        return Err(crate::Error::InvalidInput(format!(
            "{} and {} are features of two images named {}",
            w[0].0.file.display(),
            w[1].0.file.display(),
            w[0].0.name
        )));
    }
    match plan {
        Some(plan) => {
            summary.missing_images = plan.missing(
                &inputs.features,
                images
                    .iter()
                    .map(|(i, meta)| crate::io::plan::PlannedFeatures {
                        name: &i.name,
                        file: &i.file,
                        meta,
                    }),
            )?;
        }
        None => summary.without_plan.push(inputs.features.clone()),
    }
    check_merge_images(inputs, &images, summary, progress)?;
    summary.differs_from_sfm = made
        .as_ref()
        .and_then(|m| m.settings.as_ref())
        .map(differences_from_sfm)
        .unwrap_or_default();
    let images = images.into_iter().map(|(image, _)| image).collect();
    Ok((images, made.map(|m| m.model).unwrap_or_default()))
}

/// What differs between `settings` and the extraction `descl sfm` runs
/// ([`crate::model::DEFAULT_MODEL`], [`sfm_detector`], COLMAP's
/// [`crate::pipeline::COLMAP_MAX_IMAGE_SIZE`]), one "ours (descl sfm: theirs)" phrase per setting;
/// empty when the features are made as `descl sfm` makes them. The magnification is not
/// compared: it is the describer's own.
pub fn differences_from_sfm(settings: &crate::provenance::ExtractSettings) -> Vec<String> {
    let sfm = sfm_detector();
    let d = &settings.detector;
    let mut out = Vec::new();
    if settings.model != crate::model::DEFAULT_MODEL {
        out.push(format!(
            "model {} (descl sfm: {})",
            settings.model,
            crate::model::DEFAULT_MODEL
        ));
    }
    if d.kind != sfm.kind {
        out.push(format!("detector {} (descl sfm: {})", d.kind, sfm.kind));
    }
    if d.max_keypoints != sfm.max_keypoints || d.selection != sfm.selection {
        out.push(format!(
            "{} keypoints chosen {} (descl sfm: {} chosen {})",
            d.max_keypoints,
            d.selection.name(),
            sfm.max_keypoints,
            sfm.selection.name()
        ));
    }
    if d.contrast_threshold != sfm.contrast_threshold {
        out.push(format!(
            "contrast threshold {} (descl sfm: {})",
            d.contrast_threshold, sfm.contrast_threshold
        ));
    }
    if settings.max_image_size != crate::pipeline::COLMAP_MAX_IMAGE_SIZE {
        out.push(format!(
            "max image size {} (descl sfm: {})",
            settings.max_image_size,
            crate::pipeline::COLMAP_MAX_IMAGE_SIZE
        ));
    }
    out
}

/// Reads the images of a merge again (their EXIF goes into the cameras): each must be the image
/// its features were extracted from ([`crate::provenance::check_image`]); one not found is
/// refused, naming it and its features file, unless `allow_partial`, which merges it without its
/// file and lists it in `summary.images_not_found`.
fn check_merge_images(
    inputs: &MergeInputs,
    images: &[(MergeImage, crate::features::FeatureMeta)],
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<()> {
    use rayon::prelude::*;
    progress.start("check images", images.len() as u64);
    let found: Vec<bool> = images
        .par_iter()
        .map(|(image, meta)| {
            let r = crate::provenance::check_image(&image.image, &image.file, meta);
            progress.inc(1);
            r.map(|c| c.found())
        })
        .collect::<Result<_>>()?;
    progress.finish();
    let not_found: Vec<&MergeImage> = images
        .iter()
        .zip(&found)
        .filter(|(_, &found)| !found)
        .map(|((image, _), _)| image)
        .collect();
    if !not_found.is_empty() && !inputs.allow_partial {
        return Err(crate::Error::InvalidInput(format!(
            "{} images of the features are not found ({}): give --images DIR with them (the features record the paths `descl extract` was given: a relative one from its working folder), or pass --allow-partial to merge them without their EXIF focal length",
            not_found.len(),
            crate::io::plan::listing(not_found.iter().map(|i| format!(
                "{}, of {}",
                i.image.display(),
                i.file.display()
            )))
        )));
    }
    summary.images_not_found = not_found.iter().map(|i| i.name.clone()).collect();
    Ok(())
}

/// The images of a merge, indexed by their names (and the names' stems), and their model.
struct MergeSet<'a> {
    inputs: &'a MergeInputs,
    images: &'a [MergeImage],
    names: &'a MergeNames,
    /// The identity of each image's features (indexed like `images`).
    ids: &'a [FeaturesId],
    model: &'a str,
    /// Whether the (one model's) descriptors are 256-bit codes.
    binary: bool,
}

impl MergeSet<'_> {
    fn find(&self, name: &str) -> Option<usize> {
        self.names.find(name)
    }
}

/// The images of a merge by name and by the names' stems: index into its images.
struct MergeNames {
    by_name: HashMap<String, usize>,
    /// None for a stem of two images (`x.jpg` and `x.png`): it names neither.
    by_stem: HashMap<String, Option<usize>>,
}

/// The extension of a features file, by which plans and matches files of older runs name
/// their images ([`MergeNames::find`]).
const FEATURES_FILE_EXTENSION: &str = ".npz";

impl MergeNames {
    fn of(images: &[MergeImage]) -> MergeNames {
        let by_name = images
            .iter()
            .enumerate()
            .map(|(k, i)| (i.name.clone(), k))
            .collect();
        let mut by_stem: HashMap<String, Option<usize>> = HashMap::new();
        for (k, i) in images.iter().enumerate() {
            by_stem
                .entry(name_stem(&i.name).to_string())
                .and_modify(|e| *e = None)
                .or_insert(Some(k));
        }
        MergeNames { by_name, by_stem }
    }

    /// The image called `name`; or, for the name of a features file (`x.npz`: plans and
    /// matches files of older runs name features files where the set names `x.jpg`), the one
    /// image of its stem. An image of another extension (`x.png` for `x.jpg`) or a stem of two
    /// images is none.
    fn find(&self, name: &str) -> Option<usize> {
        if let Some(&k) = self.by_name.get(name) {
            return Some(k);
        }
        if !name.ends_with(FEATURES_FILE_EXTENSION) {
            return None;
        }
        self.by_stem.get(name_stem(name)).copied().flatten()
    }
}

/// The intrinsics each image's pairs were verified with (an essential matrix uses them, and the
/// matches files record them), indexed like `images`, from the matches files' metadata before
/// any camera is written: a merged camera must hold exactly these for its pairs to be
/// CALIBRATED (issue 44). One image verified with two intrinsics is refused, naming it, both
/// values and both files; with `single_camera` (one camera holds one set of intrinsics) so are
/// two images verified with different ones, and every image gets the one set. Files that
/// [`store_matches`] refuses (an unknown image, an essential matrix without intrinsics) are
/// passed over here.
fn verified_intrinsics(
    inputs: &MergeInputs,
    images: &[MergeImage],
    names: &MergeNames,
    single_camera: bool,
    progress: &dyn Progress,
) -> Result<Vec<Option<Intrinsics>>> {
    use rayon::prelude::*;
    let files = crate::io::npz_folder::npz_files(&inputs.matches, true)?;
    let plan: Option<MatchPlan> = read_plan(&inputs.matches, MATCH_PLAN_FILE)?;
    let mut used: Vec<Option<(Intrinsics, PathBuf)>> = vec![None; images.len()];
    progress.start("read match settings", files.len() as u64);
    for block in files.chunks(image_set::PAIR_BLOCK) {
        let metas: Vec<_> = block
            .par_iter()
            .map(|p| crate::io::matches::read_matches_meta(p))
            .collect::<Result<_>>()?;
        for (file, m) in block.iter().zip(metas) {
            progress.inc(1);
            let config = plan.as_ref().map_or(&m.config, |p| &p.config);
            let (true, Some(ks)) = (
                config.geometry == Some(crate::geometry::ModelKind::Essential),
                m.intrinsics,
            ) else {
                continue;
            };
            for (name, k) in m.side_names().iter().zip(ks) {
                let Some(i) = names.find(name) else {
                    continue;
                };
                match &used[i] {
                    Some((k0, other)) if *k0 != k => {
                        return Err(Error::InvalidInput(format!(
                            "{}: verified with intrinsics {} in {}, but with {} in {}: match all pairs with the same intrinsics",
                            images[i].name,
                            k,
                            file.display(),
                            k0,
                            other.display()
                        )));
                    }
                    Some(_) => {}
                    None => used[i] = Some((k, file.clone())),
                }
            }
        }
    }
    progress.finish();
    if !single_camera {
        return Ok(used.into_iter().map(|u| u.map(|(k, _)| k)).collect());
    }
    let mut shared: Option<(usize, &Intrinsics, &PathBuf)> = None;
    for (i, (k, file)) in used
        .iter()
        .enumerate()
        .filter_map(|(i, u)| Some((i, u.as_ref()?)))
    {
        match shared {
            Some((j, k0, other)) if k0 != k => {
                return Err(Error::InvalidInput(format!(
                    "one camera for all images (--single-camera) cannot hold the intrinsics of both {} ({}, in {}) and {} ({}, in {}): leave out --single-camera, or match all images with the same intrinsics",
                    images[j].name,
                    k0,
                    other.display(),
                    images[i].name,
                    k,
                    file.display()
                )));
            }
            Some(_) => {}
            None => shared = Some((i, k, file)),
        }
    }
    Ok(vec![shared.map(|(_, k, _)| *k); images.len()])
}

/// Stores every matches file of `set.inputs.matches` (read in parallel blocks): a pair matched
/// twice, a side without features, another model, a match index beyond a side's keypoints, or
/// matches made from other features than the folder's (or under other settings than the match
/// plan's) is an error naming the file. Pairs of the plan without a file go into
/// `summary.missing_pairs`.
fn store_matches(
    set: &MergeSet<'_>,
    writer: &mut dyn Writer,
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<()> {
    use rayon::prelude::*;
    let files = crate::io::npz_folder::npz_files(&set.inputs.matches, true)?;
    let plan: Option<MatchPlan> = read_plan(&set.inputs.matches, MATCH_PLAN_FILE)?;
    // The plan's pairs by image index: a matches file of another pair is another run's (a
    // leftover, or a shard run with other pair settings) and is refused.
    let planned: Option<std::collections::HashSet<(usize, usize)>> = plan.as_ref().map(|p| {
        p.pairs
            .iter()
            .filter_map(|[x, y]| Some((set.find(x)?, set.find(y)?)))
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect()
    });
    // Images of the features folder that the match plan did not cover (matched before their
    // extract shard ran): their pairs were never planned.
    if let Some(p) = &plan {
        let covered: std::collections::HashSet<usize> =
            p.inputs.iter().filter_map(|n| set.find(n)).collect();
        summary.images_not_matched = (0..set.images.len())
            .filter(|k| !covered.contains(k))
            .map(|k| set.images[k].name.clone())
            .collect();
    }
    let mut seen: std::collections::HashMap<(usize, usize), PathBuf> = Default::default();
    progress.start("store matches", files.len() as u64);
    for block in files.chunks(image_set::PAIR_BLOCK) {
        let read: Vec<_> = block
            .par_iter()
            .map(|p| crate::io::matches::read_matches(p))
            .collect::<Result<_>>()?;
        for (file, m) in block.iter().zip(read) {
            let names = m.meta.side_names();
            let side = |p: &str| {
                set.find(p).ok_or_else(|| {
                    let why = match p.is_empty() {
                        // `descl match A B --out` records paths, not the set's image names.
                        true => "names no image: a single pair's matches (`descl match A B --out`); merge the matches of a set run (`descl match --images FEATURES --out-dir DIR`)".to_string(),
                        false => format!("{p} has no features file in {}", set.inputs.features.display()),
                    };
                    crate::Error::format(file, why)
                })
            };
            let (a, b) = (side(&names[0])?, side(&names[1])?);
            if planned
                .as_ref()
                .is_some_and(|p| !p.contains(&(a.min(b), a.max(b))))
            {
                return Err(crate::Error::format(
                    file,
                    format!(
                        "the pair {} – {} is not in {} (left by another run into this folder, or a shard run with other pair settings): delete the file, or match again",
                        names[0],
                        names[1],
                        set.inputs.matches.join(MATCH_PLAN_FILE).display()
                    ),
                ));
            }
            if m.meta.model != set.model {
                return Err(crate::Error::format(
                    file,
                    format!("matches of `{}`, features of `{}`", m.meta.model, set.model),
                ));
            }
            let (ka, kb) = (set.ids[a].keypoints, set.ids[b].keypoints);
            if let Some(p) = m
                .pairs
                .iter()
                .find(|p| p[0] as usize >= ka || p[1] as usize >= kb)
            {
                return Err(crate::Error::format(
                    file,
                    format!(
                        "match {p:?} beyond the keypoints of the features ({ka} in {}, {kb} in {}): the matches were made from other features; match again",
                        set.images[a].file.display(),
                        set.images[b].file.display()
                    ),
                ));
            }
            let config = plan
                .as_ref()
                .map_or_else(|| m.meta.config.clone(), |p| p.config.clone());
            // Where verification used the intrinsics (an essential matrix), the file must
            // record them (each image's are the same in all its pairs: `verified_intrinsics`).
            let intrinsics = if config.geometry == Some(crate::geometry::ModelKind::Essential) {
                let Some(k) = m.meta.intrinsics else {
                    return Err(crate::Error::format(
                        file,
                        "verified by an essential matrix but records no intrinsics (written by an older descl): match again",
                    ));
                };
                Some(k)
            } else {
                None
            };
            let expected = PairProvenance {
                a: set.ids[a].clone(),
                b: set.ids[b].clone(),
                config,
                intrinsics,
            };
            crate::provenance::check(file, m.meta.provenance().as_ref(), &expected).map_err(
                |e| {
                    crate::Error::InvalidInput(format!(
                        "{e}; the features are {} and {}: match again",
                        set.images[a].file.display(),
                        set.images[b].file.display()
                    ))
                },
            )?;
            if let Some(first) = seen.insert((a.min(b), a.max(b)), file.clone()) {
                return Err(crate::Error::format(
                    file,
                    format!("the pair is matched twice (also {})", first.display()),
                ));
            }
            let r = m.to_result();
            writer.add_stored_pair(&crate::io::writer::StoredPair {
                a: &set.images[a].name,
                b: &set.images[b].name,
                ids: [&set.ids[a], &set.ids[b]],
                binary: set.binary,
                result: &r,
                config: &expected.config,
                intrinsics: expected.intrinsics,
            })?;
            summary.pairs += 1;
            summary.verified_pairs +=
                r.verification.as_ref().is_some_and(|v| v.model.is_some()) as usize;
            summary.pairs_without_planar_check += !m.meta.config.planar_check as usize;
            progress.inc(1);
        }
    }
    progress.finish();
    match plan {
        Some(plan) => {
            let index = |n: &str| set.find(n);
            summary.missing_pairs = plan
                .pairs
                .into_iter()
                .filter(|[x, y]| match (index(x), index(y)) {
                    (Some(a), Some(b)) => !seen.contains_key(&(a.min(b), a.max(b))),
                    _ => true,
                })
                .collect();
        }
        None => summary.without_plan.push(set.inputs.matches.clone()),
    }
    Ok(())
}

/// Refuses a merge that lacks images or pairs of the runs' plans (or a plan), unless
/// `allow_partial`: the error names what is missing and where.
fn check_complete(inputs: &MergeInputs, s: &MergeSummary) -> Result<()> {
    use crate::io::plan::listing;
    let mut gaps = Vec::new();
    if !s.missing_images.is_empty() {
        gaps.push(format!(
            "{} images of the extract plan have no features file in {} ({})",
            s.missing_images.len(),
            inputs.features.display(),
            listing(&s.missing_images)
        ));
    }
    if !s.missing_pairs.is_empty() {
        gaps.push(format!(
            "{} pairs of the match plan have no matches file in {} ({})",
            s.missing_pairs.len(),
            inputs.matches.display(),
            listing(s.missing_pairs.iter().map(|[a, b]| format!("{a} – {b}")))
        ));
    }
    if !s.images_not_matched.is_empty() {
        gaps.push(format!(
            "{} images of {} are not among the inputs of {} (matched before their extract shard ran: match again) ({})",
            s.images_not_matched.len(),
            inputs.features.display(),
            inputs.matches.join(MATCH_PLAN_FILE).display(),
            listing(&s.images_not_matched)
        ));
    }
    for dir in &s.without_plan {
        gaps.push(format!(
            "{} has no run plan ({} or {}: made by an older descl or by hand), so missing shards cannot be told",
            dir.display(),
            EXTRACT_PLAN_FILE,
            MATCH_PLAN_FILE
        ));
    }
    if gaps.is_empty() || inputs.allow_partial {
        return Ok(());
    }
    Err(crate::Error::InvalidInput(format!(
        "incomplete run: {}; run the missing shards, or pass --allow-partial to merge what is there",
        gaps.join("; ")
    )))
}

/// Builds one COLMAP database from the outputs of sharded `descl extract` and `descl match`
/// runs: the database that `descl sfm` writes for the same images and settings. One process
/// (SQLite has one writer); features are read one at a time and matches files in blocks, so
/// memory stays bounded as the set grows.
pub fn merge_database(
    inputs: &MergeInputs,
    db: &Path,
    overwrite: bool,
    options: ColmapOptions,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    let writer = ColmapWriter::create(db, overwrite, options)?;
    merge_into(inputs, options.single_camera, Box::new(writer), progress)
}

/// Writes hloc's `features.h5` and `matches.h5` into `dir` from the outputs of sharded `descl
/// extract` and `descl match` runs (`--format h5` is one file per folder, written by one
/// process, so the shards run in the npz format and are merged here, without extracting or
/// matching again): the files `descl extract --format h5` and `descl match --format h5` write
/// for the same images, pairs and settings. Existing files in `dir` are refused unless
/// `overwrite`. The merge is built in a staging folder inside `dir` (under the files' locks) and
/// the two files are renamed into place only once it is complete: a failed, refused or killed
/// merge leaves `dir` as it was (a killed one's staging folder is removed by the next merge).
/// Needs the cargo feature `h5`.
pub fn merge_hloc(
    inputs: &MergeInputs,
    dir: &Path,
    overwrite: bool,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    use crate::io::output::{open, Format, HLOC_FILES};
    if dir.exists() && !dir.is_dir() {
        return Err(crate::Error::InvalidInput(format!(
            "{}: not a folder (--hloc names the folder of features.h5 and matches.h5)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
    let targets: Vec<PathBuf> = HLOC_FILES.iter().map(|f| dir.join(f)).collect();
    if let Some(first) = targets.iter().find(|p| p.exists()).filter(|_| !overwrite) {
        return Err(crate::Error::InvalidInput(format!(
            "{}: exists; pass --overwrite to replace hloc's files in {}",
            first.display(),
            dir.display()
        )));
    }
    // The staging folder inside `dir`: hidden, as descl's other temporaries, from the folder
    // listings of every command.
    let staging_prefix = format!("{}hloc-merge-", crate::io::atomic::TMP_PREFIX);
    let _locks = targets
        .iter()
        .map(|t| crate::io::atomic::OutputLock::acquire(t, "merge into another folder"))
        .collect::<Result<Vec<_>>>()?;
    // A killed merge's staging folder (no merge holds these locks now).
    crate::io::atomic::remove_stale_staging(dir, &staging_prefix)?;
    let staging = crate::io::atomic::staging_dir(dir, &staging_prefix)?;
    let summary =
        open(Format::H5, staging.path()).and_then(|w| merge_into(inputs, false, w, progress))?;
    // Both new files carry this merge's id: a kill between the renames below leaves a pair
    // whose ids differ, which descl refuses when it opens the folder to write into it
    // (`hloc::check_pair` in `HlocFolder::create`; readers of features.h5 alone do not check).
    stamp_merge(staging.path())?;
    for (file, target) in HLOC_FILES.iter().zip(&targets) {
        let made = staging.path().join(file);
        if made.exists() {
            std::fs::rename(&made, target).map_err(|e| crate::Error::io(target, e))?;
        } else if target.exists() {
            // A merge without pairs writes no matches.h5: an older one must not stay beside
            // the new features.h5.
            std::fs::remove_file(target).map_err(|e| crate::Error::io(target, e))?;
        }
    }
    Ok(MergeSummary {
        output: dir.to_path_buf(),
        ..summary
    })
}

/// Marks the files of one `descl sfm merge --hloc` in `dir` (its staging folder) with a new id
/// ([`crate::io::hloc::PAIR_ID_ATTR`]: the time in nanoseconds and the process id).
#[cfg(feature = "h5")]
fn stamp_merge(dir: &Path) -> Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let id = format!("merge-{nanos:x}-{:x}", std::process::id());
    for file in crate::io::output::HLOC_FILES {
        let made = dir.join(file);
        if made.exists() {
            crate::io::hloc::set_pair_id(&made, &id)?;
        }
    }
    Ok(())
}

/// Without hloc's files there is nothing to mark.
#[cfg(not(feature = "h5"))]
fn stamp_merge(_: &Path) -> Result<()> {
    Ok(())
}

/// The merge of [`merge_database`] and [`merge_hloc`] into `writer`: images, then pairs
/// ([`Writer::add_stored_pair`]), checked against the plans before the output is finished (an
/// incomplete run leaves none).
fn merge_into(
    inputs: &MergeInputs,
    single_camera: bool,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    let mut summary = MergeSummary {
        output: PathBuf::new(),
        images: 0,
        pairs: 0,
        verified_pairs: 0,
        pairs_without_planar_check: 0,
        missing_images: Vec::new(),
        missing_pairs: Vec::new(),
        images_not_matched: Vec::new(),
        without_plan: Vec::new(),
        images_not_found: Vec::new(),
        differs_from_sfm: Vec::new(),
    };
    let (images, model) = merge_images(inputs, &mut summary, progress)?;
    summary.images = images.len();
    let names = MergeNames::of(&images);
    let verified = verified_intrinsics(inputs, &images, &names, single_camera, progress)?;
    progress.start("store features", images.len() as u64);
    let mut ids = Vec::with_capacity(images.len());
    let mut binary = false;
    for (image, verified) in images.iter().zip(&verified) {
        let f = crate::io::features::read_features(&image.file)?;
        ids.push(f.id());
        binary = matches!(f.descriptors, crate::describe::Descriptors::Binary(_));
        // The camera holds the intrinsics its pairs were verified with, as known (issue 44);
        // an image whose pairs did not use them keeps its EXIF focal length or COLMAP's guess.
        let (k, known) = match verified {
            Some(k) => (Some(*k), true),
            None => colmap_camera(&image.image, &f)?,
        };
        writer.add_image(&crate::io::writer::ImageRecord {
            name: &image.name,
            path: &image.image,
            features: &f,
            intrinsics: k.as_ref(),
            focal_known: known,
        })?;
        progress.inc(1);
    }
    progress.finish();

    let set = MergeSet {
        inputs,
        images: &images,
        names: &names,
        ids: &ids,
        model: &model,
        binary,
    };
    store_matches(&set, &mut *writer, &mut summary, progress)?;
    // Checked before the output is put in place: an incomplete run leaves none.
    check_complete(inputs, &summary)?;
    summary.output = writer.finish()?;
    Ok(summary)
}

/// A ground-truth camera: world-to-camera rotation and centre in world coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct GroundTruthCamera {
    pub name: String,
    pub r_world_to_cam: [[f64; 3]; 3],
    pub centre: [f64; 3],
}

/// The ground-truth cameras of a Strecha scene folder (`cameras/<image file>.camera`, the
/// layout of fountain-P11 and Herz-Jesus-P8), named by image file, in name order.
pub fn read_strecha_scene(scene: &Path) -> Result<Vec<GroundTruthCamera>> {
    use crate::io::strecha::{CAMERAS_DIR, CAMERA_SUFFIX};
    let dir = scene.join(CAMERAS_DIR);
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
    let mut cameras = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(CAMERA_SUFFIX))
            .filter(|n| !n.is_empty())
            .map(str::to_string)
        else {
            continue;
        };
        cameras.push(read_strecha_camera(&path, &name)?);
    }
    if cameras.is_empty() {
        return Err(Error::format(
            &dir,
            format!("no ground-truth cameras (<image file>{CAMERA_SUFFIX} files)"),
        ));
    }
    cameras.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cameras)
}

/// The ground truth of one image from its Strecha `.camera` file (read by the one parser,
/// [`crate::io::strecha::read_camera`]).
pub fn read_strecha_camera(path: &Path, name: &str) -> Result<GroundTruthCamera> {
    Ok(GroundTruthCamera::from_strecha(
        &crate::io::strecha::read_camera(path)?,
        name,
    ))
}

impl GroundTruthCamera {
    /// The ground truth of image `name` from its parsed Strecha camera.
    pub fn from_strecha(c: &crate::io::strecha::Camera, name: &str) -> GroundTruthCamera {
        GroundTruthCamera {
            name: name.into(),
            // The file holds camera-to-world R; world to camera is its transpose.
            r_world_to_cam: [0, 1, 2].map(|i| [0, 1, 2].map(|j| c.r[j][i])),
            centre: c.c,
        }
    }
}

/// Accuracy of a reconstruction after a similarity alignment of its camera centres to the
/// ground truth (Umeyama): per-image rotation and centre errors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SfmAccuracy {
    pub registered: usize,
    pub total: usize,
    pub median_rotation_error_deg: f64,
    pub median_centre_error: f64,
    /// Median centre error as a fraction of the largest distance between ground-truth cameras.
    pub median_centre_error_rel: f64,
    pub mean_reprojection_error: f64,
    pub num_points: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Aligns `recon` to `truth` by name and measures its errors.
pub fn evaluate(
    recon: &crate::io::colmap_model::Reconstruction,
    truth: &[GroundTruthCamera],
) -> Result<SfmAccuracy> {
    let mut est = Vec::new();
    let mut gt = Vec::new();
    for img in &recon.images {
        if let Some(g) = truth.iter().find(|g| g.name == img.name) {
            est.push(img);
            gt.push(g);
        }
    }
    if est.len() < 3 {
        const LISTED: usize = 5;
        let without: Vec<&str> = recon
            .images
            .iter()
            .filter(|i| !truth.iter().any(|g| g.name == i.name))
            .map(|i| i.name.as_str())
            .take(LISTED)
            .collect();
        return Err(Error::InvalidInput(format!(
            "{}: {} of its {} registered images have a ground-truth camera (matched by image name; without one: {without:?}{}); the alignment needs 3",
            recon.path.display(),
            est.len(),
            recon.images.len(),
            if recon.images.len() - est.len() > LISTED { ", …" } else { "" },
        )));
    }
    let sim = crate::geometry::umeyama(
        &est.iter().map(|i| i.centre()).collect::<Vec<_>>(),
        &gt.iter().map(|g| g.centre).collect::<Vec<_>>(),
    )?;
    let mut rot = Vec::new();
    let mut cen = Vec::new();
    for (e, g) in est.iter().zip(&gt) {
        // Camera rotation in the ground-truth frame: R_est · R_simᵀ.
        let re = e.rotation();
        let aligned = [0, 1, 2]
            .map(|i| [0, 1, 2].map(|j| (0..3).map(|k| re[i][k] * sim.r[j][k]).sum::<f64>()));
        rot.push(crate::geometry::rotation_angle_deg(
            &aligned,
            &g.r_world_to_cam,
        ));
        let c = sim.apply(e.centre());
        cen.push(
            (0..3)
                .map(|k| (c[k] - g.centre[k]).powi(2))
                .sum::<f64>()
                .sqrt(),
        );
    }
    let mut largest: f64 = 0.0;
    for a in truth {
        for b in truth {
            largest = largest.max(
                (0..3)
                    .map(|k| (a.centre[k] - b.centre[k]).powi(2))
                    .sum::<f64>()
                    .sqrt(),
            );
        }
    }
    let med_c = median(cen);
    Ok(SfmAccuracy {
        registered: est.len(),
        total: truth.len(),
        median_rotation_error_deg: median(rot),
        median_centre_error: med_c,
        median_centre_error_rel: med_c / largest,
        mean_reprojection_error: recon.mean_reprojection_error,
        num_points: recon.num_points,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn differences_from_sfm_name_each_setting_descl_sfm_would_not_use() {
        use crate::detect::{DetectorConfig, DEFAULT_MAX_KEYPOINTS};
        use crate::provenance::ExtractSettings;
        let sfm = ExtractSettings {
            model: crate::model::DEFAULT_MODEL.into(),
            model_sha256: None,
            detector: super::sfm_detector(),
            max_image_size: crate::pipeline::COLMAP_MAX_IMAGE_SIZE,
        };
        assert!(super::differences_from_sfm(&sfm).is_empty());
        // A magnification of another describer is the describer's own: not a difference.
        let mut m = sfm.clone();
        m.detector.magnification *= 2.0;
        assert!(super::differences_from_sfm(&m).is_empty());
        // `descl extract`'s defaults with RootSIFT: another describer, 2048 strongest, OpenCV's
        // threshold.
        let extract = ExtractSettings {
            model: "rootsift".into(),
            detector: DetectorConfig {
                max_keypoints: DEFAULT_MAX_KEYPOINTS,
                ..DetectorConfig::default()
            },
            ..sfm.clone()
        };
        let d = super::differences_from_sfm(&extract);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d[0].starts_with("model rootsift (descl sfm: descl-l2net-w0.5-distill-dist-offset)")
        );
        assert_eq!(
            d[1],
            "2048 keypoints chosen strongest (descl sfm: 8192 chosen colmap)"
        );
        assert_eq!(d[2], "contrast threshold 0.04 (descl sfm: 0.02)");
    }

    /// COLMAP's rule by hand: 10 images, or ⌊0.8 · N⌋ of a smaller set, never under a pair.
    #[test]
    fn a_model_needs_ten_images_or_four_fifths_of_a_small_set() {
        assert_eq!(super::min_model_images(29), 10);
        assert_eq!(super::min_model_images(12), 9);
        assert_eq!(super::min_model_images(4), 3);
        assert_eq!(super::min_model_images(2), 2);
    }

    #[test]
    fn merge_names_never_confuse_two_images_of_one_stem() {
        let image = |name: &str| super::MergeImage {
            name: name.into(),
            image: name.into(),
            file: "f.npz".into(),
        };
        let both = super::MergeNames::of(&[image("x.jpg"), image("x.png"), image("y.jpg")]);
        assert_eq!(both.find("x.jpg"), Some(0));
        assert_eq!(both.find("x.png"), Some(1));
        assert_eq!(both.find("x.npz"), None, "two images of the stem x");
        assert_eq!(both.find("y.npz"), Some(2));
        let one = super::MergeNames::of(&[image("x.png")]);
        assert_eq!(one.find("x.jpg"), None, "another image's name");
        assert_eq!(one.find("x.npz"), Some(0));
    }

    use super::*;
    use crate::io::colmap_model::RegisteredImage;

    /// A mapping whose runs took `seconds` each, the last one kept.
    fn mapped_of_runs(seconds: &[f64]) -> Mapped {
        let attempt = |s: f64, kept: bool| MapAttempt {
            mapper: crate::io::colmap_model::Mapper::Colmap,
            filter_max_reproj_error_px: 4.0,
            init_min_tri_angle_deg: 16.0,
            focal_prior_factor: None,
            registered: kept.then_some(2),
            num_points: kept.then_some(10),
            error: None,
            kept,
            seconds: s,
        };
        Mapped {
            mapper: "colmap".into(),
            reconstruction: Reconstruction {
                path: "sparse/0".into(),
                images: Vec::new(),
                num_points: 10,
                mean_reprojection_error: 0.5,
                mean_track_length: 2.0,
            },
            init_min_tri_angle_deg: 16.0,
            filter_max_reproj_error_px: 4.0,
            registrable_images: 2,
            refined_at_px: None,
            refinement_error: None,
            attempts: seconds
                .iter()
                .enumerate()
                .map(|(k, &s)| attempt(s, k + 1 == seconds.len()))
                .collect(),
            models: Vec::new(),
        }
    }

    /// `descl sfm --json`'s `seconds.stages` from the typed results: each mapper run's own
    /// seconds, the rest of the mapper stage as the refinement (never below 0), and no mapper
    /// keys without a reconstruction.
    #[test]
    fn stage_seconds_take_the_mapper_runs_from_the_attempts() {
        let set = image_set::StageSeconds {
            features: 3.0,
            pairs: 2.0,
            extraction: Some(crate::pipeline::ExtractSeconds {
                decode_detect: 2.5,
                describe: 0.5,
            }),
            matching: 1.3,
            verification: 0.7,
        };
        let mapped = mapped_of_runs(&[1.0, 2.5]);
        let stages = SfmStageSeconds::new(&set, Some((&mapped, 5.0)));
        assert_eq!(
            serde_json::to_value(&stages).unwrap(),
            serde_json::json!({
                "decode_detect_thread_seconds": 2.5,
                "describe": 0.5,
                "mapper_runs": [1.0, 2.5],
                "matching_thread_seconds": 1.3,
                "refinement": 1.5,
                "verification_thread_seconds": 0.7,
            })
        );
        assert_eq!(
            stages.to_string(),
            "decode_detect_thread_seconds 2.5, describe 0.5, mapper_runs [1.0, 2.5], \
             matching_thread_seconds 1.3, refinement 1.5, verification_thread_seconds 0.7"
        );
        // A stage timed shorter than its runs (clock granularity) has no negative refinement.
        let short = SfmStageSeconds::new(&set, Some((&mapped, 3.0)));
        assert_eq!(short.refinement, Some(0.0));
        let none = SfmStageSeconds::new(
            &image_set::StageSeconds {
                extraction: None,
                ..set
            },
            None,
        );
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            serde_json::json!({"matching_thread_seconds": 1.3, "verification_thread_seconds": 0.7})
        );
        assert_eq!(
            none.to_string(),
            "matching_thread_seconds 1.3, verification_thread_seconds 0.7"
        );
    }

    /// Quaternion (w, x, y, z) of a rotation by `deg` about unit axis `axis`.
    fn quat(axis: [f64; 3], deg: f64) -> [f64; 4] {
        let h = deg.to_radians() / 2.0;
        [
            h.cos(),
            axis[0] * h.sin(),
            axis[1] * h.sin(),
            axis[2] * h.sin(),
        ]
    }

    /// Hamilton product a ⊗ b (the rotation b, then a).
    fn qmul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        let [w1, x1, y1, z1] = a;
        let [w2, x2, y2, z2] = b;
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    }

    /// A camera at centre `c` with world-to-camera rotation `q`: t = −R c.
    fn image(name: &str, q: [f64; 4], c: [f64; 3]) -> RegisteredImage {
        let mut img = RegisteredImage {
            image_id: 1,
            camera_id: 1,
            name: name.into(),
            qvec: q,
            tvec: [0.0; 3],
        };
        let r = img.rotation();
        img.tvec = [0, 1, 2].map(|i| -(0..3).map(|k| r[i][k] * c[k]).sum::<f64>());
        img
    }

    /// The refinement filter in image units: 1 px at the reference side and below, scaled above.
    #[test]
    fn the_refinement_filter_scales_with_the_image_above_the_reference_side() {
        // The Strecha scenes' 1536 px and anything smaller: 1 px.
        assert_eq!(refine_filter_px(1536), Some(1.0));
        assert_eq!(refine_filter_px(640), Some(1.0));
        // The released Strecha images (3072 px): 2 px; a 4000 px photo: 4000 / 1536 px.
        assert_eq!(refine_filter_px(3072), Some(2.0));
        assert_eq!(refine_filter_px(4000), Some(4000.0 / 1536.0));
        // At four times the reference the refinement would be at COLMAP's own 4 px: none.
        assert_eq!(refine_filter_px(6144), None);
        assert_eq!(refine_filter_px(9000), None);
    }

    /// The scores of a reconstruction that is the ground truth moved by a known similarity
    /// (scale 2, 90° about z, a shift), three of its four cameras then turned by 2° about x:
    /// after the alignment every centre error is 0 and the rotation errors are 0, 2, 2, 2°
    /// (median 2°), as computed by hand; the extent is the largest distance between
    /// ground-truth centres, √2.
    #[test]
    fn evaluate_undoes_a_known_similarity_and_measures_a_known_rotation_error() {
        let z = [0.0, 0.0, 1.0];
        let centres = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        let angles = [0.0, 10.0, 20.0, 30.0];
        let truth: Vec<GroundTruthCamera> = centres
            .iter()
            .zip(angles)
            .enumerate()
            .map(|(i, (&c, a))| {
                let g = image(&format!("{i}.jpg"), quat(z, a), c);
                GroundTruthCamera {
                    name: g.name.clone(),
                    r_world_to_cam: g.rotation(),
                    centre: c,
                }
            })
            .collect();
        // X' = s·Rs·X + T; a camera's world-to-camera rotation becomes R·Rsᵀ.
        let (s, shift) = (2.0, [5.0, -3.0, 1.0]);
        let rs = quat(z, 90.0);
        let rs_inv = quat(z, -90.0);
        let rs_m = image("", rs, [0.0; 3]).rotation();
        let images = centres
            .iter()
            .zip(angles)
            .enumerate()
            .map(|(i, (c, a))| {
                let moved = [0, 1, 2]
                    .map(|r| s * (0..3).map(|k| rs_m[r][k] * c[k]).sum::<f64>() + shift[r]);
                let mut q = qmul(quat(z, a), rs_inv);
                if i > 0 {
                    q = qmul(quat([1.0, 0.0, 0.0], 2.0), q);
                }
                image(&format!("{i}.jpg"), q, moved)
            })
            .collect();
        let recon = Reconstruction {
            path: PathBuf::from("model"),
            images,
            num_points: 10,
            mean_reprojection_error: 0.5,
            mean_track_length: 3.0,
        };
        let a = evaluate(&recon, &truth).unwrap();
        assert_eq!((a.registered, a.total, a.num_points), (4, 4, 10));
        assert!(a.median_centre_error < 1e-9, "{a:?}");
        assert!(a.median_centre_error_rel < 1e-9, "{a:?}");
        assert!((a.median_rotation_error_deg - 2.0).abs() < 1e-9, "{a:?}");
        // A camera of the model that the ground truth lacks is not scored.
        let mut extra = recon.clone();
        extra
            .images
            .push(image("other.jpg", quat(z, 45.0), [9.0, 9.0, 9.0]));
        let b = evaluate(&extra, &truth).unwrap();
        assert_eq!(b.registered, 4);
        assert!(b.median_centre_error < 1e-9, "{b:?}");
    }

    #[test]
    fn a_strecha_scene_without_cameras_is_refused_naming_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cameras")).unwrap();
        std::fs::write(dir.path().join("cameras").join("notes.txt"), b"x").unwrap();
        let err = read_strecha_scene(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("cameras") && err.contains("no ground-truth cameras"),
            "{err}"
        );
        let err = read_strecha_scene(&dir.path().join("absent"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("absent"), "{err}");
    }
}
