//! Real multi-view training tracks from a reconstruction (the UBC PhotoTour recipe: Brown,
//! Hua & Winder 2011 cut their patches at DoG detections that a multi-view reconstruction
//! links to one 3-D point).
//!
//! Input: a COLMAP database (written by `descl sfm` or by COLMAP's own SIFT pipeline), the
//! sparse model its mapper produced from it, and the image folder. Every 3-D point whose mean
//! reprojection error is small and which is seen in at least `views` distinct images becomes
//! one class; each of its views is the patch at **that image's own detected frame** (position,
//! scale and orientation as the detector found them there, read back from the database's
//! keypoints through the track's `point2D_idx`), never a reprojection. So positives carry the
//! real viewpoint, lighting and detector noise between photos, which synthetic homographies
//! of one photo cannot.
//!
//! Frames: the database stores each keypoint's affine shape; descl's databases store its frames
//! `m·σ·R` (m = the extracting model's magnification, 6 for the shipped models), COLMAP's SIFT
//! extractor stores `σ·R` (m = 1). `stored_magnification` says which, and the patches are cut
//! at `magnification` (the frame's shape rescaled by `magnification / stored_magnification`).

use super::jitter::FrameJitter;
use super::TrackSet;
#[cfg(feature = "tracks")]
use anyhow::Context;
use anyhow::{bail, Result};
#[cfg(feature = "tracks")]
use descl::frame::Frame;
#[cfg(feature = "tracks")]
use descl::image::load_gray;
#[cfg(feature = "tracks")]
use descl::io::colmap::read_keypoints;
#[cfg(feature = "tracks")]
use descl::io::colmap_model::read_points;
#[cfg(feature = "tracks")]
use descl::patch::PatchSampler;
#[cfg(feature = "tracks")]
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
#[cfg(feature = "tracks")]
use std::collections::HashMap;
use std::path::PathBuf;

/// Magnification of the frames `descl sfm` stores with the shipped models (their cards' m):
/// descl's default, [`descl::detect::DEFAULT_MAGNIFICATION`].
pub const DESCL_DATABASE_MAGNIFICATION: f64 = descl::detect::DEFAULT_MAGNIFICATION as f64;
/// Magnification of the frames COLMAP's own SIFT extractor stores (`a = σ·R`).
pub const COLMAP_SIFT_MAGNIFICATION: f64 = 1.0;

/// Where the reconstruction is and how tracks are chosen from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColmapTracksConfig {
    /// Sparse model folder (`cameras.bin`, `images.bin`, `points3D.bin`).
    pub sparse: PathBuf,
    /// The COLMAP database the model was reconstructed from (keypoints with affine shapes).
    pub database: PathBuf,
    /// Folder the database's image names are relative to.
    pub images: PathBuf,
    /// Views per class (a point needs at least this many distinct images).
    #[serde(default = "three")]
    pub views: usize,
    /// Largest mean reprojection error of a kept point (pixels).
    #[serde(default = "one_px")]
    pub max_reprojection_error: f64,
    /// Magnification of the frames stored in the database (6: descl, 1: COLMAP SIFT).
    #[serde(default = "descl_m")]
    pub stored_magnification: f64,
    /// Magnification the patches are cut at (the trained model's card magnification).
    #[serde(default = "descl_m")]
    pub magnification: f64,
    /// Chooses which views of a longer track are kept (and draws the jitter).
    #[serde(default)]
    pub seed: u64,
    /// Each view cut at a perturbed frame ([`FrameJitter`]): detector error under zoom and
    /// rotation beyond what the photos' own detections carry. None: the detected frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<FrameJitter>,
}

/// Mixed into the seed for the jitter's random stream, so the views chosen do not depend on
/// whether jitter is on.
#[cfg(feature = "tracks")]
const JITTER_SEED_MIX: u64 = 0x6a09_e667_f3bc_c908;

fn three() -> usize {
    3
}
fn one_px() -> f64 {
    1.0
}
fn descl_m() -> f64 {
    DESCL_DATABASE_MAGNIFICATION
}

/// One chosen observation: image index, keypoint index.
#[cfg(feature = "tracks")]
type Observation = (usize, usize);

