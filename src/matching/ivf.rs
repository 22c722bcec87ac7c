//! Inverted-file (IVF) two-nearest-neighbour search for float descriptors: the kind of index
//! COLMAP 4's CPU SIFT matcher searches by default (`SiftMatchingOptions::cpu_brute_force_matcher`
//! false: a faiss inverted-file index), built here on the same SGEMM as the exact matcher.
//!
//! Why: the exact matcher ([`super::brute`]) already runs its SGEMM at this CPU's f32 peak, so
//! for 8 000–11 000 descriptors per image the only way to match a pair in less time is to
//! compute fewer distances. Each side's descriptors are split into Voronoi cells by k-means
//! (Lloyd's algorithm; Jégou, Douze & Schmid, "Product quantization for nearest neighbor
//! search", TPAMI 2011, §III-A, the inverted file "IVFADC" without its quantizer: distances here
//! are exact L2 on the full descriptors). A query is compared with the cell centres, then with
//! the descriptors of its [`IvfConfig::probes`] nearest cells only. Its two nearest neighbours
//! are exact when both lie in those cells; otherwise the search returns the nearest ones it saw
//! (a true neighbour missed makes a larger first or second distance). `benches/match_ivf`
//! measures how often the resulting matches differ from the exact matcher's on real features.
//! Ties between rows at one distance in different cells go to the cell searched first, not
//! always to the lower row as in the exact matcher.
//!
//! Both directions are searched (A's rows in B's index, B's rows in A's), so the mutual check
//! and the ratio test of [`super::filters`] work unchanged. Everything is deterministic: the
//! k-means starts from evenly strided rows, and the cells are searched and merged in order.

use super::brute::{contiguous, dots_abt, squared_norms};
use super::{NearestTwo, Nn2};
use ndarray::ArrayView2;
use rayon::prelude::*;

/// Descriptors per cell aimed at: the cells of an image of `n` descriptors number
/// `n / IVF_ROWS_PER_LIST`.
pub const IVF_ROWS_PER_LIST: usize = 64;
/// k-means training rows per cell (a strided sample; the rest are only assigned).
pub const IVF_TRAIN_ROWS_PER_LIST: usize = 32;
/// Lloyd iterations of the k-means.
pub const IVF_KMEANS_ITERATIONS: usize = 6;
/// Cells searched per query by default, chosen on Herz-Jesus-P8's pairs with
/// `benches/match_ivf` (docs/BENCHMARKS.md, "The inverted-file matcher"): 16 of the ~170 cells
/// of an 11 000-descriptor image keep ~98 % of the exact matcher's matches in ~half its time;
/// 8 keep 93 %, 32 keep 99.3 % at 0.85×.
pub const IVF_PROBES: usize = 16;
/// Below this many descriptors on either side the search is exact ([`super::brute`]): a set
/// of 4 096 has 64 cells, of which the default probes scan a quarter plus the index's cost,
/// so smaller sets (`descl match`'s 2 048 keypoints) save little or nothing.
pub const IVF_MIN_ROWS: usize = 4096;
/// Queries per block of the query × cell-centre product (bounds its memory).
const QUERY_BLOCK: usize = 1024;

/// Settings of the inverted-file search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfConfig {
    /// Cells searched per query.
    pub probes: usize,
    /// Descriptors per cell aimed at.
    pub rows_per_list: usize,
}

impl Default for IvfConfig {
    fn default() -> Self {
        IvfConfig {
            probes: IVF_PROBES,
            rows_per_list: IVF_ROWS_PER_LIST,
        }
    }
}

/// An inverted file over one side's descriptors: cell centres and, per cell, the indices of its
/// rows (increasing) with their data gathered contiguously.
struct Index {
    dim: usize,
    centres: Vec<f32>,
    centre_norms: Vec<f32>,
    ids: Vec<Vec<u32>>,
    data: Vec<Vec<f32>>,
    norms: Vec<Vec<f32>>,
}

