//! CDF-based dynamic soft margin (Zhang & Rusinkiewicz, CVPR 2019,
//! `cdf-dynamic-soft-margin.txt`): the hard triplet margin is replaced by weights equal to the
//! empirical CDF of each triplet's hardness, kept as an exponentially decaying histogram.
//!
//! Float descriptors: unit vectors, Euclidean distance (eq. 1). Binary descriptors (§3.2): the
//! network ends in tanh; negatives are mined on the signs (the batch "as if tested") and the
//! loss uses the differentiable Hamming distance (k − xᵀy)/2 of the tanh outputs (eq. 3).

use super::mining::{anchor_positive, to_vec, Metric, Negatives, HARDNET_MIN_NEGATIVE_L2};
use super::Loss;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// Weight of each new batch in the moving histogram (§4.2: "a weight of 0.1 on each new batch").
pub const NEW_BATCH_WEIGHT: f64 = 0.1;
/// Bins of the histogram (the authors' reference implementation; not stated in the paper).
pub const HISTOGRAM_BINS: usize = 512;
/// Largest distance between unit vectors (eq. 1 with xᵀy = −1).
pub const MAX_UNIT_L2: f64 = 2.0;
/// Anti-duplicate threshold for mining binary descriptors, in bits (reference implementation).
pub const BINARY_MIN_NEGATIVE_BITS: f64 = 2.0;

/// Which variable the moving PDF is built from (Table 4 of the paper).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CdfVariant {
    /// Histogram of d_pos − d_neg: the paper's method (eqs. 4–5).
    Difference,
    /// Histogram of d_pos ("hard positive mining", Table 4).
    Positive,
    /// Running mean and variance of d_pos − d_neg, weights from the analytic Gaussian CDF
    /// (Table 4, "Gaussian").
    Gaussian,
}

impl CdfVariant {
    pub fn parse(s: &str) -> Option<CdfVariant> {
        match s {
            "difference" | "dpos-dneg" => Some(CdfVariant::Difference),
            "positive" | "dpos" => Some(CdfVariant::Positive),
            "gaussian" => Some(CdfVariant::Gaussian),
            _ => None,
        }
    }
}

/// An exponentially decaying histogram on [lo, hi] with linear allocation of every value into
/// its two neighbouring bins (§4.2). Bin i is centred at lo + i·(hi − lo)/(bins − 1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MovingHistogram {
    lo: f64,
    hi: f64,
    mass: Vec<f64>,
    initialised: bool,
}

impl MovingHistogram {
    pub fn new(lo: f64, hi: f64, bins: usize) -> MovingHistogram {
        MovingHistogram {
            lo,
            hi,
            mass: vec![0.0; bins.max(2)],
            initialised: false,
        }
    }

    /// The normalised bin masses (sum 1 once updated).
    pub fn mass(&self) -> &[f64] {
        &self.mass
    }

    /// Lower bin and the fraction towards the upper one for `v` (clamped to the range).
    fn locate(&self, v: f64) -> (usize, f64) {
        let last = self.mass.len() - 1;
        let width = (self.hi - self.lo) / last as f64;
        let t = ((v.clamp(self.lo, self.hi) - self.lo) / width).clamp(0.0, last as f64);
        let i = (t.floor() as usize).min(last - 1);
        (i, t - i as f64)
    }

    /// Adds one batch: its normalised histogram gets weight `NEW_BATCH_WEIGHT` (the first batch
    /// initialises the histogram).
    pub fn update(&mut self, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        let mut batch = vec![0.0; self.mass.len()];
        for &v in values {
            let (i, f) = self.locate(v);
            batch[i] += 1.0 - f;
            batch[i + 1] += f;
        }
        let total: f64 = batch.iter().sum();
        let w = if self.initialised {
            NEW_BATCH_WEIGHT
        } else {
            1.0
        };
        for (m, b) in self.mass.iter_mut().zip(&batch) {
            *m = (1.0 - w) * *m + w * b / total;
        }
        self.initialised = true;
    }

