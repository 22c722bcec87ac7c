//! Float matching speed: descl's exact matcher (SGEMM, two-NN both ways, mutual + ratio in one
//! pass) against OpenCV's BFMatcher (knnMatch k=2 A→B and k=1 B→A, NORM_L2) on the same
//! 4000 × 4000 unit 128-d descriptors in the same run, plus the PCA + kd-tree approximate
//! matcher. Goal: ≥ 3× faster than OpenCV. The final JSON line is
//! `opencv_speed::compare_with_opencv` (also checks that both return the same matches).
//!
//! `cargo bench -p descl --bench match_f32` (`DESCL_BENCH_N` overrides 4000).

mod opencv_speed;

use criterion::Criterion;
use descl::describe::Descriptors;
use descl::matching::kdtree::{approximate_match, ApproxConfig};
use descl::matching::{match_descriptors, MatchConfig};
use opencv_speed::{float_mat, opencv_knn, synthetic_float};
use std::hint::black_box;

/// Descriptors per side (issue 3: 4,000 × 4,000).
const DEFAULT_N: usize = 4000;
const SEED: u64 = 7;

fn n() -> usize {
    std::env::var("DESCL_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_N)
}

fn main() {
    let n = n();
    let mut c = Criterion::default().configure_from_args().sample_size(10);
    let (a, b) = synthetic_float(n, n, 128, SEED);
    let (ma, mb) = (float_mat(&a).expect("mat"), float_mat(&b).expect("mat"));
    let (da, db) = (Descriptors::Float(a.clone()), Descriptors::Float(b.clone()));
    let cfg = MatchConfig::default();
    let mut g = c.benchmark_group(format!("match_f32_{n}x{n}"));
    g.bench_function("descl_exact_mutual_ratio", |bch| {
        bch.iter(|| black_box(match_descriptors(&da, &db, &cfg).expect("match")))
    });
    g.bench_function("opencv_bf_knn2_plus_reverse_knn1", |bch| {
        bch.iter(|| {
            black_box(opencv_knn(&ma, &mb, opencv::core::NORM_L2, 2).expect("knn"));
            black_box(opencv_knn(&mb, &ma, opencv::core::NORM_L2, 1).expect("knn"))
        })
    });
    g.bench_function("descl_approx_pca_kdtree", |bch| {
        bch.iter(|| {
            black_box(
                approximate_match(a.view(), b.view(), &ApproxConfig::default(), &cfg)
                    .expect("approx"),
            )
        })
    });
    g.finish();
    c.final_summary();
    let report = opencv_speed::compare_with_opencv(n, n, SEED).expect("speed report");
    println!("{}", serde_json::to_string(&report).expect("json"));
}
