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

/// COLMAP's `SiftExtraction.max_num_orientations` default: orientations kept per DoG location.
/// COLMAP's `max_num_features` counts locations *before* this expansion ("maximum number of
/// features to detect"), so its 8192 features give up to 16 384 descriptors per image (12 475
/// on average on fountain-P11); [`DetectorConfig::max_orientations`] reproduces that count.
pub const COLMAP_MAX_NUM_ORIENTATIONS: usize = 2;

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
    /// Keep at most this many detections, the strongest by response; 0 keeps all. With
    /// `max_orientations`, it counts locations instead (below).
    pub max_keypoints: usize,
    /// DoG contrast threshold (OpenCV's `contrastThreshold`); ignored by Harris-Affine.
    pub contrast_threshold: f32,
    /// Measurement-region magnification m (ARCHITECTURE.md "Conventions": `a = m·σ·R`).
    pub magnification: f32,
    /// COLMAP's feature count: when set, `max_keypoints` counts keypoint *locations* (OpenCV's
    /// SIFT emits one keypoint per orientation of a location, sharing its centre, size and
    /// response) and each kept location keeps at most this many of its orientations, the first
    /// in detector order — COLMAP's `max_num_features` with `max_num_orientations`
    /// ([`COLMAP_MAX_NUM_ORIENTATIONS`]), so an image gives up to `max_keypoints` × this many
    /// frames. None: every frame counts, one descriptor per kept frame (settings written before
    /// it existed read as None).
    #[serde(default)]
    pub max_orientations: Option<usize>,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            kind: DetectorKind::Dog,
            max_keypoints: 0,
            contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
            magnification: DEFAULT_MAGNIFICATION,
            max_orientations: None,
        }
    }
}

/// Detects frames in `img`, sorted by score descending and capped at `cfg.max_keypoints`
/// (0 = all; frames, or locations with `cfg.max_orientations`). An image without keypoints
/// gives an empty Vec.
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
    if cfg.max_orientations == Some(0) {
        return Err(Error::InvalidInput(
            "orientations per keypoint location must be at least 1".into(),
        ));
    }
    let mut dets = match cfg.kind {
        DetectorKind::Dog => dog::detect_dog(img, cfg.contrast_threshold, cfg.magnification)?,
        DetectorKind::HarrisAffine => {
            harris_affine::detect_harris_affine(img, cfg.magnification, cfg.max_keypoints)
        }
    };
    sort_and_cap(&mut dets, cfg.max_keypoints, cfg.max_orientations);
    Ok(dets)
}

/// The location a frame was detected at: its centre and response, bit for bit. OpenCV's SIFT
/// copies a location's keypoint once per orientation, changing only the angle; a frame's
/// scale is recomputed from its rotated matrix and may differ in the last bit, so it is not
/// part of the key (two distinct extrema with the same centre and the same response to the
/// bit would count as one location).
#[cfg(feature = "full")]
fn location_key(d: &Detection) -> (u32, u32, u32) {
    (d.frame.x.to_bits(), d.frame.y.to_bits(), d.score.to_bits())
}

/// Sorts by score descending (stable, so equal scores keep detector order) and keeps the first
/// `max` (0 = no cap): `max` frames, or with `max_orientations` = Some(k) the frames of the
/// first `max` locations ([`location_key`]), at most k per location.
#[cfg(feature = "full")]
pub(crate) fn sort_and_cap(dets: &mut Vec<Detection>, max: usize, max_orientations: Option<usize>) {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let Some(per_location) = max_orientations else {
        if max > 0 {
            dets.truncate(max);
        }
        return;
    };
    let mut kept: std::collections::HashMap<(u32, u32, u32), usize> =
        std::collections::HashMap::new();
    dets.retain(|d| {
        let locations = kept.len();
        match kept.entry(location_key(d)) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let n = e.get_mut();
                *n += 1;
                *n <= per_location
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let room = max == 0 || locations < max;
                if room {
                    e.insert(1);
                }
                room
            }
        }
    });
}

#[cfg(all(test, feature = "full"))]
mod tests {
    use super::*;
    use crate::frame::Frame;

    /// A frame at (x, y) with orientation `deg` (scale 1) and response `score`.
    fn det(x: f32, y: f32, deg: f32, score: f32) -> Detection {
        let (s, c) = deg.to_radians().sin_cos();
        Detection {
            frame: Frame {
                x,
                y,
                a: [[c, -s], [s, c]],
            },
            score,
        }
    }

    fn centres(d: &[Detection]) -> Vec<(f32, f32, f32)> {
        d.iter().map(|d| (d.frame.x, d.frame.y, d.score)).collect()
    }

    /// Three locations: A (response 3) with three orientations, B (2) with one, C (1) with two,
    /// in detector order C, A, A, B, A, C.
    fn three_locations() -> Vec<Detection> {
        vec![
            det(5.0, 5.0, 10.0, 1.0),
            det(1.0, 1.0, 0.0, 3.0),
            det(1.0, 1.0, 90.0, 3.0),
            det(2.0, 2.0, 0.0, 2.0),
            det(1.0, 1.0, 200.0, 3.0),
            det(5.0, 5.0, 300.0, 1.0),
        ]
    }

    #[test]
    fn frames_are_counted_without_max_orientations() {
        let mut d = three_locations();
        sort_and_cap(&mut d, 2, None);
        // The two strongest frames: both are A's.
        assert_eq!(centres(&d), vec![(1.0, 1.0, 3.0), (1.0, 1.0, 3.0)]);
    }

    #[test]
    fn locations_are_counted_with_max_orientations() {
        let mut d = three_locations();
        sort_and_cap(&mut d, 2, Some(COLMAP_MAX_NUM_ORIENTATIONS));
        // A (its first two orientations in detector order) and B; C is the third location.
        assert_eq!(
            centres(&d),
            vec![(1.0, 1.0, 3.0), (1.0, 1.0, 3.0), (2.0, 2.0, 2.0)]
        );
        assert_eq!(d[0].frame.a, det(0.0, 0.0, 0.0, 0.0).frame.a);
        assert_eq!(d[1].frame.a, det(0.0, 0.0, 90.0, 0.0).frame.a);

        let mut all = three_locations();
        sort_and_cap(&mut all, 0, Some(1));
        assert_eq!(
            centres(&all),
            vec![(1.0, 1.0, 3.0), (2.0, 2.0, 2.0), (5.0, 5.0, 1.0)]
        );
        let mut none = Vec::new();
        sort_and_cap(&mut none, 8, Some(2));
        assert!(none.is_empty());
    }

    #[test]
    fn zero_orientations_per_location_is_refused() {
        let img = GrayImage::filled(16, 16, 0.5);
        let cfg = DetectorConfig {
            max_orientations: Some(0),
            ..DetectorConfig::default()
        };
        let err = detect(&img, &cfg).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("orientations")),
            "{err:?}"
        );
    }
}
