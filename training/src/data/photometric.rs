//! Per-view photometric augmentation at batch time: what a descriptor meets in use and real
//! tracks barely contain — JPEG compression, defocus / motion blur, sensor noise, exposure.
//!
//! Real tracks are cut from well-exposed, sharp photos; the independent evaluation showed the
//! models losing to RootSIFT exactly on JPEG and blur sequences. The synthetic generator
//! degrades whole rendered images once, when the track file is made; this module degrades
//! each view of every source (real and synthetic) afresh at every step, independently per
//! view, so the two patches of a positive pair differ in degradation as a reference image and
//! its degraded copy do in `descl bench robustness`.
//!
//! Order of the operations follows the imaging chain: optical blur, then exposure (gamma,
//! contrast, brightness), then sensor noise, then JPEG encoding. Everything is done in patch
//! pixels: a 32×32 patch covers 2·m·σ source pixels (12σ at m = 6), about one source pixel
//! per patch pixel for the fine DoG scales that dominate a keypoint set, so σ and JPEG's 8×8
//! blocks are set in patch pixels. JPEG's block grid is aligned to the image, not to the
//! keypoint: each encoded patch is padded by a random 0–7 pixels on the top and left (edges
//! replicated) so the blocks fall at a random phase, as they do around a real keypoint.
//!
//! "About one source pixel per patch pixel" holds for few keypoints: the step between patch
//! samples is 2·m·σ / 32 = 0.375·σ image pixels at m = 6, and the 2048 strongest DoG frames
//! of the dev reference images have steps of 0.34–0.39 (10th percentile), 0.58–0.65 (median)
//! and 1.6–2.1 px (90th percentile). An image's 8×8 JPEG blocks therefore cover 13 patch
//! pixels around the median keypoint and up to 24 around the finest, not 8. `jpeg_step` sets
//! that scale: each encoded view draws a step s (image pixels per patch pixel, log-uniform in
//! the range), is resampled to the 32·s image pixels it stands for and encoded there, and the
//! coding error is resampled back and added to the patch ([`jpeg_error_at_step`]). The default,
//! s = 1, is the patch-pixel encoding above, and leaves the random stream of earlier runs
//! untouched.

use anyhow::{bail, Context, Result};
use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

use super::PATCH_SIDE;

/// JPEG's block side (ITU-T T.81 §A.2: the DCT operates on 8×8 blocks).
pub const JPEG_BLOCK: usize = 8;
/// `jpeg_step` of an encoding in the patch's own pixels (8×8 blocks of patch pixels).
pub const PATCH_PIXEL_STEP: [f64; 2] = [1.0, 1.0];
/// Bounds of `jpeg_step`: a view is encoded at 8–128 pixels a side (one JPEG block to four
/// times the patch).
pub const JPEG_STEP_RANGE: [f64; 2] = [0.25, 4.0];

fn is_patch_pixel_step(step: &[f64; 2]) -> bool {
    *step == PATCH_PIXEL_STEP
}

/// Truncation of the Gaussian kernel, in σ: weights beyond 3σ are < 1.2 % of the centre's.
pub const BLUR_RADIUS_SIGMAS: f64 = 3.0;

/// Per-view photometric augmentation; each operation is applied to a view with its own
/// probability, independently of the other views of the class.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Photometric {
    /// Probability of a JPEG round trip and its quality range (uniform, inclusive).
    pub jpeg_prob: f64,
    pub jpeg_quality: [u8; 2],
    /// Image pixels per patch pixel at which a view is JPEG-encoded, log-uniform in
    /// [low, high] (module docs); [1, 1], the default, encodes the patch's own pixels.
    #[serde(skip_serializing_if = "is_patch_pixel_step")]
    pub jpeg_step: [f64; 2],
    /// Probability of a Gaussian blur and its largest σ in patch pixels (uniform in (0, max]).
    pub blur_prob: f64,
    pub max_blur_sigma: f64,
    /// Probability of an exposure change: gamma log-uniform in [1/g, g], contrast factor
    /// uniform in [1 − c, 1 + c], brightness offset uniform in ±b.
    pub exposure_prob: f64,
    pub gamma: f64,
    pub contrast: f64,
    pub brightness: f64,
    /// Probability of additive Gaussian noise and its largest σ (intensity units in [0, 1]).
    pub noise_prob: f64,
    pub max_noise: f64,
}

