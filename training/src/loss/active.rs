//! Active descriptor learning (Cakir-style curriculum; `active-descriptor-learning.txt`):
//! a triplet margin that grows by c whenever more than a share k of the epoch's triplets
//! already have zero loss (Alg. 1), and active batch selection of b out of 2b random triplets —
//! the b easiest non-zero losses for the first f epochs, then the b hardest (Alg. 2, eqs. 5–6).

use super::mining::{to_vec, Metric};
use super::Loss;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// Initial margin m (§3: "initial margin value is set as m = 1").
pub const INITIAL_MARGIN: f64 = 1.0;
/// Margin increment c (§4: "c = 0.5 improves performance over all scenarios").
pub const MARGIN_STEP: f64 = 0.5;
/// Share k of zero-loss triplets above which the margin grows (§3: k = 0.7).
pub const ZERO_LOSS_SHARE: f64 = 0.7;
/// Epochs f of easy sampling before hard sampling (§3: "switched … after f = 2 epochs").
pub const EASY_EPOCHS: usize = 2;
/// Mixes the call count into the sampling seed (SplitMix64 increment): a resumed run draws the
/// same triplets.
const CALL_SEED_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Alg. 1: the margin and the epoch's count of zero-loss triplets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MarginSchedule {
    pub margin: f64,
    pub step: f64,
    pub share: f64,
    zero: u64,
    total: u64,
}

impl MarginSchedule {
    pub fn new(margin: f64, step: f64, share: f64) -> MarginSchedule {
        MarginSchedule {
            margin,
            step,
            share,
            zero: 0,
            total: 0,
        }
    }

    /// Line 7: adds a batch's triplets, `zero` of them with zero loss.
    pub fn record(&mut self, zero: u64, total: u64) {
        self.zero += zero;
        self.total += total;
    }

    /// Share |A_e| / |T| of the epoch so far.
    pub fn zero_share(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.zero as f64 / self.total as f64
        }
    }

    /// Line 8 at the end of the epoch: m ← m + c if |A_e|/|T| > k; then A_e ← {} (line 3).
    /// Returns whether the margin grew.
    pub fn end_epoch(&mut self) -> bool {
        let grow = self.zero_share() > self.share;
        if grow {
            self.margin += self.step;
        }
        self.zero = 0;
        self.total = 0;
        grow
    }
}

/// Eqs. 5–6: indices of the b selected triplets among `losses` (2b values). Easy phase: the b
/// smallest non-zero losses (fewer if fewer are non-zero); hard phase: the b largest.
pub fn select(losses: &[f64], b: usize, easy: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..losses.len())
        .filter(|&i| !easy || losses[i] > 0.0)
        .collect();
    idx.sort_by(|&i, &j| {
        let o = losses[i].total_cmp(&losses[j]);
        if easy {
            o
        } else {
            o.reverse()
        }
    });
    idx.truncate(b);
    idx
}

/// The active-learning triplet loss on n = 2b classes × k views.
pub struct ActiveLoss {
    schedule: MarginSchedule,
    easy_epochs: usize,
    epoch: usize,
    seed: u64,
    calls: u64,
    rng: StdRng,
    last: Vec<(&'static str, f64)>,
}

impl ActiveLoss {
    pub fn new(seed: u64) -> ActiveLoss {
        ActiveLoss::with(
            MarginSchedule::new(INITIAL_MARGIN, MARGIN_STEP, ZERO_LOSS_SHARE),
            EASY_EPOCHS,
            seed,
        )
    }

    pub fn with(schedule: MarginSchedule, easy_epochs: usize, seed: u64) -> ActiveLoss {
        ActiveLoss {
            schedule,
            easy_epochs,
            epoch: 0,
            seed,
            calls: 0,
            rng: StdRng::seed_from_u64(seed),
            last: Vec::new(),
        }
    }

    pub fn margin(&self) -> f64 {
        self.schedule.margin
    }

