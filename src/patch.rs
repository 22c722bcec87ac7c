//! Frame → 32×32 patch: bilinear sampling from a level of the image's Gaussian pyramid, rayon
//! over frames.
//!
//! Level choice: l = ⌊log2 step⌋, the step being the distance between patch samples in level-0
//! pixels, so at level l the step lies in [1, 2) px (below 1 px at level 0 for small frames):
//! kornia's `extract_patches_from_pyramid` (`pyr_idx = (2·scale/PS).log2().long()`), which
//! HardNet's image-matching pipeline uses. A coarser choice (step ≤ 1 px at the level, less
//! aliasing for large frames) was measured with the default model and made no difference beyond
//! ±0.2 MMA@3 on any dev group, blur or JPEG included (docs/BENCHMARKS.md, "Patch sampling
//! level"): with 2048 DoG frames at m = 6 the step 0.375σ exceeds 1 px only for σ > 2.67, a
//! minority of frames.
//!
//! Patch grid: patch pixel (row i, column j), i, j ∈ 0..32, sits at patch coordinates
//! `u = (2j+1)/32 − 1`, `v = (2i+1)/32 − 1` (pixel centres of a 32×32 grid tiling [−1, 1]²), and
//! samples the image at `(x, y) + a·(u, v)` (the frame convention of ARCHITECTURE.md
//! "Conventions", OpenCV pixel centres at integer coordinates). Borders are replicated: points outside the image take the value of the
//! nearest edge pixel (as OpenCV's BORDER_REPLICATE).

use crate::frame::Frame;
use crate::image::GrayImage;
use ndarray::Array3;
use rayon::prelude::*;

/// Side of a patch in pixels.
pub const PATCH_SIZE: usize = 32;

/// Samples patches from one image; the pyramid is built once in [`PatchSampler::new`].
#[derive(Debug, Clone)]
pub struct PatchSampler {
    levels: Vec<GrayImage>,
}

/// Largest singular value of a 2×2 matrix: the frame's longest semi-axis in pixels.
fn max_singular_value(a: &[[f32; 2]; 2]) -> f32 {
    let s = 0.5 * (a[0][0].powi(2) + a[0][1].powi(2) + a[1][0].powi(2) + a[1][1].powi(2));
    let det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
    (s + (s * s - det * det).max(0.0).sqrt()).sqrt()
}

impl PatchSampler {
    /// Builds the Gaussian pyramid of `img` (see [`GrayImage::pyramid`]).
    pub fn new(img: &GrayImage) -> Self {
        PatchSampler {
            levels: img.pyramid(),
        }
    }

    /// Number of pyramid levels.
    pub fn num_levels(&self) -> usize {
        self.levels.len()
    }

    /// The pyramid level used for `frame`: l = ⌊log2 step⌋ clamped to the pyramid, the step
    /// being the longest semi-axis · 2/32 px at level 0 (along the frame's most stretched
    /// direction); the coarsest level whose pixels are no larger than the step, so the step is
    /// in [1, 2) px of level l (< 1 px when l = 0).
    pub fn level_for(&self, frame: &Frame) -> usize {
        let step = max_singular_value(&frame.a) * 2.0 / PATCH_SIZE as f32;
        if !(step > 1.0 && step.is_finite()) {
            return 0;
        }
        (step.log2().floor() as usize).min(self.levels.len() - 1)
    }

    /// N×32×32 patches in [0, 1], one per frame, in frame order. A frame with a non-finite
    /// value gives an all-zero patch.
    pub fn sample(&self, frames: &[Frame]) -> Array3<f32> {
        const P2: usize = PATCH_SIZE * PATCH_SIZE;
        let mut buf = vec![0.0f32; frames.len() * P2];
        buf.par_chunks_mut(P2)
            .zip(frames.par_iter())
            .for_each(|(out, f)| self.sample_into(f, out));
        // The buffer has exactly N·32·32 elements, so the shape always fits.
        Array3::from_shape_vec((frames.len(), PATCH_SIZE, PATCH_SIZE), buf)
            .unwrap_or_else(|_| Array3::zeros((frames.len(), PATCH_SIZE, PATCH_SIZE)))
    }

    fn sample_into(&self, f: &Frame, out: &mut [f32]) {
        let finite =
            f.x.is_finite() && f.y.is_finite() && f.a.iter().flatten().all(|v| v.is_finite());
        if !finite {
            return;
        }
        let l = self.level_for(f);
        let img = &self.levels[l];
        let k = 1.0 / (1u32 << l) as f32;
        let (cx, cy) = (f.x * k, f.y * k);
        let a = [
            [f.a[0][0] * k, f.a[0][1] * k],
            [f.a[1][0] * k, f.a[1][1] * k],
        ];
        let n = PATCH_SIZE as f32;
        for i in 0..PATCH_SIZE {
            let v = (2 * i + 1) as f32 / n - 1.0;
            for j in 0..PATCH_SIZE {
                let u = (2 * j + 1) as f32 / n - 1.0;
                let x = cx + a[0][0] * u + a[0][1] * v;
                let y = cy + a[1][0] * u + a[1][1] * v;
                out[i * PATCH_SIZE + j] = img.bilinear(x, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singular_value_hand_cases() {
        assert!((max_singular_value(&[[3.0, 0.0], [0.0, -2.0]]) - 3.0).abs() < 1e-5);
        let (s, c) = 0.7f32.sin_cos();
        assert!((max_singular_value(&[[5.0 * c, -s], [5.0 * s, c]]) - 5.0).abs() < 1e-4);
    }

    #[test]
    fn level_selection_keeps_step_at_most_one_pixel() {
        let img = GrayImage::filled(512, 512, 0.5);
        let s = PatchSampler::new(&img);
        let f = |r: f32| Frame {
            x: 100.0,
            y: 100.0,
            a: [[r, 0.0], [0.0, r]],
        };
        assert_eq!(s.level_for(&f(16.0)), 0); // step 1
        assert_eq!(s.level_for(&f(31.9)), 0); // step < 2
        assert_eq!(s.level_for(&f(32.0)), 1); // step 2 → 1 px at level 1
        assert_eq!(s.level_for(&f(200.0)), 3); // step 12.5 → 1.56 px at level 3
        assert_eq!(s.level_for(&f(1e9)), s.num_levels() - 1);
    }

    #[test]
    fn patch_grid_hand_case() {
        // image value = x coordinate / 100: the patch must reproduce x = cx + r·u exactly.
        let w = 128;
        let data = (0..w * w).map(|i| (i % w) as f32 / 100.0).collect();
        let img = GrayImage::from_vec(w, w, data).unwrap();
        let s = PatchSampler::new(&img);
        let f = Frame {
            x: 60.0,
            y: 50.0,
            a: [[16.0, 0.0], [0.0, 16.0]],
        };
        let p = s.sample(&[f]);
        for j in 0..PATCH_SIZE {
            let u = (2 * j + 1) as f32 / 32.0 - 1.0;
            assert!((p[[0, 5, j]] - (60.0 + 16.0 * u) / 100.0).abs() < 1e-5);
        }
        // empty input, non-finite frame
        assert_eq!(s.sample(&[]).dim(), (0, 32, 32));
        let bad = Frame { x: f32::NAN, ..f };
        assert!(s.sample(&[bad]).iter().all(|&v| v == 0.0));
    }
}