impl Default for Photometric {
    /// Off: every probability 0 (a run opts in per operation).
    fn default() -> Self {
        Photometric {
            jpeg_prob: 0.0,
            jpeg_quality: [15, 95],
            jpeg_step: PATCH_PIXEL_STEP,
            blur_prob: 0.0,
            max_blur_sigma: 2.5,
            exposure_prob: 0.0,
            gamma: 1.5,
            contrast: 0.3,
            brightness: 0.1,
            noise_prob: 0.0,
            max_noise: 0.03,
        }
    }
}

impl Photometric {
    /// True when no operation can fire (the random stream is then left untouched, so runs
    /// without photometric augmentation draw exactly the batches they drew before it existed).
    pub fn is_off(&self) -> bool {
        self.jpeg_prob <= 0.0
            && self.blur_prob <= 0.0
            && self.exposure_prob <= 0.0
            && self.noise_prob <= 0.0
    }

    pub fn validate(&self) -> Result<()> {
        for (what, p) in [
            ("jpeg_prob", self.jpeg_prob),
            ("blur_prob", self.blur_prob),
            ("exposure_prob", self.exposure_prob),
            ("noise_prob", self.noise_prob),
        ] {
            if !(0.0..=1.0).contains(&p) {
                bail!("augment.photometric.{what} must be in [0, 1], got {p}");
            }
        }
        let [q0, q1] = self.jpeg_quality;
        if q0 == 0 || q0 > q1 || q1 > 100 {
            bail!(
                "augment.photometric.jpeg_quality must be 1 ≤ low ≤ high ≤ 100, got [{q0}, {q1}]"
            );
        }
        let [s0, s1] = self.jpeg_step;
        let [lo, hi] = JPEG_STEP_RANGE;
        if !(s0.is_finite() && s1.is_finite() && lo <= s0 && s0 <= s1 && s1 <= hi) {
            bail!(
                "augment.photometric.jpeg_step must be {lo} ≤ low ≤ high ≤ {hi} image pixels per patch pixel, got [{s0}, {s1}]"
            );
        }
        for (what, v) in [
            ("max_blur_sigma", self.max_blur_sigma),
            ("contrast", self.contrast),
            ("brightness", self.brightness),
            ("max_noise", self.max_noise),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("augment.photometric.{what} must be ≥ 0, got {v}");
            }
        }
        if !(self.gamma.is_finite() && self.gamma >= 1.0) {
            bail!("augment.photometric.gamma must be ≥ 1, got {}", self.gamma);
        }
        if self.contrast >= 1.0 {
            bail!(
                "augment.photometric.contrast must be < 1, got {}",
                self.contrast
            );
        }
        Ok(())
    }

    /// Degrades one 32×32 patch in place (values in [0, 1]).
    pub fn apply<R: Rng>(&self, rng: &mut R, patch: &mut [f32]) -> Result<()> {
        check_patch(patch)?;
        if self.is_off() {
            return Ok(());
        }
        if self.max_blur_sigma > 0.0 && rng.gen_bool(self.blur_prob) {
            let sigma = rng.gen_range(0.0..self.max_blur_sigma).max(1e-3);
            gaussian_blur(patch, PATCH_SIDE, sigma);
        }
        if rng.gen_bool(self.exposure_prob) {
            let lg = self.gamma.ln();
            let gamma = if lg > 0.0 {
                rng.gen_range(-lg..=lg).exp()
            } else {
                1.0
            };
            let contrast = 1.0 + rng.gen_range(-self.contrast..=self.contrast);
            let brightness = rng.gen_range(-self.brightness..=self.brightness);
            for v in patch.iter_mut() {
                let g = f64::from(*v).clamp(0.0, 1.0).powf(gamma);
                *v = ((g - 0.5) * contrast + 0.5 + brightness).clamp(0.0, 1.0) as f32;
            }
        }
        if self.max_noise > 0.0 && rng.gen_bool(self.noise_prob) {
            let sigma = rng.gen_range(0.0..self.max_noise);
            if sigma > 0.0 {
                let n = Normal::new(0.0, sigma).context("noise σ")?;
                for v in patch.iter_mut() {
                    *v = (f64::from(*v) + n.sample(rng)).clamp(0.0, 1.0) as f32;
                }
            }
        }
        if rng.gen_bool(self.jpeg_prob) {
            let [q0, q1] = self.jpeg_quality;
            let quality = rng.gen_range(q0..=q1);
            let phase = (rng.gen_range(0..JPEG_BLOCK), rng.gen_range(0..JPEG_BLOCK));
            if self.jpeg_step == PATCH_PIXEL_STEP {
                jpeg_round_trip(patch, PATCH_SIDE, quality, phase)?;
            } else {
                let [s0, s1] = self.jpeg_step;
                let step = if s0 < s1 {
                    rng.gen_range(s0.ln()..=s1.ln()).exp()
                } else {
                    s0
                };
                jpeg_error_at_step(patch, quality, phase, step)?;
            }
        }
        Ok(())
    }
}

