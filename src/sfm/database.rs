//! Images to a COLMAP database (`descl sfm IMAGES`): the set path with a [`ColmapWriter`],
//! each image's camera from EXIF or COLMAP's prior, and what the run wrote ([`SfmSummary`]).
//! The extractor is a parameter, so any [`crate::describe::Describer`] serves.

use super::SfmConfig;
use crate::error::Result;
use crate::features::Features;
use crate::geometry::Intrinsics;
use crate::image::image_inputs;
use crate::image_set::{self, SetConfig, SetImage};
use crate::io::cameras::KnownCameras;
use crate::io::output::{ColmapOptions, ColmapWriter};
use crate::matching::two_view::PairConfig;
use crate::progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// Camera knowledge of an image for COLMAP: focal length from EXIF when present, else COLMAP's
/// 1.2·max(w, h) prior.
pub fn colmap_camera(path: &Path, f: &Features) -> Result<image_set::CameraInfo> {
    let (w, h) = (f.meta.image_width, f.meta.image_height);
    // Held to the picture the features were extracted from: a file renamed over it during the
    // run gave the new picture's focal length beside the old one's features.
    let recorded = f
        .meta
        .provenance
        .as_ref()
        .and_then(|p| p.image_sha256.as_deref());
    let exif = Intrinsics::from_exif_of(path, w, h, recorded)?;
    Ok((
        Some(exif.unwrap_or_else(|| Intrinsics::default_prior(w, h))),
        exif.is_some(),
    ))
}

/// The camera function of [`build_database`]: an image's known camera (checked against its
/// size) when `known` has one, else [`colmap_camera`]'s EXIF or prior.
fn known_or_colmap_camera<'a>(
    known: &'a KnownCameras,
    inputs: &'a [crate::names::SetInput],
) -> impl Fn(&Path, &Features) -> Result<image_set::CameraInfo> + Sync + 'a {
    // Each image's name by its path, looked up once per image (only when cameras are known).
    let names: std::collections::HashMap<&Path, &str> = if known.is_known() {
        inputs
            .iter()
            .map(|i| (i.path.as_path(), i.name.as_str()))
            .collect()
    } else {
        Default::default()
    };
    move |path: &Path, f: &Features| {
        let (w, h) = (f.meta.image_width, f.meta.image_height);
        match names
            .get(path)
            .map(|n| known.camera_of(n, w, h))
            .transpose()?
            .flatten()
        {
            Some(c) => Ok((Some(c.intrinsics()), true)),
            None => colmap_camera(path, f),
        }
    }
}

/// Checks the cameras the user gave against each image of the set before any extraction,
/// from the image files' headers (the size the extraction decodes): a cameras file without a
/// line for an image, or a camera that cannot be an image's, failed only after every image
/// had been extracted (hostile round 1 of issue 55, M2). An image whose header cannot be read
/// is left to the extraction, which names it.
fn check_known_cameras(known: &KnownCameras, inputs: &[crate::names::SetInput]) -> Result<()> {
    if !known.is_known() {
        return Ok(());
    }
    for input in inputs {
        if let Ok((w, h)) = ::image::image_dimensions(&input.path) {
            known.camera_of(&input.name, w, h)?;
        }
    }
    Ok(())
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
    let inputs = image_inputs(image_dir)?;
    check_known_cameras(&cfg.known_cameras, &inputs)?;
    let writer = ColmapWriter::create(
        db,
        overwrite,
        ColmapOptions {
            camera_model: cfg.camera_model,
            single_camera: cfg.single_camera,
            known_cameras: cfg.known_cameras.clone(),
        },
    )?;
    let camera = known_or_colmap_camera(&cfg.known_cameras, &inputs);
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
        // A database records no match plan.
        features: None,
        intrinsics: None,
    };
    let run = image_set::run(&inputs, &set, extract, camera, Box::new(writer), progress)?;
    Ok(summary(run, pair_config))
}

/// What [`build_database`]'s set run wrote, for people and `--json`.
fn summary(run: image_set::SetSummary, pair_config: PairConfig) -> SfmSummary {
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
    SfmSummary {
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
    }
}
