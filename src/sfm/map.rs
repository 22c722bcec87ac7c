//! The mapping policy of `descl sfm --reconstruct`, `descl sfm map` and descl's side of
//! `descl bench sfm`: which mapper runs ([`crate::sfm::mapper`]) with which settings, the
//! fallbacks when a run makes no model (a smaller initial-pair angle, a wide focal prior), the
//! `min_model_size` rule, and the staging that leaves no model of a run that was not kept.
//! Why here and not in the mapper: the policy is the same for every mapper.

use super::mapper::{
    run_mapper, MapperOptions, COLMAP_FILTER_MAX_REPROJ_ERROR_PX, COLMAP_INIT_MIN_TRI_ANGLE_DEG,
    COLMAP_MAPPER_MIN_NUM_MATCHES,
};
use super::refine::{refine_filter_px, refine_models};
use super::report::{MapAttempt, Mapped};
use super::sparse_dir::check_sparse_dir;
use crate::error::{Error, Result};
use crate::io::colmap_model::{model_folders, read_model, Reconstruction};
use std::path::{Path, PathBuf};

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
pub(super) const MAP_STAGING_PREFIX: &str = ".descl-tmp-map-";

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

/// A mapper run's staging folder and largest model.
type Staged = (tempfile::TempDir, Reconstruction);
/// A mapper run, and its staging folder and largest model when it made one.
type Run = (MapAttempt, Option<Staged>);

/// Splits a run of [`map`] by COLMAP's `min_model_size` rule ([`min_model_images`] of the
/// `registrable` images): a run whose largest model holds fewer is returned as the third
/// value, not the second, so that the fallbacks run; [`map`] keeps the largest such model
/// only when no run made a large enough one (a set of two scenes, whose larger holds 6 of 10
/// images, where pycolmap keeps the 6-image model, issue 55).
fn large_enough(
    (mut attempt, model): Run,
    registrable: usize,
) -> (MapAttempt, Option<Staged>, Option<Staged>) {
    let least = min_model_images(registrable);
    match model {
        Some((dir, r)) if r.images.len() < least => {
            attempt.error = Some(format!(
                "its largest model holds {} of the {registrable} registrable images, fewer than {least} (COLMAP's min_model_size rule, applied to the largest model)",
                r.images.len()
            ));
            (attempt, None, Some((dir, r)))
        }
        model => (attempt, model, None),
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
) -> Result<Run> {
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
/// folders holding `images.bin`) are set aside first and removed once this run's models are
/// in place (put back when it fails, or by the next run when it was killed). All of it happens under `out`'s lock: each run maps into a staging folder inside
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
    // Held while the database is read (here and by the mapper): a run replacing it meanwhile
    // is refused.
    let _reading = crate::io::atomic::ReadLock::share(database, "map a copy of the database")?;
    // The mapper is checked here (pycolmap imported), so a Python without it is refused before
    // the output folder is made or any mapper runs.
    let mapper = options.mapper.describe()?;
    // Before the folder is made: a database without two registrable images leaves none.
    let registrable = registrable_images(database)?;
    let (_lock, earlier) = lock_out(database, images, out, overwrite)?;
    let refine_px = match (options.refine, options.filter_max_reproj_error_px) {
        (true, None) => refine_filter_px(crate::io::colmap::median_camera_side(database)?),
        _ => None,
    };
    let runs = Runs {
        images,
        out,
        options,
        registrable,
        filter: options
            .filter_max_reproj_error_px
            .unwrap_or(COLMAP_FILTER_MAX_REPROJ_ERROR_PX),
        angles: match options.init_min_tri_angle_deg {
            Some(a) => vec![a],
            None => vec![
                COLMAP_INIT_MIN_TRI_ANGLE_DEG,
                FALLBACK_INIT_MIN_TRI_ANGLE_DEG,
            ],
        },
    };
    let mut attempts: Vec<MapAttempt> = Vec::new();
    // The largest model under the min_model_size rule, and the database it was mapped from:
    // kept only when no run makes a large enough one.
    let mut small: Option<(Made, PathBuf)> = None;
    let mut made = runs.first_model(database, None, &mut attempts, &mut small)?;
    let mut mapped_from = database.to_path_buf();
    // No model from the database's focal priors: a copy with a wide camera's, at each angle
    // (not when the angle was given: then nothing falls back). The copy lives in a staging
    // folder until the end of this run (the refinement triangulates from it). A failure to
    // make the copy does not hide the runs before it: it joins the no-model report.
    let mut focal_fallback_error = None;
    let mut _focal_copy = None;
    if made.is_none() && options.init_min_tri_angle_deg.is_none() {
        match focal_fallback_database(database, out) {
            Ok(Some((dir, copy))) => {
                let factor = Some(FALLBACK_FOCAL_PRIOR_FACTOR);
                made = runs.first_model(&copy, factor, &mut attempts, &mut small)?;
                if made.is_some() {
                    mapped_from = copy;
                }
                _focal_copy = Some(dir);
            }
            Ok(None) => {}
            Err(e) => focal_fallback_error = Some(e.to_string()),
        }
    }
    let (made, below_min_model_size) = match (made, small) {
        (Some(made), _) => (made, None),
        // No run made a model as large as the rule asks: the largest one made is kept (as
        // pycolmap keeps its first model whatever its size), with the rule's size reported.
        (None, Some((made, from))) => {
            mapped_from = from;
            attempts[made.0].error = None;
            (made, Some(min_model_images(registrable)))
        }
        (None, None) => {
            return Err(no_model_error(database, &attempts, focal_fallback_error));
        }
    };
    let mut mapped = keep(&mapped_from, &runs, made, refine_px, mapper, attempts)?;
    if let Some(earlier) = earlier {
        earlier.replaced();
    }
    mapped.below_min_model_size = below_min_model_size;
    Ok(mapped)
}

/// Makes `out` and takes its lock for the whole mapping (returned), then, under the lock,
/// checks it again ([`check_sparse_dir`]: another run may have mapped there since), puts back
/// earlier models a killed `--overwrite` run set aside, removes what killed runs left, and
/// with `overwrite` sets the earlier models aside ([`EarlierModels`]).
fn lock_out(
    database: &Path,
    images: &Path,
    out: &Path,
    overwrite: bool,
) -> Result<(crate::io::atomic::OutputLock, Option<EarlierModels>)> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    // The lock is a file beside the folder: named from its canonical path, so that `.` and
    // the same folder spelt in full take the same lock.
    let canonical = out.canonicalize().map_err(|e| Error::io(out, e))?;
    let lock = crate::io::atomic::OutputLock::acquire(&canonical, "map into another folder")?;
    // Earlier models a killed `--overwrite` run had set aside and not replaced: back first.
    restore_set_aside(out)?;
    check_sparse_dir(out, overwrite)?;
    // Staging folders (or files) of a killed run (no run holds this folder's lock now).
    crate::io::atomic::remove_stale_staging(out, MAP_STAGING_PREFIX)?;
    let earlier = match overwrite {
        true => Some(set_earlier_models_aside(database, images, out)?),
        false => None,
    };
    Ok((lock, earlier))
}

