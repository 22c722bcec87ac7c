//! kd-trees (kiddo) where they win: low dimensions.
//!
//! - [`PositionIndex`]: a 2-D tree over keypoint positions, the candidate search of guided
//!   matching ([`super::guided`]).
//! - [`approximate_match`]: descriptors reduced by PCA to [`PCA_DIM`] dimensions, a kd-tree
//!   proposes the nearest `candidates` in the reduced space, and the exact L2 distance on the
//!   full descriptors re-ranks them. The speed report measures its speed and recall against the
//!   exact matcher.

use super::{filters, MatchConfig, Matches, NearestTwo, Nn2};
use crate::error::{Error, Result};
use kiddo::{ImmutableKdTree, SquaredEuclidean};
use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;
use std::num::NonZeroUsize;

/// Reduced dimension for the approximate matcher: kd-trees lose their edge above ~10-D.
pub const PCA_DIM: usize = 8;

/// A 2-D kd-tree over keypoint positions (pixels).
pub struct PositionIndex {
    tree: ImmutableKdTree<f32, 2>,
}

impl PositionIndex {
    pub fn new(points: &[[f32; 2]]) -> Result<Self> {
        let tree = ImmutableKdTree::new_from_slice(points)
            .map_err(|e| Error::InvalidInput(format!("kd-tree over keypoints: {e:?}")))?;
        Ok(PositionIndex { tree })
    }

    /// Indices of the points within `radius` pixels of `(x, y)` (unsorted).
    pub fn within(&self, x: f32, y: f32, radius: f32) -> Vec<u32> {
        self.tree
            .query(&[x, y])
            .within::<SquaredEuclidean<f32>>(radius * radius)
            .unsorted()
            .execute()
            .into_iter()
            .map(|r| r.item)
            .collect()
    }
}

/// Settings of the approximate matcher.
#[derive(Debug, Clone, PartialEq)]
pub struct ApproxConfig {
    /// Candidates proposed per query in the reduced space, re-ranked exactly.
    pub candidates: usize,
}

impl Default for ApproxConfig {
    fn default() -> Self {
        ApproxConfig { candidates: 32 }
    }
}

/// Principal axes of the rows of `data` (mean and the top [`PCA_DIM`] eigenvectors of the
/// covariance, from OpenCV's symmetric eigen-solver).
pub struct Pca {
    mean: Vec<f32>,
    axes: Array2<f32>, // PCA_DIM × D
}

impl Pca {
    pub fn fit(data: ArrayView2<f32>) -> Result<Self> {
        let (n, d) = data.dim();
        if n < 2 || d < PCA_DIM {
            return Err(Error::InvalidInput(format!(
                "PCA needs ≥ 2 rows of ≥ {PCA_DIM} dims, got {n}×{d}"
            )));
        }
        let mean = data
            .map(|&v| v as f64)
            .mean_axis(Axis(0))
            .ok_or_else(|| Error::InvalidInput("empty".into()))?;
        let centred = data.map(|&v| v as f64) - &mean;
        let cov = centred.t().dot(&centred) / (n as f64 - 1.0);
        let cov_vec: Vec<f64> = cov.iter().copied().collect();
        let cov_mat = opencv::core::Mat::new_rows_cols_with_data(d as i32, d as i32, &cov_vec)?;
        let mut values = opencv::core::Mat::default();
        let mut vectors = opencv::core::Mat::default();
        // Eigenvectors come as rows, sorted by decreasing eigenvalue.
        opencv::core::eigen(&cov_mat, &mut values, &mut vectors)?;
        let mut axes = Array2::<f32>::zeros((PCA_DIM, d));
        for k in 0..PCA_DIM {
            for c in 0..d {
                axes[[k, c]] =
                    *opencv::prelude::MatTraitConst::at_2d::<f64>(&vectors, k as i32, c as i32)?
                        as f32;
            }
        }
        Ok(Pca {
            mean: mean.iter().map(|&v| v as f32).collect(),
            axes,
        })
    }

