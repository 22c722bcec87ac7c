//! Descriptor distances for the benchmarks: L2 for float descriptors, Hamming for binary ones
//! (ARCHITECTURE.md "Conventions", Descriptors). One pair at a time, or a whole distance matrix
//! (SGEMM for float).

use crate::describe::Descriptors;
use crate::error::{Error, Result};
use ndarray::{Array2, Axis};

/// Which distance a descriptor set is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Metric {
    L2,
    Hamming,
}

impl Metric {
    /// The metric of a descriptor kind: L2 for float, Hamming for binary.
    pub fn of(d: &Descriptors) -> Metric {
        match d {
            Descriptors::Float(_) => Metric::L2,
            Descriptors::Binary(_) => Metric::Hamming,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "L2",
            Metric::Hamming => "Hamming",
        }
    }
}

fn kinds_match(a: &Descriptors, b: &Descriptors) -> Result<()> {
    match (a, b) {
        (Descriptors::Float(x), Descriptors::Float(y)) if x.ncols() != y.ncols() => {
            Err(Error::InvalidInput(format!(
                "descriptor dimensions differ: {} and {}",
                x.ncols(),
                y.ncols()
            )))
        }
        (Descriptors::Float(_), Descriptors::Float(_))
        | (Descriptors::Binary(_), Descriptors::Binary(_)) => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "cannot compare {} with {} descriptors",
            a.kind(),
            b.kind()
        ))),
    }
}

/// Distance between row `i` of `a` and row `j` of `b` (exact: L2 summed in f64, or bit count).
pub fn distance(a: &Descriptors, i: usize, b: &Descriptors, j: usize) -> Result<f64> {
    kinds_match(a, b)?;
    if i >= a.len() || j >= b.len() {
        return Err(Error::InvalidInput(format!(
            "descriptor index out of range: {i} of {} or {j} of {}",
            a.len(),
            b.len()
        )));
    }
    Ok(match (a, b) {
        (Descriptors::Float(x), Descriptors::Float(y)) => x
            .row(i)
            .iter()
            .zip(y.row(j))
            .map(|(p, q)| (f64::from(*p) - f64::from(*q)).powi(2))
            .sum::<f64>()
            .sqrt(),
        (Descriptors::Binary(x), Descriptors::Binary(y)) => f64::from(hamming(&x[i], &y[j])),
        _ => return Err(Error::InvalidInput("descriptor kinds differ".into())),
    })
}

/// Hamming distance of two 256-bit codes: the matcher's own ([`crate::matching::hamming`]).
pub use crate::matching::hamming::distance as hamming;

/// All distances between the rows of `a` (rows of the result) and of `b` (columns).
/// Float: ‖a‖² + ‖b‖² − 2·a·b through SGEMM (ndarray → matrixmultiply), clamped at 0.
pub fn distance_matrix(a: &Descriptors, b: &Descriptors) -> Result<Array2<f32>> {
    kinds_match(a, b)?;
    match (a, b) {
        (Descriptors::Float(x), Descriptors::Float(y)) => {
            let nx = x.map_axis(Axis(1), |r| r.dot(&r));
            let ny = y.map_axis(Axis(1), |r| r.dot(&r));
            let mut d = x.dot(&y.t());
            for ((i, j), v) in d.indexed_iter_mut() {
                *v = (nx[i] + ny[j] - 2.0 * *v).max(0.0).sqrt();
            }
            Ok(d)
        }
        (Descriptors::Binary(x), Descriptors::Binary(y)) => {
            Ok(Array2::from_shape_fn((x.len(), y.len()), |(i, j)| {
                hamming(&x[i], &y[j]) as f32
            }))
        }
        _ => Err(Error::InvalidInput("descriptor kinds differ".into())),
    }
}

/// The rows `idx` of `d`, as a new descriptor set.
pub fn select(d: &Descriptors, idx: &[usize]) -> Result<Descriptors> {
    if let Some(&bad) = idx.iter().find(|&&i| i >= d.len()) {
        return Err(Error::InvalidInput(format!(
            "descriptor index {bad} out of range ({} rows)",
            d.len()
        )));
    }
    Ok(match d {
        Descriptors::Float(x) => Descriptors::Float(x.select(Axis(0), idx)),
        Descriptors::Binary(x) => Descriptors::Binary(idx.iter().map(|&i| x[i]).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn l2_matrix_matches_pairwise() {
        let a = Descriptors::Float(array![[1.0, 0.0, 0.0], [0.0, 3.0, 4.0]]);
        let b = Descriptors::Float(array![[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]);
        let m = distance_matrix(&a, &b).unwrap();
        assert!((m[[1, 0]] - 5.0).abs() < 1e-5);
        assert!((distance(&a, 0, &b, 1).unwrap() - 2f64.sqrt()).abs() < 1e-12);
        for i in 0..2 {
            for j in 0..2 {
                assert!((f64::from(m[[i, j]]) - distance(&a, i, &b, j).unwrap()).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn hamming_counts_bits() {
        let a = Descriptors::Binary(vec![[0b1011, 0, 0, 1 << 63]]);
        let b = Descriptors::Binary(vec![[0b0001, 0, u64::MAX, 0]]);
        assert_eq!(distance(&a, 0, &b, 0).unwrap(), 2.0 + 64.0 + 1.0);
        assert_eq!(distance_matrix(&a, &b).unwrap()[[0, 0]], 67.0);
        assert!(distance(&a, 0, &Descriptors::Float(array![[1.0]]), 0).is_err());
    }
}