    /// Random triplets, one per class i: anchor = view 0, positive = view 1, negative = a random
    /// view of a random other class. Returns flat indices (class·k + view) of the negatives.
    fn negatives(&mut self, n: i64, k: i64) -> Vec<i64> {
        (0..n)
            .map(|i| {
                let j = (i + self.rng.gen_range(1..n.max(2))) % n;
                j * k + self.rng.gen_range(0..k)
            })
            .collect()
    }
}

/// Triplet losses max(0, d(a, p) − d(a, n) + m) (eq. 2, hinged), Euclidean on unit vectors.
pub fn triplet_losses(a: &Tensor, p: &Tensor, neg: &Tensor, margin: f64) -> Tensor {
    (Metric::UnitL2.rowwise(a, p) - Metric::UnitL2.rowwise(a, neg) + margin).clamp_min(0.0)
}

impl Loss for ActiveLoss {
    fn name(&self) -> &'static str {
        "active"
    }

    fn forward(&mut self, descriptors: &Tensor, _progress: f64) -> Tensor {
        let size = descriptors.size();
        let (n, k, d) = (size[0], size[1], size[2]);
        let device = descriptors.device();
        let flat = descriptors.view([n * k, d]);
        self.rng = StdRng::seed_from_u64(self.seed ^ self.calls.wrapping_mul(CALL_SEED_MIX));
        self.calls += 1;
        let neg_idx = Tensor::from_slice(&self.negatives(n, k)).to_device(device);
        let a = descriptors.select(1, 0);
        let p = descriptors.select(1, 1);
        let neg = flat.index_select(0, &neg_idx);
        let losses = triplet_losses(&a, &p, &neg, self.schedule.margin);
        // Alg. 2: 2b sampled triplets → b selected.
        let b = (n as usize / 2).max(1);
        let easy = self.epoch < self.easy_epochs;
        let values = to_vec(&losses);
        let chosen = select(&values, b, easy);
        let zero = chosen.iter().filter(|&&i| values[i] == 0.0).count() as u64;
        self.schedule.record(zero, b as u64);
        let idx: Vec<i64> = chosen.iter().map(|&i| i as i64).collect();
        // Mean over the b slots (missing easy triplets count as zero loss).
        let loss = if idx.is_empty() {
            (descriptors * 0.0).sum(Kind::Float)
        } else {
            losses
                .index_select(0, &Tensor::from_slice(&idx).to_device(device))
                .sum(Kind::Float)
                / b as f64
        };
        self.last = vec![
            ("margin", self.schedule.margin),
            ("easy_phase", if easy { 1.0 } else { 0.0 }),
            ("selected", chosen.len() as f64),
            ("zero_share_epoch", self.schedule.zero_share()),
        ];
        loss
    }

    fn end_epoch(&mut self) {
        self.schedule.end_epoch();
        self.epoch += 1;
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        self.last.clone()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::json!({"schedule": self.schedule, "epoch": self.epoch, "calls": self.calls})
    }