/// Refuses a buffer that is not one 32×32 patch.
fn check_patch(patch: &[f32]) -> Result<()> {
    if patch.len() != PATCH_SIDE * PATCH_SIDE {
        bail!(
            "a patch has {} pixels, not {}",
            patch.len(),
            PATCH_SIDE * PATCH_SIDE
        );
    }
    Ok(())
}

/// 1-D Gaussian weights for σ, truncated at [`BLUR_RADIUS_SIGMAS`]·σ, summing to 1.
pub fn gaussian_kernel(sigma: f64) -> Vec<f32> {
    let r = (BLUR_RADIUS_SIGMAS * sigma).ceil().max(1.0) as i64;
    let w: Vec<f64> = (-r..=r)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let s: f64 = w.iter().sum();
    w.iter().map(|v| (v / s) as f32).collect()
}

/// Separable Gaussian blur of a `side`×`side` image, borders replicated (as the patch sampler
/// replicates them).
pub fn gaussian_blur(img: &mut [f32], side: usize, sigma: f64) {
    let k = gaussian_kernel(sigma);
    let r = (k.len() / 2) as i64;
    let at = |i: i64| i.clamp(0, side as i64 - 1) as usize;
    let mut tmp = vec![0f32; img.len()];
    for y in 0..side {
        for x in 0..side {
            tmp[y * side + x] = k
                .iter()
                .enumerate()
                .map(|(j, w)| w * img[y * side + at(x as i64 + j as i64 - r)])
                .sum();
        }
    }
    for y in 0..side {
        for x in 0..side {
            img[y * side + x] = k
                .iter()
                .enumerate()
                .map(|(j, w)| w * tmp[at(y as i64 + j as i64 - r) * side + x])
                .sum();
        }
    }
}

/// JPEG-encodes a `side`×`side` gray image at `quality` with the block grid shifted by
/// `phase` = (rows, columns) pixels (edges replicated into the padding), decodes it, and
/// writes the decoded pixels back.
pub fn jpeg_round_trip(
    img: &mut [f32],
    side: usize,
    quality: u8,
    phase: (usize, usize),
) -> Result<()> {
    use ::image::ImageEncoder;
    let (py, px) = phase;
    let (w, h) = (side + px, side + py);
    let mut padded = Vec::with_capacity(w * h);
    for y in 0..h {
        for x in 0..w {
            let v = img[y.saturating_sub(py) * side + x.saturating_sub(px)];
            padded.push((v.clamp(0.0, 1.0) * 255.0).round() as u8);
        }
    }
    let mut bytes = Vec::new();
    ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, quality)
        .write_image(&padded, w as u32, h as u32, ::image::ExtendedColorType::L8)
        .context("JPEG augmentation: encoding a patch")?;
    let decoded = ::image::load_from_memory_with_format(&bytes, ::image::ImageFormat::Jpeg)
        .context("JPEG augmentation: decoding a patch")?
        .into_luma8();
    if decoded.width() as usize != w || decoded.height() as usize != h {
        bail!(
            "JPEG augmentation: decoded {}×{}, encoded {w}×{h}",
            decoded.width(),
            decoded.height()
        );
    }
    for y in 0..side {
        for x in 0..side {
            img[y * side + x] =
                f32::from(decoded.get_pixel((x + px) as u32, (y + py) as u32)[0]) / 255.0;
        }
    }
    Ok(())
}

