//! Robustness sequences made from the dev images themselves (issue 23 item 3): each dev
//! homography sequence's reference image (HPatches sequences and Oxford Affine, the images of
//! `descl bench sequences`) against a degraded copy of itself — re-encoded as JPEG at
//! [`JPEG_QUALITIES`] and blurred with a Gaussian of σ in [`BLUR_SIGMAS`] — with the identity
//! as ground-truth homography. The pair is evaluated exactly as a sequences pair (same
//! detector frames, mutual nearest neighbours, the MMA thresholds, homography accuracy), so
//! the numbers sit beside the sequences' groups.
//!
//! Why: descriptors meet compressed and defocused photos, and the dev sequences hold almost
//! none (one JPEG and one blur sequence in the full Oxford set; neither in the dev slice).
//! These pairs isolate the photometric change: the geometry is the identity, so every lost
//! match is the descriptor's (or the detector's) reaction to the degradation. They are
//! development checks, not a target to tune on: the images are the dev images, and the
//! degradations are synthetic.

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

/// Name of the JPEG re-encoding family in reports.
pub const JPEG: &str = "jpeg";
/// Name of the Gaussian blur family in reports.
pub const BLUR: &str = "blur";

/// The ground truth of every robustness pair: the degraded image is the reference image.
pub const IDENTITY: Mat3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

/// One degradation: a family and its level (JPEG quality, or σ in px).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Degradation {
    /// Re-encoded as JPEG at this quality.
    Jpeg(u8),
    /// Blurred with a Gaussian of this σ (px).
    Blur(f32),
}

impl Degradation {
    /// Every degradation of the suite: the JPEG family, then the blur family, mildest first.
    pub fn all() -> Vec<Degradation> {
        JPEG_QUALITIES
            .iter()
            .map(|&q| Degradation::Jpeg(q))
            .chain(BLUR_SIGMAS.iter().map(|&s| Degradation::Blur(s)))
            .collect()
    }

    /// The family's name in reports ([`JPEG`] or [`BLUR`]).
    pub fn family(&self) -> &'static str {
        match self {
            Degradation::Jpeg(_) => JPEG,
            Degradation::Blur(_) => BLUR,
        }
    }

    /// The level: the JPEG quality or σ (px).
    pub fn level(&self) -> f64 {
        match *self {
            Degradation::Jpeg(q) => f64::from(q),
            Degradation::Blur(s) => f64::from(s),
        }
    }

    /// The degraded copy of `img`; `source` names the image in errors.
    pub fn apply(&self, img: &GrayImage, source: &Path) -> Result<GrayImage> {
        match *self {
            Degradation::Jpeg(q) => jpeg_round_trip(img, q, source),
            Degradation::Blur(s) => Ok(img.gaussian_blur(s)),
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

/// One level of a family for one method: its pairs (one per reference image; `target` holds
/// the level rounded to an integer) and their summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessLevel {
    /// JPEG quality, or blur σ in px.
    pub level: f64,
    pub summary: SequenceSummary,
    pub pairs: Vec<PairResult>,
}

/// One family (JPEG or blur) for one method: the summary over all its levels' pairs, then
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
    for family in [JPEG, BLUR] {
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
        assert_eq!(all.len(), JPEG_QUALITIES.len() + BLUR_SIGMAS.len());
        assert_eq!(all[0], Degradation::Jpeg(90));
        assert_eq!(all[5].family(), BLUR);
        assert_eq!(all[9].level(), 5.0);
        let img = texture(64, 48);
        let b = Degradation::Blur(2.0).apply(&img, Path::new("t")).unwrap();
        assert!(mean_abs_diff(&img, &b) > 0.01);
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
