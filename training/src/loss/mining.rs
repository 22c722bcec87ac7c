//! Descriptor distances and HardNet's hardest-in-batch negative mining, shared by the papers'
//! losses (CDF §3.1, AdaSample §3.3, SDGMNet §III-E all mine negatives the HardNet way).

use tch::{Device, Kind, Tensor};

/// Cosines are clamped to [−1 + ε, 1 − ε] before `acos`: its derivative is infinite at ±1.
pub const COS_CLAMP_EPS: f64 = 1e-6;
/// ε added under the square root of unit-vector L2 distances (HardNet's `eps`): bounded gradient
/// for identical descriptors.
pub const L2_SQRT_EPS: f64 = 1e-6;
/// HardNet's anti-duplicate threshold: candidates closer than this L2 distance are not taken as
/// negatives (they are almost surely the same point; Mishchuk et al. 2017, reference code).
pub const HARDNET_MIN_NEGATIVE_L2: f64 = 0.008;

/// How two descriptors are compared. Every metric is a function of the inner product xᵀy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// Euclidean distance of unit vectors, sqrt(2 − 2xᵀy) (CDF eq. 1).
    UnitL2,
    /// Included angle, arccos(xᵀy) (AdaSample eq. 15, SDGMNet eq. 3).
    Angular,
    /// Hamming distance of ±1 vectors of length k, (k − xᵀy)/2 (CDF eq. 3).
    Hamming,
}

impl Metric {
    /// Distances from inner products `s` of descriptors of length `dim`.
    pub fn from_inner(self, s: &Tensor, dim: i64) -> Tensor {
        match self {
            Metric::UnitL2 => (s * -2.0 + 2.0)
                .clamp_min(0.0)
                .g_add_scalar(L2_SQRT_EPS)
                .sqrt(),
            Metric::Angular => s.clamp(-1.0 + COS_CLAMP_EPS, 1.0 - COS_CLAMP_EPS).acos(),
            Metric::Hamming => (s.neg() + dim as f64) * 0.5,
        }
    }

    /// Pairwise distances between the rows of `a` (n × d) and of `b` (m × d): n × m.
    pub fn pairwise(self, a: &Tensor, b: &Tensor) -> Tensor {
        self.from_inner(&a.matmul(&b.tr()), last_dim(a))
    }

    /// Distances between matching rows of `a` and `b` (both n × d): n.
    pub fn rowwise(self, a: &Tensor, b: &Tensor) -> Tensor {
        let s = (a * b).sum_dim_intlist(-1, false, Kind::Float);
        self.from_inner(&s, last_dim(a))
    }

    /// The L2 threshold [`HARDNET_MIN_NEGATIVE_L2`] in this metric's unit, for unit vectors
    /// (angle θ = 2·asin(l/2)); Hamming has its own integer threshold.
    pub fn hardnet_min_negative(self) -> f64 {
        match self {
            Metric::UnitL2 => HARDNET_MIN_NEGATIVE_L2,
            Metric::Angular => 2.0 * (HARDNET_MIN_NEGATIVE_L2 / 2.0).asin(),
            Metric::Hamming => 0.0,
        }
    }
}

fn last_dim(t: &Tensor) -> i64 {
    t.size().last().copied().unwrap_or(0)
}

/// The hardest negative of every matching pair (a_i, p_i) of a HardNet batch: the closest
/// non-matching descriptor among {p_j : j ≠ i} (row i of the a–p distance matrix) and
/// {a_j : j ≠ i} (column i). Candidates closer than a threshold are skipped as label noise; a pair
/// whose candidates are all below it falls back to its unthresholded hardest negative.
pub struct Negatives {
    /// Index j of the negative (int64, n).
    pub index: Tensor,
    /// True where the negative is p_j (row), false where it is a_j (column).
    pub in_row: Tensor,
}