/// JPEG coding error of a 32×32 patch whose samples are `step` image pixels apart, added to it:
/// the patch is resampled to the n = round(32·step) image pixels it covers ([`triangle_resize`]),
/// encoded there with the block grid shifted by `phase` image pixels ([`jpeg_round_trip`]), and
/// the coding error (decoded − encoded, at n×n) is resampled back to 32×32 and added to the
/// patch. Only the error travels: the patch keeps the detail it had (a resampled round trip of
/// the patch itself would blur it as well, by up to 0.15 mean absolute change at step 0.25 with
/// no coding at all), and the blocks cover 256 / n ≈ 8 / step patch pixels, as an image's blocks
/// do around a keypoint of that scale.
pub fn jpeg_error_at_step(
    patch: &mut [f32],
    quality: u8,
    phase: (usize, usize),
    step: f64,
) -> Result<()> {
    check_patch(patch)?;
    let [lo, hi] = JPEG_STEP_RANGE;
    if !(lo..=hi).contains(&step) {
        bail!("JPEG step {step} outside [{lo}, {hi}] image pixels per patch pixel");
    }
    // n ≥ 8 = one block, by JPEG_STEP_RANGE.
    let n = (PATCH_SIDE as f64 * step).round() as usize;
    let encoded: Vec<f32> = triangle_resize(patch, PATCH_SIDE, n)
        .into_iter()
        .map(|v| v.clamp(0.0, 1.0))
        .collect();
    let mut decoded = encoded.clone();
    jpeg_round_trip(&mut decoded, n, quality, phase)?;
    // jpeg_round_trip quantises to 8 bits; so does a real image, so the error includes it.
    let error: Vec<f32> = decoded.iter().zip(&encoded).map(|(d, e)| d - e).collect();
    for (p, e) in patch.iter_mut().zip(triangle_resize(&error, n, PATCH_SIDE)) {
        *p = (*p + e).clamp(0.0, 1.0);
    }
    Ok(())
}

/// Resamples a `from`×`from` image to `to`×`to` with the triangle (bilinear) filter, widened by
/// the ratio when shrinking (antialiased), pixel centres aligned, windows clipped at the border
/// and renormalised: the `image` crate's `FilterType::Triangle` resize, without its clamp to
/// [0, 1] (a coding error is signed). Tested against it on [0, 1] images.
pub fn triangle_resize(src: &[f32], from: usize, to: usize) -> Vec<f32> {
    let weights = triangle_weights(from, to);
    let mut rows = vec![0f32; from * to];
    for y in 0..from {
        for (x, (start, w)) in weights.iter().enumerate() {
            rows[y * to + x] = w
                .iter()
                .enumerate()
                .map(|(k, w)| w * src[y * from + start + k])
                .sum();
        }
    }
    let mut out = vec![0f32; to * to];
    for (y, (start, w)) in weights.iter().enumerate() {
        for x in 0..to {
            out[y * to + x] = w
                .iter()
                .enumerate()
                .map(|(k, w)| w * rows[(start + k) * to + x])
                .sum();
        }
    }
    out
}

