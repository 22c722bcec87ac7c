//! Robustness sequences made from the dev images themselves (issue 23 item 3): each dev
//! homography sequence's reference image (HPatches sequences and Oxford Affine, the images of
//! `descl bench sequences`) against a changed copy of itself — re-encoded as JPEG at
//! [`JPEG_QUALITIES`], blurred with a Gaussian of σ in [`BLUR_SIGMAS`] (both with the identity
//! as ground-truth homography), or turned and magnified about its centre at [`ZOOM_LEVELS`]
//! (ground truth [`Degradation::homography`]). The pair is evaluated exactly as a sequences
//! pair (same detector frames, mutual nearest neighbours, the MMA thresholds, homography
//! accuracy), so the numbers sit beside the sequences' groups.
//!
//! Why: descriptors meet compressed, defocused and zoomed photos, and the dev sequences hold
//! one of each kind at most (Oxford's `bikes` for blur and `boat` for zoom and rotation; no JPEG
//! sequence: Oxford's `ubc` is not in the dev slice), five pairs each. These pairs give every
//! dev image each change at graded levels. The JPEG and blur pairs isolate the photometric
//! change: the geometry is the identity, so every lost match is the descriptor's (or the
//! detector's) reaction to the degradation. The zoom pairs isolate scale and rotation change,
//! where the describer depends on the detector's scale and orientation (and trains for their
//! errors with frame jitter); as in `boat` and `bark`, image 1 of a zoom pair is the magnified
//! view ([`Degradation::copy_is_first`]), so errors are measured in the wider view's pixels.
//! They are development checks, not a target to tune on: the images are the dev images, and the
//! changes are synthetic (a zoomed copy is interpolated, so it holds no detail finer than the
//! reference's, unlike a real zoom lens).

use crate::error::{Error, Result};
use crate::eval::sequences::{Mat3, PairResult, SequenceSummary};
use crate::image::{decode_gray, GrayImage};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// JPEG qualities (the `image` crate's encoder, libjpeg's 1–100 scale) of the `jpeg` family,
/// mildest first.
pub const JPEG_QUALITIES: [u8; 5] = [90, 70, 50, 30, 15];

/// Gaussian blur standard deviations (px) of the `blur` family, mildest first. The kernel is
/// [`crate::image::gaussian_kernel`]'s: separable, radius
/// ⌈[`crate::image::GAUSSIAN_RADIUS_SIGMAS`]·σ⌉.
pub const BLUR_SIGMAS: [f32; 5] = [1.0, 2.0, 3.0, 4.0, 5.0];

/// (magnification, rotation in degrees) of the `zoom` family, mildest first: the copy is the
/// reference image turned by the angle and magnified by the factor about its centre, the camera
/// motion of Oxford's `boat` and `bark` sequences (zoom ×2.8 with 45°, ×4 with 60°). Each factor
/// k is at least cos θ + r sin θ for every r up to [`ZOOM_COVERED_ASPECT`] (the tight level is
/// ×1.25 10°), so the copy shows only the reference's content for images no more elongated
/// than that either way up (every dev reference image: v_wormhole's 986×653, 1.51, is the
/// most); beyond it the corners repeat the image reflected (`BORDER_REFLECT_101`).
pub const ZOOM_LEVELS: [(f64, f64); 5] = [
    (1.25, 10.0),
    (1.5, 20.0),
    (1.75, 30.0),
    (2.0, 45.0),
    (2.5, 60.0),
];

/// Longest side over shortest side up to which every [`ZOOM_LEVELS`] copy stays inside the
/// reference: min over the levels of (k − cos θ) / sin θ is 1.527 (×1.25 10°).
pub const ZOOM_COVERED_ASPECT: f64 = 1.52;

/// Name of the JPEG re-encoding family in reports.
pub const JPEG: &str = "jpeg";
/// Name of the Gaussian blur family in reports.
pub const BLUR: &str = "blur";
/// Name of the rotation-and-zoom family in reports.
pub const ZOOM: &str = "zoom";
/// The families in report order.
pub const FAMILIES: [&str; 3] = [JPEG, BLUR, ZOOM];

/// The ground truth of the JPEG and blur pairs: the degraded image is the reference image.
pub const IDENTITY: Mat3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

