//! Keypoint detection: image → oriented local affine frames with a response, strongest first.
//! Two detectors: DoG (OpenCV's SIFT detector, [`dog`]) and Harris-Affine (Rust,
//! [`harris_affine`]). Both express their frames in the conventions of ARCHITECTURE.md
//! "Conventions" ([`Frame`]).

#[cfg(feature = "full")]
pub mod dog;
pub mod harris_affine;

#[cfg(feature = "full")]
use crate::error::{Error, Result};
#[cfg(feature = "full")]
use crate::frame::Detection;
#[cfg(feature = "full")]
use crate::image::GrayImage;
use serde::{Deserialize, Serialize};

/// Measurement-region magnification m (ARCHITECTURE.md "Conventions", Frame): a DoG frame is
/// `a = m·σ·R(angle)`, so the
/// patch covers 2m·σ = 12σ (HardNet / kornia / hloc).
pub const DEFAULT_MAGNIFICATION: f32 = 6.0;
/// Default cap on keypoints per image (the strongest by detector response): `descl
/// extract --max-keypoints` and `descl.Extractor(max_keypoints=…)`.
pub const DEFAULT_MAX_KEYPOINTS: usize = 2048;

/// OpenCV's default SIFT contrast threshold (Lowe 2004 §4 uses 0.03 on [0,1] images with
/// 3 scales per octave; OpenCV divides its 0.04 by the number of octave layers).
pub const DEFAULT_CONTRAST_THRESHOLD: f32 = 0.04;

/// Which detector to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DetectorKind {
    /// Difference of Gaussians, OpenCV SIFT detector (Lowe 2004).
    #[default]
    Dog,
    /// Harris-Affine (Mikolajczyk & Schmid 2004).
    HarrisAffine,
}

impl DetectorKind {
    /// Every detector, in the order the command line lists them.
    pub const ALL: &'static [DetectorKind] = &[DetectorKind::Dog, DetectorKind::HarrisAffine];

    /// The name on the command line and in features files.
    pub fn name(self) -> &'static str {
        match self {
            DetectorKind::Dog => "dog",
            DetectorKind::HarrisAffine => "harris-affine",
        }
    }
}

impl std::fmt::Display for DetectorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Detector settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DetectorConfig {
    pub kind: DetectorKind,
    /// Keep at most this many detections, the strongest by response; 0 keeps all.
    pub max_keypoints: usize,
    /// DoG contrast threshold (OpenCV's `contrastThreshold`); ignored by Harris-Affine.
    pub contrast_threshold: f32,
    /// Measurement-region magnification m (ARCHITECTURE.md "Conventions": `a = m·σ·R`).
    pub magnification: f32,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            kind: DetectorKind::Dog,
            max_keypoints: 0,
            contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
            magnification: DEFAULT_MAGNIFICATION,
        }
    }
}

/// Detects frames in `img`, sorted by score descending and capped at `cfg.max_keypoints`
/// (0 = all). An image without keypoints gives an empty Vec.
#[cfg(feature = "full")]
pub fn detect(img: &GrayImage, cfg: &DetectorConfig) -> Result<Vec<Detection>> {
    if !(cfg.magnification.is_finite() && cfg.magnification > 0.0) {
        return Err(Error::InvalidInput(format!(
            "magnification must be positive, got {}",
            cfg.magnification
        )));
    }
    if !(cfg.contrast_threshold.is_finite() && cfg.contrast_threshold >= 0.0) {
        return Err(Error::InvalidInput(format!(
            "contrast threshold must be ≥ 0, got {}",
            cfg.contrast_threshold
        )));
    }
    let mut dets = match cfg.kind {
        DetectorKind::Dog => dog::detect_dog(img, cfg.contrast_threshold, cfg.magnification)?,
        DetectorKind::HarrisAffine => {
            harris_affine::detect_harris_affine(img, cfg.magnification, cfg.max_keypoints)
        }
    };
    sort_and_cap(&mut dets, cfg.max_keypoints);
    Ok(dets)
}

/// Sorts by score descending (stable, so equal scores keep detector order) and truncates to
/// `max` (0 = no cap).
#[cfg(feature = "full")]
pub(crate) fn sort_and_cap(dets: &mut Vec<Detection>, max: usize) {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    if max > 0 {
        dets.truncate(max);
    }
}
