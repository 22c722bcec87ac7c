//! Speed comparison against OpenCV's `BFMatcher` (called through the opencv crate in the same
//! process on the same descriptors), shared by the benches (`matcher_vs_opencv`, `match_f32`,
//! `match_hamming`) and the agreement test `tests/matcher_vs_opencv.rs`. It lives beside the
//! benches, not in the library: it is a measurement of the library against another one, and
//! nothing in descl's own path calls it.
//!
//! The task timed is the one users run: mutual nearest neighbours with Lowe's ratio test.
//! descl does it in one pass (`matching::nearest_two` + `matching::filters::apply`); with OpenCV
//! it takes `knnMatch(A, B, k=2)` (ratio) plus `knnMatch(B, A, k=1)` (mutual check). The report
//! also gives the time of the single `knnMatch(A, B, k=2)` call so the comparison is open.
//! Results are checked to be the same: the final match sets are compared pair by pair.

// Each including target uses its own subset of these helpers.
#![allow(dead_code)]

use descl::describe::{BinaryDescriptor, Descriptors, BINARY_BITS};
use descl::error::{Error, Result};
use descl::matching::{filters, kdtree, MatchConfig, Matches, NearestTwo, Nn2};
use ndarray::Array2;
use opencv::core::{DMatch, Mat, Vector, CV_8U};
use opencv::prelude::*;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Instant;

/// Timed repetitions per method; the median is reported (after one untimed warm-up run).
pub const REPETITIONS: usize = 3;
/// Fraction of B's rows that are noisy copies of A's rows, so that the ratio test keeps real
/// matches (pure random 128-d vectors are all nearly equidistant).
pub const TRUE_MATCH_FRACTION: f64 = 0.5;
/// Noise added to the copies: Gaussian σ per float dimension (before renormalising)...
pub const FLOAT_NOISE_SIGMA: f32 = 0.04;
/// ...and the probability of flipping each bit of a binary copy.
pub const BIT_FLIP_PROBABILITY: f64 = 0.1;

/// One descriptor kind's timings and agreement.
#[derive(Debug, Clone, Serialize)]
pub struct KindReport {
    /// "float" (L2, 128-d) or "binary" (Hamming, 256 bits).
    pub kind: String,
    /// descl: exact two-NN both ways + mutual + ratio, median seconds.
    pub descl_s: f64,
    /// OpenCV: knnMatch(A,B,2) + knnMatch(B,A,1) + the same filters, median seconds.
    pub opencv_s: f64,
    /// OpenCV's single knnMatch(A,B,2) call alone, median seconds.
    pub opencv_knn_only_s: f64,
    /// opencv_s / descl_s: how many times faster descl is at the same job.
    pub speedup: f64,
    /// opencv_knn_only_s / descl_s.
    pub speedup_vs_knn_only: f64,
    /// Mutual + ratio matches found by descl and by OpenCV.
    pub matches_descl: usize,
    pub matches_opencv: usize,
    /// Matches found by both.
    pub matches_common: usize,
    /// Rows of A whose nearest-neighbour distance agrees (|Δ| ≤ 1e-3 float, exact for binary).
    pub rows_same_best_distance: usize,
    pub rows: usize,
}

/// Approximate matcher (PCA + kd-tree + exact re-ranking) against the exact float matcher.
#[derive(Debug, Clone, Serialize)]
pub struct ApproxReport {
    pub pca_dim: usize,
    pub candidates: usize,
    pub approx_s: f64,
    pub exact_s: f64,
    /// exact_s / approx_s (above 1: the approximate matcher is faster).
    pub speedup: f64,
    /// Fraction of the exact mutual + ratio matches that the approximate matcher also returns.
    pub recall: f64,
    pub matches_exact: usize,
    pub matches_approx: usize,
}

/// The whole comparison, printed as JSON by `cargo bench --bench matcher_vs_opencv`.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedReport {
    pub n_a: usize,
    pub n_b: usize,
    pub seed: u64,
    /// Threads used by descl (rayon) and by OpenCV (its own pool).
    pub threads_descl: usize,
    pub threads_opencv: i32,
    pub repetitions: usize,
    pub ratio: f32,
    pub float: KindReport,
    pub binary: KindReport,
    pub approximate: ApproxReport,
}

fn median_time<T>(mut f: impl FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut out = f()?; // warm-up
    let mut times = Vec::with_capacity(REPETITIONS);
    for _ in 0..REPETITIONS {
        let t = Instant::now();
        out = f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], out))
}

fn normalise_rows(m: &mut Array2<f32>) {
    for mut r in m.outer_iter_mut() {
        let n = r
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        r.mapv_inplace(|v| v / n);
    }
}

