//! `descl bench` end to end on a slice of the dev data (one Oxford and one HPatches sequence,
//! one Strecha scene), with the OpenCV baselines so no trained model is needed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data() -> Option<PathBuf> {
    match descl::data::data_root() {
        Some(root) => Some(root),
        None if std::env::var_os("CI").is_some() => panic!("CI must have ../shared/data"),
        None => {
            eprintln!("skipping: no ../shared/data (set DESCL_DATA)");
            None
        }
    }
}

/// A folder holding only the named sub-folders of `src` (symlinked).
fn slice(src: &Path, names: &[&str], dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for n in names {
        std::os::unix::fs::symlink(src.join(n), dst.join(n)).unwrap();
    }
}

fn descl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_descl"))
}

/// Runs `cmd`, failing the test with descl's stderr unless it succeeds.
fn succeed(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn sequences_report_json_markdown_and_plots() {
    let Some(root) = data() else { return };
    let tmp = tempfile::tempdir().unwrap();
    slice(&root.join("oxford"), &["graf"], &tmp.path().join("ox"));
    slice(
        &root.join("hpatches-sequences"),
        &["v_wormhole"],
        &tmp.path().join("hp"),
    );
    let (json, md, plots) = (
        tmp.path().join("r.json"),
        tmp.path().join("r.md"),
        tmp.path().join("plots"),
    );
    let out = succeed(
        descl()
            .args([
                "bench",
                "sequences",
                "robustness",
                "-m",
                "sift",
                "-m",
                "rootsift",
                "--max-keypoints",
                "400",
            ])
            .arg("--oxford")
            .arg(tmp.path().join("ox"))
            .arg("--hpatches-sequences")
            .arg(tmp.path().join("hp"))
            .arg("--json")
            .arg(&json)
            .arg("--md")
            .arg(&md)
            .arg("--plots")
            .arg(&plots),
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for m in ["sift", "rootsift"] {
        let all = &r["sequences"][m]["all"]["summary"];
        assert_eq!(all["pairs"], 10);
        let mma: Vec<f64> = all["mma"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_f64().unwrap())
            .collect();
        assert_eq!(mma.len(), 10);
        assert!(
            mma.windows(2).all(|w| w[0] <= w[1]),
            "MMA must grow with the threshold: {mma:?}"
        );
        // SIFT finds a good share of correct matches on graf + wormhole at 10 px.
        assert!(mma[9] > 20.0 && mma[9] <= 100.0, "{m}: {mma:?}");
        let pairs = r["sequences"][m]["oxford"]["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 5);
        assert!(pairs
            .iter()
            .all(|p| p["keypoints"][0].as_u64().unwrap() <= 400));
        // The robustness pairs: both reference images at each of the 5 levels per family.
        for family in ["jpeg", "blur", "zoom"] {
            let f = &r["robustness"][m][family];
            assert_eq!(f["summary"]["pairs"], 10, "{m} {family}");
            assert_eq!(f["levels"].as_array().unwrap().len(), 5, "{m} {family}");
        }
    }
    assert!(
        r["timing"]["per_method"]["sift"]["patches"]
            .as_u64()
            .unwrap()
            > 0
    );
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("| sift |") && text.contains("| rootsift |"),
        "{text}"
    );
    assert!(
        text.contains("### Robustness (2 dev reference images"),
        "{text}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), text.trim());
    for p in ["mma_all.png", "mma_oxford.png", "mma_hpatches.png"] {
        let img = image::open(plots.join(p)).unwrap();
        assert_eq!((img.width(), img.height()), (820, 480));
    }
}

#[test]
fn pose_on_one_strecha_scene() {
    let Some(root) = data() else { return };
    let tmp = tempfile::tempdir().unwrap();
    slice(
        &root.join("strecha"),
        &["Herz-Jesus-P8"],
        &tmp.path().join("st"),
    );
    let json = tmp.path().join("p.json");
    succeed(
        descl()
            .args([
                "bench",
                "pose",
                "-m",
                "sift",
                "--max-keypoints",
                "1000",
                "--strecha",
            ])
            .arg(tmp.path().join("st"))
            .arg("--json")
            .arg(&json),
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let p = &r["pose"]["sift"];
    assert_eq!(p["pairs"], 13);
    let auc: Vec<f64> = p["auc"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a[1].as_f64().unwrap())
        .collect();
    assert!(auc[0] <= auc[1] && auc[1] <= auc[2], "{auc:?}");
    // Herz-Jesus is easy for SIFT with known intrinsics: most pairs within a few degrees.
    assert!(auc[2] > 70.0, "{auc:?}");
}

#[test]
fn unknown_method_and_missing_folder_are_clear_errors() {
    let out = descl()
        .args(["bench", "sequences", "-m", "no-such-model-xyz"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-model-xyz"));
    let out = descl()
        .args([
            "bench",
            "pose",
            "-m",
            "sift",
            "--strecha",
            "/nonexistent-descl-strecha",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-descl-strecha"));
}

#[test]
fn record_files_the_runs_numbers_in_the_model_card() {
    let Some(root) = data() else { return };
    let tmp = tempfile::tempdir().unwrap();
    slice(&root.join("oxford"), &["graf"], &tmp.path().join("ox"));
    // A private models folder: the shipped default model with a card that already holds a
    // metric of another benchmark, which --record must keep.
    let models = tmp.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let name = descl::model::DEFAULT_MODEL;
    let shipped = descl::model::models_dir();
    std::fs::copy(
        shipped.join(format!("{name}.onnx")),
        models.join(format!("{name}.onnx")),
    )
    .unwrap();
    let mut card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(shipped.join(format!("{name}.json"))).unwrap())
            .unwrap();
    card["metrics"] = serde_json::json!({"other-benchmark": {"command": "x", "score": 1.5}});
    let card_path = models.join(format!("{name}.json"));
    std::fs::write(&card_path, serde_json::to_vec(&card).unwrap()).unwrap();
    let json = tmp.path().join("r.json");
    succeed(
        descl()
            .env("DESCL_MODELS", &models)
            .args(["bench", "sequences", "-m", "sift", "-m", name])
            .args(["--max-keypoints", "300", "--record", "--oxford"])
            .arg(tmp.path().join("ox"))
            .arg("--json")
            .arg(&json),
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let all = |m: &str| r["sequences"][m]["all"]["summary"].clone();
    let mma3 = |m: &str| all(m)["mma"][2][1].as_f64().unwrap();
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&card_path).unwrap()).unwrap();
    let seq = &card["metrics"]["dev-homography-sequences"];
    assert!(
        (seq["mma@3"].as_f64().unwrap() - mma3(name)).abs() <= 0.005,
        "{seq}"
    );
    assert!((seq["same_run_mma@3"]["sift"].as_f64().unwrap() - mma3("sift")).abs() <= 0.005);
    assert_eq!(seq["pairs"], all(name)["pairs"]);
    // The recorded command is one a person can re-run, not this machine's binary path.
    assert!(seq["command"]
        .as_str()
        .unwrap()
        .starts_with("descl bench sequences -m sift"));
    assert_eq!(card["metrics"]["other-benchmark"]["score"], 1.5);
    // The rewritten card still loads with its checksum.
    descl::model::card::ModelCard::load(&card_path).unwrap();
}

/// A data folder that is not there, or is a file, ran nothing and exited 0 with an empty
/// report (`$DESCL_DATA` pointing nowhere, a folder flag under `bench all`). It is an error
/// naming the folder and the suite, before any work; `bench all` still skips the suites whose
/// folder under the data root is absent.
#[test]
fn a_missing_data_folder_is_an_error_naming_it_and_the_suite() {
    let tmp = tempfile::tempdir().unwrap();
    let (empty, file) = (tmp.path().join("empty"), tmp.path().join("file"));
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(&file, b"not a folder").unwrap();
    let absent = tmp.path().join("absent");
    let fails = |cmd: &mut Command, expect: &[&str]| {
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?} succeeded: {err}");
        for e in expect {
            assert!(err.contains(e), "{cmd:?}: {e:?} not in {err}");
        }
    };
    let (absent_s, file_s) = (absent.display().to_string(), file.display().to_string());
    for (root, what) in [(&absent_s, "no such folder"), (&file_s, "not a folder")] {
        for suite in ["sequences", "pose", "all"] {
            fails(
                descl()
                    .env("DESCL_DATA", root)
                    .args(["bench", suite, "-m", "sift"]),
                &["$DESCL_DATA", root, what],
            );
            fails(
                descl()
                    .env("DESCL_DATA", &empty)
                    .args(["bench", suite, "-m", "sift", "--data", root]),
                &["--data", root, what],
            );
        }
        // A folder flag given is checked under `all` too.
        fails(
            descl().env("DESCL_DATA", &empty).args([
                "bench",
                "all",
                "-m",
                "sift",
                "--strecha",
                root,
            ]),
            &["--strecha", root, what, "pose and sfm suites"],
        );
    }
    // A suite's folder flag that is a file, and a folder under the data root that is absent:
    // each named with the suite.
    fails(
        descl().env("DESCL_DATA", &empty).args([
            "bench",
            "matching-score",
            "-m",
            "sift",
            "--oxford",
            &file_s,
        ]),
        &["--oxford", &file_s, "not a folder", "matching-score"],
    );
    fails(
        descl()
            .env("DESCL_DATA", &empty)
            .args(["bench", "pose", "-m", "sift"]),
        &[
            &empty.join("strecha").display().to_string(),
            "no such folder",
            "pose suite",
        ],
    );
    // No folder and no data root (the library's view when neither is there): an error naming
    // the suite, not an empty report.
    for suite in [
        descl::eval::suite::Suite::Sequences,
        descl::eval::suite::Suite::Pose,
        descl::eval::suite::Suite::Phototour,
        descl::eval::suite::Suite::Hpatches,
    ] {
        let cfg = descl::eval::suite::BenchConfig {
            suites: vec![suite],
            skip_missing: false,
            data: descl::eval::suite::DataPaths::default(),
            split: "a".into(),
            max_keypoints: 100,
            sfm_max_keypoints: 100,
            sfm_runs: 1,
            sfm_mapper: descl::sfm::mapper::MapperKind::Colmap,
            sfm_keep: None,
            sfm_peers: None,
            command: "test".into(),
        };
        let err = descl::eval::suite::run(&cfg, &[], &descl::progress::Silent)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("the {} suite has no data", suite.name())),
            "{err}"
        );
    }
}

/// HPatches and Oxford ground-truth homographies that are singular, or whose values overflow
/// when normalised by H[2][2], were taken as ground truth (every projected point then NaN or
/// infinite, a pair's accuracy silently 0). The sequence is refused before any work, naming
/// the file and the problem.
#[test]
fn singular_or_non_finite_ground_truth_homographies_are_refused() {
    const IDENTITY: &str = "1 0 0\n0 1 0\n0 0 1\n";
    let tmp = tempfile::tempdir().unwrap();
    // A sequence folder in either release's layout (empty image files: the homographies are
    // read before any image), `bad` replacing the homography of target 3.
    let sequence = |root: &Path, hpatches: bool, bad: &str| -> PathBuf {
        let dir = root.join("seq");
        std::fs::create_dir_all(&dir).unwrap();
        for k in 1..=6 {
            let (image, h) = if hpatches {
                (format!("{k}.ppm"), format!("H_1_{k}"))
            } else {
                (format!("img{k}.png"), format!("H1to{k}p"))
            };
            std::fs::write(dir.join(image), b"").unwrap();
            if k > 1 {
                let text = if k == 3 { bad } else { IDENTITY };
                std::fs::write(dir.join(&h), text).unwrap();
            }
        }
        dir.join(if hpatches { "H_1_3" } else { "H1to3p" })
    };
    // Good sequences of each layout, beside the bad one of the other.
    let (good_hp, good_ox) = (tmp.path().join("good-hp"), tmp.path().join("good-ox"));
    sequence(&good_hp, true, IDENTITY);
    sequence(&good_ox, false, IDENTITY);
    for (case, bad, expect) in [
        ("singular", "1 2 3\n2 4 6\n0 0 1\n", "singular"),
        ("zero", "0 0 0\n0 0 0\n0 0 1\n", "singular"),
        ("overflow", "1e300 0 0\n0 1 0\n0 0 1e-11\n", "not finite"),
    ] {
        for hpatches in [true, false] {
            let root = tmp.path().join(format!("{case}-{hpatches}"));
            let file = sequence(&root, hpatches, bad);
            let (hp, ox) = if hpatches {
                (&root, &good_ox)
            } else {
                (&good_hp, &root)
            };
            let flag = if hpatches {
                "--hpatches-sequences"
            } else {
                "--oxford"
            };
            let out = descl()
                .args(["bench", "sequences", "-m", "sift", "--hpatches-sequences"])
                .arg(hp)
                .arg("--oxford")
                .arg(ox)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success()
                    && err.contains(&file.display().to_string())
                    && err.contains(expect),
                "{case} {flag}: {err}"
            );
        }
    }
}
