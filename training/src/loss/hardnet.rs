//! HardNet's hardest-in-batch triplet margin loss (Mishchuk et al., NIPS 2017, Eq. 2–3):
//! for each matching pair (a_i, p_i) of the batch, the hardest negative is the closest
//! non-matching descriptor among the positives (a_i ↔ p_j) and, with the anchor swap, among the
//! anchors (a_j ↔ p_i); loss = mean_i max(0, margin + d(a_i, p_i) − min_neg_i), d = L2 distance.

use super::Loss;
use anyhow::{bail, Result};
use tch::{Kind, Tensor};

/// Margin of the triplet loss (HardNet: 1).
pub const HARDNET_MARGIN: f64 = 1.0;
/// ε inside the distance's square root (HardNet's `distance_matrix_vector`), keeps the gradient finite.
pub const DISTANCE_EPS: f64 = 1e-6;
/// Negatives closer than this are treated as duplicates of the anchor and ignored (HardNet's
/// mask `dist >= 0.008`): the same image point sampled into two classes.
pub const DUPLICATE_DISTANCE: f64 = 0.008;
/// Added to ignored entries (diagonal, duplicates) so they are never the minimum (HardNet: 10).
const IGNORE_OFFSET: f64 = 10.0;

/// Configured HardNet loss.
pub struct HardNetLoss {
    pub margin: f64,
    pub anchor_swap: bool,
    last: Vec<(&'static str, f64)>,
}

impl HardNetLoss {
    pub fn new(margin: f64, anchor_swap: bool) -> Self {
        HardNetLoss {
            margin,
            anchor_swap,
            last: Vec::new(),
        }
    }

    /// `{"name": "hardnet", "margin": 1.0, "anchor_swap": true}` (both optional).
    pub fn from_config(config: &serde_json::Value) -> Result<Self> {
        let margin = config
            .get("margin")
            .and_then(|v| v.as_f64())
            .unwrap_or(HARDNET_MARGIN);
        let anchor_swap = config
            .get("anchor_swap")
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        if margin.is_nan() || margin <= 0.0 {
            bail!("hardnet: margin must be > 0, got {margin}");
        }
        Ok(Self::new(margin, anchor_swap))
    }
}

/// L2 distance matrix between the rows of `a` (n, d) and `b` (n, d): sqrt(|a|² + |b|² − 2a·b + ε).
pub fn distance_matrix(a: &Tensor, b: &Tensor) -> Tensor {
    let a2 = a.square().sum_dim_intlist(1, true, Kind::Float);
    let b2 = b
        .square()
        .sum_dim_intlist(1, true, Kind::Float)
        .transpose(0, 1);
    ((a2 + b2 - a.matmul(&b.transpose(0, 1)) * 2.0).clamp_min(0.0) + DISTANCE_EPS).sqrt()
}

impl Loss for HardNetLoss {
    fn name(&self) -> &'static str {
        "hardnet"
    }