    /// CDF at `v`: the cumulative mass at the bin centres, linearly interpolated (eq. 5).
    pub fn cdf(&self, v: f64) -> f64 {
        let (i, f) = self.locate(v);
        let below: f64 = self.mass[..=i].iter().sum();
        below + f * self.mass[i + 1]
    }
}

/// Running mean and variance with the same decay as the histogram (Table 4, "Gaussian").
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MovingGaussian {
    pub mean: f64,
    pub var: f64,
    initialised: bool,
}

impl MovingGaussian {
    pub fn update(&mut self, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let w = if self.initialised {
            NEW_BATCH_WEIGHT
        } else {
            1.0
        };
        self.mean = (1.0 - w) * self.mean + w * mean;
        self.var = (1.0 - w) * self.var + w * var;
        self.initialised = true;
    }
}

/// Standard normal CDF Φ(z) = (1 + erf(z/√2))/2, element-wise.
pub fn normal_cdf(z: &Tensor) -> Tensor {
    ((z / std::f64::consts::SQRT_2).erf() + 1.0) * 0.5
}

#[derive(Serialize, Deserialize)]
enum Pdf {
    Histogram(MovingHistogram),
    Gaussian(MovingGaussian),
}

/// The CDF dynamic soft margin loss, L = (1/N) Σ w_i (d_pos^i − d_neg^i), w_i = CDF(…) (eqs. 4–5).
pub struct CdfLoss {
    variant: CdfVariant,
    binary: bool,
    pdf: Pdf,
    last: Vec<(&'static str, f64)>,
}

impl CdfLoss {
    /// `binary`: descriptors are tanh outputs of length k (256 in the paper) and distances are
    /// Hamming (eq. 3); otherwise unit vectors and Euclidean distances (eq. 1).
    pub fn new(variant: CdfVariant, binary: bool) -> CdfLoss {
        // Hamming distances are used as fractions of k/2 (see `forward`), so both kinds of
        // descriptor have distances in [0, 2] and differences in [−2, 2].
        let lo = match variant {
            CdfVariant::Positive => 0.0,
            _ => -MAX_UNIT_L2,
        };
        let pdf = match variant {
            CdfVariant::Gaussian => Pdf::Gaussian(MovingGaussian::default()),
            _ => Pdf::Histogram(MovingHistogram::new(lo, MAX_UNIT_L2, HISTOGRAM_BINS)),
        };
        CdfLoss {
            variant,
            binary,
            pdf,
            last: Vec::new(),
        }
    }

    /// (d_pos, d_neg) of the hardest-in-batch triplets, differentiable.
    fn distances(&self, descriptors: &Tensor) -> (Tensor, Tensor) {
        let (a, p) = anchor_positive(descriptors);
        if self.binary {
            let k = a.size()[1] as f64;
            // Eq. 3 divided by k/2: 1 − xᵀy/k ∈ [0, 2], the float range, so one learning rate
            // serves both kinds (the authors' implementation normalises the same way).
            let unit = 2.0 / k;
            let sign = |x: &Tensor| x.detach().sign();
            let mining = Metric::Hamming.pairwise(&sign(&a), &sign(&p));
            let neg = Negatives::mine(&mining, BINARY_MIN_NEGATIVE_BITS);
            let dist = Metric::Hamming.pairwise(&a, &p) * unit;
            (dist.diagonal(0, 0, 1), neg.gather(&dist))
        } else {
            let dist = Metric::UnitL2.pairwise(&a, &p);
            let neg = Negatives::mine(&dist, HARDNET_MIN_NEGATIVE_L2);
            (dist.diagonal(0, 0, 1), neg.gather(&dist))
        }
    }

