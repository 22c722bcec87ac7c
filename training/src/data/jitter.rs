//! Frame jitter: a patch cut at a slightly wrong frame, as a detector places one under zoom,
//! rotation and noise. HPatches' "easy/hard" patches were made the same way (Balntas et al.
//! 2017: rotation, anisotropic scale and shift of each detected frame); descl perturbs the
//! rotation, the isotropic scale and the centre, each with a zero-mean Gaussian.
//!
//! Used by the synthetic generator (every view's frame) and by the real-track cutter
//! ([`super::colmap`], opt-in): real tracks carry the detector's own noise between photos,
//! the jitter widens it towards what a zoomed and turned image pair gives.

use anyhow::{Context, Result};
use descl::frame::Frame;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

/// Standard deviations of the perturbation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameJitter {
    /// σ of the rotation, degrees.
    pub rotation_deg: f64,
    /// σ of the log-scale (0.11 puts 95 % of the scales within ±25 %).
    pub scale: f64,
    /// σ of the shift of the centre, as a fraction of the frame's radius (its `scale()`,
    /// m·σ for a DoG frame: 0.02 at m = 6 is 0.12σ, a few tenths of a pixel at fine scales).
    pub shift: f64,
}

impl FrameJitter {
    /// The frame rotated by R(θ) and scaled by s in patch space (a' = s·a·R(θ)), its centre
    /// shifted: θ ~ N(0, rotation_deg), ln s ~ N(0, scale), shift ~ N(0, shift·radius) per axis.
    pub fn apply<R: Rng>(&self, rng: &mut R, f: &Frame) -> Result<Frame> {
        let n = Normal::new(0.0, 1.0).context("normal")?;
        let (sin, cos) = (self.rotation_deg.to_radians() * n.sample(rng)).sin_cos();
        let s = (self.scale * n.sample(rng)).exp();
        let a = f.a.map(|r| r.map(f64::from));
        let rotated = [
            [
                a[0][0] * cos + a[0][1] * sin,
                -a[0][0] * sin + a[0][1] * cos,
            ],
            [
                a[1][0] * cos + a[1][1] * sin,
                -a[1][0] * sin + a[1][1] * cos,
            ],
        ];
        let radius = f64::from(f.scale());
        Ok(Frame {
            x: (f64::from(f.x) + self.shift * radius * n.sample(rng)) as f32,
            y: (f64::from(f.y) + self.shift * radius * n.sample(rng)) as f32,
            a: rotated.map(|r| r.map(|v| (v * s) as f32)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zero_jitter_is_the_identity_and_rotation_keeps_the_scale() {
        let f = Frame {
            x: 10.0,
            y: 20.0,
            a: [[6.0, 0.0], [0.0, 6.0]],
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let none = FrameJitter {
            rotation_deg: 0.0,
            scale: 0.0,
            shift: 0.0,
        };
        assert_eq!(none.apply(&mut rng, &f).unwrap(), f);
        let turn = FrameJitter {
            rotation_deg: 15.0,
            scale: 0.0,
            shift: 0.0,
        };
        let g = turn.apply(&mut rng, &f).unwrap();
        assert!((g.scale() - 6.0).abs() < 1e-4);
        assert_eq!((g.x, g.y), (10.0, 20.0));
        // a·R(θ): first column (6cos θ, 6 sin θ)... for a = 6·I it is 6·R(θ).
        assert!((g.a[0][0] - g.a[1][1]).abs() < 1e-5 && (g.a[0][1] + g.a[1][0]).abs() < 1e-5);
    }

    #[test]
    fn spread_follows_the_sigmas() {
        let f = Frame {
            x: 0.0,
            y: 0.0,
            a: [[10.0, 0.0], [0.0, 10.0]],
        };
        let j = FrameJitter {
            rotation_deg: 0.0,
            scale: 0.11,
            shift: 0.02,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let n = 4000;
        let (mut ls2, mut x2) = (0.0, 0.0);
        for _ in 0..n {
            let g = j.apply(&mut rng, &f).unwrap();
            ls2 += f64::from(g.scale() / 10.0).ln().powi(2);
            x2 += f64::from(g.x).powi(2);
        }
        let (sd_ls, sd_x) = ((ls2 / n as f64).sqrt(), (x2 / n as f64).sqrt());
        assert!((sd_ls - 0.11).abs() < 0.01, "{sd_ls}");
        assert!((sd_x - 0.2).abs() < 0.02, "{sd_x}"); // 0.02 · radius 10
    }
}
