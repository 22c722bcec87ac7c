//! Small dense linear algebra on 3×3 matrices stored row-major as `[[f64; 3]; 3]` (homographies,
//! camera matrices, rotations): the one place the product, transpose and explicit cofactor
//! inverse live, shared by COLMAP export, pose evaluation, the Oxford overlap error and the
//! training crate's synthetic views. OpenCV would do it too,
//! but through a `Mat` round trip for nine numbers.

/// A 3×3 matrix, row-major.
pub type Mat3 = [[f64; 3]; 3];

/// The product a·b.
pub fn mul3(a: &Mat3, b: &Mat3) -> Mat3 {
    std::array::from_fn(|r| std::array::from_fn(|c| (0..3).map(|k| a[r][k] * b[k][c]).sum()))
}

/// The transpose of `m`.
pub fn transpose3(m: &Mat3) -> Mat3 {
    std::array::from_fn(|r| std::array::from_fn(|c| m[c][r]))
}

/// The inverse of `m` by cofactors (adjugate / determinant), or None when the determinant is
/// not finite or its magnitude is not above `min_abs_det` (each caller picks what it treats
/// as singular).
pub fn invert3(m: &Mat3, min_abs_det: f64) -> Option<Mat3> {
    // Cofactor of entry (r, k), with the sign folded in by the cyclic index order.
    let c = |r: usize, k: usize| {
        m[(r + 1) % 3][(k + 1) % 3] * m[(r + 2) % 3][(k + 2) % 3]
            - m[(r + 1) % 3][(k + 2) % 3] * m[(r + 2) % 3][(k + 1) % 3]
    };
    let det = m[0][0] * c(0, 0) + m[0][1] * c(0, 1) + m[0][2] * c(0, 2);
    if !(det.is_finite() && det.abs() > min_abs_det) {
        return None;
    }
    // inverse[k][r] = cofactor(r, k) / det
    Some([0, 1, 2].map(|k| [0, 1, 2].map(|r| c(r, k) / det)))
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn inverse_times_matrix_is_identity() {
        let m = [[2.0, 0.0, 1.0], [1.0, 3.0, 0.0], [0.0, 1.0, 4.0]];
        let i = invert3(&m, 0.0).unwrap();
        for r in 0..3 {
            for c in 0..3 {
                let v: f64 = (0..3).map(|k| m[r][k] * i[k][c]).sum();
                assert!((v - if r == c { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn product_and_transpose_by_hand() {
        let a = [[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [4.0, 0.0, 1.0]];
        let b = [[2.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 5.0, 1.0]];
        // By hand: entry (r, c) = Σ_k a[r][k]·b[k][c].
        assert_eq!(
            mul3(&a, &b),
            [[4.0, 2.0, 1.0], [1.0, 16.0, 3.0], [8.0, 5.0, 5.0]]
        );
        assert_eq!(
            transpose3(&a),
            [[1.0, 0.0, 4.0], [2.0, 1.0, 0.0], [0.0, 3.0, 1.0]]
        );
    }

    #[test]
    fn singular_and_non_finite_give_none() {
        let singular = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]];
        assert_eq!(invert3(&singular, 0.0), None);
        let tiny = [[1e-7, 0.0, 0.0], [0.0, 1e-7, 0.0], [0.0, 0.0, 1.0]];
        assert!(invert3(&tiny, 1e-15).is_some());
        assert_eq!(invert3(&tiny, 1e-12), None);
        let nan = [[f64::NAN, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        assert_eq!(invert3(&nan, 0.0), None);
    }
}
