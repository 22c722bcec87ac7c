//! Retrieval pairs: the few image pairs of a large set worth matching, chosen from descl's own
//! local descriptors, as hloc chooses them with NetVLAD and COLMAP with a vocabulary tree.
//!
//! Each image's local descriptors are assigned to the nearest of `K` centres (visual words) of
//! a codebook, and the residuals to each centre summed, `v_c = Σ_{x : NN(x) = c} (x − μ_c)`,
//! then L2-normalised per word: VLAD's blocks (Jégou et al., "Aggregating local descriptors
//! into a compact image representation", CVPR 2010) with intra-normalisation (Arandjelović &
//! Zisserman, "All about VLAD", CVPR 2013: it keeps bursts of repeated structure — façade
//! windows — from dominating). These are the aggregated, normalised residuals `V̂(X_c)` of the
//! aggregated selective match kernel (ASMK; Tolias, Avrithis & Jégou, "To aggregate or not to
//! aggregate: selective match kernels for image search", ICCV 2013), and images are compared by
//! that kernel rather than by VLAD's dot product:
//!
//! `K(X, Y) = γ(X) γ(Y) Σ_{c shared} σ_α(V̂(X_c)ᵀ V̂(Y_c))`, `σ_α(u) = sign(u)|u|^α` for `u > τ`,
//! else 0,
//!
//! with the paper's α = 3, τ = 0, and no idf weights. One change: the paper's `γ(X) =
//! (Σ_c σ_α(1))^{-1/2}`, one over the square root of `X`'s occupied words, is `1/√K` here for
//! every image, as if each occupied all `K` words, because the paper's let pictures of a few
//! words outrank photographs ([`WordResiduals::similarities`]). Why not the dot product: the codebook is
//! learned on the set itself, so each word's residuals sum to about zero over the set, and two
//! unrelated images of a small set score about −1/(n − 1). An image that shares no word with
//! the others (a checkerboard, a blurred frame, noise) scored 0 and outranked every real
//! neighbour of negative score (issue 55). Under the kernel only agreeing words count: a shared
//! word of opposite residuals adds 0, not a penalty, and an image sharing nothing scores 0,
//! below any image with one agreeing word. Measured in docs/BENCHMARKS.md, "Retrieval pairs:
//! ASMK's kernel".
//!
//! The codebook is learned by k-means on the set itself (a deterministic sample of each image's
//! descriptors), so it needs no training data and follows the model: float descriptors as they
//! are, binary ones as ±1 vectors. Everything is deterministic — seeded k-means++ and sums in a
//! fixed order — so every shard of a cluster run computes the same pairs. Features are read
//! twice (sample, then aggregate) one image at a time: memory holds the codebook and one vector
//! per image, not the set's descriptors.

use crate::describe::Descriptors;
use crate::error::{Error, Result};
use ndarray::{s, Array2, ArrayView2, Axis};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Centres of the VLAD codebook (`K` in Jégou et al.; 64 is their setting for 128-d SIFT).
pub const VLAD_CODEBOOK_SIZE: usize = 64;
/// Local descriptors per image sampled to learn the codebook (evenly spaced through the image's
/// list, which is ordered by detector score).
pub const CODEBOOK_SAMPLE_PER_IMAGE: usize = 256;
/// Lloyd iterations of the codebook's k-means.
pub const KMEANS_ITERATIONS: usize = 25;
/// Seed of the k-means++ initialisation (fixed: pairs must not change between runs or shards).
pub const KMEANS_SEED: u64 = 0x5eed_41ad;
/// Points per partial sum of a k-means update; partial sums are added in chunk order, so the
/// result does not depend on the number of threads.
const KMEANS_CHUNK: usize = 1024;
/// Rows of the image-similarity matrix computed at once (bounds its memory).
const SIMILARITY_BLOCK: usize = 256;
/// ASMK's selectivity exponent α (Tolias et al. 2013, §3; 3 in their experiments): a word's
/// residual agreement `u` counts as `u^α`, so weak agreements count little.
pub const ASMK_ALPHA: i32 = 3;
/// ASMK's selectivity threshold τ (0 in the paper's ASMK): agreements at or below it count 0.
pub const ASMK_TAU: f32 = 0.0;

