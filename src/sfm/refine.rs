//! `descl sfm --refine`: each model of the kept mapper run refined on its own (observations
//! past a tighter filter dropped, one more bundle adjustment, points triangulated again) with
//! COLMAP 3.8's tools. Apart from [`crate::sfm::map`] because it is optional (off by default)
//! and works on finished models, whichever mapper made them.

use super::map::MAP_STAGING_PREFIX;
use super::mapper::{
    run_bundle_adjuster, run_point_filtering, run_point_triangulator, BundleTermination,
    MapperOptions, COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
};
use super::report::{px_text, ModelRefinement};
use crate::error::Result;
use crate::io::colmap_model::model_folders;
use std::path::{Path, PathBuf};

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

/// One model of [`map`]'s kept run: the folder it is moved into the output folder from (its
/// refinement, or the mapper's own), and how its refinement went.
pub(super) struct StagedModel {
    pub(super) from: PathBuf,
    pub(super) outcome: ModelRefinement,
}

/// [`map`]'s refinement of each model in `mapped` (a staging folder of `out`) on its own, at
/// `px` (None: none refined). Returns each model's source and outcome, and the staging
/// folder holding the refined ones (kept until they are moved). A model whose refinement
/// fails keeps the mapper's version; its outcome says why. `largest` is the mapper's largest
/// model (a folder of `mapped`).
pub(super) fn refine_models(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