/// Random unit float descriptors: A random; B = noisy copies of part of A plus random rows.
pub fn synthetic_float(
    n_a: usize,
    n_b: usize,
    dim: usize,
    seed: u64,
) -> (Array2<f32>, Array2<f32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut a = Array2::from_shape_fn((n_a, dim), |_| StandardNormal.sample(&mut rng));
    normalise_rows(&mut a);
    let mut b = Array2::from_shape_fn((n_b, dim), |_| StandardNormal.sample(&mut rng));
    for j in 0..n_b {
        if n_a > 0 && rng.gen_bool(TRUE_MATCH_FRACTION) {
            let src = rng.gen_range(0..n_a);
            for k in 0..dim {
                let noise: f32 = StandardNormal.sample(&mut rng);
                b[[j, k]] = a[[src, k]] + FLOAT_NOISE_SIGMA * noise;
            }
        }
    }
    normalise_rows(&mut b);
    (a, b)
}

/// Random binary descriptors: A random; B = bit-flipped copies of part of A plus random rows.
pub fn synthetic_binary(
    n_a: usize,
    n_b: usize,
    seed: u64,
) -> (Vec<BinaryDescriptor>, Vec<BinaryDescriptor>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let a: Vec<BinaryDescriptor> = (0..n_a)
        .map(|_| [rng.gen(), rng.gen(), rng.gen(), rng.gen()])
        .collect();
    let b = (0..n_b)
        .map(|_| {
            if n_a > 0 && rng.gen_bool(TRUE_MATCH_FRACTION) {
                let mut d = a[rng.gen_range(0..n_a)];
                for bit in 0..BINARY_BITS {
                    if rng.gen_bool(BIT_FLIP_PROBABILITY) {
                        d[bit / 64] ^= 1 << (bit % 64);
                    }
                }
                d
            } else {
                [rng.gen(), rng.gen(), rng.gen(), rng.gen()]
            }
        })
        .collect();
    (a, b)
}

/// An N×D float matrix as a CV_32F Mat (copied).
pub fn float_mat(m: &Array2<f32>) -> Result<Mat> {
    let data: Vec<f32> = m.iter().copied().collect();
    let rows =
        i32::try_from(m.nrows()).map_err(|_| Error::InvalidInput("too many descriptors".into()))?;
    let cols =
        i32::try_from(m.ncols()).map_err(|_| Error::InvalidInput("descriptor too long".into()))?;
    Ok(Mat::new_rows_cols_with_data(rows, cols, &data)?.try_clone()?)
}

/// Bytes of one binary descriptor (32 for 256 bits).
const BINARY_BYTES: usize = std::mem::size_of::<BinaryDescriptor>();

/// Binary descriptors as an N×[`BINARY_BYTES`] CV_8U Mat (little-endian bytes of each word;
/// Hamming distances do not depend on the byte order as long as both sides use the same).
pub fn binary_mat(d: &[BinaryDescriptor]) -> Result<Mat> {
    let bytes: Vec<u8> = d
        .iter()
        .flat_map(|w| w.iter().flat_map(|x| x.to_le_bytes()))
        .collect();
    let rows =
        i32::try_from(d.len()).map_err(|_| Error::InvalidInput("too many descriptors".into()))?;
    let m = Mat::new_rows_cols_with_data(rows, BINARY_BYTES as i32, &bytes)?.try_clone()?;
    debug_assert_eq!(m.typ(), CV_8U);
    Ok(m)
}

/// OpenCV's BFMatcher knnMatch of `query` against `train`, as two-NN lists (k = 2) or one-NN
/// lists (k = 1).
pub fn opencv_knn(query: &Mat, train: &Mat, norm: i32, k: i32) -> Result<Vec<Nn2>> {
    let matcher = opencv::features2d::BFMatcher::new(norm, false)?;
    let mut knn: Vector<Vector<DMatch>> = Vector::new();
    matcher.knn_train_match(query, train, &mut knn, k, &Mat::default(), false)?;
    Ok(knn
        .iter()
        .map(|row| {
            let mut nn = Nn2::EMPTY;
            for m in row.iter() {
                // knnMatch returns neighbours sorted by distance: push keeps that order.
                nn.push(m.train_idx as u32, m.distance);
            }
            nn
        })
        .collect())
}

/// The OpenCV way to get mutual + ratio matches: two knnMatch calls, then the same filters.
fn opencv_mutual_ratio(a: &Mat, b: &Mat, norm: i32, config: &MatchConfig) -> Result<Matches> {
    let rows = opencv_knn(a, b, norm, 2)?;
    let cols = opencv_knn(b, a, norm, 1)?;
    Ok(filters::apply(&NearestTwo { rows, cols }, config))
}

