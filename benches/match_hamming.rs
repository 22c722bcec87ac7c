//! Binary matching speed: descl's Hamming matcher ([u64; 4] popcount, two-NN both ways,
//! mutual + ratio in one pass) against OpenCV's BFMatcher (knnMatch k=2 A→B and k=1 B→A,
//! NORM_HAMMING) on the same 4000 × 4000 256-bit descriptors in the same run.
//! Goal: ≥ 5× faster than OpenCV.
//!
//! `cargo bench -p descl --bench match_hamming` (`DESCL_BENCH_N` overrides 4000).

mod opencv_speed;

use criterion::Criterion;
use descl::describe::Descriptors;
use descl::matching::{match_descriptors, MatchConfig};
use opencv_speed::{binary_mat, opencv_knn, synthetic_binary};
use std::hint::black_box;

/// Descriptors per side (issue 3: 4,000 × 4,000).
const DEFAULT_N: usize = 4000;
const SEED: u64 = 8;

fn main() {
    let n = std::env::var("DESCL_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_N);
    let mut c = Criterion::default().configure_from_args().sample_size(10);
    let (a, b) = synthetic_binary(n, n, SEED);
    let (ma, mb) = (binary_mat(&a).expect("mat"), binary_mat(&b).expect("mat"));
    let (da, db) = (Descriptors::Binary(a), Descriptors::Binary(b));
    let cfg = MatchConfig::default();
    let mut g = c.benchmark_group(format!("match_hamming_{n}x{n}"));
    g.bench_function("descl_exact_mutual_ratio", |bch| {
        bch.iter(|| black_box(match_descriptors(&da, &db, &cfg).expect("match")))
    });
    g.bench_function("opencv_bf_knn2_plus_reverse_knn1", |bch| {
        bch.iter(|| {
            black_box(opencv_knn(&ma, &mb, opencv::core::NORM_HAMMING, 2).expect("knn"));
            black_box(opencv_knn(&mb, &ma, opencv::core::NORM_HAMMING, 1).expect("knn"))
        })
    });
    g.finish();
    c.final_summary();
}
