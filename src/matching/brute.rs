//! Exact float matching: blocked brute force on SGEMM.
//!
//! Squared L2 distances come from one matrix product: ‖a − b‖² = ‖a‖² + ‖b‖² − 2·a·b
//! (= 2 − 2·a·b for unit vectors; the norms are computed, so non-unit input is exact too).
//! A is cut into blocks of rows; each block is one SGEMM (matrixmultiply, runtime-dispatched
//! AVX/FMA kernels) followed by a scan that updates the two best per row and per column, and
//! rayon runs the blocks in parallel. Memory stays at one block × |B| distances per thread.

use super::{NearestTwo, Nn2};
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::borrow::Cow;

/// Rows of A per SGEMM block: 128 rows × 4000 columns × 4 bytes = 2 MB of distances per
/// block, about one L2 cache, while still giving rayon enough blocks to balance.
pub const ROW_BLOCK: usize = 128;

/// Row-major contiguous data of a 2-D view (borrowed when already contiguous).
pub(crate) fn contiguous<'a>(v: &'a ArrayView2<'a, f32>) -> Cow<'a, [f32]> {
    match v.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(v.iter().copied().collect()),
    }
}

/// `out = A·Bᵀ`: the dot products of every row of `a` (m × dim, row-major) with every row of
/// `b` (n × dim, row-major), m × n row-major. One SGEMM; extents are checked, so a mismatch
/// writes nothing rather than reading out of bounds.
pub(crate) fn dots_abt(a: &[f32], b: &[f32], dim: usize, out: &mut [f32]) {
    if dim == 0 || !a.len().is_multiple_of(dim) || !b.len().is_multiple_of(dim) {
        debug_assert!(
            false,
            "dots_abt: {} and {} values are not rows of {dim}",
            a.len(),
            b.len()
        );
        return;
    }
    let (m, n) = (a.len() / dim, b.len() / dim);
    if m == 0 || n == 0 || out.len() != m * n {
        debug_assert!(
            m == 0 || n == 0,
            "dots_abt: output of {} for {m} × {n}",
            out.len()
        );
        return;
    }
    // SAFETY: a is m×dim row-major (strides dim, 1); b is n×dim row-major, read as its
    // transpose dim×n (strides 1, dim); out is m×n row-major (n, 1). The checks above make
    // every slice exactly the extent its strides address.
    unsafe {
        matrixmultiply::sgemm(
            m,
            dim,
            n,
            1.0,
            a.as_ptr(),
            dim as isize,
            1,
            b.as_ptr(),
            1,
            dim as isize,
            0.0,
            out.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

pub(crate) fn squared_norms(data: &[f32], dim: usize) -> Vec<f32> {
    data.chunks_exact(dim)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// Exact two nearest neighbours (L2) of every row of `a` in `b` and of every row of `b` in `a`.
/// `a` and `b` must have the same number of columns (checked by [`super::validate`]).
pub fn nearest_two(a: ArrayView2<f32>, b: ArrayView2<f32>) -> NearestTwo {
    let (na, dim) = a.dim();
    let nb = b.nrows();
    if na == 0 || nb == 0 || dim == 0 || dim != b.ncols() {
        return NearestTwo {
            rows: vec![Nn2::EMPTY; na],
            cols: vec![Nn2::EMPTY; nb],
        };
    }
    let a_data = contiguous(&a);
    let b_data = contiguous(&b);
    let norms_a = squared_norms(&a_data, dim);
    let norms_b = squared_norms(&b_data, dim);
    let n_blocks = na.div_ceil(ROW_BLOCK);

    let blocks: Vec<(Vec<Nn2>, Vec<Nn2>)> = (0..n_blocks)
        .into_par_iter()
        .map(|blk| {
            let start = blk * ROW_BLOCK;
            let m = ROW_BLOCK.min(na - start);
            let mut dots = vec![0f32; m * nb];
            let a_block = &a_data[start * dim..(start + m) * dim];
            dots_abt(a_block, &b_data, dim, &mut dots);
            let mut rows = vec![Nn2::EMPTY; m];
            let mut cols = vec![Nn2::EMPTY; nb];
            for (r, (row_dots, row_nn)) in dots.chunks_exact(nb).zip(rows.iter_mut()).enumerate() {
                let i = start + r;
                let na_i = norms_a[i];
                for (j, ((&dot, &nb_j), col_nn)) in row_dots
                    .iter()
                    .zip(&norms_b)
                    .zip(cols.iter_mut())
                    .enumerate()
                {
                    let d2 = na_i + nb_j - 2.0 * dot;
                    row_nn.push(j as u32, d2);
                    col_nn.push(i as u32, d2);
                }
            }
            (rows, cols)
        })
        .collect();

    let mut rows = Vec::with_capacity(na);
    let mut cols = vec![Nn2::EMPTY; nb];
    for (block_rows, block_cols) in blocks {
        rows.extend(block_rows);
        // Blocks are merged in increasing row order, so ties keep the lower row index.
        for (c, bc) in cols.iter_mut().zip(&block_cols) {
            c.merge(bc);
        }
    }
    for nn in rows.iter_mut().chain(cols.iter_mut()) {
        nn.best_dist = nn.best_dist.max(0.0).sqrt();
        nn.second_dist = nn.second_dist.max(0.0).sqrt();
    }
    NearestTwo { rows, cols }
}

/// Reference implementation for tests and cross-checks: a plain double loop on
/// ‖a − b‖² accumulated in f64.
pub fn nearest_two_naive(a: ArrayView2<f32>, b: ArrayView2<f32>) -> NearestTwo {
    let mut rows = vec![Nn2::EMPTY; a.nrows()];
    let mut cols = vec![Nn2::EMPTY; b.nrows()];
    for (i, ra) in a.outer_iter().enumerate() {
        for (j, rb) in b.outer_iter().enumerate() {
            let d2: f64 = ra
                .iter()
                .zip(rb.iter())
                .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
                .sum();
            let d = d2.sqrt() as f32;
            rows[i].push(j as u32, d);
            cols[j].push(i as u32, d);
        }
    }
    NearestTwo { rows, cols }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, d: usize, seed: u64, unit: bool) -> Array2<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut m = Array2::from_shape_fn((n, d), |_| rng.gen_range(-1.0f32..1.0));
        if unit {
            for mut r in m.outer_iter_mut() {
                let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
                r.mapv_inplace(|v| v / n);
            }
        }
        m
    }

    #[test]
    fn hand_computed_case() {
        let a = ndarray::arr2(&[[0.0f32, 0.0], [3.0, 4.0]]);
        let b = ndarray::arr2(&[[0.0f32, 1.0], [3.0, 3.0], [10.0, 0.0]]);
        let nn = nearest_two(a.view(), b.view());
        assert_eq!((nn.rows[0].best, nn.rows[0].best_dist), (0, 1.0));
        assert_eq!(nn.rows[0].second, 1);
        assert!((nn.rows[0].second_dist - 18f32.sqrt()).abs() < 1e-6);
        assert_eq!((nn.rows[1].best, nn.rows[1].best_dist), (1, 1.0));
        assert_eq!((nn.cols[2].best, nn.cols[2].second), (1, 0));
        assert!((nn.cols[2].best_dist - 65f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn same_as_naive_loop_unit_and_non_unit() {
        // Sizes straddle the block size and leave a partial last block.
        for (na, nb, unit) in [(300, 257, true), (131, 40, false), (1, 5, true)] {
            let a = random(na, 128, na as u64, unit);
            let b = random(nb, 128, 1000 + nb as u64, unit);
            let fast = nearest_two(a.view(), b.view());
            let slow = nearest_two_naive(a.view(), b.view());
            for (f, s) in fast
                .rows
                .iter()
                .chain(&fast.cols)
                .zip(slow.rows.iter().chain(&slow.cols))
            {
                assert_eq!(f.best, s.best);
                assert_eq!(f.second, s.second);
                assert!((f.best_dist - s.best_dist).abs() < 1e-4, "{f:?} vs {s:?}");
                assert!((f.second_dist - s.second_dist).abs() < 1e-4 || s.second == u32::MAX);
            }
        }
    }

    #[test]
    fn non_contiguous_view_is_handled() {
        let a = random(50, 128, 7, true);
        let b = random(60, 256, 8, true);
        let b_cols = b.slice(ndarray::s![.., ..128]);
        let fast = nearest_two(a.view(), b_cols);
        let slow = nearest_two_naive(a.view(), b_cols);
        assert_eq!(
            fast.rows.iter().map(|n| n.best).collect::<Vec<_>>(),
            slow.rows.iter().map(|n| n.best).collect::<Vec<_>>()
        );
    }
}