fn pair_set(m: &Matches) -> BTreeSet<[u32; 2]> {
    m.pairs.iter().copied().collect()
}

#[allow(clippy::too_many_arguments)] // private: the two sides in two representations each
fn kind_report(
    kind: &str,
    a: &Descriptors,
    b: &Descriptors,
    mat_a: &Mat,
    mat_b: &Mat,
    norm: i32,
    config: &MatchConfig,
    tolerance: f32,
) -> Result<KindReport> {
    let (descl_s, (ours, nn)) = median_time(|| {
        let nn = descl::matching::nearest_two(a, b)?;
        Ok((filters::apply(&nn, config), nn))
    })?;
    let (opencv_s, theirs) = median_time(|| opencv_mutual_ratio(mat_a, mat_b, norm, config))?;
    let (opencv_knn_only_s, cv_rows) = median_time(|| opencv_knn(mat_a, mat_b, norm, 2))?;
    let rows_same_best_distance = nn
        .rows
        .iter()
        .zip(&cv_rows)
        .filter(|(x, y)| (x.best_dist - y.best_dist).abs() <= tolerance)
        .count();
    Ok(KindReport {
        kind: kind.into(),
        descl_s,
        opencv_s,
        opencv_knn_only_s,
        speedup: opencv_s / descl_s,
        speedup_vs_knn_only: opencv_knn_only_s / descl_s,
        matches_descl: ours.len(),
        matches_opencv: theirs.len(),
        matches_common: pair_set(&ours).intersection(&pair_set(&theirs)).count(),
        rows_same_best_distance,
        rows: nn.rows.len(),
    })
}

/// Times descl against OpenCV BFMatcher on `n_a × n_b` synthetic descriptors (float 128-d L2
/// and binary 256-bit Hamming), mutual + ratio 0.8, and checks both return the same matches.
/// Also reports the PCA + kd-tree approximate matcher's speed and recall against exact.
pub fn compare_with_opencv(n_a: usize, n_b: usize, seed: u64) -> Result<SpeedReport> {
    if n_a < 2 || n_b < 2 {
        return Err(Error::InvalidInput(format!(
            "speed comparison needs at least 2 descriptors per side, got {n_a} × {n_b}"
        )));
    }
    let config = MatchConfig::default();
    let (fa, fb) = synthetic_float(n_a, n_b, descl::describe::FLOAT_DIM, seed);
    let (mfa, mfb) = (float_mat(&fa)?, float_mat(&fb)?);
    let (da, db) = (Descriptors::Float(fa), Descriptors::Float(fb));
    let float = kind_report(
        "float",
        &da,
        &db,
        &mfa,
        &mfb,
        opencv::core::NORM_L2,
        &config,
        1e-3,
    )?;

    let (ba, bb) = synthetic_binary(n_a, n_b, seed.wrapping_add(1));
    let (mba, mbb) = (binary_mat(&ba)?, binary_mat(&bb)?);
    let (dba, dbb) = (Descriptors::Binary(ba), Descriptors::Binary(bb));
    let binary = kind_report(
        "binary",
        &dba,
        &dbb,
        &mba,
        &mbb,
        opencv::core::NORM_HAMMING,
        &config,
        0.0,
    )?;

    let approximate = approx_report(&da, &db, &config)?;
    Ok(SpeedReport {
        n_a,
        n_b,
        seed,
        threads_descl: rayon::current_num_threads(),
        threads_opencv: opencv::core::get_num_threads()?,
        repetitions: REPETITIONS,
        ratio: config.ratio.unwrap_or(1.0),
        float,
        binary,
        approximate,
    })
}

fn approx_report(a: &Descriptors, b: &Descriptors, config: &MatchConfig) -> Result<ApproxReport> {
    let (Descriptors::Float(fa), Descriptors::Float(fb)) = (a, b) else {
        return Err(Error::InvalidInput(
            "approximate matching needs float descriptors".into(),
        ));
    };
    let (exact_s, exact) = median_time(|| descl::matching::match_descriptors(a, b, config))?;
    let approx_cfg = kdtree::ApproxConfig::default();
    let (approx_s, approx) =
        median_time(|| kdtree::approximate_match(fa.view(), fb.view(), &approx_cfg, config))?;
    let common = pair_set(&exact).intersection(&pair_set(&approx)).count();
    Ok(ApproxReport {
        pca_dim: kdtree::PCA_DIM,
        candidates: approx_cfg.candidates,
        approx_s,
        exact_s,
        speedup: exact_s / approx_s,
        recall: if exact.is_empty() {
            1.0
        } else {
            common as f64 / exact.len() as f64
        },
        matches_exact: exact.len(),
        matches_approx: approx.len(),
    })
}