    pub fn project(&self, data: ArrayView2<f32>) -> Vec<[f32; PCA_DIM]> {
        data.outer_iter()
            .map(|row| {
                let mut out = [0f32; PCA_DIM];
                for (k, o) in out.iter_mut().enumerate() {
                    *o = row
                        .iter()
                        .zip(&self.mean)
                        .zip(self.axes.row(k))
                        .map(|((v, m), a)| (v - m) * a)
                        .sum();
                }
                out
            })
            .collect()
    }
}

fn exact_l2(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f32 {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f32>()
        .sqrt()
}

/// Approximate two-NN of every row of `query` among `train`: kd-tree candidates in PCA space,
/// exact re-ranking on full descriptors.
fn approx_two_nn(
    query: ArrayView2<f32>,
    train: ArrayView2<f32>,
    q_red: &[[f32; PCA_DIM]],
    tree: &ImmutableKdTree<f32, PCA_DIM>,
    candidates: NonZeroUsize,
) -> Vec<Nn2> {
    q_red
        .par_iter()
        .enumerate()
        .map(|(i, q)| {
            let mut found: Vec<u32> = tree
                .query(q)
                .nearest_n::<SquaredEuclidean<f32>>(candidates)
                .execute()
                .into_iter()
                .map(|r| r.item)
                .collect();
            found.sort_unstable();
            let mut nn = Nn2::EMPTY;
            for j in found {
                nn.push(j, exact_l2(query.row(i), train.row(j as usize)));
            }
            nn
        })
        .collect()
}

/// Approximate matcher on float descriptors, then the same filters as the exact matcher.
/// PCA is fitted on both sides together; the mutual check uses the reverse approximate search.
pub fn approximate_match(
    a: ArrayView2<f32>,
    b: ArrayView2<f32>,
    approx: &ApproxConfig,
    config: &MatchConfig,
) -> Result<Matches> {
    let candidates = NonZeroUsize::new(approx.candidates).ok_or_else(|| {
        Error::InvalidInput("approximate matcher needs at least one candidate".into())
    })?;
    let both =
        ndarray::concatenate(Axis(0), &[a, b]).map_err(|e| Error::InvalidInput(e.to_string()))?;
    let pca = Pca::fit(both.view())?;
    let (ra, rb) = (pca.project(a), pca.project(b));
    let tree_b = ImmutableKdTree::new_from_slice(&rb)
        .map_err(|e| Error::InvalidInput(format!("kd-tree: {e:?}")))?;
    let tree_a = ImmutableKdTree::new_from_slice(&ra)
        .map_err(|e| Error::InvalidInput(format!("kd-tree: {e:?}")))?;
    let rows = approx_two_nn(a, b, &ra, &tree_b, candidates);
    let cols = approx_two_nn(b, a, &rb, &tree_a, candidates);
    Ok(filters::apply(&NearestTwo { rows, cols }, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_index_finds_points_in_radius() {
        let pts = [[0.0f32, 0.0], [3.0, 4.0], [10.0, 10.0], [5.0, 0.0]];
        let idx = PositionIndex::new(&pts).unwrap();
        let mut got = idx.within(0.0, 0.0, 5.0);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 3]); // (3,4) and (5,0) are exactly 5 px away: inclusive
        assert_eq!(idx.within(10.0, 9.0, 0.5), Vec::<u32>::new());
    }

    #[test]
    fn pca_axes_of_a_line_are_its_direction() {
        // Points on a line along (1, 1, 0, ...)/√2 plus tiny noise in other axes.
        let d = 16;
        let data = Array2::from_shape_fn((200, d), |(i, c)| match c {
            0 | 1 => i as f32,
            _ => ((i * 7 + c * 13) % 5) as f32 * 1e-3,
        });
        let pca = Pca::fit(data.view()).unwrap();
        let ax = pca.axes.row(0);
        assert!(
            (ax[0].abs() - 0.5f32.sqrt()).abs() < 1e-3 && (ax[1] - ax[0]).abs() < 1e-3,
            "{ax:?}"
        );
    }
}