/// Settings of retrieval pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalConfig {
    /// Neighbours per image (hloc's `num_matched`).
    pub neighbours: usize,
    pub codebook_size: usize,
    pub sample_per_image: usize,
    pub iterations: usize,
    pub seed: u64,
}

impl RetrievalConfig {
    /// The defaults with `neighbours` per image.
    pub fn with_neighbours(neighbours: usize) -> Self {
        RetrievalConfig {
            neighbours,
            codebook_size: VLAD_CODEBOOK_SIZE,
            sample_per_image: CODEBOOK_SAMPLE_PER_IMAGE,
            iterations: KMEANS_ITERATIONS,
            seed: KMEANS_SEED,
        }
    }
}

/// The local descriptors as float rows: float descriptors as they are, binary ones as ±1/√bits
/// per bit (unit length, so that distances order as Hamming distances do).
pub fn float_rows(d: &Descriptors) -> Array2<f32> {
    match d {
        Descriptors::Float(a) => a.clone(),
        Descriptors::Binary(b) => {
            let bits = 64 * b.first().map_or(0, |w| w.len());
            let v = 1.0 / (bits.max(1) as f32).sqrt();
            Array2::from_shape_fn((b.len(), bits), |(i, k)| {
                if b[i][k / 64] >> (k % 64) & 1 == 1 {
                    v
                } else {
                    -v
                }
            })
        }
    }
}

/// A k-means codebook: `K` centres in descriptor space.
#[derive(Debug, Clone, PartialEq)]
pub struct Codebook {
    pub centres: Array2<f32>,
}

fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

impl Codebook {
    /// Learns `k` centres from the rows of `sample` (k-means++ seeding, then `iterations` Lloyd
    /// steps; an emptied centre moves to the point farthest from its own centre). Fewer
    /// distinct rows than `k` is an error.
    pub fn train(sample: ArrayView2<f32>, k: usize, iterations: usize, seed: u64) -> Result<Self> {
        let (n, dim) = sample.dim();
        if k == 0 || n < k || dim == 0 {
            return Err(Error::InvalidInput(format!(
                "a codebook of {k} centres needs at least {k} descriptors; the set has {n}"
            )));
        }
        let mut book = Codebook {
            centres: kmeans_plus_plus(sample, k, seed),
        };
        for _ in 0..iterations {
            let assigned = book.assign(sample);
            let (sums, counts) = chunked_sums(sample, &assigned, k);
            let mut far = farthest_first(sample, &book, &assigned);
            for (c, &count) in counts.iter().enumerate() {
                let mut row = book.centres.row_mut(c);
                if count > 0 {
                    row.assign(&(&sums.row(c) / count as f32));
                } else if let Some(p) = far.next() {
                    row.assign(&sample.row(p));
                }
            }
        }
        Ok(book)
    }

    /// The nearest centre of every row of `x` (L2; ties to the lower index).
    pub fn assign(&self, x: ArrayView2<f32>) -> Vec<usize> {
        if x.nrows() == 0 {
            return Vec::new();
        }
        // argmin |x − c|² = argmax (x·c − |c|²/2).
        let half_norms: Vec<f32> = self
            .centres
            .rows()
            .into_iter()
            .map(|c| c.dot(&c) / 2.0)
            .collect();
        let dots = x.dot(&self.centres.t());
        (0..dots.nrows())
            .into_par_iter()
            .map(|i| {
                let row = dots.row(i);
                let mut best = (0, f32::NEG_INFINITY);
                for (c, (d, h)) in row.iter().zip(&half_norms).enumerate() {
                    if d - h > best.1 {
                        best = (c, d - h);
                    }
                }
                best.0
            })
            .collect()
    }

    /// One image's aggregated residuals per word, `V̂(X_c)`: the residual sums of its descriptor
    /// rows per centre, each L2-normalised (intra-normalised VLAD blocks, concatenated; a word
    /// none of its rows falls in is a zero block, and an image without descriptors all zeros).
    pub fn word_residuals(&self, x: ArrayView2<f32>) -> Vec<f32> {
        let (k, dim) = self.centres.dim();
        let mut v = Array2::<f32>::zeros((k, dim));
        for (row, c) in x.rows().into_iter().zip(self.assign(x)) {
            let mut acc = v.row_mut(c);
            acc += &row;
            acc -= &self.centres.row(c);
        }
        for mut block in v.rows_mut() {
            let norm = block.dot(&block).sqrt();
            if norm > 0.0 {
                block /= norm;
            }
        }
        v.into_raw_vec_and_offset().0
    }
}

