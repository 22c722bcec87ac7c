//! The intrinsics each merged image's pairs were verified with (issue 44): a merged camera
//! must hold exactly these for its pairs to be CALIBRATED, so they are read from the matches
//! files before any camera is written, and two different ones for one camera are refused.

use super::merge::MergeInputs;
use super::merge_checks::{MergeImage, MergeNames};
use crate::error::{Error, Result};
use crate::geometry::Intrinsics;
use crate::image_set;
use crate::io::plan::{read_plan, MatchPlan, MATCH_PLAN_FILE};
use crate::progress::Progress;
use std::path::PathBuf;

/// The intrinsics each image's pairs were verified with (an essential matrix uses them, and the
/// matches files record them), indexed like `images`, from the matches files' metadata before
/// any camera is written: a merged camera must hold exactly these for its pairs to be
/// CALIBRATED (issue 44). One image verified with two intrinsics is refused, naming it, both
/// values and both files; with `single_camera` (one camera holds one set of intrinsics) so are
/// two images verified with different ones, and every image gets the one set. Files that
/// [`store_matches`] refuses (an unknown image, an essential matrix without intrinsics) are
/// passed over here.
pub(super) fn verified_intrinsics(
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
    one_camera(images, &used)
}

/// With `--single-camera`, the one set of intrinsics every image's pairs were verified with
/// (`used`: each image's, and the file it came from), for every image; two different ones are
/// refused, naming both images and files.
fn one_camera(
    images: &[MergeImage],
    used: &[Option<(Intrinsics, PathBuf)>],
) -> Result<Vec<Option<Intrinsics>>> {
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