    /// Updates the moving PDF with this batch and returns the weights (eq. 5), detached.
    fn weights(&mut self, d_pos: &Tensor, d_neg: &Tensor) -> Tensor {
        let diff = (d_pos - d_neg).detach();
        match (&mut self.pdf, self.variant) {
            (Pdf::Gaussian(g), _) => {
                g.update(&to_vec(&diff));
                let sd = g.var.sqrt().max(f64::EPSILON);
                normal_cdf(&((diff - g.mean) / sd))
            }
            (Pdf::Histogram(h), variant) => {
                let v = match variant {
                    CdfVariant::Positive => to_vec(d_pos),
                    _ => to_vec(&diff),
                };
                h.update(&v);
                let w: Vec<f32> = v.iter().map(|&x| h.cdf(x) as f32).collect();
                Tensor::from_slice(&w).to_device(d_pos.device())
            }
        }
    }
}

impl Loss for CdfLoss {
    fn name(&self) -> &'static str {
        match (self.binary, self.variant) {
            (false, CdfVariant::Difference) => "cdf",
            (false, CdfVariant::Positive) => "cdf-dpos",
            (false, CdfVariant::Gaussian) => "cdf-gaussian",
            (true, CdfVariant::Difference) => "cdf-binary",
            (true, CdfVariant::Positive) => "cdf-binary-dpos",
            (true, CdfVariant::Gaussian) => "cdf-binary-gaussian",
        }
    }

    fn forward(&mut self, descriptors: &Tensor, _progress: f64) -> Tensor {
        let (d_pos, d_neg) = self.distances(descriptors);
        let w = self.weights(&d_pos, &d_neg);
        let loss = (&w * (&d_pos - &d_neg)).mean(Kind::Float);
        let mean = |t: &Tensor| {
            to_vec(&t.mean(Kind::Float))
                .first()
                .copied()
                .unwrap_or(f64::NAN)
        };
        self.last = vec![
            ("d_pos", mean(&d_pos)),
            ("d_neg", mean(&d_neg)),
            ("weight_mean", mean(&w)),
        ];
        loss
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        self.last.clone()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::to_value(&self.pdf).unwrap_or(serde_json::Value::Null)
    }