/// First characters of the staging folder that holds the earlier models an `--overwrite`
/// mapping replaces, until its own are in place (a [`MAP_STAGING_PREFIX`] folder, so that a
/// later run removes it once it is no longer needed).
const SET_ASIDE_PREFIX: &str = ".descl-tmp-map-earlier-";

/// The earlier models of an `--overwrite` mapping, moved into a staging folder of the output
/// folder until the run's own models are in place ([`EarlierModels::replaced`]): a run that
/// fails puts them back when this is dropped, and one killed leaves them for the next run to
/// put back ([`restore_set_aside`]). Removed at its start, they were lost to a run killed or
/// failing before its end (issue 55).
struct EarlierModels {
    out: PathBuf,
    staging: Option<tempfile::TempDir>,
}

impl EarlierModels {
    /// The run's models are in place: the earlier ones go.
    fn replaced(mut self) {
        // Dropping the staging folder removes it with the earlier models.
        self.staging.take();
    }
}

impl Drop for EarlierModels {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            // Best effort: a model that cannot go back stays in the hidden staging folder,
            // where the next run under this folder's lock finds it.
            let kept = staging.keep();
            let _ = put_back(&kept, &self.out);
        }
    }
}

/// Moves the numbered model folders of `from` back into `out`, where `out` holds no folder of
/// that number, and removes `from` once empty.
fn put_back(from: &Path, out: &Path) -> Result<()> {
    for model in model_folders(from)? {
        let Some(name) = model.file_name() else {
            continue;
        };
        let to = out.join(name);
        if !to.exists() {
            std::fs::rename(&model, &to).map_err(|e| Error::io(&to, e))?;
        }
    }
    if model_folders(from)?.is_empty() {
        std::fs::remove_dir_all(from).map_err(|e| Error::io(from, e))?;
    }
    Ok(())
}

/// Puts back the earlier models a killed `--overwrite` run of `out` set aside, when `out`
/// holds no model of its own (the killed run did not get as far as moving its models in).
fn restore_set_aside(out: &Path) -> Result<()> {
    if !model_folders(out)?.is_empty() {
        return Ok(());
    }
    for entry in std::fs::read_dir(out).map_err(|e| Error::io(out, e))? {
        let entry = entry.map_err(|e| Error::io(out, e))?;
        let named = entry
            .file_name()
            .to_string_lossy()
            .starts_with(SET_ASIDE_PREFIX);
        if named && entry.file_type().is_ok_and(|t| t.is_dir()) {
            return put_back(&entry.path(), out);
        }
    }
    Ok(())
}