/// Index of the nearest centre of each row of `rows` (squared L2 through one SGEMM).
fn assign(rows: &[f32], centres: &[f32], centre_norms: &[f32], dim: usize) -> Vec<u32> {
    let k = centre_norms.len();
    rows.par_chunks(QUERY_BLOCK * dim)
        .flat_map_iter(|block| {
            let m = block.len() / dim;
            let mut dots = vec![0f32; m * k];
            dots_abt(block, centres, dim, &mut dots);
            dots.chunks_exact(k)
                .map(|row| {
                    // ‖x‖² is the same for every centre: compare ‖c‖² − 2 x·c.
                    let mut best = (0u32, f32::INFINITY);
                    for (c, (&d, &cn)) in row.iter().zip(centre_norms).enumerate() {
                        let v = cn - 2.0 * d;
                        if v < best.1 {
                            best = (c as u32, v);
                        }
                    }
                    best.0
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

impl Index {
    fn build(data: &[f32], dim: usize, rows_per_list: usize) -> Index {
        let n = data.len() / dim;
        let k = (n / rows_per_list.max(1)).max(1);
        // Strided training sample, strided initial centres.
        let train_n = n.min(k * IVF_TRAIN_ROWS_PER_LIST);
        let train: Vec<f32> = (0..train_n)
            .flat_map(|i| {
                let r = i * n / train_n;
                data[r * dim..(r + 1) * dim].iter().copied()
            })
            .collect();
        let mut centres: Vec<f32> = (0..k)
            .flat_map(|c| {
                let r = c * train_n / k;
                train[r * dim..(r + 1) * dim].iter().copied()
            })
            .collect();
        for _ in 0..IVF_KMEANS_ITERATIONS {
            let norms = squared_norms(&centres, dim);
            let label = assign(&train, &centres, &norms, dim);
            let mut sum = vec![0f64; k * dim];
            let mut count = vec![0usize; k];
            for (row, &c) in train.chunks_exact(dim).zip(&label) {
                count[c as usize] += 1;
                for (s, &v) in sum[c as usize * dim..(c as usize + 1) * dim]
                    .iter_mut()
                    .zip(row)
                {
                    *s += v as f64;
                }
            }
            // An empty cell keeps its centre.
            for c in (0..k).filter(|&c| count[c] > 0) {
                for (dst, s) in centres[c * dim..(c + 1) * dim]
                    .iter_mut()
                    .zip(&sum[c * dim..(c + 1) * dim])
                {
                    *dst = (*s / count[c] as f64) as f32;
                }
            }
        }
        let centre_norms = squared_norms(&centres, dim);
        let label = assign(data, &centres, &centre_norms, dim);
        let mut ids = vec![Vec::new(); k];
        for (i, &c) in label.iter().enumerate() {
            ids[c as usize].push(i as u32);
        }
        let gather = |list: &Vec<u32>| -> Vec<f32> {
            list.iter()
                .flat_map(|&i| {
                    data[i as usize * dim..(i as usize + 1) * dim]
                        .iter()
                        .copied()
                })
                .collect()
        };
        let data_lists: Vec<Vec<f32>> = ids.iter().map(gather).collect();
        let norms = data_lists.iter().map(|d| squared_norms(d, dim)).collect();
        Index {
            dim,
            centres,
            centre_norms,
            ids,
            data: data_lists,
            norms,
        }
    }

    /// The two nearest rows of the index (of those in each query's `probes` nearest cells) for
    /// every row of `queries`; distances squared.
    fn search(&self, queries: &[f32], probes: usize) -> Vec<Nn2> {
        let dim = self.dim;
        let k = self.centre_norms.len();
        let probes = probes.clamp(1, k);
        // Each query's nearest cells.
        let probed: Vec<u32> = queries
            .par_chunks(QUERY_BLOCK * dim)
            .flat_map_iter(|block| {
                let m = block.len() / dim;
                let mut dots = vec![0f32; m * k];
                dots_abt(block, &self.centres, dim, &mut dots);
                let mut out = Vec::with_capacity(m * probes);
                let mut order: Vec<(f32, u32)> = Vec::with_capacity(k);
                for row in dots.chunks_exact(k) {
                    order.clear();
                    // An empty cell (k-means left it without rows) is never probed; ties go
                    // to the lower cell, as in `assign`.
                    order.extend(
                        row.iter()
                            .zip(&self.centre_norms)
                            .zip(&self.ids)
                            .enumerate()
                            .map(|(c, ((&d, &cn), ids))| {
                                let v = if ids.is_empty() {
                                    f32::INFINITY
                                } else {
                                    cn - 2.0 * d
                                };
                                (v, c as u32)
                            }),
                    );
                    order.select_nth_unstable_by(probes - 1, |x, y| {
                        x.0.total_cmp(&y.0).then(x.1.cmp(&y.1))
                    });
                    out.extend(order[..probes].iter().map(|&(_, c)| c));
                }
                out
            })
            .collect();
        // The queries of each cell.
        let mut per_cell: Vec<Vec<u32>> = vec![Vec::new(); k];
        for (q, cells) in probed.chunks_exact(probes).enumerate() {
            for &c in cells {
                per_cell[c as usize].push(q as u32);
            }
        }
        let q_norms = squared_norms(queries, dim);
        // Per cell: one SGEMM of its queries against its rows, two best per query.
        let found: Vec<Vec<(u32, Nn2)>> = per_cell
            .par_iter()
            .enumerate()
            .map(|(c, qs)| {
                let members = &self.ids[c];
                if qs.is_empty() || members.is_empty() {
                    return Vec::new();
                }
                // In blocks of queries: a cell k-means made large (many near-identical
                // descriptors) must not take |queries| × |rows| floats at once.
                let mut out = Vec::with_capacity(qs.len());
                for block in qs.chunks(QUERY_BLOCK) {
                    let q_data: Vec<f32> = block
                        .iter()
                        .flat_map(|&q| {
                            queries[q as usize * dim..(q as usize + 1) * dim]
                                .iter()
                                .copied()
                        })
                        .collect();
                    let mut dots = vec![0f32; block.len() * members.len()];
                    dots_abt(&q_data, &self.data[c], dim, &mut dots);
                    for (&q, row) in block.iter().zip(dots.chunks_exact(members.len())) {
                        let qn = q_norms[q as usize];
                        let mut nn = Nn2::EMPTY;
                        for ((&d, &xn), &id) in row.iter().zip(&self.norms[c]).zip(members) {
                            nn.push(id, qn + xn - 2.0 * d);
                        }
                        out.push((q, nn));
                    }
                }
                out
            })
            .collect();
        let mut out = vec![Nn2::EMPTY; queries.len() / dim];
        for (q, nn) in found.iter().flatten() {
            out[*q as usize].merge(nn);
        }
        out
    }
}

/// Two nearest neighbours of every row of `a` in `b` and of every row of `b` in `a`, searched in
/// inverted files (exact when either side has fewer than [`IVF_MIN_ROWS`] rows). `a` and `b`
/// must have the same number of columns (checked by [`super::validate`]).
pub fn nearest_two(a: ArrayView2<f32>, b: ArrayView2<f32>, cfg: &IvfConfig) -> NearestTwo {
    let dim = a.ncols();
    if a.nrows() < IVF_MIN_ROWS || b.nrows() < IVF_MIN_ROWS || dim != b.ncols() || dim == 0 {
        return super::brute::nearest_two(a, b);
    }
    let a_data = contiguous(&a);
    let b_data = contiguous(&b);
    let (rows, cols) = rayon::join(
        || Index::build(&b_data, dim, cfg.rows_per_list).search(&a_data, cfg.probes),
        || Index::build(&a_data, dim, cfg.rows_per_list).search(&b_data, cfg.probes),
    );
    let mut nn = NearestTwo { rows, cols };
    for n in nn.rows.iter_mut().chain(nn.cols.iter_mut()) {
        n.best_dist = n.best_dist.max(0.0).sqrt();
        n.second_dist = n.second_dist.max(0.0).sqrt();
    }
    nn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::{filters, MatchConfig};
    use ndarray::Array2;
    use rand::{Rng, SeedableRng};

    /// Unit vectors around `clusters` random centres, and a noisy copy of each (the "other
    /// image"), so every row has one true match and many near misses, as descriptors do.
    fn pair(n: usize, clusters: usize, seed: u64) -> (Array2<f32>, Array2<f32>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let d = 128;
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..d).map(|_| rng.gen_range(-1.0f32..1.0)).collect())
            .collect();
        let mut a = Array2::zeros((n, d));
        let mut b = Array2::zeros((n, d));
        for i in 0..n {
            let c = &centres[i % clusters];
            for j in 0..d {
                let v = c[j] + rng.gen_range(-0.6f32..0.6);
                a[[i, j]] = v;
                b[[i, j]] = v + rng.gen_range(-0.1f32..0.1);
            }
        }
        for m in [&mut a, &mut b] {
            for mut r in m.outer_iter_mut() {
                let s = r.iter().map(|v| v * v).sum::<f32>().sqrt();
                r.mapv_inplace(|v| v / s);
            }
        }
        (a, b)
    }

    #[test]
    fn small_sets_are_searched_exactly() {
        let (a, b) = pair(IVF_MIN_ROWS - 1, 20, 1);
        let ivf = nearest_two(a.view(), b.view(), &IvfConfig::default());
        assert_eq!(ivf, crate::matching::brute::nearest_two(a.view(), b.view()));
    }

    #[test]
    fn probing_every_cell_is_exact() {
        let (a, b) = pair(IVF_MIN_ROWS + 500, 40, 2);
        let cfg = IvfConfig {
            probes: usize::MAX,
            ..IvfConfig::default()
        };
        let ivf = nearest_two(a.view(), b.view(), &cfg);
        let exact = crate::matching::brute::nearest_two_naive(a.view(), b.view());
        for (f, s) in ivf
            .rows
            .iter()
            .chain(&ivf.cols)
            .zip(exact.rows.iter().chain(&exact.cols))
        {
            assert_eq!((f.best, f.second), (s.best, s.second));
            assert!((f.best_dist - s.best_dist).abs() < 1e-4, "{f:?} vs {s:?}");
        }
    }

    #[test]
    fn default_probes_keep_the_exact_matches() {
        let (a, b) = pair(6000, 60, 3);
        let cfg = MatchConfig::default();
        let exact = filters::apply(
            &crate::matching::brute::nearest_two(a.view(), b.view()),
            &cfg,
        );
        let ivf = filters::apply(
            &nearest_two(a.view(), b.view(), &IvfConfig::default()),
            &cfg,
        );
        let exact_set: std::collections::HashSet<_> = exact.pairs.iter().collect();
        let kept = ivf.pairs.iter().filter(|p| exact_set.contains(p)).count();
        assert!(
            exact.len() > 3000,
            "the test pair should match well: {}",
            exact.len()
        );
        // Same matches to within 1 % either way.
        assert!(
            kept as f64 >= 0.99 * exact.len() as f64,
            "{kept} of {}",
            exact.len()
        );
        assert!(
            ivf.len() as f64 <= 1.01 * exact.len() as f64,
            "{} vs {}",
            ivf.len(),
            exact.len()
        );
    }
}