/// One change of the reference image: a family and its level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Degradation {
    /// Re-encoded as JPEG at this quality.
    Jpeg(u8),
    /// Blurred with a Gaussian of this σ (px).
    Blur(f32),
    /// Turned by `rotation_deg` and magnified by `factor` about the image centre.
    Zoom { factor: f64, rotation_deg: f64 },
}

impl Degradation {
    /// Every change of the suite: the JPEG family, the blur family, then the zoom family,
    /// mildest first.
    pub fn all() -> Vec<Degradation> {
        JPEG_QUALITIES
            .iter()
            .map(|&q| Degradation::Jpeg(q))
            .chain(BLUR_SIGMAS.iter().map(|&s| Degradation::Blur(s)))
            .chain(
                ZOOM_LEVELS
                    .iter()
                    .map(|&(factor, rotation_deg)| Degradation::Zoom {
                        factor,
                        rotation_deg,
                    }),
            )
            .collect()
    }

    /// The family's name in reports ([`JPEG`], [`BLUR`] or [`ZOOM`]).
    pub fn family(&self) -> &'static str {
        match self {
            Degradation::Jpeg(_) => JPEG,
            Degradation::Blur(_) => BLUR,
            Degradation::Zoom { .. } => ZOOM,
        }
    }

    /// The level: the JPEG quality, σ (px) or the zoom's magnification.
    pub fn level(&self) -> f64 {
        match *self {
            Degradation::Jpeg(q) => f64::from(q),
            Degradation::Blur(s) => f64::from(s),
            Degradation::Zoom { factor, .. } => factor,
        }
    }

    /// The level's rotation in degrees: the zoom's, `None` for the other families.
    pub fn rotation_deg(&self) -> Option<f64> {
        match *self {
            Degradation::Zoom { rotation_deg, .. } => Some(rotation_deg),
            _ => None,
        }
    }

    /// The pair's `target` in reports: the level rounded (JPEG quality, σ px), for the zoom the
    /// magnification in percent (125 … 250), so that each level has its own.
    pub fn target(&self) -> usize {
        match *self {
            Degradation::Zoom { factor, .. } => (factor * 100.0).round() as usize,
            _ => self.level().round() as usize,
        }
    }

    /// The level's name in reports and card keys ([`level_label`]).
    pub fn label(&self) -> String {
        level_label(self.level(), self.rotation_deg())
    }

    /// Whether the changed copy is image 1 of the evaluated pair (the zoom: image 1 is the
    /// magnified view, as in Oxford's `boat` and `bark`, so the MMA's pixel errors are measured
    /// in the wider view, the reference); otherwise the reference is image 1.
    pub fn copy_is_first(&self) -> bool {
        matches!(self, Degradation::Zoom { .. })
    }

    /// Ground truth of the pair as evaluated, image 1 → image 2: [`Degradation::homography`],
    /// inverted when [`Degradation::copy_is_first`] (by the benchmark's homography inverse,
    /// [`crate::eval::overlap::invert_homography`], which refuses a singular one: never one of
    /// the suite's levels).
    pub fn pair_homography(&self, width: usize, height: usize) -> Result<Mat3> {
        let h = self.homography(width, height);
        if self.copy_is_first() {
            crate::eval::overlap::invert_homography(&h)
        } else {
            Ok(h)
        }
    }

    /// The warp reference → copy for a `width`×`height` reference: the
    /// identity, or for the zoom T(c) · k·R(θ) · T(−c) about the centre
    /// c = ((width − 1)/2, (height − 1)/2) (pixel centres at integer coordinates; with y down,
    /// a positive θ turns the content clockwise on screen).
    pub fn homography(&self, width: usize, height: usize) -> Mat3 {
        match *self {
            Degradation::Zoom {
                factor,
                rotation_deg,
            } => {
                let (cx, cy) = ((width as f64 - 1.0) / 2.0, (height as f64 - 1.0) / 2.0);
                let (sin, cos) = rotation_deg.to_radians().sin_cos();
                let k = factor;
                let (a, b, c, d) = (k * cos, -k * sin, k * sin, k * cos);
                [
                    [a, b, cx - a * cx - b * cy],
                    [c, d, cy - c * cx - d * cy],
                    [0.0, 0.0, 1.0],
                ]
            }
            _ => IDENTITY,
        }
    }

    /// The changed copy of `img`; `source` names the image in errors.
    pub fn apply(&self, img: &GrayImage, source: &Path) -> Result<GrayImage> {
        match *self {
            Degradation::Jpeg(q) => jpeg_round_trip(img, q, source),
            Degradation::Blur(s) => Ok(img.gaussian_blur(s)),
            Degradation::Zoom { .. } => img
                .warp_perspective(&self.homography(img.width, img.height))
                .map_err(|e| Error::Image {
                    path: source.to_path_buf(),
                    reason: format!("rotation and zoom {}: {e}", self.label()),
                }),
        }
    }
}