/// k-means++ seeding (Arthur & Vassilvitskii 2007): each next centre drawn with probability
/// proportional to its squared distance from the nearest centre so far.
fn kmeans_plus_plus(sample: ArrayView2<f32>, k: usize, seed: u64) -> Array2<f32> {
    let (n, dim) = sample.dim();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut centres = Array2::<f32>::zeros((k, dim));
    let first = rng.gen_range(0..n);
    centres.row_mut(0).assign(&sample.row(first));
    let row = |i: usize| sample.row(i).to_vec();
    let mut nearest: Vec<f32> = (0..n)
        .into_par_iter()
        .map(|i| squared_distance(&row(i), &row(first)))
        .collect();
    for c in 1..k {
        let total: f64 = nearest.iter().map(|&d| d as f64).sum();
        let pick = if total > 0.0 {
            let mut target = rng.gen::<f64>() * total;
            nearest
                .iter()
                .position(|&d| {
                    target -= d as f64;
                    target <= 0.0
                })
                .unwrap_or(n - 1)
        } else {
            rng.gen_range(0..n)
        };
        centres.row_mut(c).assign(&sample.row(pick));
        let chosen = row(pick);
        nearest.par_iter_mut().enumerate().for_each(|(i, d)| {
            *d = d.min(squared_distance(&row(i), &chosen));
        });
    }
    centres
}

/// Per-centre sums and counts of the assigned rows, summed in fixed chunks added in order.
fn chunked_sums(
    sample: ArrayView2<f32>,
    assigned: &[usize],
    k: usize,
) -> (Array2<f32>, Vec<usize>) {
    let dim = sample.ncols();
    let partial: Vec<(Array2<f32>, Vec<usize>)> = (0..sample.nrows().div_ceil(KMEANS_CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let start = chunk * KMEANS_CHUNK;
            let end = (start + KMEANS_CHUNK).min(sample.nrows());
            let mut sums = Array2::<f32>::zeros((k, dim));
            let mut counts = vec![0usize; k];
            for i in start..end {
                let mut acc = sums.row_mut(assigned[i]);
                acc += &sample.row(i);
                counts[assigned[i]] += 1;
            }
            (sums, counts)
        })
        .collect();
    let mut sums = Array2::<f32>::zeros((k, dim));
    let mut counts = vec![0usize; k];
    for (s, c) in partial {
        sums += &s;
        counts.iter_mut().zip(c).for_each(|(a, b)| *a += b);
    }
    (sums, counts)
}

/// Sample rows in order of decreasing distance to their assigned centre (ties by index).
fn farthest_first<'a>(
    sample: ArrayView2<'a, f32>,
    book: &Codebook,
    assigned: &[usize],
) -> impl Iterator<Item = usize> + 'a {
    let mut d: Vec<(f32, usize)> = assigned
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let x = sample.row(i).to_vec();
            let m = book.centres.row(c).to_vec();
            (squared_distance(&x, &m), i)
        })
        .collect();
    d.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    d.into_iter().map(|(_, i)| i)
}

/// Up to `per_image` rows of `x`, evenly spaced.
fn sample_rows(x: &Array2<f32>, per_image: usize) -> Array2<f32> {
    let n = x.nrows();
    if n <= per_image {
        return x.clone();
    }
    let picks: Vec<usize> = (0..per_image).map(|k| k * n / per_image).collect();
    x.select(Axis(0), &picks)
}