    fn restore(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        let pdf: Pdf = serde_json::from_value(state.clone())
            .map_err(|e| anyhow::anyhow!("{}: bad loss state: {e}", self.name()))?;
        match (&pdf, &self.pdf) {
            (Pdf::Histogram(a), Pdf::Histogram(b)) if a.mass.len() == b.mass.len() => {}
            (Pdf::Gaussian(_), Pdf::Gaussian(_)) => {}
            _ => anyhow::bail!("{}: loss state is of another variant", self.name()),
        }
        self.pdf = pdf;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_allocates_linearly_and_decays() {
        // 5 bins on [−2, 2]: centres −2, −1, 0, 1, 2.
        let mut h = MovingHistogram::new(-2.0, 2.0, 5);
        h.update(&[0.25, -1.5]);
        // 0.25 → 0.75 to bin 2 (0), 0.25 to bin 3 (1); −1.5 → 0.5 to bins 0 and 1. Sum 2.
        let first = [0.25, 0.25, 0.375, 0.125, 0.0];
        for (m, w) in h.mass().iter().zip(first) {
            assert!((m - w).abs() < 1e-12, "{:?}", h.mass());
        }
        h.update(&[2.0]);
        // Second batch: all mass in bin 4, weight 0.1; old mass × 0.9.
        let second = [0.225, 0.225, 0.3375, 0.1125, 0.1];
        for (m, w) in h.mass().iter().zip(second) {
            assert!((m - w).abs() < 1e-12, "{:?}", h.mass());
        }
        // Values beyond the range are clamped into the end bins.
        h.update(&[-7.0]);
        assert!((h.mass()[0] - (0.9 * 0.225 + 0.1)).abs() < 1e-12);
    }

    #[test]
    fn cdf_matches_direct_cumulative_sum() {
        let mut h = MovingHistogram::new(-2.0, 2.0, 5);
        h.update(&[0.25, -1.5]);
        // At a bin centre: the cumulative mass up to and including it.
        assert!((h.cdf(0.0) - (0.25 + 0.25 + 0.375)).abs() < 1e-12);
        // Between centres 0 and 1, a quarter of the way: 0.875 + 0.25·0.125.
        assert!((h.cdf(0.25) - (0.875 + 0.25 * 0.125)).abs() < 1e-12);
        assert!((h.cdf(2.0) - 1.0).abs() < 1e-12);
        assert!((h.cdf(-2.0) - 0.25).abs() < 1e-12);
        // Monotone.
        let mut prev = 0.0;
        for i in 0..=40 {
            let c = h.cdf(-2.0 + i as f64 * 0.1);
            assert!(c >= prev - 1e-15);
            prev = c;
        }
    }

    #[test]
    fn histogram_of_many_batches_matches_direct_exponential_average() {
        // Direct computation: mass = Σ_b c_b · hist_b with c = 0.9^(B−1) for the first batch and
        // 0.1·0.9^(B−1−b) after, the closed form of the recursive update.
        let batches: Vec<Vec<f64>> = (0..6)
            .map(|b| {
                (0..7)
                    .map(|i| ((b * 7 + i) as f64 * 0.37).sin() * 1.9)
                    .collect()
            })
            .collect();
        let mut h = MovingHistogram::new(-2.0, 2.0, 9);
        for b in &batches {
            h.update(b);
        }
        let width = 4.0 / 8.0;
        let mut direct = vec![0.0; 9];
        let last = batches.len() - 1;
        for (bi, b) in batches.iter().enumerate() {
            let coef = if bi == 0 {
                0.9f64.powi(last as i32)
            } else {
                0.1 * 0.9f64.powi((last - bi) as i32)
            };
            for &v in b {
                let t = (v + 2.0) / width;
                let i = t.floor() as usize;
                let f = t - i as f64;
                direct[i] += coef * (1.0 - f) / b.len() as f64;
                direct[i + 1] += coef * f / b.len() as f64;
            }
        }
        for (m, d) in h.mass().iter().zip(&direct) {
            assert!((m - d).abs() < 1e-12, "{:?} vs {direct:?}", h.mass());
        }
    }

    #[test]
    fn normal_cdf_matches_tabulated_values() {
        let z = Tensor::from_slice(&[0.0f64, 1.0, -1.96]);
        let got = to_vec(&normal_cdf(&z));
        for (g, w) in got.iter().zip([0.5, 0.841_344_746, 0.024_997_895]) {
            assert!((g - w).abs() < 1e-8, "{got:?}");
        }
    }

    /// Two classes of unit vectors in 2-D at hand-chosen angles.
    fn batch() -> Tensor {
        let v = |deg: f64| [deg.to_radians().cos() as f32, deg.to_radians().sin() as f32];
        // class 0: a = 0°, p = 30°; class 1: a = 90°, p = 150°.
        let flat: Vec<f32> = [v(0.0), v(30.0), v(90.0), v(150.0)].concat();
        Tensor::from_slice(&flat).view([2, 2, 2])
    }

    #[test]
    fn float_loss_matches_hand_computation() {
        // d(θ) = 2 sin(θ/2) for unit vectors. Positives: d(30°), d(60°).
        // Negatives (a–p matrix): a0–p1 150°, a1–p0 60°: both pairs take 60° (d = 1).
        let d = |deg: f64| (2.0 - 2.0 * deg.to_radians().cos() + 1e-6).sqrt();
        let x = [d(30.0) - d(60.0), d(60.0) - d(60.0)];
        let mut loss = CdfLoss::new(CdfVariant::Difference, false);
        let got = to_vec(&loss.forward(&batch(), 0.0))[0];
        let mut h = MovingHistogram::new(-2.0, 2.0, HISTOGRAM_BINS);
        h.update(&x);
        let want = (h.cdf(x[0]) * x[0] + h.cdf(x[1]) * x[1]) / 2.0;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // First batch, histogram = this batch: the easier triplet (x0 < x1) has the smaller weight.
        assert!(h.cdf(x[0]) < h.cdf(x[1]));
    }

    #[test]
    fn weights_are_detached_and_gradient_is_weighted() {
        let x = batch().set_requires_grad(true);
        let mut loss = CdfLoss::new(CdfVariant::Difference, false);
        let l = loss.forward(&x, 0.0);
        l.backward();
        // d loss / d p1 only through d_pos of pair 1 (p1 is nobody's negative: a1–p0 and a0–p1 …
        // pair 0's negative is a1–p0, pair 1's is a1–p0 too). So ∂L/∂p1 = w1/2 · ∂d(a1,p1)/∂p1.
        let g = to_vec(&x.grad().select(0, 1).select(0, 1));
        let d = |deg: f64| (2.0 - 2.0 * deg.to_radians().cos() + 1e-6).sqrt();
        let xs = [d(30.0) - d(60.0), 0.0];
        let mut h = MovingHistogram::new(-2.0, 2.0, HISTOGRAM_BINS);
        h.update(&xs);
        let w1 = h.cdf(xs[1]);
        // ∂ sqrt(2 − 2 a·p + ε)/∂p = −a / d; a1 = (0, 1).
        let want = [0.0, -w1 / 2.0 / d(60.0)];
        for (gi, wi) in g.iter().zip(want) {
            assert!((gi - wi).abs() < 1e-5, "{g:?} vs {want:?}");
        }
    }

    #[test]
    fn binary_loss_uses_hamming_on_tanh_and_mines_on_signs() {
        // 2 classes, k = 4 bits. Tanh-like outputs with known signs.
        let a0 = [0.01f32, 0.99, -0.01, 0.01]; // signs + + − +
        let p0 = [0.5f32, 0.4, -0.9, -0.2]; // + + − −
        let a1 = [-0.9f32, 0.7, 0.6, -0.5]; // − + + −
        let p1 = [-0.6f32, 0.9, 0.8, -0.4]; // − + + −
        let flat: Vec<f32> = [a0, p0, a1, p1].concat();
        let x = Tensor::from_slice(&flat).view([2, 2, 4]);
        let loss = CdfLoss::new(CdfVariant::Difference, true);
        let (dp, dn) = loss.distances(&x);
        let dot =
            |u: &[f32; 4], v: &[f32; 4]| u.iter().zip(v).map(|(a, b)| (a * b) as f64).sum::<f64>();
        // Differentiable Hamming (eq. 3) in units of k/2 = 2: (4 − xᵀy)/2 / 2.
        let h = |u: &[f32; 4], v: &[f32; 4]| (4.0 - dot(u, v)) / 2.0 / 2.0;
        let dp = to_vec(&dp);
        assert!((dp[0] - h(&a0, &p0)).abs() < 1e-6 && (dp[1] - h(&a1, &p1)).abs() < 1e-6);
        // Sign Hamming: a1–p0 = 2 bits, a0–p1 = 3 bits → both pairs take (a1, p0) (2 bits is not
        // below the anti-duplicate threshold), although on the tanh values a0–p1 is closer.
        assert!(h(&a0, &p1) < h(&a1, &p0));
        let dn = to_vec(&dn);
        assert!(
            (dn[0] - h(&a1, &p0)).abs() < 1e-6 && (dn[1] - h(&a1, &p0)).abs() < 1e-6,
            "{dn:?}"
        );
    }

    #[test]
    fn positive_and_gaussian_variants_weight_by_their_cdf() {
        let d = |deg: f64| (2.0 - 2.0 * deg.to_radians().cos() + 1e-6).sqrt();
        let dpos = [d(30.0), d(60.0)];
        let dneg = [d(60.0), d(60.0)];
        let mut pos = CdfLoss::new(CdfVariant::Positive, false);
        let got = to_vec(&pos.forward(&batch(), 0.0))[0];
        let mut h = MovingHistogram::new(0.0, 2.0, HISTOGRAM_BINS);
        h.update(&dpos);
        let want =
            (h.cdf(dpos[0]) * (dpos[0] - dneg[0]) + h.cdf(dpos[1]) * (dpos[1] - dneg[1])) / 2.0;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");

        // Gaussian: two values x0 < x1 → mean m, population sd s = |x1 − x0|/2, z = ∓1.
        let mut gauss = CdfLoss::new(CdfVariant::Gaussian, false);
        let got = to_vec(&gauss.forward(&batch(), 0.0))[0];
        let x = [dpos[0] - dneg[0], dpos[1] - dneg[1]];
        let want = (0.158_655_254 * x[0] + 0.841_344_746 * x[1]) / 2.0;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
}