/// `img` encoded as an 8-bit gray JPEG at `quality` in memory and decoded again (the gray image
/// is what every detector and describer sees, so the luma channel is the one compressed).
pub fn jpeg_round_trip(img: &GrayImage, quality: u8, source: &Path) -> Result<GrayImage> {
    use image::ImageEncoder;
    let mut bytes = Vec::new();
    let fail = |e: image::ImageError| Error::Image {
        path: source.to_path_buf(),
        reason: format!("JPEG re-encoding at quality {quality}: {e}"),
    };
    let (w, h) = (
        u32::try_from(img.width).map_err(|_| Error::InvalidInput("image too wide".into()))?,
        u32::try_from(img.height).map_err(|_| Error::InvalidInput("image too tall".into()))?,
    );
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, quality)
        .write_image(&img.to_u8(), w, h, image::ExtendedColorType::L8)
        .map_err(fail)?;
    decode_gray(&bytes, source)
}

/// A level's name in reports and card keys: `90` (JPEG quality), `2` (σ px), `1.25x10deg` (a
/// zoom's magnification and rotation), so that no two levels share one.
pub fn level_label(level: f64, rotation_deg: Option<f64>) -> String {
    match rotation_deg {
        Some(r) => format!("{level}x{r}deg"),
        None => format!("{level}"),
    }
}

/// One level of a family for one method: its pairs (one per reference image; `target` holds
/// [`Degradation::target`]) and their summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessLevel {
    /// JPEG quality, blur σ in px, or the zoom's magnification.
    pub level: f64,
    /// The zoom's rotation in degrees (absent for the other families).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation_deg: Option<f64>,
    pub summary: SequenceSummary,
    pub pairs: Vec<PairResult>,
}

/// One family (JPEG, blur or zoom) for one method: the summary over all its levels' pairs, then
/// each level, mildest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessFamily {
    pub summary: SequenceSummary,
    pub levels: Vec<RobustnessLevel>,
}

