//! SDGMNet (Ma & Deng, `sdgmnet.txt`): statistic-based dynamic gradient modulation of the
//! HardNet triplet loss on angular distances. Each triplet's positive and negative angles get
//! weights w± = w_s±(θ±)·w_c(θʳ): auto-focus modulation (eqs. 9–10) times a probabilistic margin
//! (eq. 11); powers are normalised by their moving expectations with attenuation α (eqs. 12–13);
//! all statistics follow the update of eq. 14; training back-propagates the pseudo loss of
//! eq. 15, whose gradient is eq. 13.

use super::cdf::normal_cdf;
use super::mining::{anchor_positive, to_vec, Metric, Negatives};
use super::Loss;
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use tch::{Kind, Tensor};

/// Probabilistic hard margin m of eq. 11 (§III-E: "m = 0.6").
pub const PROB_MARGIN: f64 = 0.6;
/// Probabilistic hard margin of the fine-tuning stage (§III-E: "m = 0.1").
pub const FINE_TUNE_PROB_MARGIN: f64 = 0.1;
/// Attenuation coefficient α of eq. 13 (§III-E: "α = 0.9").
pub const ATTENUATION: f64 = 0.9;
/// Retention of the statistics update β_t = 0.999 β_{t−1} + 0.001 μ_t (eq. 14).
pub const STAT_RETENTION: f64 = 0.999;
/// Initial E[P⁺] and E[P⁻] (§III-E: "We set them to 10000").
pub const INITIAL_POWER: f64 = 10_000.0;
/// Share of training with all weights 1 (§III-E: "warmed up with w = 1 in the first 10 %").
pub const WARMUP: f64 = 0.1;
/// Anti-noise threshold of hard-negative mining, in radians (§III-E: "set to 0.6").
pub const ANTI_NOISE_ANGLE: f64 = 0.6;
/// Lower bound of the blur radius added to the standard deviation in eqs. 9–10 (π/6).
pub const BLUR_FLOOR: f64 = PI / 6.0;

/// The statistics vector β of eq. 14.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statistics {
    pub mean_pos: f64,
    pub std_pos: f64,
    pub mean_neg: f64,
    pub std_neg: f64,
    pub mean_rel: f64,
    pub std_rel: f64,
    pub power_pos: f64,
    pub power_neg: f64,
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    // Unbiased, as torch.std in the authors' code.
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// β_t = 0.999 β_{t−1} + 0.001 μ_t (eq. 14).
pub fn update(old: f64, batch: f64) -> f64 {
    STAT_RETENTION * old + (1.0 - STAT_RETENTION) * batch
}

/// Auto-focus modulation w_s(θ) = exp(−(θ − E)² / (2 (π/6 + Std)²)) (eqs. 9–10).
pub fn auto_focus(theta: &Tensor, mean: f64, std: f64) -> Tensor {
    let r = BLUR_FLOOR + std;
    ((theta - mean).square() / (-2.0 * r * r)).exp()
}

/// Coupled weight w_c (eq. 11), the relative-angle distribution approximated by a normal
/// N(E[θʳ], Std[θʳ]²): CDF(θʳ) where θʳ > iCDF(m), else 0 (equivalently CDF(θʳ) > m).
/// With `soft = false` (fine-tuning: soft CDF part off) the kept triplets get weight 1.
pub fn coupled_weight(rel: &Tensor, mean: f64, std: f64, margin: f64, soft: bool) -> Tensor {
    let cdf = normal_cdf(&((rel - mean) / std.max(f64::EPSILON)));
    let keep = cdf.gt(margin).to_kind(Kind::Float);
    if soft {
        cdf * keep
    } else {
        keep
    }
}

/// The SDGMNet pseudo loss.
pub struct SdgmLoss {
    margin: f64,
    fine_tune: bool,
    stats: Option<Statistics>,
    last: Vec<(&'static str, f64)>,
}

impl SdgmLoss {
    /// Full training (m = 0.6, soft CDF) or, with `fine_tune`, the fine-tuning stage (m = 0.1,
    /// soft CDF part off).
    pub fn new(fine_tune: bool) -> SdgmLoss {
        let margin = if fine_tune {
            FINE_TUNE_PROB_MARGIN
        } else {
            PROB_MARGIN
        };
        SdgmLoss {
            margin,
            fine_tune,
            stats: None,
            last: Vec::new(),
        }
    }

