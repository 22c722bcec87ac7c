//! Structure from motion: a folder of images through the one pair path
//! ([`crate::image_set::run`]) into a COLMAP database ([`database`]), the database into models
//! ([`map`], with a [`mapper::Mapper`]), sharded runs merged into one database or hloc's files
//! ([`merge`]), and a model scored against ground truth ([`evaluate`]). This file holds what
//! they share: `descl sfm`'s defaults ([`SfmConfig`], [`sfm_detector`]). Each job is its own
//! file so that each can be read alone; the public names are re-exported here, where the
//! command line and the benchmarks take them (`sfm::map`, `sfm::build_database`, …).

mod database;
mod evaluate;
mod intrinsics;
mod map;
pub mod mapper;
mod merge;
mod merge_checks;
mod merge_pairs;
mod refine;
mod report;
mod sparse_dir;

pub use database::{build_database, colmap_camera, SfmSummary};
pub use evaluate::{
    evaluate, read_strecha_camera, read_strecha_scene, GroundTruthCamera, SfmAccuracy,
};
pub use map::{
    map, min_model_images, COLMAP_MIN_MODEL_SIZE, FALLBACK_FOCAL_PRIOR_FACTOR,
    FALLBACK_INIT_MIN_TRI_ANGLE_DEG, MIN_MODEL_FRACTION,
};
pub use merge::{merge_database, merge_hloc, MergeInputs, MergeSummary};
pub use merge_checks::differences_from_sfm;
pub use refine::{
    refine_filter_px, SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX, SFM_REFINE_FILTER_REFERENCE_SIDE_PX,
};
pub use report::{px_text, MapAttempt, Mapped, ModelRefinement, SfmStageSeconds};
pub use sparse_dir::{check_outputs, check_sparse_dir, default_sparse_dir, require_colmap};

use crate::detect::{DetectorConfig, Selection, COLMAP_PEAK_CONTRAST_THRESHOLD};
use crate::io::colmap::CameraModel;
use crate::matching::pairs::PairMode;
use crate::matching::two_view::PairConfig;

pub use crate::matching::two_view::{COLMAP_MAX_ERROR_PX, COLMAP_MIN_NUM_INLIERS};

/// Settings of `descl sfm`.
#[derive(Debug, Clone)]
pub struct SfmConfig {
    pub pair: PairConfig,
    pub pairs: PairMode,
    pub camera_model: CameraModel,
    /// One camera shared by all images (same camera, same size) instead of one per image.
    pub single_camera: bool,
    /// Cameras the user knows (`--camera-params`, `--cameras-file`); the mapper holds them
    /// fixed unless asked to refine them ([`mapper::MapperOptions::hold_intrinsics`]).
    pub known_cameras: crate::io::cameras::KnownCameras,
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
            known_cameras: Default::default(),
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