/// Every image's word residuals ([`Codebook::word_residuals`]): one row per image, `K` blocks of
/// the descriptors' dimension. `load(i)` gives image `i`'s descriptors; each image is loaded
/// twice (sample, then aggregate), one at a time per thread.
pub fn global_descriptors<F>(n: usize, load: F, cfg: &RetrievalConfig) -> Result<WordResiduals>
where
    F: Fn(usize) -> Result<Descriptors> + Sync,
{
    let samples: Vec<Array2<f32>> = (0..n)
        .into_par_iter()
        .map(|i| load(i).map(|d| sample_rows(&float_rows(&d), cfg.sample_per_image)))
        .collect::<Result<_>>()?;
    let dims: Vec<usize> = samples
        .iter()
        .filter(|s| s.nrows() > 0)
        .map(|s| s.ncols())
        .collect();
    if dims.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::InvalidInput(
            "retrieval pairs: the images' descriptors differ in dimension (mixed models)".into(),
        ));
    }
    let views: Vec<ArrayView2<f32>> = samples
        .iter()
        .filter(|s| s.nrows() > 0)
        .map(|s| s.view())
        .collect();
    if views.is_empty() {
        // No image has descriptors: every one is in no pair ([`top_k_pairs`]).
        return Ok(WordResiduals {
            rows: Array2::zeros((n, 0)),
            dim: 1,
        });
    }
    let sample = ndarray::concatenate(Axis(0), &views)
        .map_err(|e| Error::InvalidInput(format!("retrieval pairs: {e}")))?;
    drop(samples);
    if sample.nrows() < cfg.codebook_size {
        return Err(Error::InvalidInput(format!(
            "retrieval pairs: the {n} images have {} descriptors in all, fewer than the {} words of the codebook; choose the pairs of so small a set with --exhaustive (or --sequential)",
            sample.nrows(),
            cfg.codebook_size
        )));
    }
    let book = Codebook::train(sample.view(), cfg.codebook_size, cfg.iterations, cfg.seed)?;
    let rows: Vec<Vec<f32>> = (0..n)
        .into_par_iter()
        .map(|i| load(i).map(|d| book.word_residuals(float_rows(&d).view())))
        .collect::<Result<_>>()?;
    let width = book.centres.len();
    Ok(WordResiduals {
        rows: Array2::from_shape_fn((n, width), |(i, k)| rows[i][k]),
        dim: book.centres.ncols(),
    })
}

/// The images' word residuals: `rows` (one per image) of `K` blocks of `dim` values.
#[derive(Debug, Clone, PartialEq)]
pub struct WordResiduals {
    pub rows: Array2<f32>,
    pub dim: usize,
}

/// ASMK's selectivity function `σ_α(u)` with [`ASMK_ALPHA`] and [`ASMK_TAU`] (τ ≥ 0, so a
/// kept `u` is positive and `sign(u)|u|^α = u^α`).
fn selectivity(u: f32) -> f32 {
    if u > ASMK_TAU {
        u.powi(ASMK_ALPHA)
    } else {
        0.0
    }
}

impl WordResiduals {
    /// The kernel `K(X_i, X_j)` of images `rows` (a range) against every image: one GEMM per
    /// word, its agreements through `σ_α`, summed, scaled by `γ_i γ_j = 1/K` (`K` the
    /// codebook's words; an image without descriptors has no agreement, so scores 0).
    ///
    /// Why `γ = 1/√K` for every image: ASMK's own `γ`, one over the square root of the image's
    /// occupied words, gives a picture of 6 descriptors in 6 words the self-similarity of a
    /// photograph in all 64, so one strongly agreeing word let such a picture (a blob, a
    /// near-blank frame) outrank a photograph's real neighbours, whose agreement is spread over
    /// many words (issue 55: a 6-keypoint picture took the place of a pair with 115 inliers).
    /// Counting every image as occupying all `K` words (pivoted normalisation with the pivot
    /// at `K`) scales a short picture's scores by `√(words / K)`; on the measured sets it kept
    /// or raised the recall of verified pairs (docs/BENCHMARKS.md, "Retrieval pairs"), where a
    /// pivot at the set's median word count failed once pictures of few words were the
    /// majority.
    pub fn similarities(&self, rows: std::ops::Range<usize>) -> Array2<f32> {
        let n = self.rows.nrows();
        let words = self.rows.ncols() / self.dim.max(1);
        let mut sims = Array2::<f32>::zeros((rows.len(), n));
        for c in 0..words {
            let cols = c * self.dim..(c + 1) * self.dim;
            let a = self.rows.slice(s![rows.clone(), cols.clone()]);
            let b = self.rows.slice(s![.., cols]);
            let u = a.dot(&b.t());
            sims.zip_mut_with(&u, |acc, &u| *acc += selectivity(u));
        }
        sims /= words.max(1) as f32;
        sims
    }
}

