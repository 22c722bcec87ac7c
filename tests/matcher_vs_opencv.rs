//! descl's exact matcher returns the same mutual + ratio matches as OpenCV's BFMatcher on the
//! same descriptors (float L2 and binary Hamming), and the approximate matcher keeps most of
//! them: the correctness half of the `matcher_vs_opencv` bench, whose code it shares.

#[path = "../benches/opencv_speed/mod.rs"]
mod opencv_speed;

#[test]
fn small_comparison_agrees_with_opencv() {
    let r = opencv_speed::compare_with_opencv(300, 280, 5).unwrap();
    for k in [&r.float, &r.binary] {
        assert!(k.matches_descl > 50, "{k:?}");
        assert_eq!(k.matches_descl, k.matches_common, "{k:?}");
        assert_eq!(k.matches_opencv, k.matches_common, "{k:?}");
        assert_eq!(k.rows_same_best_distance, k.rows, "{k:?}");
    }
    assert!(r.approximate.recall > 0.8, "{:?}", r.approximate);
}