    /// `descriptors` (n, k, d): views 0 and 1 of each class are the anchor and the positive;
    /// with k > 2 the loss is averaged over the consecutive view pairs (0,1), (1,2), ….
    fn forward(&mut self, descriptors: &Tensor, _progress: f64) -> Tensor {
        let k = descriptors.size().get(1).copied().unwrap_or(0);
        let mut total = Tensor::zeros([], (Kind::Float, descriptors.device()));
        let (mut pos_sum, mut neg_sum, mut active_sum) = (0.0, 0.0, 0.0);
        let pairs = (k - 1).max(1);
        for v in 0..pairs {
            let anchor = descriptors.select(1, v);
            let positive = descriptors.select(1, (v + 1).min(k - 1));
            let dist = distance_matrix(&anchor, &positive);
            let n = dist.size()[0];
            let eye = Tensor::eye(n, (Kind::Float, dist.device()));
            let pos = dist.diagonal(0, 0, 1);
            let duplicates = dist.lt(DUPLICATE_DISTANCE).to_kind(Kind::Float);
            let masked = &dist + (eye + duplicates).clamp_max(1.0) * IGNORE_OFFSET;
            let mut min_neg = masked.min_dim(1, false).0;
            if self.anchor_swap {
                min_neg = min_neg.minimum(&masked.min_dim(0, false).0);
            }
            let hinge = (&pos - &min_neg + self.margin).clamp_min(0.0);
            pos_sum += pos.mean(Kind::Float).double_value(&[]);
            neg_sum += min_neg.mean(Kind::Float).double_value(&[]);
            active_sum += hinge
                .gt(0.0)
                .to_kind(Kind::Float)
                .mean(Kind::Float)
                .double_value(&[]);
            total += hinge.mean(Kind::Float);
        }
        let p = pairs as f64;
        self.last = vec![
            ("pos_dist", pos_sum / p),
            ("hardest_neg_dist", neg_sum / p),
            ("active", active_sum / p),
        ];
        total / p
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        self.last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three 2-D classes × 2 views, hand-computed.
    /// a0=(1,0) p0=(0.6,0.8); a1=(0,1) p1=(0,1); a2=(-1,0) p2=(-0.8,-0.6).
    /// d(a0,p0)=sqrt(0.16+0.64)=0.894427, d(a1,p1)=sqrt(0+ε)=0.001, d(a2,p2)=sqrt(0.04+0.36)=0.632456
    /// (ε = 1e-6 moves the other distances by < 1e-6).
    /// Row minima over j≠i of d(a_i,p_j): a0: p1 → sqrt2=1.414214, p2 → sqrt(3.24+0.36)=1.897367
    ///   → 1.414214; a1: p0 → sqrt(0.36+0.04)=0.632456, p2 → sqrt(0.64+2.56)=1.788854 → 0.632456;
    ///   a2: p0 → sqrt(2.56+0.64)=1.788854, p1 → sqrt2 → 1.414214.
    /// Column minima over j≠i of d(a_j,p_i): p0: a1 0.632456, a2 1.788854 → 0.632456;
    ///   p1: a0 1.414214, a2 1.414214 → 1.414214; p2: a0 1.897367, a1 1.788854 → 1.788854.
    /// With swap: min_neg = (0.632456, 0.632456, 1.414214);
    /// hinge = max(0, 1 + pos − min_neg) = (1.261971, 0.368544, 0.218242) → mean 0.616252.
    /// Without swap: min_neg = (1.414214, 0.632456, 1.414214) → hinge (0.480213, 0.368544, 0.218242)
    ///   → mean 0.355666.
    fn toy() -> Tensor {
        let v: [f32; 12] = [
            1.0, 0.0, 0.6, 0.8, 0.0, 1.0, 0.0, 1.0, -1.0, 0.0, -0.8, -0.6,
        ];
        Tensor::from_slice(&v).reshape([3, 2, 2])
    }

    #[test]
    fn matches_hand_computed_value_with_anchor_swap() {
        let mut loss = HardNetLoss::new(1.0, true);
        let l = loss.forward(&toy(), 0.0).double_value(&[]);
        assert!((l - 0.616252).abs() < 1e-5, "{l}");
    }

    #[test]
    fn matches_hand_computed_value_without_anchor_swap() {
        let mut loss = HardNetLoss::new(1.0, false);
        let l = loss.forward(&toy(), 0.0).double_value(&[]);
        assert!((l - 0.355666).abs() < 1e-5, "{l}");
    }

    #[test]
    fn gradient_pulls_positives_together() {
        let x = toy().set_requires_grad(true);
        let mut loss = HardNetLoss::new(1.0, true);
        loss.forward(&x, 0.0).backward();
        let g = x.grad();
        // ∂loss/∂p0 must point from p0 towards a0 reversed: a gradient step p0 − η·g moves p0 closer to a0.
        let p0 = x.get(0).get(1).detach();
        let a0 = x.get(0).get(0).detach();
        let stepped = &p0 - g.get(0).get(1) * 0.1;
        let before = (&p0 - &a0).norm().double_value(&[]);
        let after = (&stepped - &a0).norm().double_value(&[]);
        assert!(after < before, "{before} -> {after}");
    }

    #[test]
    fn config_parses_and_rejects_bad_margin() {
        let cfg = serde_json::json!({"name": "hardnet", "margin": 0.5, "anchor_swap": false});
        let l = HardNetLoss::from_config(&cfg).unwrap();
        assert_eq!(l.margin, 0.5);
        assert!(!l.anchor_swap);
        assert!(HardNetLoss::from_config(&serde_json::json!({"margin": -1.0})).is_err());
        assert!(super::super::from_config(&serde_json::json!({"name": "nope"})).is_err());
    }
}