/// With `--overwrite`, the earlier models of `out` (numbered folders holding `images.bin`)
/// set aside ([`EarlierModels`]), unless the database or the images are inside one (they
/// would go with it).
fn set_earlier_models_aside(database: &Path, images: &Path, out: &Path) -> Result<EarlierModels> {
    let old_models = model_folders(out)?;
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
    let staging = crate::io::atomic::staging_dir(out, SET_ASIDE_PREFIX)?;
    let earlier = EarlierModels {
        out: out.to_path_buf(),
        staging: Some(staging),
    };
    for old in old_models {
        if let (Some(name), Some(staging)) = (old.file_name(), &earlier.staging) {
            let to = staging.path().join(name);
            // A failure here puts back what was moved (the drop) and names the folder.
            std::fs::rename(&old, &to).map_err(|e| Error::io(&old, e))?;
        }
    }
    Ok(earlier)
}

/// Images of `database` with a verified pair of at least [`COLMAP_MAPPER_MIN_NUM_MATCHES`]
/// inliers (the most a model can register); fewer than two is [`Error::NoModel`].
fn registrable_images(database: &Path) -> Result<usize> {
    let registrable =
        crate::io::colmap::count_registrable_images(database, COLMAP_MAPPER_MIN_NUM_MATCHES)?;
    if registrable < 2 {
        return Err(Error::NoModel(format!(
            "{}: {registrable} images with a verified pair of at least {} inliers; a model needs two",
            database.display(),
            COLMAP_MAPPER_MIN_NUM_MATCHES
        )));
    }
    Ok(registrable)
}

/// A run of [`map`] that made a model: its index in the attempts, its staging folder and its
/// largest model.
type Made = (usize, tempfile::TempDir, Reconstruction);

/// What every mapper run of one [`map`] shares.
struct Runs<'a> {
    images: &'a Path,
    out: &'a Path,
    options: &'a MapperOptions,
    registrable: usize,
    filter: f64,
    /// The initial-pair angles to try, in order.
    angles: Vec<f64>,
}

impl Runs<'_> {
    /// Maps `database` at each angle until a run makes a large enough model
    /// ([`large_enough`]), recording every run in `attempts`, and in `small` the largest model
    /// (the first of equal ones) under the rule so far, with the database it was mapped from.
    fn first_model(
        &self,
        database: &Path,
        focal_prior_factor: Option<f64>,
        attempts: &mut Vec<MapAttempt>,
        small: &mut Option<(Made, PathBuf)>,
    ) -> Result<Option<Made>> {
        for &angle in &self.angles {
            let run = map_once(
                database,
                self.images,
                self.out,
                self.options,
                self.filter,
                angle,
                focal_prior_factor,
            )?;
            let (attempt, model, too_small) = large_enough(run, self.registrable);
            attempts.push(attempt);
            if let Some((staging, r)) = model {
                return Ok(Some((attempts.len() - 1, staging, r)));
            }
            if let Some((staging, r)) = too_small {
                let larger = small
                    .as_ref()
                    .is_none_or(|((_, _, s), _)| r.images.len() > s.images.len());
                if larger {
                    *small = Some(((attempts.len() - 1, staging, r), database.to_path_buf()));
                }
            }
        }
        Ok(None)
    }
}

/// The kept run's models, refined at `refine_px` when given ([`refine_models`]), moved into
/// `out`, and what [`map`] returns.
fn keep(
    mapped_from: &Path,
    runs: &Runs<'_>,
    (index, staging, mapped): Made,
    refine_px: Option<f64>,
    mapper: String,
    mut attempts: Vec<MapAttempt>,
) -> Result<Mapped> {
    let (models, _refined) = refine_models(
        mapped_from,
        runs.images,
        staging.path(),
        &mapped.path,
        runs.out,
        refine_px,
        runs.options,
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
        registrable_images: runs.registrable,
        models: models.into_iter().map(|m| m.outcome).collect(),
        attempts,
        below_min_model_size: None,
    })
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
    let mapper = attempts
        .first()
        .map(|a| a.mapper)
        .unwrap_or_default()
        .mapper();
    Error::NoModel(format!(
        "{} mapper made no model of {}: {}{skipped}{}",
        mapper.name(),
        database.display(),
        why.join("; "),
        mapper.no_model_hint()
    ))
}

#[cfg(test)]
mod tests {

    /// COLMAP's rule by hand: 10 images, or ⌊0.8 · N⌋ of a smaller set, never under a pair.
    #[test]
    fn a_model_needs_ten_images_or_four_fifths_of_a_small_set() {
        assert_eq!(super::min_model_images(29), 10);
        assert_eq!(super::min_model_images(12), 9);
        assert_eq!(super::min_model_images(4), 3);
        assert_eq!(super::min_model_images(2), 2);
    }
}
