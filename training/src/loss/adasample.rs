//! AdaSample (Zhang et al., `adasample.txt`): adaptive sampling of hard positives. From each
//! class of k views a random anchor is drawn, then its positive with probability
//! p_i ∝ d(x_i, x_anchor)^(λ/L_avg) and re-weighting w_i ∝ d^(−1) (eq. 13); negatives are the
//! hardest in batch (eq. 14) and the loss is the Angular Hinge Triplet loss (eqs. 14–15).
//! λ = 0 samples positives uniformly (HardNet); λ → ∞ takes the farthest one (Hardpos).

use super::mining::{to_vec, Metric};
use super::Loss;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tch::{Kind, Tensor};

/// λ of eq. 13 (§5.1: "λ = 10 unless otherwise specified").
pub const LAMBDA: f64 = 10.0;
/// Margin t of the hinge triplet loss (§5.1: "margin t = 1").
pub const MARGIN: f64 = 1.0;
/// Decay of the moving average L_avg of the batch loss. The paper says "moving average of
/// history loss" without a constant; 0.99 averages over about the last hundred batches.
pub const LOSS_AVERAGE_DECAY: f64 = 0.99;
/// Mixes the call count into the sampling seed (SplitMix64 increment), so the sampling of any
/// batch depends only on (seed, batch number) and a resumed run draws the same samples.
const CALL_SEED_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Sampling probabilities p_i ∝ d_i^e over the candidate positives (eq. 13, e = λ/L_avg),
/// computed in log space so large exponents do not overflow. e = 0 gives the uniform
/// distribution; e = ∞ puts all mass on the farthest candidate (first one on ties).
pub fn positive_probabilities(distances: &[f64], exponent: f64) -> Vec<f64> {
    let n = distances.len();
    if n == 0 {
        return Vec::new();
    }
    if exponent == 0.0 {
        return vec![1.0 / n as f64; n];
    }
    if exponent.is_infinite() {
        let mut best = 0;
        for (i, d) in distances.iter().enumerate() {
            if *d > distances[best] {
                best = i;
            }
        }
        let mut p = vec![0.0; n];
        p[best] = 1.0;
        return p;
    }
    let logs: Vec<f64> = distances
        .iter()
        .map(|d| exponent * d.max(f64::MIN_POSITIVE).ln())
        .collect();
    let max = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let un: Vec<f64> = logs.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = un.iter().sum();
    un.iter().map(|u| u / total).collect()
}

/// Draws an index from `probabilities` (summing to 1).
pub fn draw(probabilities: &[f64], rng: &mut impl Rng) -> usize {
    let u: f64 = rng.gen();
    let mut acc = 0.0;
    for (i, p) in probabilities.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    // Rounding left u above the last partial sum: take the last index with mass.
    probabilities.iter().rposition(|p| *p > 0.0).unwrap_or(0)
}

/// The AdaSample loss: Alg. 1 steps 3–8 on one batch of n classes × k views.
pub struct AdaSampleLoss {
    lambda: f64,
    margin: f64,
    loss_average: Option<f64>,
    seed: u64,
    calls: u64,
    rng: StdRng,
    last: Vec<(&'static str, f64)>,
}

impl AdaSampleLoss {
    /// `lambda` = λ of eq. 13 (0: HardNet sampling, ∞: Hardpos); `seed` drives the sampling.
    pub fn new(lambda: f64, seed: u64) -> AdaSampleLoss {
        AdaSampleLoss {
            lambda,
            margin: MARGIN,
            loss_average: None,
            seed,
            calls: 0,
            rng: StdRng::seed_from_u64(seed),
            last: Vec::new(),
        }
    }

    /// The exponent λ/L_avg of eq. 13. Before any history (first batch) and for λ = 0 it is 0.
    pub fn exponent(&self) -> f64 {
        match self.loss_average {
            _ if self.lambda == 0.0 => 0.0,
            _ if self.lambda.is_infinite() => f64::INFINITY,
            None => 0.0,
            Some(l) => self.lambda / l.max(f64::MIN_POSITIVE),
        }
    }

    /// Sets L_avg (tests; resuming).
    pub fn set_loss_average(&mut self, l: f64) {
        self.loss_average = Some(l);
    }

