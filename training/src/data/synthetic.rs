//! Synthetic training tracks from the training photos (`../shared/data/train/` only — never an
//! evaluation set).
//!
//! For each photo and each of `groups` view groups: render `views` views with random
//! homographies (rotation, scale, tilt/shear, perspective) and photometric change (gamma,
//! contrast, brightness, blur, noise, JPEG); detect DoG frames independently in every view;
//! a track is a view-0 frame whose prediction through the homographies meets a detected frame
//! in every other view (position, scale and orientation agree). Each view's frame then gets
//! a small HPatches-style jitter and its patch is sampled with the inference sampler.
//! Independent detections make the frame noise the same kind the test-time matcher sees.

#[cfg(feature = "tracks")]
mod render;
#[cfg(feature = "tracks")]
pub use render::*;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Generator settings (all have defaults; `images` defaults to `<data>/train`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Folder searched recursively for .jpg/.png photos.
    pub images: Option<PathBuf>,
    /// Sub-folders of `images` (first path component, e.g. a scene) left out: the scenes held
    /// out for validation must not reach training through synthetic views either.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Photos are downscaled so the longer side is at most this (pixels).
    pub max_side: usize,
    /// View groups rendered per photo.
    pub groups: usize,
    /// Views per group = patches per class (k ≥ 2; 3 lets AdaSample choose positives).
    pub views: usize,
    /// DoG keypoints kept per view (strongest first).
    pub max_keypoints: usize,
    /// Largest in-plane rotation (degrees, uniform in ±).
    pub max_rotation_deg: f64,
    /// Scale range (log-uniform).
    pub scale: [f64; 2],
    /// Largest tilt (anisotropic scale, log-uniform in [1, max]) along a random direction.
    pub max_tilt: f64,
    /// Largest perspective coefficient, relative to the half-diagonal.
    pub max_perspective: f64,
    /// Gamma range (log-uniform).
    pub gamma: [f64; 2],
    /// Contrast factor range and largest brightness offset.
    pub contrast: [f64; 2],
    pub brightness: f64,
    /// Probability and largest σ (pixels) of a Gaussian blur.
    pub blur_prob: f64,
    pub max_blur_sigma: f64,
    /// Largest σ of additive Gaussian noise (intensity units).
    pub max_noise: f64,
    /// Probability and quality range of a JPEG round trip.
    pub jpeg_prob: f64,
    pub jpeg_quality: [i32; 2],
    /// A detection matches a predicted frame when the centres are closer than this fraction of the
    /// frame radius (at least [`MIN_POSITION_TOLERANCE_PX`]), scales agree within this ratio and
    /// orientations within this angle.
    pub position_tolerance: f64,
    pub scale_tolerance: f64,
    pub angle_tolerance_deg: f64,
    /// HPatches-style jitter of each view's frame: σ of rotation (degrees), of log-scale and of
    /// the shift (fraction of the frame radius).
    pub jitter_rotation_deg: f64,
    pub jitter_scale: f64,
    pub jitter_shift: f64,
    /// Measurement-region magnification (ARCHITECTURE.md "Conventions": A = m·σ·R).
    pub magnification: f64,
    pub seed: u64,
}

/// Smallest position tolerance of a track match (pixels): DoG's own localisation noise.
pub const MIN_POSITION_TOLERANCE_PX: f64 = 1.0;

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            images: None,
            exclude: Vec::new(),
            max_side: 1024,
            groups: 8,
            views: 3,
            max_keypoints: 4000,
            max_rotation_deg: 180.0,
            scale: [0.7, 1.4],
            max_tilt: 1.5,
            max_perspective: 0.15,
            gamma: [0.6, 1.6],
            contrast: [0.6, 1.4],
            brightness: 0.15,
            blur_prob: 0.4,
            max_blur_sigma: 1.5,
            max_noise: 0.02,
            jpeg_prob: 0.5,
            jpeg_quality: [30, 95],
            position_tolerance: 0.15,
            scale_tolerance: 1.3,
            angle_tolerance_deg: 30.0,
            jitter_rotation_deg: 3.0,
            jitter_scale: 0.03,
            jitter_shift: 0.02,
            magnification: 6.0,
            seed: 0,
        }
    }
}

/// Without feature `tracks` there is no generator (it needs OpenCV): an error saying so.
#[cfg(not(feature = "tracks"))]
pub fn generate(_cfg: &SyntheticConfig) -> anyhow::Result<super::TrackSet> {
    anyhow::bail!(super::NO_TRACKS_FEATURE)
}

#[cfg(all(test, feature = "tracks"))]
mod tests {
    use super::*;
    use descl::frame::Frame;
    use rand::SeedableRng;

    #[test]
    fn jacobian_matches_finite_differences() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let h = random_homography(&mut rng, &SyntheticConfig::default(), 800, 600);
        let (x, y) = (123.0, 456.0);
        let j = jacobian(&h, x, y);
        let e = 1e-4;
        let (u1, v1) = apply(&h, x + e, y);
        let (u0, v0) = apply(&h, x - e, y);
        assert!((j[0][0] - (u1 - u0) / (2.0 * e)).abs() < 1e-6);
        assert!((j[1][0] - (v1 - v0) / (2.0 * e)).abs() < 1e-6);
        let (u1, v1) = apply(&h, x, y + e);
        let (u0, v0) = apply(&h, x, y - e);
        assert!((j[0][1] - (u1 - u0) / (2.0 * e)).abs() < 1e-6);
        assert!((j[1][1] - (v1 - v0) / (2.0 * e)).abs() < 1e-6);
    }

    #[test]
    fn invert_inverts() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let h = random_homography(&mut rng, &SyntheticConfig::default(), 640, 480);
        let hi = invert(&h).unwrap();
        let (u, v) = apply(&h, 100.0, 200.0);
        let (x, y) = apply(&hi, u, v);
        assert!((x - 100.0).abs() < 1e-9 && (y - 200.0).abs() < 1e-9);
    }

    #[test]
    fn predicted_frames_are_matched_and_wrong_ones_are_not() {
        // Two views related by a pure rotation + scale: the exact predicted frame must match,
        // a frame rotated by 90° or shifted by 10 px must not.
        let cfg = SyntheticConfig::default();
        let id: Homography = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let (s, c) = (0.3f64.sin() * 1.2, 0.3f64.cos() * 1.2);
        let h1: Homography = [[c, -s, 50.0], [s, c, 20.0], [0.0, 0.0, 1.0]];
        let f0 = Frame {
            x: 200.0,
            y: 150.0,
            a: [[12.0, 0.0], [0.0, 12.0]],
        };
        let (px, py) = apply(&h1, 200.0, 150.0);
        let good = Frame {
            x: px as f32,
            y: py as f32,
            a: [
                [(12.0 * c) as f32, (-12.0 * s) as f32],
                [(12.0 * s) as f32, (12.0 * c) as f32],
            ],
        };
        let turned = Frame {
            a: [[good.a[0][1], -good.a[0][0]], [good.a[1][1], -good.a[1][0]]],
            ..good
        };
        let shifted = Frame {
            x: good.x + 10.0,
            ..good
        };
        let tracks = match_tracks(
            &cfg,
            &[id, h1],
            &[vec![f0], vec![turned, shifted, good]],
            (640, 480),
        )
        .unwrap();
        assert_eq!(tracks, vec![vec![f0, good]]);
        let none = match_tracks(
            &cfg,
            &[id, h1],
            &[vec![f0], vec![turned, shifted]],
            (640, 480),
        )
        .unwrap();
        assert!(none.is_empty());
    }
}