impl Negatives {
    /// Mines on `mining` (n × n, entry (i, j) = distance between a_i and p_j; not differentiated).
    pub fn mine(mining: &Tensor, min_distance: f64) -> Negatives {
        let n = mining.size()[0];
        let mining = mining.detach();
        let diag = Tensor::eye(n, (Kind::Bool, mining.device()));
        let plain = mining.masked_fill(&diag, f64::INFINITY);
        let thresholded = plain.masked_fill(&plain.lt(min_distance), f64::INFINITY);
        let (row_t, row_ti) = thresholded.min_dim(1, false);
        let (col_t, col_ti) = thresholded.min_dim(0, false);
        let (row_p, row_pi) = plain.min_dim(1, false);
        let (col_p, col_pi) = plain.min_dim(0, false);
        // Fall back to the plain minimum where thresholding removed every candidate.
        let all_masked = row_t.minimum(&col_t).isinf();
        let row_v = row_p.where_self(&all_masked, &row_t);
        let col_v = col_p.where_self(&all_masked, &col_t);
        let row_i = row_pi.where_self(&all_masked, &row_ti);
        let col_i = col_pi.where_self(&all_masked, &col_ti);
        let in_row = row_v.le_tensor(&col_v);
        let index = row_i.where_self(&in_row, &col_i);
        Negatives { index, in_row }
    }

    /// The negative distances taken from `dist` (n × n, same layout as the mining matrix, possibly
    /// a different, differentiable distance): `dist[i, j]` for a row negative, `dist[j, i]` else.
    pub fn gather(&self, dist: &Tensor) -> Tensor {
        let idx = self.index.unsqueeze(1);
        let from_row = dist.gather(1, &idx, false).squeeze_dim(1);
        let from_col = dist.tr().gather(1, &idx, false).squeeze_dim(1);
        from_row.where_self(&self.in_row, &from_col)
    }
}

/// Copies a tensor of any shape to a flat `Vec<f64>` on the CPU (detached).
pub fn to_vec(t: &Tensor) -> Vec<f64> {
    let flat = t
        .detach()
        .to_device(Device::Cpu)
        .to_kind(Kind::Double)
        .contiguous()
        .view([-1]);
    let n = flat.numel();
    let mut out = vec![0.0; n];
    flat.copy_data(&mut out, n);
    out
}

/// The two views of a HardNet batch (n, k ≥ 2, d): anchors (view 0) and positives (view 1).
pub fn anchor_positive(descriptors: &Tensor) -> (Tensor, Tensor) {
    (descriptors.select(1, 0), descriptors.select(1, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: &[&[f32]]) -> Tensor {
        let d = rows[0].len() as i64;
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).view([rows.len() as i64, d])
    }

    #[test]
    fn metrics_match_closed_forms() {
        let s = 0.5f64;
        let a = t(&[&[1.0, 0.0]]);
        let b = t(&[&[0.5, 0.75f32.sqrt()]]);
        let l2 = to_vec(&Metric::UnitL2.rowwise(&a, &b))[0];
        assert!((l2 - (2.0 - 2.0 * s + L2_SQRT_EPS).sqrt()).abs() < 1e-6);
        let ang = to_vec(&Metric::Angular.rowwise(&a, &b))[0];
        assert!((ang - std::f64::consts::FRAC_PI_3).abs() < 1e-6);
        // Hamming of ±1 vectors equals the number of differing signs.
        let x = t(&[&[1.0, -1.0, 1.0, 1.0]]);
        let y = t(&[&[1.0, 1.0, -1.0, 1.0]]);
        assert_eq!(to_vec(&Metric::Hamming.rowwise(&x, &y))[0], 2.0);
    }

    #[test]
    fn hardest_negative_is_taken_from_row_or_column() {
        // a–p distances; diagonal = positives.
        let d = t(&[&[0.1, 0.9, 0.5], &[0.2, 0.3, 0.8], &[0.7, 0.6, 0.4]]);
        let neg = Negatives::mine(&d, 0.0);
        // i=0: row {0.9, 0.5}, column {0.2, 0.7} → 0.2 = d[1,0] (column, j=1).
        // i=1: row {0.2, 0.8}, column {0.9, 0.6} → 0.2 = d[1,0] (row, j=0).
        // i=2: row {0.7, 0.6}, column {0.5, 0.8} → 0.5 = d[0,2] (column, j=0).
        assert_eq!(to_vec(&neg.index), vec![1.0, 0.0, 0.0]);
        assert_eq!(to_vec(&neg.gather(&d)), to_vec(&t(&[&[0.2, 0.2, 0.5]])));
        // With a threshold of 0.25, 0.2 is skipped: i=0 → 0.5 (row, j=2); i=1 → 0.6 (column, j=2).
        let neg = Negatives::mine(&d, 0.25);
        let got = to_vec(&neg.gather(&d));
        let want = [0.5, 0.6, 0.5];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?}");
        }
        // A threshold above every candidate falls back to the plain hardest negative.
        let neg = Negatives::mine(&d, 10.0);
        assert_eq!(to_vec(&neg.index), vec![1.0, 0.0, 0.0]);
    }
}
