//! Exact binary matching: Hamming distance over `[u64; 4]` (256 bits) with popcount.
//!
//! Distances are exact integers. A is cut into blocks of rows (rayon) and B into tiles that
//! stay in L1/L2 cache; each block keeps the two best per row and per column. The inner kernel
//! is compiled for AVX-512 VPOPCNTDQ, AVX2 + POPCNT and plain POPCNT and picked at run time
//! (the x86-64 baseline has no popcount instruction).

use super::{NearestTwo, Nn2};
use crate::describe::BinaryDescriptor;
use rayon::prelude::*;

/// Rows of A per parallel block.
pub const ROW_BLOCK: usize = 64;
/// Columns of B per tile: 2048 × 32 bytes = 64 KB, resident in L2 while a block sweeps it.
pub const COL_TILE: usize = 2048;

/// Hamming distance between two 256-bit descriptors.
#[inline(always)]
pub fn distance(a: &BinaryDescriptor, b: &BinaryDescriptor) -> u32 {
    (a[0] ^ b[0]).count_ones()
        + (a[1] ^ b[1]).count_ones()
        + (a[2] ^ b[2]).count_ones()
        + (a[3] ^ b[3]).count_ones()
}

/// Distances from `q` to every descriptor of `tile`, written to `out`.
#[inline(always)]
fn distances_generic(q: &BinaryDescriptor, tile: &[BinaryDescriptor], out: &mut [u32]) {
    for (o, t) in out.iter_mut().zip(tile) {
        *o = distance(q, t);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,avx2,popcnt")]
unsafe fn distances_avx512(q: &BinaryDescriptor, tile: &[BinaryDescriptor], out: &mut [u32]) {
    distances_generic(q, tile, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn distances_avx2(q: &BinaryDescriptor, tile: &[BinaryDescriptor], out: &mut [u32]) {
    distances_generic(q, tile, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn distances_popcnt(q: &BinaryDescriptor, tile: &[BinaryDescriptor], out: &mut [u32]) {
    distances_generic(q, tile, out)
}

type Kernel = fn(&BinaryDescriptor, &[BinaryDescriptor], &mut [u32]);

/// The fastest kernel this CPU supports.
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512vpopcntdq") && is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports every feature the function was compiled for.
            return |q, t, o| unsafe { distances_avx512(q, t, o) };
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("popcnt") {
            // SAFETY: as above.
            return |q, t, o| unsafe { distances_avx2(q, t, o) };
        }
        if is_x86_feature_detected!("popcnt") {
            // SAFETY: as above.
            return |q, t, o| unsafe { distances_popcnt(q, t, o) };
        }
    }
    distances_generic
}

/// Exact two nearest neighbours (Hamming) of every row of `a` in `b` and of every row of `b` in `a`.
pub fn nearest_two(a: &[BinaryDescriptor], b: &[BinaryDescriptor]) -> NearestTwo {
    let nb = b.len();
    let kernel = kernel();
    let blocks: Vec<(Vec<Nn2>, Vec<Nn2>)> = a
        .par_chunks(ROW_BLOCK)
        .enumerate()
        .map(|(blk, rows_a)| {
            let start = blk * ROW_BLOCK;
            let mut rows = vec![Nn2::EMPTY; rows_a.len()];
            let mut cols = vec![Nn2::EMPTY; nb];
            let mut dist = vec![0u32; COL_TILE.min(nb)];
            for (t, tile) in b.chunks(COL_TILE).enumerate() {
                let j0 = t * COL_TILE;
                let cols_tile = &mut cols[j0..j0 + tile.len()];
                for (r, (q, row_nn)) in rows_a.iter().zip(rows.iter_mut()).enumerate() {
                    let d = &mut dist[..tile.len()];
                    kernel(q, tile, d);
                    let i = (start + r) as u32;
                    for (jj, (&dd, col_nn)) in d.iter().zip(cols_tile.iter_mut()).enumerate() {
                        let dd = dd as f32;
                        row_nn.push((j0 + jj) as u32, dd);
                        col_nn.push(i, dd);
                    }
                }
            }
            (rows, cols)
        })
        .collect();
    let mut rows = Vec::with_capacity(a.len());
    let mut cols = vec![Nn2::EMPTY; nb];
    for (block_rows, block_cols) in blocks {
        rows.extend(block_rows);
        for (c, bc) in cols.iter_mut().zip(&block_cols) {
            c.merge(bc);
        }
    }
    NearestTwo { rows, cols }
}

/// Reference: a plain double loop with per-bit counting, for tests.
pub fn nearest_two_naive(a: &[BinaryDescriptor], b: &[BinaryDescriptor]) -> NearestTwo {
    let mut rows = vec![Nn2::EMPTY; a.len()];
    let mut cols = vec![Nn2::EMPTY; b.len()];
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            let mut d = 0u32;
            for bit in 0..256 {
                d += (((x[bit / 64] ^ y[bit / 64]) >> (bit % 64)) & 1) as u32;
            }
            rows[i].push(j as u32, d as f32);
            cols[j].push(i as u32, d as f32);
        }
    }
    NearestTwo { rows, cols }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, seed: u64) -> Vec<BinaryDescriptor> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| [rng.gen(), rng.gen(), rng.gen(), rng.gen()])
            .collect()
    }

    #[test]
    fn hand_computed_distance() {
        let a = [0b1011u64, 0, u64::MAX, 1 << 63];
        let b = [0b0001u64, 0, 0, 0];
        assert_eq!(distance(&a, &b), 2 + 64 + 1);
    }

    #[test]
    fn same_as_naive_loop_including_ties() {
        // Few distinct bits make ties frequent: ties must resolve to the lower index both ways.
        let mut a = random(150, 1);
        let mut b = random(COL_TILE + 70, 2);
        for d in a.iter_mut().chain(b.iter_mut()) {
            d[1] = 0;
            d[2] = 0;
            d[3] &= 0xff;
        }
        let fast = nearest_two(&a, &b);
        let slow = nearest_two_naive(&a, &b);
        assert_eq!(fast, slow);
        let (a, b) = (random(70, 3), random(300, 4));
        assert_eq!(nearest_two(&a, &b), nearest_two_naive(&a, &b));
    }
}
