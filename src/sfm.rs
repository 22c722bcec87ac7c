//! Structure-from-motion export: extract every image of a folder, match and verify the chosen
//! pairs, and write a COLMAP database ([`crate::io::colmap`]) that `colmap mapper` can
//! reconstruct from. The extractor is a parameter, so the same path serves learned models
//! (`pipeline::Extractor`) and baselines (SIFT).

use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::{Intrinsics, ModelKind};
use crate::io::colmap::{CameraModel, Database, TwoViewConfig, TwoViewModels};
use crate::matching::pairs::{file_names, make_pairs, PairMode};
use crate::matching::two_view::{match_pair, PairConfig, PairResult};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Image file extensions picked up from an image folder.
pub const IMAGE_EXTENSIONS: [&str; 9] = [
    "jpg", "jpeg", "png", "ppm", "pgm", "pbm", "tif", "tiff", "bmp",
];
/// Fewest verified inliers for a pair to enter two_view_geometries: COLMAP's
/// `TwoViewGeometryOptions::min_num_inliers` default.
pub const COLMAP_MIN_NUM_INLIERS: usize = 15;

/// Settings of `descl sfm`.
#[derive(Debug, Clone)]
pub struct SfmConfig {
    pub pair: PairConfig,
    pub pairs: PairMode,
    pub camera_model: CameraModel,
    /// One camera shared by all images (same camera, same size) instead of one per image.
    pub single_camera: bool,
    pub min_inliers: usize,
}

impl Default for SfmConfig {
    fn default() -> Self {
        SfmConfig {
            pair: PairConfig::default(),
            pairs: PairMode::Exhaustive,
            camera_model: CameraModel::SimpleRadial,
            single_camera: false,
            min_inliers: COLMAP_MIN_NUM_INLIERS,
        }
    }
}

/// One image as written to the database.
#[derive(Debug, Clone, Serialize)]
pub struct SfmImage {
    pub image_id: i64,
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub focal_prior: f64,
    pub focal_from_exif: bool,
    pub num_features: usize,
}

/// What `descl sfm` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct SfmSummary {
    pub database: PathBuf,
    pub images: Vec<SfmImage>,
    pub pairs: usize,
    /// Pairs with at least `min_inliers` verified inliers (written to two_view_geometries).
    pub verified_pairs: usize,
    pub mean_matches: f64,
    pub mean_inliers: f64,
    /// Pairs that could not be matched (e.g. an image without features), with the reason.
    pub skipped: Vec<String>,
}

/// The image files of `dir` (by extension, case-insensitive), sorted by name.
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out = Vec::new();
    for e in entries {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let ext = p
            .extension()
            .and_then(|x| x.to_str())
            .map(|x| x.to_ascii_lowercase());
        if p.is_file() && ext.is_some_and(|x| IMAGE_EXTENSIONS.contains(&x.as_str())) {
            out.push(p);
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{}: no images ({})",
            dir.display(),
            IMAGE_EXTENSIONS.join(", ")
        )));
    }
    Ok(out)
}

