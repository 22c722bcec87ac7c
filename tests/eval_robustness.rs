//! The robustness suite (`descl bench robustness`) on one small dev image (Oxford graf's
//! reference, 800×640) with SIFT: JPEG, blur and rotation-and-zoom levels, MMA in [0, 100], stronger degradation
//! no better than the mildest, the report's JSON round trip (and reports written before the
//! suite existed still read), markdown and card metrics.

use descl::describe::{Describer, SIFT};
use descl::eval::report::{BenchReport, CARD_ROBUSTNESS};
use descl::eval::robustness::{BLUR, BLUR_SIGMAS, JPEG, JPEG_QUALITIES, ZOOM, ZOOM_LEVELS};
use descl::eval::suite::{self, BenchConfig, DataPaths, Suite};
use descl::model::Device;
use descl::progress::Silent;

fn data() -> Option<std::path::PathBuf> {
    match descl::data::data_root() {
        Some(root) => Some(root),
        None if std::env::var_os("CI").is_some() => panic!("CI must have ../shared/data"),
        None => {
            eprintln!("skipping: no ../shared/data (set DESCL_DATA)");
            None
        }
    }
}

#[test]
fn jpeg_blur_and_zoom_pairs_of_one_dev_image() {
    let Some(root) = data() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ox = tmp.path().join("ox");
    std::fs::create_dir_all(&ox).unwrap();
    std::os::unix::fs::symlink(root.join("oxford/graf"), ox.join("graf")).unwrap();
    let cfg = BenchConfig {
        suites: vec![Suite::Robustness],
        skip_missing: false,
        data: DataPaths {
            oxford: Some(ox),
            ..DataPaths::default()
        },
        split: "a".into(),
        max_keypoints: 1024,
        sfm_max_keypoints: 0,
        sfm_runs: 1,
        sfm_mapper: descl::sfm::mapper::MapperKind::Colmap,
        sfm_keep: None,
        sfm_peers: None,
        command: "test".into(),
    };
    let sift = Describer::open(SIFT, Device::Cpu).unwrap();
    let report = suite::run(&cfg, &[sift], &Silent).unwrap();
    assert!(report.sequences.is_empty() && report.pose.is_empty());
    let families = &report.robustness[SIFT];
    let mma3 = |family: &str, i: usize| families[family].levels[i].summary.mma[2].1;
    for (family, n) in [
        (JPEG, JPEG_QUALITIES.len()),
        (BLUR, BLUR_SIGMAS.len()),
        (ZOOM, ZOOM_LEVELS.len()),
    ] {
        let f = &families[family];
        assert_eq!(f.levels.len(), n, "{family}");
        assert_eq!(f.summary.pairs, n, "{family}: one pair per level");
        for l in &f.levels {
            assert_eq!(l.pairs.len(), 1);
            assert_eq!(l.pairs[0].sequence, "oxford/graf");
            for &(_, v) in &l.summary.mma {
                assert!((0.0..=100.0).contains(&v), "{family} {}: {v}", l.level);
            }
            assert!(l.summary.mean_matches > 0.0, "{family} {}", l.level);
            // The detector's share is part of the wrong matches; descl match's matcher (mutual
            // NN + ratio) keeps a subset of the mutual-NN matches.
            let p = &l.pairs[0];
            assert!(
                p.unrepeated_wrong_3px <= p.matches - p.correct[2],
                "{family} {}",
                l.level
            );
            assert!(
                p.lowe_matches > 0 && p.lowe_matches <= p.matches,
                "{family} {}",
                l.level
            );
            assert!(
                p.lowe_correct_3px <= p.lowe_matches.min(p.correct[2]),
                "{family} {}",
                l.level
            );
        }
    }
    // JPEG 15 moves the detections: some wrong matches join frames without counterparts.
    assert!(families[JPEG].levels[4].pairs[0].unrepeated_wrong_3px > 0);
    let levels: Vec<f64> = families[JPEG].levels.iter().map(|l| l.level).collect();
    assert_eq!(levels, vec![90.0, 70.0, 50.0, 30.0, 15.0]);
    // The identity pair at JPEG 90 is nearly perfect; quality 15 cannot be better.
    assert!(mma3(JPEG, 0) > 80.0, "JPEG 90: {}", mma3(JPEG, 0));
    assert!(
        mma3(JPEG, 4) <= mma3(JPEG, 0),
        "JPEG 15 {} > JPEG 90 {}",
        mma3(JPEG, 4),
        mma3(JPEG, 0)
    );
    assert!(mma3(BLUR, 4) <= mma3(BLUR, 0), "σ 5 better than σ 1");
    // Rotation and zoom: each level names its angle; the mildest keeps most matches correct
    // under the ground-truth similarity (a wrong ground truth would leave almost none), the
    // strongest sees a sixth of the reference, so more of its wrong matches are the detector's.
    let zoom = &families[ZOOM];
    let zl: Vec<(f64, Option<f64>)> = zoom
        .levels
        .iter()
        .map(|l| (l.level, l.rotation_deg))
        .collect();
    assert_eq!(
        zl,
        ZOOM_LEVELS
            .iter()
            .map(|&(k, r)| (k, Some(r)))
            .collect::<Vec<_>>()
    );
    assert_eq!(zoom.levels[0].pairs[0].target, 125);
    assert!(mma3(ZOOM, 0) > 50.0, "×1.25 10°: {}", mma3(ZOOM, 0));
    assert!(
        mma3(ZOOM, 4) < mma3(ZOOM, 0),
        "×2.5 60° {} ≥ ×1.25 10° {}",
        mma3(ZOOM, 4),
        mma3(ZOOM, 0)
    );
    let unrepeated = |i: usize| {
        let p = &zoom.levels[i].pairs[0];
        p.unrepeated_wrong_3px as f64 / (p.matches - p.correct[2]).max(1) as f64
    };
    assert!(
        unrepeated(4) > unrepeated(0),
        "{} {}",
        unrepeated(4),
        unrepeated(0)
    );
    // Only the degraded image's detections change: the count of the reference is shared.
    let kp = |family: &str, i: usize| families[family].levels[i].pairs[0].keypoints.0;
    assert_eq!(kp(JPEG, 0), kp(BLUR, 4));

    // JSON round trip, markdown, card.
    let json = serde_json::to_string(&report).unwrap();
    let back: BenchReport = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    let md = report.markdown();
    assert!(
        md.contains("### Robustness (1 dev reference images"),
        "{md}"
    );
    assert!(
        md.contains("| jpeg (all) | q90 |") && md.contains("σ5 |") && md.contains("| ×2.5 60° |"),
        "{md}"
    );
    assert!(md.contains("| sift |"), "{md}");
    assert!(md.contains("| jpeg | jpeg, ratio 0.8 |"), "{md}");
    let card = report.card_metrics(SIFT);
    let entry = &card[CARD_ROBUSTNESS];
    assert_eq!(entry["jpeg_mma@3_by_level"]["15"].as_f64().unwrap(), {
        (mma3(JPEG, 4) * 100.0).round() / 100.0
    });
    assert!(entry["blur_mma@3"].is_number());
    assert_eq!(
        entry["zoom_mma@3_by_level"]["1.25x10deg"].as_f64().unwrap(),
        { (mma3(ZOOM, 0) * 100.0).round() / 100.0 }
    );
}