    pub fn statistics(&self) -> Option<&Statistics> {
        self.stats.as_ref()
    }

    /// HardNet triplets on angles with the anti-noise threshold: (θ⁺, θ⁻), differentiable.
    pub fn triplet_angles(descriptors: &Tensor) -> (Tensor, Tensor) {
        let (a, p) = anchor_positive(descriptors);
        let dist = Metric::Angular.pairwise(&a, &p);
        let neg = Negatives::mine(&dist, ANTI_NOISE_ANGLE);
        (dist.diagonal(0, 0, 1), neg.gather(&dist))
    }

    /// Alg. 1 without the backward pass: statistics update, weights, powers; returns the
    /// detached (α w⁺ / E[P⁺], w⁻ / E[P⁻]) multiplying θ⁺ and θ⁻ in eq. 15.
    pub fn coefficients(&mut self, pos: &Tensor, neg: &Tensor, progress: f64) -> (Tensor, Tensor) {
        let (pos, neg) = (pos.detach(), neg.detach());
        let rel = &pos - &neg;
        let (mp, sp) = mean_std(&to_vec(&pos));
        let (mn, sn) = mean_std(&to_vec(&neg));
        let (mr, sr) = mean_std(&to_vec(&rel));
        // The first batch initialises the angle statistics (β_0); the powers start at 10000.
        let mut s = match self.stats.take() {
            None => Statistics {
                mean_pos: mp,
                std_pos: sp,
                mean_neg: mn,
                std_neg: sn,
                mean_rel: mr,
                std_rel: sr,
                power_pos: INITIAL_POWER,
                power_neg: INITIAL_POWER,
            },
            Some(o) => Statistics {
                mean_pos: update(o.mean_pos, mp),
                std_pos: update(o.std_pos, sp),
                mean_neg: update(o.mean_neg, mn),
                std_neg: update(o.std_neg, sn),
                mean_rel: update(o.mean_rel, mr),
                std_rel: update(o.std_rel, sr),
                ..o
            },
        };
        let (w_pos, w_neg) = if progress < WARMUP {
            (pos.ones_like(), neg.ones_like())
        } else {
            let wc = coupled_weight(&rel, s.mean_rel, s.std_rel, self.margin, !self.fine_tune);
            (
                auto_focus(&pos, s.mean_pos, s.std_pos) * &wc,
                auto_focus(&neg, s.mean_neg, s.std_neg) * &wc,
            )
        };
        // Powers (eq. 12) and their expectations (eq. 14), then eq. 13's normalisation.
        let p_pos = to_vec(&w_pos.sum(Kind::Double))[0];
        let p_neg = to_vec(&w_neg.sum(Kind::Double))[0];
        s.power_pos = update(s.power_pos, p_pos);
        s.power_neg = update(s.power_neg, p_neg);
        let c_pos = w_pos * (ATTENUATION / s.power_pos);
        let c_neg = w_neg * (1.0 / s.power_neg);
        self.last = vec![
            ("theta_pos", mp),
            ("theta_neg", mn),
            ("theta_rel", mr),
            ("power_pos", p_pos),
            ("power_neg", p_neg),
            ("expected_power_pos", s.power_pos),
            ("expected_power_neg", s.power_neg),
        ];
        self.stats = Some(s);
        (c_pos, c_neg)
    }
}

impl Loss for SdgmLoss {
    fn name(&self) -> &'static str {
        if self.fine_tune {
            "sdgm-finetune"
        } else {
            "sdgm"
        }
    }

    /// Eq. 15: L_P = α/E[P⁺] Σ w⁺ θ⁺ − 1/E[P⁻] Σ w⁻ θ⁻, coefficients detached.
    fn forward(&mut self, descriptors: &Tensor, progress: f64) -> Tensor {
        let (pos, neg) = SdgmLoss::triplet_angles(descriptors);
        let (c_pos, c_neg) = self.coefficients(&pos, &neg, progress);
        (c_pos * &pos).sum(Kind::Float) - (c_neg * &neg).sum(Kind::Float)
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        self.last.clone()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or(serde_json::Value::Null)
    }