fn bar(len: usize, msg: &'static str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len as u64).with_message(msg);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed_precise} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Extracts, matches, verifies and writes the COLMAP database for the images of `image_dir`.
/// `db` must not exist unless `overwrite`; it is checked before any work starts.
pub fn build_database<E>(
    image_dir: &Path,
    db: &Path,
    overwrite: bool,
    cfg: &SfmConfig,
    extract: E,
    progress: bool,
) -> Result<SfmSummary>
where
    E: Fn(&Path) -> Result<Features> + Sync,
{
    let database = Database::create(db, overwrite)?;
    let paths = list_images(image_dir)?;
    let names = file_names(&paths);
    let pairs = make_pairs(&cfg.pairs, &names)?;

    let pb = bar(paths.len(), "extract", progress);
    let features: Vec<Features> = paths
        .par_iter()
        .map(|p| {
            let f = extract(p);
            pb.inc(1);
            f
        })
        .collect::<Result<_>>()?;
    pb.finish_and_clear();

    // Cameras: focal from EXIF when present, else COLMAP's 1.2·max(w, h) prior.
    let mut images = Vec::with_capacity(paths.len());
    let mut intrinsics = Vec::with_capacity(paths.len());
    let mut shared_camera: Option<i64> = None;
    for ((path, name), f) in paths.iter().zip(&names).zip(&features) {
        let (w, h) = (f.meta.image_width, f.meta.image_height);
        let exif = Intrinsics::from_exif(path, w, h).ok().flatten();
        let k = exif.unwrap_or_else(|| Intrinsics::default_prior(w, h));
        let params = cfg.camera_model.params(k.fx, w, h);
        let camera_id = match shared_camera {
            Some(id) if cfg.single_camera => id,
            _ => {
                let id = database.add_camera(cfg.camera_model, w, h, &params, exif.is_some())?;
                shared_camera = Some(id);
                id
            }
        };
        let image_id = database.add_image(name, camera_id)?;
        database.add_keypoints(image_id, &f.frames)?;
        database.add_descriptors(image_id, &f.descriptors)?;
        intrinsics.push(k);
        images.push(SfmImage {
            image_id,
            name: name.clone(),
            width: w,
            height: h,
            focal_prior: k.fx,
            focal_from_exif: exif.is_some(),
            num_features: f.frames.len(),
        });
    }

    let pb = bar(pairs.len(), "match", progress);
    let results: Vec<std::result::Result<PairResult, String>> = pairs
        .par_iter()
        .map(|&(i, j)| {
            let r = match_pair(
                &features[i],
                &features[j],
                &cfg.pair,
                Some((&intrinsics[i], &intrinsics[j])),
            )
            .map_err(|e| format!("{} – {}: {e}", names[i], names[j]));
            pb.inc(1);
            r
        })
        .collect();
    pb.finish_and_clear();

    let (mut verified, mut n_matches, mut n_inliers, mut skipped) =
        (0usize, 0usize, 0usize, Vec::new());
    for (&(i, j), r) in pairs.iter().zip(results) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                skipped.push(e);
                continue;
            }
        };
        let (id1, id2) = (images[i].image_id, images[j].image_id);
        n_matches += r.matches.len();
        database.add_matches(id1, id2, &r.matches.pairs)?;
        let inliers = r.inlier_pairs();
        n_inliers += inliers.len();
        let Some(v) = &r.verification else { continue };
        let Some(model) = &v.model else { continue };
        if inliers.len() < cfg.min_inliers {
            continue;
        }
        let none = TwoViewModels::default();
        let (config, models) = match v.kind {
            ModelKind::Fundamental => (
                TwoViewConfig::Uncalibrated,
                TwoViewModels {
                    f: Some(model),
                    ..none
                },
            ),
            ModelKind::Essential => (
                TwoViewConfig::Calibrated,
                TwoViewModels {
                    e: Some(model),
                    ..none
                },
            ),
            ModelKind::Homography => (
                TwoViewConfig::Planar,
                TwoViewModels {
                    h: Some(model),
                    ..none
                },
            ),
        };
        database.add_two_view_geometry(id1, id2, &inliers, config, &models)?;
        verified += 1;
    }
    let database = database.finish()?;
    let n_pairs = pairs.len().max(1) as f64;
    Ok(SfmSummary {
        database,
        images,
        pairs: pairs.len(),
        verified_pairs: verified,
        mean_matches: n_matches as f64 / n_pairs,
        mean_inliers: n_inliers as f64 / n_pairs,
        skipped,
    })
}

/// A ground-truth camera: world-to-camera rotation and centre in world coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct GroundTruthCamera {
    pub name: String,
    pub r_world_to_cam: [[f64; 3]; 3],
    pub centre: [f64; 3],
}

/// Reads a Strecha `.camera` file (lines 0–2 K, 3 distortion, 4–6 R camera-to-world,
/// 7 centre C, 8 width height; see the data README).
pub fn read_strecha_camera(path: &Path, name: &str) -> Result<GroundTruthCamera> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::format(path, format!("not a Strecha camera file: {e}")))?;
    if v.len() < 24 {
        return Err(Error::format(
            path,
            format!("expected at least 24 numbers, got {}", v.len()),
        ));
    }
    let r_c2w = [
        [v[12], v[13], v[14]],
        [v[15], v[16], v[17]],
        [v[18], v[19], v[20]],
    ];
    Ok(GroundTruthCamera {
        name: name.into(),
        r_world_to_cam: [0, 1, 2].map(|i| [0, 1, 2].map(|j| r_c2w[j][i])),
        centre: [v[21], v[22], v[23]],
    })
}

/// Accuracy of a reconstruction after a similarity alignment of its camera centres to the
/// ground truth (Umeyama): per-image rotation and centre errors.
#[derive(Debug, Clone, Serialize)]
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