    /// Steps 3–6 of Alg. 1: per class, a uniform anchor and an eq.-13 positive. Returns the flat
    /// indices (class·k + view) of anchors and positives and the anchor–positive angles.
    pub fn sample_pairs(&mut self, descriptors: &Tensor) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
        let size = descriptors.size();
        let (n, k) = (size[0], size[1]);
        // Angles between all views of each class: n × k × k, detached.
        let x = descriptors.detach();
        let angles = to_vec(&Metric::Angular.from_inner(&x.matmul(&x.transpose(1, 2)), size[2]));
        let exponent = self.exponent();
        let (mut anchors, mut positives, mut d_pos) = (Vec::new(), Vec::new(), Vec::new());
        for c in 0..n {
            let i0 = self.rng.gen_range(0..k);
            let others: Vec<i64> = (0..k).filter(|&i| i != i0).collect();
            let d: Vec<f64> = others
                .iter()
                .map(|&i| angles[((c * k + i0) * k + i) as usize])
                .collect();
            let pick = draw(&positive_probabilities(&d, exponent), &mut self.rng);
            anchors.push(c * k + i0);
            positives.push(c * k + others[pick]);
            d_pos.push(d[pick]);
        }
        (anchors, positives, d_pos)
    }
}

/// Re-weighting w_i ∝ d_i^(−1) (eq. 13), scaled to mean 1 over the batch (the constant is
/// absorbed by the learning rate, footnote 2).
pub fn reweighting(d_pos: &[f64]) -> Vec<f64> {
    let inv: Vec<f64> = d_pos
        .iter()
        .map(|d| 1.0 / d.max(f64::MIN_POSITIVE))
        .collect();
    let mean = inv.iter().sum::<f64>() / inv.len().max(1) as f64;
    inv.iter().map(|w| w / mean).collect()
}

/// Angular hinge triplet losses (eqs. 14–15) of anchors `a` and positives `p` (n × d):
/// max(t + θ_pos² − θ_neg², 0), θ_neg the smallest anchor–anchor or positive–positive angle to
/// another class (eq. 14), HardNet's anti-duplicate threshold applied.
pub fn angular_hinge(a: &Tensor, p: &Tensor, margin: f64) -> Tensor {
    let n = a.size()[0];
    let pos = Metric::Angular.rowwise(a, p);
    let aa = Metric::Angular.pairwise(a, a);
    let pp = Metric::Angular.pairwise(p, p);
    let both = aa.minimum(&pp);
    let eye = Tensor::eye(n, (Kind::Bool, a.device()));
    let min_neg = Metric::Angular.hardnet_min_negative();
    let masked = both.masked_fill(&eye, f64::INFINITY);
    let masked = masked.masked_fill(&masked.detach().lt(min_neg), f64::INFINITY);
    let (neg, _) = masked.min_dim(1, false);
    (pos.square() - neg.square() + margin).clamp_min(0.0)
}