/// Per output sample: the first source index and the normalised triangle weights from there.
fn triangle_weights(from: usize, to: usize) -> Vec<(usize, Vec<f32>)> {
    let ratio = from as f64 / to as f64;
    let scale = ratio.max(1.0);
    (0..to)
        .map(|o| {
            let centre = (o as f64 + 0.5) * ratio;
            let left = ((centre - scale).floor().max(0.0)) as usize;
            let right = ((centre + scale).ceil() as usize).min(from);
            let w: Vec<f64> = (left..right)
                .map(|i| (1.0 - ((i as f64 + 0.5 - centre) / scale).abs()).max(0.0))
                .collect();
            let sum: f64 = w.iter().sum();
            (left, w.iter().map(|v| (v / sum) as f32).collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn texture() -> Vec<f32> {
        (0..PATCH_SIDE * PATCH_SIDE)
            .map(|i| {
                let (y, x) = ((i / PATCH_SIDE) as f32, (i % PATCH_SIDE) as f32);
                0.5 + 0.4 * ((x * 0.9).sin() * (y * 0.7).cos())
            })
            .collect()
    }

    fn mean_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f32>() / a.len() as f32
    }

    #[test]
    fn kernel_is_the_sampled_gaussian() {
        // σ = 1: radius 3, weights ∝ exp(−i²/2): centre 1, ±1 0.60653, ±2 0.13534, ±3 0.011109.
        let k = gaussian_kernel(1.0);
        assert_eq!(k.len(), 7);
        let s = 1.0 + 2.0 * (0.606_530_66 + 0.135_335_28 + 0.011_108_997);
        assert!((k[3] - (1.0 / s) as f32).abs() < 1e-6);
        assert!((k[4] - (0.606_530_66 / s) as f32).abs() < 1e-6);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn blur_keeps_constants_and_smooths_more_with_sigma() {
        let mut flat = vec![0.3f32; PATCH_SIDE * PATCH_SIDE];
        gaussian_blur(&mut flat, PATCH_SIDE, 2.0);
        assert!(flat.iter().all(|v| (v - 0.3).abs() < 1e-6));
        let t = texture();
        let (mut b1, mut b3) = (t.clone(), t.clone());
        gaussian_blur(&mut b1, PATCH_SIDE, 1.0);
        gaussian_blur(&mut b3, PATCH_SIDE, 3.0);
        let d1 = mean_abs_diff(&t, &b1);
        let d3 = mean_abs_diff(&t, &b3);
        assert!(d1 > 0.01 && d3 > d1, "{d1} {d3}");
    }

    #[test]
    fn jpeg_loses_more_at_low_quality_and_keeps_the_size() {
        let t = texture();
        let (mut hi, mut lo) = (t.clone(), t.clone());
        jpeg_round_trip(&mut hi, PATCH_SIDE, 95, (0, 0)).unwrap();
        jpeg_round_trip(&mut lo, PATCH_SIDE, 10, (3, 5)).unwrap();
        let (dh, dl) = (mean_abs_diff(&t, &hi), mean_abs_diff(&t, &lo));
        assert!(dh < 0.02, "quality 95 changed the patch by {dh}");
        assert!(dl > 2.0 * dh, "quality 10: {dl}, quality 95: {dh}");
    }

    /// Mean over rows of |p[x + 1] − p[x]| for each column boundary x | x + 1.
    fn column_jumps(p: &[f32]) -> Vec<f32> {
        (0..PATCH_SIDE - 1)
            .map(|x| {
                (0..PATCH_SIDE)
                    .map(|y| (p[y * PATCH_SIDE + x + 1] - p[y * PATCH_SIDE + x]).abs())
                    .sum::<f32>()
                    / PATCH_SIDE as f32
            })
            .collect()
    }

    /// Mean |j[x] − j[x + lag]|: small when the profile repeats with period `lag`.
    fn profile_change(j: &[f32], lag: usize) -> f32 {
        (0..j.len() - lag)
            .map(|x| (j[x] - j[x + lag]).abs())
            .sum::<f32>()
            / (j.len() - lag) as f32
    }

    fn ramp() -> Vec<f32> {
        (0..PATCH_SIDE * PATCH_SIDE)
            .map(|i| 0.2 + 0.6 * ((i % PATCH_SIDE) as f32 / 31.0))
            .collect()
    }

    #[test]
    fn jpeg_blocks_cover_eight_over_step_patch_pixels() {
        // A horizontal ramp at quality 5 keeps about a DC and one cosine per block, so the
        // output's column-to-column change repeats with the block period in patch pixels: 16
        // at step 0.5 (encoded at 16×16 image pixels), 8 at step 1.
        let mut half = ramp();
        jpeg_error_at_step(&mut half, 5, (0, 0), 0.5).unwrap();
        let j = column_jumps(&half);
        let (p16, p8) = (profile_change(&j, 16), profile_change(&j, 8));
        assert!(
            p8 > 4.0 * p16,
            "step 0.5: period 16 {p16}, period 8 {p8}: {j:?}"
        );
        let mut one = ramp();
        jpeg_round_trip(&mut one, PATCH_SIDE, 5, (0, 0)).unwrap();
        let j = column_jumps(&one);
        let (p8, p4) = (profile_change(&j, 8), profile_change(&j, 4));
        assert!(p4 > 4.0 * p8, "step 1: period 8 {p8}, period 4 {p4}: {j:?}");
        // At both ends of the range: the size and the range kept, the patch changed.
        for step in JPEG_STEP_RANGE {
            let mut p = texture();
            jpeg_error_at_step(&mut p, 5, (3, 1), step).unwrap();
            assert!(p.iter().all(|v| (0.0..=1.0).contains(v)));
            let d = mean_abs_diff(&texture(), &p);
            assert!(d > 0.01, "step {step}: quality 5 changed the patch by {d}");
        }
    }

    #[test]
    fn only_the_coding_error_reaches_the_patch() {
        // Resampling the texture to 8 px and back alone changes it by > 0.1; at quality 100 the
        // coding error is the 8-bit rounding, so the patch must stay within a few levels.
        let t = texture();
        let round_trip = triangle_resize(&triangle_resize(&t, PATCH_SIDE, 8), 8, PATCH_SIDE);
        assert!(mean_abs_diff(&t, &round_trip) > 0.1);
        for step in [0.25, 0.5, 1.3, 2.0, 4.0] {
            let mut p = t.clone();
            jpeg_error_at_step(&mut p, 100, (0, 0), step).unwrap();
            let d = mean_abs_diff(&t, &p);
            assert!(d < 0.01, "step {step}, quality 100: changed by {d}");
        }
    }

    #[test]
    fn triangle_resize_is_the_image_crates_on_unit_range_images() {
        use ::image::imageops::{resize, FilterType};
        use ::image::{ImageBuffer, Luma};
        let t = texture();
        let src: ImageBuffer<Luma<f32>, Vec<f32>> =
            ImageBuffer::from_raw(32, 32, t.clone()).unwrap();
        for to in [8, 11, 16, 31, 33, 64, 128] {
            let theirs = resize(&src, to, to, FilterType::Triangle).into_raw();
            let ours = triangle_resize(&t, PATCH_SIDE, to as usize);
            let worst = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "32 → {to}: differs by {worst}");
        }
        // Signed values are not clamped (a coding error).
        let neg = vec![-0.25f32; 64];
        assert!(triangle_resize(&neg, 8, 32)
            .iter()
            .all(|v| (v + 0.25).abs() < 1e-6));
    }

    #[test]
    fn apply_encodes_at_the_configured_step() {
        // The wiring: apply's output is the encoding at the configured step for one of the 64
        // block phases, and none of the other step's.
        let cfg = |step| Photometric {
            jpeg_prob: 1.0,
            jpeg_quality: [5, 5],
            jpeg_step: step,
            ..Photometric::default()
        };
        let phases = || (0..JPEG_BLOCK).flat_map(|y| (0..JPEG_BLOCK).map(move |x| (y, x)));
        let at_half = |phase| {
            let mut p = ramp();
            jpeg_error_at_step(&mut p, 5, phase, 0.5).unwrap();
            p
        };
        let at_one = |phase| {
            let mut p = ramp();
            jpeg_round_trip(&mut p, PATCH_SIDE, 5, phase).unwrap();
            p
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..4 {
            let mut half = ramp();
            cfg([0.5, 0.5]).apply(&mut rng, &mut half).unwrap();
            assert!(phases().any(|ph| at_half(ph) == half));
            assert!(!phases().any(|ph| at_one(ph) == half));
            let mut one = ramp();
            cfg(PATCH_PIXEL_STEP).apply(&mut rng, &mut one).unwrap();
            assert!(phases().any(|ph| at_one(ph) == one));
            assert!(!phases().any(|ph| at_half(ph) == one));
        }
    }

    #[test]
    fn the_patch_pixel_step_is_left_out_of_a_config() {
        // Configs and cards written before `jpeg_step` existed serialize as they did.
        let json = serde_json::to_string(&Photometric::default()).unwrap();
        assert!(!json.contains("jpeg_step"), "{json}");
        let scaled = Photometric {
            jpeg_step: [0.33, 2.0],
            ..Photometric::default()
        };
        let json = serde_json::to_string(&scaled).unwrap();
        assert!(json.contains("\"jpeg_step\":[0.33,2.0]"), "{json}");
        let back: Photometric = serde_json::from_str(&json).unwrap();
        assert_eq!(back, scaled);
    }

    #[test]
    fn off_changes_nothing_and_on_changes_something() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let t = texture();
        let mut p = t.clone();
        Photometric::default().apply(&mut rng, &mut p).unwrap();
        assert_eq!(p, t);
        let all = Photometric {
            jpeg_prob: 1.0,
            blur_prob: 1.0,
            exposure_prob: 1.0,
            noise_prob: 1.0,
            ..Photometric::default()
        };
        all.validate().unwrap();
        all.apply(&mut rng, &mut p).unwrap();
        assert!(mean_abs_diff(&t, &p) > 0.005);
        assert!(p.iter().all(|v| (0.0..=1.0).contains(v)));
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = Photometric {
            jpeg_quality: [90, 20],
            ..Photometric::default()
        };
        assert!(bad.validate().is_err());
        let bad = Photometric {
            blur_prob: 1.5,
            ..Photometric::default()
        };
        assert!(bad.validate().is_err());
        for step in [[2.0, 1.0], [0.1, 1.0], [1.0, 8.0], [f64::NAN, 1.0]] {
            let bad = Photometric {
                jpeg_step: step,
                ..Photometric::default()
            };
            assert!(bad.validate().is_err(), "{step:?} accepted");
        }
        let mut p = texture();
        assert!(jpeg_error_at_step(&mut p, 50, (0, 0), 9.0).is_err());
        assert!(jpeg_error_at_step(&mut p[..100], 50, (0, 0), 1.0).is_err());
    }
}