#[test]
fn reports_written_before_the_suite_still_read() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let old = manifest.join("docs/bench/methods-2026-11-22.json");
    let text = std::fs::read_to_string(&old).unwrap();
    assert!(!text.contains("\"robustness\""));
    let r: BenchReport = serde_json::from_str(&text).unwrap();
    assert!(r.robustness.is_empty());
    assert!(!r.sequences.is_empty());
    assert!(!r.markdown().contains("### Robustness"));
    // Columns added later read as 0 from reports without them.
    let s = &r
        .sequences
        .values()
        .next()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .summary;
    assert_eq!((s.lowe_mma3, s.mean_unrepeated_wrong_3px), (0.0, 0.0));
}

/// The robustness plots of a committed 9-method report: one per family, legible size, every
/// method's colour drawn. `DESCL_TEST_PLOTS=DIR` keeps them for a look.
#[test]
fn robustness_plots_of_the_zoom_report() {
    use descl::eval::plot::write_plots;
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(manifest.join("docs/bench/zoom-2026-11-27.json")).unwrap();
    let r: BenchReport = serde_json::from_str(&text).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("DESCL_TEST_PLOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let written = write_plots(&r, &dir).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec![
            "robustness_blur.png",
            "robustness_jpeg.png",
            "robustness_zoom.png"
        ]
    );
    for p in &written {
        let img = image::open(p).unwrap().to_rgb8();
        assert_eq!((img.width(), img.height()), (820, 480));
        // Tableau 10's first nine colours, one per method.
        for c in [[31u8, 119, 180], [255, 127, 14], [188, 189, 34]] {
            assert!(
                img.pixels().any(|px| px.0 == c),
                "{}: no line in {c:?}",
                p.display()
            );
        }
    }
}