    fn restore(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        self.stats = serde_json::from_value(state.clone())
            .map_err(|e| anyhow::anyhow!("{}: bad loss state: {e}", self.name()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 classes × 2 views of unit vectors in 3-D, fixed and far from degenerate.
    fn batch() -> Vec<f32> {
        let raw: [[f32; 3]; 6] = [
            [1.0, 0.2, 0.1],
            [0.8, 0.5, -0.1],
            [-0.3, 1.0, 0.4],
            [0.1, 0.9, 0.9],
            [0.2, -0.4, 1.0],
            [-0.5, -0.2, 0.8],
        ];
        raw.iter()
            .flat_map(|v| {
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.map(|x| x / n)
            })
            .collect()
    }

    fn dot(u: &[f32], v: &[f32]) -> f64 {
        u.iter().zip(v).map(|(a, b)| (a * b) as f64).sum()
    }

    #[test]
    fn statistics_update_is_eq_14() {
        assert!((update(2.0, 1.0) - (0.999 * 2.0 + 0.001)).abs() < 1e-15);
        let mut loss = SdgmLoss::new(false);
        let x = Tensor::from_slice(&batch()).view([3, 2, 3]);
        let _ = loss.forward(&x, 0.0);
        let s1 = loss.statistics().unwrap().clone();
        // Warm-up: w = 1, P± = N = 3, E[P±] = 0.999·10000 + 0.001·3.
        assert!((s1.power_pos - (0.999 * INITIAL_POWER + 0.003)).abs() < 1e-9);
        let _ = loss.forward(&x, 0.0);
        let s2 = loss.statistics().unwrap();
        // Same batch again: the angle statistics are fixed points of eq. 14.
        assert!(
            (s2.mean_pos - s1.mean_pos).abs() < 1e-12 && (s2.std_rel - s1.std_rel).abs() < 1e-12
        );
        assert!((s2.power_neg - update(s1.power_neg, 3.0)).abs() < 1e-9);
    }

    #[test]
    fn weights_match_eqs_9_to_11_by_hand() {
        let theta = Tensor::from_slice(&[0.5f64, 1.0]);
        // w_s = exp(−(θ − 0.8)² / (2 (π/6 + 0.1)²)).
        let r = PI / 6.0 + 0.1;
        let got = to_vec(&auto_focus(&theta, 0.8, 0.1));
        for (g, t) in got.iter().zip([0.5, 1.0]) {
            assert!((g - (-(t - 0.8f64).powi(2) / (2.0 * r * r)).exp()).abs() < 1e-12);
        }
        // w_c with E = −0.3, Std = 0.2: z = (θʳ + 0.3)/0.2. θʳ = −0.3 → Φ = 0.5 ≤ 0.6 → 0;
        // θʳ = −0.1 → Φ(1) = 0.8413 > 0.6 → 0.8413; θʳ = −0.5 → Φ(−1) → 0.
        let rel = Tensor::from_slice(&[-0.3f64, -0.1, -0.5]);
        let got = to_vec(&coupled_weight(&rel, -0.3, 0.2, PROB_MARGIN, true));
        for (g, w) in got.iter().zip([0.0, 0.841_344_746, 0.0]) {
            assert!((g - w).abs() < 1e-8, "{got:?}");
        }
        // Fine-tuning (m = 0.1, hard only): Φ(0) = 0.5 > 0.1 → 1; Φ(−1) = 0.159 > 0.1 → 1.
        let got = to_vec(&coupled_weight(
            &rel,
            -0.3,
            0.2,
            FINE_TUNE_PROB_MARGIN,
            false,
        ));
        assert_eq!(got, vec![1.0, 1.0, 1.0]);
        // The threshold is iCDF(m) = E + Std·Φ⁻¹(m): Φ⁻¹(0.6) = 0.253347, so just above and below.
        let icdf = -0.3 + 0.2 * 0.253_347_103;
        let rel = Tensor::from_slice(&[icdf - 1e-6, icdf + 1e-6]);
        let got = to_vec(&coupled_weight(&rel, -0.3, 0.2, PROB_MARGIN, true));
        assert!(got[0] == 0.0 && (got[1] - 0.6).abs() < 1e-5, "{got:?}");
    }

    #[test]
    fn pseudo_loss_gradient_equals_eq_13() {
        let data = batch();
        let x = Tensor::from_slice(&data)
            .view([3, 2, 3])
            .set_requires_grad(true);
        let mut loss = SdgmLoss::new(false);
        // Second call after warm-up so that the modulations are active.
        let _ = loss.forward(&x.detach(), 0.0);
        let (pos, neg) = SdgmLoss::triplet_angles(&x);
        let (c_pos, c_neg) = loss.coefficients(&pos, &neg, 0.5);
        let l = (&c_pos * &pos).sum(Kind::Float) - (&c_neg * &neg).sum(Kind::Float);
        l.backward();
        let grad = to_vec(&x.grad());
        let (c_pos, c_neg) = (to_vec(&c_pos), to_vec(&c_neg));
        assert!(
            c_pos.iter().chain(&c_neg).any(|c| *c > 0.0),
            "weights all zero: test is vacuous"
        );

        // Eq. 13 by hand: ∂L/∂x = Σ_i c⁺_i ∂θ⁺_i/∂x − c⁻_i ∂θ⁻_i/∂x, with
        // ∂ arccos(uᵀv)/∂u = −v / sqrt(1 − (uᵀv)²). Negatives re-mined by hand on angles.
        let row = |c: usize, v: usize| &data[(c * 2 + v) * 3..(c * 2 + v) * 3 + 3];
        let ang = |u: &[f32], v: &[f32]| dot(u, v).clamp(-1.0, 1.0).acos();
        let mut want = vec![0.0f64; 18];
        let mut add = |c: usize, v: usize, other: &[f32], coef: f64, s: f64| {
            for (k, o) in other.iter().enumerate() {
                want[(c * 2 + v) * 3 + k] += coef * -(*o as f64) / (1.0 - s * s).sqrt();
            }
        };
        for i in 0..3 {
            let (a, p) = (row(i, 0), row(i, 1));
            let s = dot(a, p);
            add(i, 0, p, c_pos[i], s);
            add(i, 1, a, c_pos[i], s);
            // Hardest negative: min over j ≠ i of θ(a_i, p_j) (row) and θ(a_j, p_i) (column),
            // skipping angles below the anti-noise threshold.
            let mut best: Option<(f64, usize, bool)> = None;
            for j in (0..3).filter(|&j| j != i) {
                for (t, in_row) in [(ang(a, row(j, 1)), true), (ang(row(j, 0), p), false)] {
                    if t >= ANTI_NOISE_ANGLE && best.is_none_or(|b| t < b.0) {
                        best = Some((t, j, in_row));
                    }
                }
            }
            let (_, j, in_row) = best.unwrap();
            let (u, uc, v, vc) = if in_row {
                (a, (i, 0), row(j, 1), (j, 1))
            } else {
                (row(j, 0), (j, 0), p, (i, 1))
            };
            let s = dot(u, v);
            add(uc.0, uc.1, v, -c_neg[i], s);
            add(vc.0, vc.1, u, -c_neg[i], s);
        }
        for (g, w) in grad.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "autograd {grad:?}\nby hand {want:?}");
        }
    }

    #[test]
    fn loss_value_is_eq_15() {
        let x = Tensor::from_slice(&batch()).view([3, 2, 3]);
        let mut loss = SdgmLoss::new(false);
        let l = to_vec(&loss.forward(&x, 0.0))[0];
        // Warm-up: w = 1 → L = α/E[P⁺] Σθ⁺ − 1/E[P⁻] Σθ⁻ with E[P±] = 0.999·10⁴ + 0.003.
        let (pos, neg) = SdgmLoss::triplet_angles(&x);
        let e = 0.999 * INITIAL_POWER + 0.003;
        let want = ATTENUATION / e * to_vec(&pos).iter().sum::<f64>()
            - to_vec(&neg).iter().sum::<f64>() / e;
        assert!((l - want).abs() < 1e-9, "{l} vs {want}");
    }
}