/// Groups one method's pair results (degradation, pair) into families and levels, in the
/// order of [`Degradation::all`].
pub fn group(
    results: &[(Degradation, PairResult)],
) -> std::collections::BTreeMap<String, RobustnessFamily> {
    use crate::eval::sequences::summarise;
    let mut out = std::collections::BTreeMap::new();
    for family in FAMILIES {
        let mut levels: Vec<RobustnessLevel> = Vec::new();
        for d in Degradation::all().iter().filter(|d| d.family() == family) {
            let pairs: Vec<PairResult> = results
                .iter()
                .filter(|(e, _)| e == d)
                .map(|(_, p)| p.clone())
                .collect();
            if !pairs.is_empty() {
                levels.push(RobustnessLevel {
                    level: d.level(),
                    rotation_deg: d.rotation_deg(),
                    summary: summarise(&pairs),
                    pairs,
                });
            }
        }
        if levels.is_empty() {
            continue;
        }
        let all: Vec<PairResult> = levels.iter().flat_map(|l| l.pairs.clone()).collect();
        out.insert(
            family.to_string(),
            RobustnessFamily {
                summary: summarise(&all),
                levels,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::metrics::apply_homography;

    fn texture(w: usize, h: usize) -> GrayImage {
        let data = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as f32, (i / w) as f32);
                0.5 + 0.25 * (x * 0.37).sin() * (y * 0.23).cos() + 0.2 * ((x + y) * 1.3).sin()
            })
            .collect();
        GrayImage::from_vec(w, h, data).unwrap()
    }

    fn mean_abs_diff(a: &GrayImage, b: &GrayImage) -> f64 {
        a.data
            .iter()
            .zip(&b.data)
            .map(|(x, y)| f64::from((x - y).abs()))
            .sum::<f64>()
            / a.data.len() as f64
    }

    #[test]
    fn lower_jpeg_quality_loses_more() {
        let img = texture(96, 64);
        let p = Path::new("texture");
        let errs: Vec<f64> = JPEG_QUALITIES
            .iter()
            .map(|&q| {
                let d = jpeg_round_trip(&img, q, p).unwrap();
                assert_eq!((d.width, d.height), (96, 64));
                mean_abs_diff(&img, &d)
            })
            .collect();
        assert!(errs[0] > 0.0, "{errs:?}");
        assert!(errs.windows(2).all(|w| w[0] < w[1]), "{errs:?}");
    }

    #[test]
    fn families_and_levels() {
        let all = Degradation::all();
        assert_eq!(
            all.len(),
            JPEG_QUALITIES.len() + BLUR_SIGMAS.len() + ZOOM_LEVELS.len()
        );
        assert_eq!(all[0], Degradation::Jpeg(90));
        assert_eq!(all[5].family(), BLUR);
        assert_eq!(all[9].level(), 5.0);
        assert_eq!(all[10].family(), ZOOM);
        assert_eq!((all[14].level(), all[14].rotation_deg()), (2.5, Some(60.0)));
        assert_eq!(all[9].rotation_deg(), None);
        let targets: Vec<usize> = all[10..].iter().map(|d| d.target()).collect();
        assert_eq!(targets, vec![125, 150, 175, 200, 250]);
        assert_eq!(all[0].target(), 90);
        let img = texture(64, 48);
        let b = Degradation::Blur(2.0).apply(&img, Path::new("t")).unwrap();
        assert!(mean_abs_diff(&img, &b) > 0.01);
        assert_eq!(all[3].homography(64, 48), IDENTITY);
        assert_eq!(all[3].pair_homography(64, 48).unwrap(), IDENTITY);
        assert!(!all[3].copy_is_first() && all[10].copy_is_first());
        assert_eq!(all[10].label(), "1.25x10deg");
        assert_eq!(all[13].label(), "2x45deg");
        assert_eq!(all[0].label(), "90");
        // The zoom pair runs copy → reference: the inverse similarity, ×1/k.
        let inv = all[13].pair_homography(101, 51).unwrap();
        let p = apply_homography(&inv, 50.0, 25.0).unwrap();
        assert!(
            (p.0 - 50.0).abs() < 1e-9 && (p.1 - 25.0).abs() < 1e-9,
            "the centre is fixed"
        );
        assert!((inv[0][0].hypot(inv[1][0]) - 0.5).abs() < 1e-12);
    }

    /// Each zoom level shows only the reference's content for images up to
    /// [`ZOOM_COVERED_ASPECT`] (v_wormhole's 986×653 among them): the copy's corners map inside
    /// the reference (the inverse is affine, so the corners suffice), and the bound is tight.
    #[test]
    fn zoom_levels_cover_the_canvas_up_to_the_stated_aspect() {
        let bound = ZOOM_LEVELS
            .iter()
            .map(|&(k, r)| (k - r.to_radians().cos()) / r.to_radians().sin())
            .fold(f64::INFINITY, f64::min);
        assert!(
            (ZOOM_COVERED_ASPECT..ZOOM_COVERED_ASPECT + 0.01).contains(&bound),
            "{bound}"
        );
        for (w, h) in [
            (600usize, 400usize),
            (400, 600),
            (500, 500),
            (986, 653),
            (653, 986),
        ] {
            assert!(w.max(h) as f64 / w.min(h) as f64 <= ZOOM_COVERED_ASPECT);
            for &(factor, rotation_deg) in &ZOOM_LEVELS {
                let d = Degradation::Zoom {
                    factor,
                    rotation_deg,
                };
                // The zoom pair's ground truth runs copy → reference: the warp's inverse.
                let inv = d.pair_homography(w, h).unwrap();
                for (x, y) in [(0.0, 0.0), (w as f64 - 1.0, 0.0), (0.0, h as f64 - 1.0)] {
                    for (x, y) in [(x, y), (w as f64 - 1.0 - x, h as f64 - 1.0 - y)] {
                        let (u, v) = apply_homography(&inv, x, y).unwrap();
                        assert!(
                            (-0.5..w as f64 - 0.5).contains(&u)
                                && (-0.5..h as f64 - 0.5).contains(&v),
                            "{w}x{h} x{factor} {rotation_deg}°: corner ({x}, {y}) from ({u}, {v})"
                        );
                    }
                }
            }
        }
    }

    /// The ground truth against a hand computation, and against the warped image itself: a
    /// Gaussian spot drawn at p in the reference is found (intensity centroid) at H·p in the copy.
    #[test]
    fn zoom_ground_truth_follows_the_content() {
        // 101×51: centre (50, 25). ×2 turned 90°: (60, 25) is 10 px right of the centre, turns
        // to 10 px below it (y down) and doubles to 20: (50, 45).
        let d = Degradation::Zoom {
            factor: 2.0,
            rotation_deg: 90.0,
        };
        let p = apply_homography(&d.homography(101, 51), 60.0, 25.0).unwrap();
        assert!(
            (p.0 - 50.0).abs() < 1e-9 && (p.1 - 45.0).abs() < 1e-9,
            "{p:?}"
        );

        let (w, hh) = (160usize, 120usize);
        let (sx, sy) = (91.3f64, 52.6f64);
        let spot = |x: f64, y: f64| {
            (-((x - sx).powi(2) + (y - sy).powi(2)) / (2.0 * 2.5f64.powi(2))).exp()
        };
        let data = (0..w * hh)
            .map(|i| spot((i % w) as f64, (i / w) as f64) as f32)
            .collect();
        let img = GrayImage::from_vec(w, hh, data).unwrap();
        let d = Degradation::Zoom {
            factor: 1.5,
            rotation_deg: 20.0,
        };
        let copy = d.apply(&img, Path::new("spot")).unwrap();
        assert_eq!((copy.width, copy.height), (w, hh));
        let h = d.homography(w, hh);
        let want = apply_homography(&h, sx, sy).unwrap();
        let (mut m, mut mx, mut my) = (0.0f64, 0.0f64, 0.0f64);
        for y in 0..hh {
            for x in 0..w {
                let v = f64::from(copy.get(x, y));
                m += v;
                mx += v * x as f64;
                my += v * y as f64;
            }
        }
        let got = (mx / m, my / m);
        assert!(
            (got.0 - want.0).abs() < 0.05 && (got.1 - want.1).abs() < 0.05,
            "spot at {got:?}, H·p = {want:?}"
        );
        // The spot is magnified: its mass grows with the area, ×1.5².
        let m0: f64 = img.data.iter().map(|&v| f64::from(v)).sum();
        assert!((m / m0 - 2.25).abs() < 0.02, "{}", m / m0);
    }

    #[test]
    fn grouping_keeps_levels_in_order() {
        use crate::eval::sequences::evaluate_pair;
        let pair = |ok: bool| {
            let q = if ok { (1.0, 1.0) } else { (50.0, 1.0) };
            evaluate_pair(
                "s",
                1,
                (&[(1.0, 1.0)], &[q]),
                &[(1.0, 1.0)],
                &[q],
                (&[(1.0, 1.0)], &[q]),
                &IDENTITY,
                Some(&IDENTITY),
                (100, 100),
            )
        };
        let results = vec![
            (Degradation::Blur(2.0), pair(false)),
            (Degradation::Jpeg(90), pair(true)),
            (Degradation::Blur(1.0), pair(true)),
        ];
        let g = group(&results);
        assert_eq!(g.len(), 2);
        assert_eq!(g[BLUR].levels[0].rotation_deg, None);
        let blur = &g[BLUR];
        assert_eq!(
            blur.levels.iter().map(|l| l.level).collect::<Vec<_>>(),
            vec![1.0, 2.0]
        );
        assert_eq!(blur.levels[0].summary.mma[2].1, 100.0);
        assert_eq!(blur.levels[1].summary.mma[2].1, 0.0);
        assert_eq!(blur.summary.mma[2].1, 50.0);
        assert_eq!(g[JPEG].summary.pairs, 1);
    }
}
