//! The reconstruction suite (`descl bench sfm`) on a small Strecha scene: five fountain-P11
//! images reconstructed by descl (RootSIFT on DoG frames, `colmap mapper`) and by COLMAP's own
//! SIFT pipeline in the same run, both aligned to the ground truth; the report's table and the
//! card entry carry both, and `--sfm-keep` keeps what each built.

use descl::describe::{Describer, ROOTSIFT};
use descl::eval::reconstruction::COLMAP_SIFT_PIPELINE;
use descl::eval::report::CARD_SFM;
use descl::eval::suite::{run, BenchConfig, DataPaths, Suite};
use descl::model::Device;

mod common;

/// Images of the small scene: enough for a model with a meaningful alignment, few enough for
/// a debug build.
const IMAGES: usize = 5;
const KEYPOINTS: usize = 1024;
/// Runs per pipeline: more than one, so the median row and its runs are checked.
const RUNS: usize = 2;

#[test]
fn sfm_suite_reconstructs_a_scene_with_each_method_and_colmaps_sift_pipeline() {
    const TEST: &str = "sfm suite";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let src = root.join("strecha").join("fountain-P11");
    // A Strecha root with one scene: the first IMAGES images and their cameras.
    let root = tempfile::tempdir().unwrap();
    let scene = root.path().join("fountain-small");
    std::fs::create_dir_all(scene.join("images")).unwrap();
    std::fs::create_dir_all(scene.join("cameras")).unwrap();
    for i in 0..IMAGES {
        let name = format!("{i:04}.jpg");
        std::fs::copy(
            src.join("images").join(&name),
            scene.join("images").join(&name),
        )
        .unwrap();
        let cam = format!("{name}.camera");
        std::fs::copy(
            src.join("cameras").join(&cam),
            scene.join("cameras").join(&cam),
        )
        .unwrap();
    }
    let cfg = BenchConfig {
        suites: vec![Suite::Sfm],
        skip_missing: false,
        data: DataPaths {
            strecha: Some(root.path().to_path_buf()),
            ..DataPaths::default()
        },
        split: "a".into(),
        max_keypoints: 2048,
        sfm_max_keypoints: KEYPOINTS,
        sfm_runs: RUNS,
        sfm_mapper: descl::sfm::mapper::MapperKind::Colmap,
        sfm_keep: Some(root.path().join("keep")),
        command: "test".into(),
    };
    let methods = [Describer::open(ROOTSIFT, Device::Cpu).unwrap()];
    let report = run(&cfg, &methods, &descl::progress::Silent).unwrap();
    let md = report.markdown();
    eprintln!("{md}");
    // descl's side chooses its keypoints as COLMAP chooses its features.
    assert_eq!(
        report.settings.sfm_selection,
        Some(descl::detect::Selection::Colmap)
    );
    assert!(
        md.contains(&format!("as COLMAP chooses {KEYPOINTS} features")),
        "{md}"
    );
    assert_eq!(report.sfm.len(), 2, "{:?}", report.sfm.keys());
    for method in [ROOTSIFT, COLMAP_SIFT_PIPELINE] {
        let r = &report.sfm[method]["fountain-small"];
        let a = r
            .accuracy
            .as_ref()
            .unwrap_or_else(|| panic!("{method}: {:?}", r.error));
        assert_eq!(a.total, IMAGES, "{method}");
        assert_eq!(a.registered, IMAGES, "{method}: {a:?}");
        // Five overlapping views of a facade: both pipelines place every camera within 1 % of
        // the scene's extent and 0.5° (the full scene's test gets 0.5° and 1 % too).
        assert!(a.median_centre_error_rel < 0.01, "{method}: {a:?}");
        assert!(a.median_rotation_error_deg < 0.5, "{method}: {a:?}");
        assert!(a.num_points > 100, "{method}: {a:?}");
        assert!(r.seconds > 0.0);
        // Every run is reported; the row is one of them, the better middle one of two.
        assert_eq!(r.runs.len(), RUNS, "{method}");
        let each = r.centre_errors_rel();
        assert!(each.iter().all(Option::is_some), "{method}: {each:?}");
        let best = each.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(a.median_centre_error_rel, best, "{method}: {each:?}");
        assert!(
            md.contains(&format!(
                "| fountain-small | {method} | {IMAGES}/{IMAGES} |"
            )),
            "{md}"
        );
    }
    // descl's side maps as descl sfm does (sfm::map): each run records its mapper filter,
    // COLMAP's 4 px, and no refinement (descl sfm's default since 2026-11-28).
    assert_eq!(
        report.sfm[ROOTSIFT]["fountain-small"].filters_px(),
        vec![descl::sfm::mapper::COLMAP_FILTER_MAX_REPROJ_ERROR_PX; RUNS]
    );
    assert!(report.sfm[ROOTSIFT]["fountain-small"]
        .refined_px()
        .is_empty());
    // The card entry quotes the COLMAP peer of the same run.
    let card = report.card_metrics(ROOTSIFT);
    let entry = &card[CARD_SFM];
    assert_eq!(
        entry["scenes"]["fountain-small"]["registered"].as_u64(),
        Some(IMAGES as u64)
    );
    assert!(entry["same_run"][COLMAP_SIFT_PIPELINE]["fountain-small"]["points"].as_u64() > Some(0));
    assert_eq!(
        entry["scenes"]["fountain-small"]["centre_error_percent_of_each_run"]
            .as_array()
            .map(Vec::len),
        Some(RUNS)
    );
    assert_eq!(report.settings.sfm_runs, Some(RUNS));
    assert!(
        md.contains(&format!("Each pipeline run {RUNS} times")),
        "{md}"
    );
    // --sfm-keep leaves each method's database and each run's model in SCENE/METHOD ...
    let kept = root.path().join("keep").join("fountain-small");
    for (method, db) in [
        (ROOTSIFT, "database.db"),
        (COLMAP_SIFT_PIPELINE, "run-0/colmap.db"),
    ] {
        assert!(kept.join(method).join(db).is_file(), "{method}: {db}");
        assert!(kept.join(method).join("run-1").is_dir(), "{method}");
    }
    // ... and refuses to build into a folder an earlier run filled.
    let err = run(&cfg, &methods, &descl::progress::Silent)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("already exists") && err.contains(&kept.join(ROOTSIFT).display().to_string()),
        "{err}"
    );
    // The JSON report reads back (older reports without `sfm` read too: the field defaults).
    let json = serde_json::to_string(&report).unwrap();
    let back: descl::eval::report::BenchReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back.sfm.len(), 2);
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    old.as_object_mut().unwrap().remove("sfm");
    let old: descl::eval::report::BenchReport = serde_json::from_value(old).unwrap();
    assert!(old.sfm.is_empty());
}