impl Loss for AdaSampleLoss {
    fn name(&self) -> &'static str {
        "adasample"
    }

    fn forward(&mut self, descriptors: &Tensor, _progress: f64) -> Tensor {
        let size = descriptors.size();
        let exponent = self.exponent();
        self.rng = StdRng::seed_from_u64(self.seed ^ self.calls.wrapping_mul(CALL_SEED_MIX));
        self.calls += 1;
        let (anchors, positives, d_pos) = self.sample_pairs(descriptors);
        let flat = descriptors.view([size[0] * size[1], size[2]]);
        let device = descriptors.device();
        let a = flat.index_select(0, &Tensor::from_slice(&anchors).to_device(device));
        let p = flat.index_select(0, &Tensor::from_slice(&positives).to_device(device));
        let losses = angular_hinge(&a, &p, self.margin);
        let w: Vec<f32> = reweighting(&d_pos).iter().map(|&w| w as f32).collect();
        let w = Tensor::from_slice(&w).to_device(device);
        // Step 8: Σ w_i ∇L_i, as the mean so the scale matches HardNet's.
        let loss = (&w * &losses).mean(Kind::Float);
        let plain = to_vec(&losses.mean(Kind::Float))
            .first()
            .copied()
            .unwrap_or(f64::NAN);
        if plain.is_finite() {
            self.loss_average = Some(match self.loss_average {
                None => plain,
                Some(avg) => LOSS_AVERAGE_DECAY * avg + (1.0 - LOSS_AVERAGE_DECAY) * plain,
            });
        }
        let mean_pos = d_pos.iter().sum::<f64>() / d_pos.len().max(1) as f64;
        self.last = vec![
            ("ht_loss", plain),
            ("loss_average", self.loss_average.unwrap_or(f64::NAN)),
            ("exponent", exponent),
            ("theta_pos", mean_pos),
        ];
        loss
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        self.last.clone()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({"loss_average": self.loss_average, "calls": self.calls})
    }

    fn restore(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        self.loss_average = state.get("loss_average").and_then(|v| v.as_f64());
        self.calls = state
            .get("calls")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| anyhow::anyhow!("adasample: loss state without \"calls\": {state}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson chi-square statistic of observed counts against probabilities.
    fn chi_square(counts: &[usize], p: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(p)
            .map(|(&c, &pi)| (c as f64 - n as f64 * pi).powi(2) / (n as f64 * pi))
            .sum()
    }
    /// Upper 0.1 % point of χ² with 4 degrees of freedom (statistical tables).
    const CHI2_4DF_999: f64 = 18.467;

    fn frequencies(d: &[f64], exponent: f64, draws: usize, seed: u64) -> Vec<usize> {
        let p = positive_probabilities(d, exponent);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut counts = vec![0; d.len()];
        for _ in 0..draws {
            counts[draw(&p, &mut rng)] += 1;
        }
        counts
    }

    #[test]
    fn probabilities_follow_eq_13() {
        let d = [0.2, 0.4, 0.8];
        let p = positive_probabilities(&d, 2.0);
        // d² = 0.04, 0.16, 0.64; sum 0.84.
        for (pi, w) in p.iter().zip([0.04 / 0.84, 0.16 / 0.84, 0.64 / 0.84]) {
            assert!((pi - w).abs() < 1e-12, "{p:?}");
        }
        // A huge exponent does not overflow.
        let p = positive_probabilities(&d, 5000.0);
        assert!((p[2] - 1.0).abs() < 1e-12 && p.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn sampling_frequencies_match_distribution_chi_square() {
        let d = [0.3, 0.5, 0.7, 0.9, 1.1];
        for exponent in [1.0, 4.0] {
            let p = positive_probabilities(&d, exponent);
            let counts = frequencies(&d, exponent, 20_000, 7);
            let chi2 = chi_square(&counts, &p);
            assert!(
                chi2 < CHI2_4DF_999,
                "exponent {exponent}: χ² = {chi2}, counts {counts:?}"
            );
        }
        // And the test has power: counts from exponent 4 are rejected under exponent 1's law.
        let counts = frequencies(&d, 4.0, 20_000, 7);
        assert!(chi_square(&counts, &positive_probabilities(&d, 1.0)) > CHI2_4DF_999);
    }

    #[test]
    fn lambda_zero_is_uniform_hardnet_sampling() {
        let mut loss = AdaSampleLoss::new(0.0, 1);
        loss.set_loss_average(0.5);
        assert_eq!(loss.exponent(), 0.0);
        let d = [0.1, 0.5, 1.2, 2.0, 3.0];
        let counts = frequencies(&d, loss.exponent(), 20_000, 3);
        assert!(chi_square(&counts, &[0.2; 5]) < CHI2_4DF_999, "{counts:?}");
    }

    #[test]
    fn lambda_infinite_is_hardpos() {
        let mut loss = AdaSampleLoss::new(f64::INFINITY, 1);
        loss.set_loss_average(0.5);
        // One class, 4 views on the unit circle: anchor whichever; the positive must always be
        // the view farthest from the anchor.
        let ang = [0.0f64, 20.0, 50.0, 170.0];
        let flat: Vec<f32> = ang
            .iter()
            .flat_map(|a| [a.to_radians().cos() as f32, a.to_radians().sin() as f32])
            .collect();
        let x = Tensor::from_slice(&flat).view([1, 4, 2]);
        for _ in 0..50 {
            let (a, p, _) = loss.sample_pairs(&x);
            let far = (0..4).filter(|&i| i != a[0]).max_by(|&i, &j| {
                let di = (ang[i as usize] - ang[a[0] as usize]).abs();
                let dj = (ang[j as usize] - ang[a[0] as usize]).abs();
                di.partial_cmp(&dj).unwrap()
            });
            assert_eq!(Some(p[0]), far);
        }
    }

    #[test]
    fn exponent_is_lambda_over_loss_average() {
        let mut loss = AdaSampleLoss::new(LAMBDA, 1);
        assert_eq!(loss.exponent(), 0.0, "no history yet");
        loss.set_loss_average(2.5);
        assert!((loss.exponent() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn angular_hinge_matches_hand_computation() {
        let v = |deg: f64| [deg.to_radians().cos() as f32, deg.to_radians().sin() as f32];
        // Two pairs: (0°, 40°) and (100°, 120°). θ_pos = 40°, 20°.
        // Negatives (eq. 14): a–a 100°, p–p 80° → both pairs 80°.
        let a = Tensor::from_slice(&[v(0.0), v(100.0)].concat()).view([2, 2]);
        let p = Tensor::from_slice(&[v(40.0), v(120.0)].concat()).view([2, 2]);
        let got = to_vec(&angular_hinge(&a, &p, 1.0));
        let r = |d: f64| d.to_radians();
        let want = [
            (1.0 + r(40.0).powi(2) - r(80.0).powi(2)).max(0.0),
            (1.0 + r(20.0).powi(2) - r(80.0).powi(2)).max(0.0),
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn weights_are_inverse_distance_with_unit_mean() {
        let w = reweighting(&[0.5, 1.0, 2.0]);
        // 1/d = 2, 1, 0.5; mean 7/6.
        for (g, e) in w.iter().zip([2.0 * 6.0 / 7.0, 6.0 / 7.0, 0.5 * 6.0 / 7.0]) {
            assert!((g - e).abs() < 1e-12);
        }
    }

    #[test]
    fn forward_is_weighted_mean_of_sampled_triplets_and_updates_average() {
        // k = 2: the positive is forced; the anchor view is random, so the expected value is
        // computed by hand for the anchors that a twin sampler with the same seed draws.
        let deg = [[0.0f64, 40.0], [100.0, 120.0]];
        let v = |d: f64| [d.to_radians().cos() as f32, d.to_radians().sin() as f32];
        let flat: Vec<f32> = deg.iter().flatten().flat_map(|&d| v(d)).collect();
        let x = Tensor::from_slice(&flat).view([2, 2, 2]);
        let (anchors, positives, _) = AdaSampleLoss::new(LAMBDA, 5).sample_pairs(&x);
        let ang = |i: i64| deg[(i / 2) as usize][(i % 2) as usize];
        let (a, p): (Vec<f64>, Vec<f64>) = (
            anchors.iter().map(|&i| ang(i)).collect(),
            positives.iter().map(|&i| ang(i)).collect(),
        );
        let r = |d: f64| d.to_radians();
        let theta_pos = [r((a[0] - p[0]).abs()), r((a[1] - p[1]).abs())];
        let theta_neg = r((a[0] - a[1]).abs().min((p[0] - p[1]).abs()));
        let l: Vec<f64> = theta_pos
            .iter()
            .map(|t| (1.0 + t * t - theta_neg * theta_neg).max(0.0))
            .collect();
        let w = reweighting(&theta_pos);
        let want = (w[0] * l[0] + w[1] * l[1]) / 2.0;

        let mut loss = AdaSampleLoss::new(LAMBDA, 5);
        let got = to_vec(&loss.forward(&x, 0.0))[0];
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        let avg = loss
            .stats()
            .iter()
            .find(|(n, _)| *n == "loss_average")
            .map(|s| s.1)
            .unwrap();
        assert!((avg - (l[0] + l[1]) / 2.0).abs() < 1e-5);
        assert!((loss.exponent() - LAMBDA / avg).abs() < 1e-6);
    }
}
