//! descl's matcher against OpenCV's BFMatcher on the same synthetic descriptors in one process:
//! float (128-d, L2) and binary (256-bit, Hamming), mutual + ratio 0.8, median of a few runs,
//! with a check that both return the same matches; plus the PCA + kd-tree approximate matcher
//! against exact. Prints the report as JSON, then a table. (Formerly `descl bench match`: a
//! comparison with another library is a benchmark, not a feature of the CLI.)
//!
//! `cargo bench -p descl --bench matcher_vs_opencv` (`DESCL_BENCH_N` overrides 4000
//! descriptors per side).

mod opencv_speed;

use opencv_speed::{compare_with_opencv, KindReport};

/// Descriptors per side (issue 3: 4,000 × 4,000), as `descl bench match --match-size` had.
const DEFAULT_N: usize = 4000;
/// The seed `descl bench match` used, so numbers stay comparable with earlier reports.
const SEED: u64 = 0;

fn row(k: &KindReport) -> String {
    format!(
        "| {} | {:.1} | {:.1} | {:.1} | {:.2}× | {:.2}× | {} / {} / {} | {} / {} |",
        k.kind,
        1e3 * k.descl_s,
        1e3 * k.opencv_s,
        1e3 * k.opencv_knn_only_s,
        k.speedup,
        k.speedup_vs_knn_only,
        k.matches_descl,
        k.matches_opencv,
        k.matches_common,
        k.rows_same_best_distance,
        k.rows
    )
}

fn main() {
    let n = std::env::var("DESCL_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_N);
    eprintln!("matcher speed: {n} × {n} descriptors, descl vs OpenCV BFMatcher ...");
    let r = compare_with_opencv(n, n, SEED).expect("speed comparison");
    println!(
        "{}",
        serde_json::to_string_pretty(&r).expect("report as JSON")
    );
    println!(
        "\n{n} × {n} descriptors, ratio {}, median of {} runs; descl {} threads, OpenCV {}\n",
        r.ratio, r.repetitions, r.threads_descl, r.threads_opencv
    );
    println!(
        "| kind | descl (ms) | OpenCV (ms) | OpenCV knn only (ms) | speed-up | vs knn only | matches descl / OpenCV / common | same best distance / rows |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!("{}", row(&r.float));
    println!("{}", row(&r.binary));
    let a = &r.approximate;
    println!(
        "\nApproximate (PCA {} + kd-tree, {} candidates): {:.1} ms vs exact {:.1} ms ({:.2}×), recall {:.3} ({} of {} exact matches)",
        a.pca_dim,
        a.candidates,
        1e3 * a.approx_s,
        1e3 * a.exact_s,
        a.speedup,
        a.recall,
        a.matches_approx,
        a.matches_exact
    );
}
