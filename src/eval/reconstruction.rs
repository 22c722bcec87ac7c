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

use crate::describe::Describer;
use crate::detect::DetectorConfig;
use crate::error::{Error, Result};
use crate::eval::pose::PoseScene;
use crate::io::colmap_model::{run_colmap, run_mapper, MapperOptions, Reconstruction};
use crate::matching::pairs::file_names;
use crate::pipeline::{Extractor, COLMAP_MAX_IMAGE_SIZE};
use crate::progress::Progress;
use crate::sfm::{build_database, evaluate, GroundTruthCamera, SfmAccuracy, SfmConfig};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Method name of the same-run peer: COLMAP's own SIFT extraction, matching and mapping.
pub const COLMAP_SIFT_PIPELINE: &str = "colmap-sift";

/// One method's reconstruction of one scene.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SceneReconstruction {
    /// Accuracy against the ground truth; None when no model could be aligned (fewer than
    /// three registered images, or the mapper failed: `error` says why).
    pub accuracy: Option<SfmAccuracy>,
    pub error: Option<String>,
    /// Wall time of the whole pipeline (extract, match, map), seconds.
    pub seconds: f64,
}

/// The mapper settings of both pipelines: COLMAP's defaults (principal point fixed).
fn mapper_options() -> MapperOptions {
    MapperOptions {
        num_threads: None,
        refine_principal_point: false,
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

/// Aligns a finished reconstruction, turning a failure into a reported row.
fn outcome(
    recon: Result<Reconstruction>,
    truth: &[GroundTruthCamera],
    started: Instant,
) -> SceneReconstruction {
    let accuracy = recon.and_then(|r| evaluate(&r, truth));
    let seconds = started.elapsed().as_secs_f64();
    match accuracy {
        Ok(a) => SceneReconstruction {
            accuracy: Some(a),
            error: None,
            seconds,
        },
        Err(e) => SceneReconstruction {
            accuracy: None,
            error: Some(e.to_string()),
            seconds,
        },
    }
}

/// Runs `pipeline(images, folder)` on `scene` in a fresh temporary folder under `work` (removed
/// afterwards), timed, and aligns what it reconstructed to the scene's ground truth.
fn reconstruct(
    scene: &PoseScene,
    work: &Path,
    pipeline: impl FnOnce(&Path, &Path) -> Result<Reconstruction>,
) -> Result<SceneReconstruction> {
    let images = image_dir(scene)?;
    let truth = ground_truth(scene);
    let dir = tempfile::Builder::new()
        .prefix("descl-bench-sfm-")
        .tempdir_in(work)
        .map_err(|e| Error::io(work, e))?;
    let started = Instant::now();
    let recon = pipeline(images, dir.path());
    Ok(outcome(recon, &truth, started))
}

/// Reconstructs `scene` with `describer` on DoG frames (`det`, its `max_keypoints` per image)
/// through `descl sfm`'s path, in a temporary folder under `work`.
pub fn reconstruct_with(
    scene: &PoseScene,
    describer: &Describer,
    det: &DetectorConfig,
    work: &Path,
    progress: &dyn Progress,
) -> Result<SceneReconstruction> {
    let extractor = Extractor::with_describer(describer.try_clone()?, *det)
        .max_image_size(COLMAP_MAX_IMAGE_SIZE);
    reconstruct(scene, work, |images, dir| {
        let db = dir.join("database.db");
        build_database(
            images,
            &db,
            false,
            &SfmConfig::default(),
            &extractor,
            progress,
        )?;
        run_mapper(&db, images, &dir.join("sparse"), &mapper_options())
    })
}

/// Reconstructs `scene` with COLMAP's own CPU SIFT pipeline, at most `max_features` per image.
pub fn reconstruct_with_colmap_sift(
    scene: &PoseScene,
    max_features: usize,
    work: &Path,
) -> Result<SceneReconstruction> {
    reconstruct(scene, work, |images, dir| {
        colmap_sift_pipeline(images, dir, max_features, false, &mapper_options())
    })
}

/// COLMAP's own SIFT pipeline on `images` (CPU): `feature_extractor` (at most `max_features`
/// per image, one camera for all images when `single_camera`, otherwise its defaults),
/// `exhaustive_matcher`, then `mapper`; database and model under `work`.
pub fn colmap_sift_pipeline(
    images: &Path,
    work: &Path,
    max_features: usize,
    single_camera: bool,
    options: &MapperOptions,
) -> Result<Reconstruction> {
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
    run_mapper(&db, images, &work.join("colmap-sparse"), options)
}