/// Each image with its `k` most similar others by the ASMK kernel (ties to the lower index), as
/// sorted unique pairs `(i, j)`, i < j. An image without descriptors (all-zero residuals: a
/// blank or uniform picture) is in no pair: it has nothing to match.
pub fn top_k_pairs(globals: &WordResiduals, k: usize) -> Vec<(usize, usize)> {
    let n = globals.rows.nrows();
    let mut empty = vec![false; n];
    for i in images_without_descriptors(globals.rows.view()) {
        empty[i] = true;
    }
    let mut pairs: Vec<(usize, usize)> = (0..n.div_ceil(SIMILARITY_BLOCK))
        .into_par_iter()
        .flat_map_iter(|blk| {
            let start = blk * SIMILARITY_BLOCK;
            let end = (start + SIMILARITY_BLOCK).min(n);
            let sims = globals.similarities(start..end);
            (start..end)
                .filter(|&i| !empty[i])
                .flat_map(|i| {
                    let mut order: Vec<usize> = (0..n).filter(|&j| j != i && !empty[j]).collect();
                    let row = sims.row(i - start);
                    let by_similarity =
                        |a: &usize, b: &usize| row[*b].total_cmp(&row[*a]).then(a.cmp(b));
                    // The k first in that order, then sorted: O(n) per image, not O(n log n).
                    if k < order.len() {
                        order.select_nth_unstable_by(k, by_similarity);
                        order.truncate(k);
                    }
                    order.sort_by(by_similarity);
                    order.into_iter().map(move |j| (i.min(j), i.max(j)))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// The images (rows of `globals`, sorted) whose word residuals are all zeros: no descriptors,
/// so never a retrieval neighbour ([`top_k_pairs`]).
pub fn images_without_descriptors(globals: ArrayView2<f32>) -> Vec<usize> {
    globals
        .rows()
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.iter().all(|v| *v == 0.0))
        .map(|(i, _)| i)
        .collect()
}

/// Retrieval pairs of the `n` images whose descriptors `load` gives; an image without
/// descriptors is in none ([`top_k_pairs`]).
pub fn retrieval_pairs<F>(n: usize, load: F, cfg: &RetrievalConfig) -> Result<Vec<(usize, usize)>>
where
    F: Fn(usize) -> Result<Descriptors> + Sync,
{
    if cfg.neighbours == 0 {
        return Err(Error::InvalidInput(
            "retrieval pairs need at least 1 neighbour per image".into(),
        ));
    }
    if n < 2 {
        return Ok(Vec::new());
    }
    let globals = global_descriptors(n, load, cfg)?;
    Ok(top_k_pairs(&globals, cfg.neighbours))
}

/// The share of `reference` pairs that `candidates` keep (1 for an empty reference); both
/// sorted `(i, j)`, i < j.
pub fn pair_recall(candidates: &[(usize, usize)], reference: &[(usize, usize)]) -> f64 {
    if reference.is_empty() {
        return 1.0;
    }
    let kept = reference
        .iter()
        .filter(|p| candidates.binary_search(p).is_ok())
        .count();
    kept as f64 / reference.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn word_residuals_of_a_hand_computed_case() {
        // Two centres in 2-D; x1 = (1, 1) and x2 = (3, 0) go to c0 = (0, 0), x3 = (10, 11) to
        // c1 = (10, 10). Residual sums: v0 = (4, 1), v1 = (0, 1); intra-normalised
        // (4, 1)/√17 and (0, 1).
        let book = Codebook {
            centres: array![[0.0, 0.0], [10.0, 10.0]],
        };
        let x = array![[1.0, 1.0], [3.0, 0.0], [10.0, 11.0]];
        assert_eq!(book.assign(x.view()), vec![0, 0, 1]);
        let v = book.word_residuals(x.view());
        let r = 17f32.sqrt();
        let want = [4.0 / r, 1.0 / r, 0.0, 1.0];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
        assert_eq!(
            book.word_residuals(Array2::zeros((0, 2)).view()),
            vec![0.0; 4]
        );
    }

    /// Images of 2 words of 2-D residuals (rows: image; blocks: words).
    fn residuals(rows: Array2<f32>) -> WordResiduals {
        WordResiduals { rows, dim: 2 }
    }

    #[test]
    fn asmk_kernel_of_a_hand_computed_case() {
        // X = [(1,0), (0,1)], Y = [(0.6,0.8), (0,−1)], Z = [0, (0.6,0.8)], 2 words: γ = 1/√2
        // for all three (Z's one word counted as all 2).
        // K(X,Y) = (1/2)(σ(0.6) + σ(−1)) = 0.216/2; K(X,Z) = (1/2)σ(0.8) = 0.512/2;
        // K(Y,Z) = σ(−0.8)·… = 0; K(X,X) = (1/2)(1 + 1) = 1; K(Z,Z) = (1/2)·1.
        let g = residuals(array![
            [1.0, 0.0, 0.0, 1.0],
            [0.6, 0.8, 0.0, -1.0],
            [0.0, 0.0, 0.6, 0.8]
        ]);
        let k = g.similarities(0..3);
        let want = [[1.0, 0.108, 0.256], [0.108, 1.0, 0.0], [0.256, 0.0, 0.5]];
        for i in 0..3 {
            for j in 0..3 {
                assert!((k[[i, j]] - want[i][j]).abs() < 1e-5, "{k:?}");
            }
        }
        // Rows computed in another block give the same values.
        assert_eq!(g.similarities(1..3), k.slice(s![1..3, ..]));
    }

    #[test]
    fn an_image_sharing_no_agreeing_word_ranks_below_a_real_neighbour() {
        // Issue 55: A's real neighbour B agrees on word 0 and opposes it on word 1, so their
        // VLAD dot product is negative (−0.1); C shares no word with A (a checkerboard's own
        // cluster, shared with D only) and D opposes A everywhere. The dot product ranked C
        // first for A (0 > −0.1); the kernel ranks B first (σ(0.8)/3 = 0.171 against 0 and 0).
        let g = WordResiduals {
            rows: array![
                [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
                [0.8, 0.6, -1.0, 0.0, 0.0, 0.0],
                [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                [-1.0, 0.0, -1.0, 0.0, 1.0, 0.0]
            ],
            dim: 2,
        };
        let unit = |i: usize| {
            let r = g.rows.row(i);
            &r / r.dot(&r).sqrt()
        };
        assert!(
            unit(0).dot(&unit(2)) > unit(0).dot(&unit(1)),
            "the dot product's order this test is about"
        );
        let k = g.similarities(0..1);
        assert!((k[[0, 1]] - 0.512 / 3.0).abs() < 1e-6 && k[[0, 2]] == 0.0 && k[[0, 3]] == 0.0);
        // A → B, B → D (their agreeing word 1), C ↔ D (word 2).
        assert_eq!(top_k_pairs(&g, 1), vec![(0, 1), (1, 3), (2, 3)]);
    }

    #[test]
    fn kmeans_finds_separated_clusters_deterministically() {
        // Three tight clusters around (0,0), (5,5), (−5,5).
        let mut rows = Vec::new();
        for (cx, cy) in [(0.0f32, 0.0f32), (5.0, 5.0), (-5.0, 5.0)] {
            for k in 0..50 {
                let t = k as f32 * 0.37;
                rows.push([cx + 0.1 * t.sin(), cy + 0.1 * t.cos()]);
            }
        }
        let x = Array2::from_shape_fn((rows.len(), 2), |(i, j)| rows[i][j]);
        let a = Codebook::train(x.view(), 3, 10, 7).unwrap();
        let b = Codebook::train(x.view(), 3, 10, 7).unwrap();
        assert_eq!(a, b);
        let labels = a.assign(x.view());
        for c in 0..3 {
            let first = labels[c * 50];
            assert!(labels[c * 50..(c + 1) * 50].iter().all(|&l| l == first));
        }
        assert!(Codebook::train(x.view(), 200, 1, 7).is_err());
    }

    #[test]
    fn binary_rows_order_like_hamming() {
        let d = Descriptors::Binary(vec![[0, 0, 0, 0], [1, 0, 0, 0], [u64::MAX, 0, 0, 0]]);
        let x = float_rows(&d);
        assert_eq!(x.dim(), (3, 256));
        let d2 = |a: usize, b: usize| squared_distance(&x.row(a).to_vec(), &x.row(b).to_vec());
        // Squared distance = 4 · hamming / 256.
        assert!((d2(0, 1) - 4.0 / 256.0).abs() < 1e-6);
        assert!((d2(0, 2) - 4.0 * 64.0 / 256.0).abs() < 1e-6);
    }

    #[test]
    fn a_picture_of_few_words_is_normalised_as_a_full_one() {
        // Issue 55: Q and R agree weakly on all 4 words (u = 0.7 each: 4σ(0.7)/4 = 0.343); S,
        // a picture of one word, agrees fully on one. ASMK's own γ (1/√1 for S) scored S
        // 1/√4 = 0.5, above R; counted as occupying all 4 words, S scores 0.25.
        let (w, v) = (0.7f32, (1.0f32 - 0.49).sqrt());
        let g = WordResiduals {
            rows: array![
                [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
                [w, v, w, v, w, v, w, v],
                [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            ],
            dim: 2,
        };
        let k = g.similarities(0..1);
        assert!((k[[0, 1]] - 0.343).abs() < 1e-5, "{k:?}");
        assert!((k[[0, 2]] - 0.25).abs() < 1e-6, "{k:?}");
        assert!(top_k_pairs(&g, 1).contains(&(0, 1)));
    }

    #[test]
    fn top_k_and_recall() {
        // Images 0,1 alike, 2,3 alike (one word each).
        let g = residuals(array![
            [1.0, 0.0, 0.0, 0.0],
            [0.9, 0.1, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.1, 0.9, 0.0, 0.0]
        ]);
        let pairs = top_k_pairs(&g, 1);
        assert_eq!(pairs, vec![(0, 1), (2, 3)]);
        assert_eq!(pair_recall(&pairs, &[(0, 1), (1, 2)]), 0.5);
        assert_eq!(pair_recall(&pairs, &[]), 1.0);
        assert_eq!(top_k_pairs(&g, 3).len(), 6);
    }

    #[test]
    fn sets_of_no_or_few_descriptors_get_pairs_or_none_not_an_error() {
        // Issue 55: three blank pictures gave "ShapeError/Unsupported"; five small ones with 3
        // descriptors in all were refused for a 64-word codebook without a way out.
        let cfg = RetrievalConfig::with_neighbours(2);
        let none = |_: usize| Ok(Descriptors::Float(Array2::zeros((0, 4))));
        assert_eq!(retrieval_pairs(3, none, &cfg).unwrap(), vec![]);
        let few = |i: usize| {
            let rows = if i < 3 { 1 } else { 0 };
            Ok(Descriptors::Float(Array2::from_shape_fn(
                (rows, 4),
                |(_, k)| (i * 4 + k) as f32,
            )))
        };
        let e = retrieval_pairs(5, few, &cfg).unwrap_err().to_string();
        assert!(
            e.contains("3 descriptors in all") && e.contains("--exhaustive"),
            "{e}"
        );
    }

    #[test]
    fn an_image_without_descriptors_is_no_neighbour() {
        // Image 1 has no descriptors (all zeros): in no pair, whatever k.
        let g = residuals(array![
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
            [-0.6, 0.8, 0.0, 0.0],
            [0.95, 0.31, 0.0, 0.0]
        ]);
        assert_eq!(images_without_descriptors(g.rows.view()), vec![1]);
        let pairs = top_k_pairs(&g, 1);
        assert!(pairs.iter().all(|&(i, j)| i != 1 && j != 1), "{pairs:?}");
        // 0 → 3 (σ(0.95)); 2 agrees with no one: its neighbour is the lowest index, 0.
        assert_eq!(pairs, vec![(0, 2), (0, 3)]);
        assert!(top_k_pairs(&g, 3).iter().all(|&(i, j)| i != 1 && j != 1));
    }
}