    fn restore(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        let bad = || anyhow::anyhow!("active: bad loss state {state}");
        self.schedule = serde_json::from_value(state.get("schedule").cloned().ok_or_else(bad)?)?;
        self.epoch = state
            .get("epoch")
            .and_then(|v| v.as_u64())
            .ok_or_else(bad)? as usize;
        self.calls = state
            .get("calls")
            .and_then(|v| v.as_u64())
            .ok_or_else(bad)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_grows_exactly_when_share_exceeds_threshold() {
        let mut s = MarginSchedule::new(INITIAL_MARGIN, MARGIN_STEP, ZERO_LOSS_SHARE);
        // Exactly k = 0.7 is not "> k".
        s.record(7, 10);
        assert!(!s.end_epoch());
        assert_eq!(s.margin, 1.0);
        // One more zero-loss triplet in 1000 crosses it.
        s.record(600, 900);
        s.record(101, 100);
        assert!((s.zero_share() - 0.701).abs() < 1e-12);
        assert!(s.end_epoch());
        assert_eq!(s.margin, 1.5);
        // The count restarts each epoch (line 3): 699/1000 does not fire.
        s.record(699, 1000);
        assert!(!s.end_epoch());
        assert_eq!(s.margin, 1.5);
        // An empty epoch does not fire.
        assert!(!s.end_epoch());
    }

    #[test]
    fn selection_follows_eqs_5_and_6() {
        let losses = [0.0, 0.9, 0.2, 0.0, 0.5, 1.3, 0.0, 0.1];
        // Easy: the 4 smallest non-zero losses.
        assert_eq!(select(&losses, 4, true), vec![7, 2, 4, 1]);
        // Hard: the 4 largest (zeros allowed).
        assert_eq!(select(&losses, 4, false), vec![5, 1, 4, 2]);
        // Easy with fewer non-zero than b: all of them.
        assert_eq!(select(&[0.0, 0.3, 0.0, 0.0], 2, true), vec![1]);
    }

    /// n classes of unit vectors in 2n dimensions: class i's views are e_{2i} and
    /// cos(θ_i)·e_{2i} + sin(θ_i)·e_{2i+1}; every negative is orthogonal to every anchor.
    fn batch(theta_deg: &[f64]) -> Tensor {
        let n = theta_deg.len();
        let dim = 2 * n;
        let mut flat = vec![0f32; n * 2 * dim];
        for (i, t) in theta_deg.iter().enumerate() {
            flat[(i * 2) * dim + 2 * i] = 1.0;
            flat[(i * 2 + 1) * dim + 2 * i] = t.to_radians().cos() as f32;
            flat[(i * 2 + 1) * dim + 2 * i + 1] = t.to_radians().sin() as f32;
        }
        Tensor::from_slice(&flat).view([n as i64, 2, dim as i64])
    }

    #[test]
    fn forward_selects_and_counts_by_hand() {
        // d(a, n) = √2 for every negative (orthogonal), d(a, p) = 2 sin(θ/2).
        // θ = 0 → loss max(0, 0 − √2 + 1) = 0; θ = 60° → 1 − √2 + 1 = 0.586; θ = 90° → 1.
        let x = batch(&[0.0, 60.0, 90.0, 0.0]);
        let eps = crate::loss::mining::L2_SQRT_EPS;
        let l = |t: f64| {
            ((2.0 - 2.0 * t.to_radians().cos() + eps).sqrt() - (2.0 + eps).sqrt() + 1.0).max(0.0)
        };
        let mut loss = ActiveLoss::new(3);
        // Easy phase, b = 2: the two non-zero losses (60°, 90°), mean over b.
        let got = to_vec(&loss.forward(&x, 0.0))[0];
        assert!((got - (l(60.0) + l(90.0)) / 2.0).abs() < 1e-5, "{got}");
        assert_eq!(loss.schedule.zero_share(), 0.0);
        loss.end_epoch();
        loss.end_epoch();
        // Hard phase: the two largest are the same here; now a batch with three zero losses.
        let x = batch(&[0.0, 0.0, 90.0, 0.0]);
        let got = to_vec(&loss.forward(&x, 0.0))[0];
        assert!((got - l(90.0) / 2.0).abs() < 1e-5, "{got}");
        // Selected: 90° (non-zero) and one zero → share 1/2 ≤ 0.7: no margin update.
        loss.end_epoch();
        assert_eq!(loss.margin(), INITIAL_MARGIN);
        // All four zero: hard selection keeps two zero-loss triplets → share 1 > 0.7.
        let x = batch(&[0.0, 0.0, 0.0, 0.0]);
        let _ = loss.forward(&x, 0.0);
        loss.end_epoch();
        assert_eq!(loss.margin(), INITIAL_MARGIN + MARGIN_STEP);
        // With m = 1.5 the same batch has non-zero loss 1.5 − √2 > 0.
        let got = to_vec(&loss.forward(&x, 0.0))[0];
        assert!(
            (got - (1.5 + eps.sqrt() - (2.0 + eps).sqrt())).abs() < 1e-5,
            "{got}"
        );
    }
}