#[cfg(feature = "tracks")]
/// The classes of a reconstruction before any pixel is read: for each kept 3-D point, `views`
/// observations in distinct images (chosen with the config's seed when the track is longer).
pub fn choose_tracks(
    cfg: &ColmapTracksConfig,
    image_ids: &HashMap<u32, usize>,
    keypoint_counts: &[usize],
) -> Result<(Vec<Vec<Observation>>, TrackStats)> {
    let points = read_points(&cfg.sparse)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut stats = TrackStats {
        points: points.len(),
        ..TrackStats::default()
    };
    let mut classes = Vec::new();
    for p in &points {
        // A NaN error counts as high.
        if p.error.is_nan() || p.error > cfg.max_reprojection_error {
            stats.high_error += 1;
            continue;
        }
        // One observation per image (COLMAP may keep two keypoints of one image in a track).
        let mut seen = std::collections::HashSet::new();
        let mut obs: Vec<Observation> = Vec::with_capacity(p.track.len());
        for &(image_id, idx) in &p.track {
            let Some(&image) = image_ids.get(&image_id) else {
                bail!(
                    "{}: point {} observed in image {image_id}, absent from {}",
                    cfg.sparse.display(),
                    p.id,
                    cfg.database.display()
                );
            };
            if idx as usize >= keypoint_counts[image] {
                bail!(
                    "{}: point {} refers to keypoint {idx} of image {image_id}, which has {} in {}",
                    cfg.sparse.display(),
                    p.id,
                    keypoint_counts[image],
                    cfg.database.display()
                );
            }
            if seen.insert(image) {
                obs.push((image, idx as usize));
            }
        }
        if obs.len() < cfg.views {
            stats.short += 1;
            continue;
        }
        let pick = rand::seq::index::sample(&mut rng, obs.len(), cfg.views);
        classes.push(pick.iter().map(|i| obs[i]).collect());
    }
    stats.classes = classes.len();
    Ok((classes, stats))
}

/// What a reconstruction gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TrackStats {
    /// 3-D points in the model.
    pub points: usize,
    /// Dropped for their reprojection error.
    pub high_error: usize,
    /// Dropped for being seen in fewer than `views` distinct images.
    pub short: usize,
    /// Kept: one class each.
    pub classes: usize,
}

#[cfg(feature = "tracks")]
/// Cuts the tracks of a reconstruction (see the module doc).
pub fn generate(cfg: &ColmapTracksConfig) -> Result<TrackSet> {
    if cfg.views < 2 {
        bail!("views must be ≥ 2, got {}", cfg.views);
    }
    for (what, m) in [
        ("magnification", cfg.magnification),
        ("stored_magnification", cfg.stored_magnification),
    ] {
        if !(m.is_finite() && m > 0.0) {
            bail!("{what} must be positive, got {m}");
        }
    }
    let stored = read_keypoints(&cfg.database)?;
    let image_ids: HashMap<u32, usize> = stored
        .iter()
        .enumerate()
        .filter_map(|(i, s)| u32::try_from(s.image_id).ok().map(|id| (id, i)))
        .collect();
    let counts: Vec<usize> = stored.iter().map(|s| s.frames.len()).collect();
    let (classes, stats) = choose_tracks(cfg, &image_ids, &counts)?;

    // Per image, the frames to cut (rescaled to the wanted magnification), then the patches.
    let k = (cfg.magnification / cfg.stored_magnification) as f32;
    let mut wanted: Vec<Vec<usize>> = vec![Vec::new(); stored.len()];
    for class in &classes {
        for &(image, idx) in class {
            wanted[image].push(idx);
        }
    }
    let mut patches: HashMap<Observation, Vec<f32>> = HashMap::new();
    let mut jitter_rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ JITTER_SEED_MIX);
    for (image, idxs) in wanted.iter().enumerate() {
        if idxs.is_empty() {
            continue;
        }
        let path = cfg.images.join(&stored[image].name);
        let img =
            load_gray(&path).with_context(|| format!("image of {}", cfg.database.display()))?;
        let frames: Vec<Frame> = idxs
            .iter()
            .map(|&i| {
                let f = stored[image].frames[i];
                let f = Frame {
                    a: f.a.map(|row| row.map(|v| v * k)),
                    ..f
                };
                match &cfg.jitter {
                    Some(j) => j.apply(&mut jitter_rng, &f),
                    None => Ok(f),
                }
            })
            .collect::<Result<_>>()?;
        let cut = PatchSampler::new(&img).sample(&frames);
        for (j, &i) in idxs.iter().enumerate() {
            let p = cut.index_axis(ndarray::Axis(0), j);
            patches.insert((image, i), p.iter().copied().collect());
        }
    }

    let names: Vec<&str> = stored.iter().map(|s| s.name.as_str()).collect();
    let mut set = TrackSet::new(
        cfg.views,
        cfg.magnification,
        serde_json::json!({
            "generator": "colmap",
            "config": cfg,
            "frames": crate::data::TRACK_FRAMES,
            "stats": stats,
            "images": names,
        }),
    );
    for class in &classes {
        let views: Vec<&[f32]> = class
            .iter()
            .map(|o| patches.get(o).map(|p| p.as_slice()).unwrap_or(&[]))
            .collect();
        set.push_class(&views)?;
    }
    Ok(set)
}
/// Without feature `tracks` there is no generator (it reads the database through descl's full
/// toolkit): an error saying so.
#[cfg(not(feature = "tracks"))]
pub fn generate(_cfg: &ColmapTracksConfig) -> Result<TrackSet> {
    bail!(super::NO_TRACKS_FEATURE)
}
