//! Staged, sharded and resumed work never mixes stale results (issue 24): features and matches
//! record what made them, `--resume` and a rerun of `descl match --out-dir` redo what differs,
//! `descl sfm merge` refuses stale matches and incomplete runs, and shard membership does not
//! depend on the order of the inputs.

mod common;

use common::{descl, files_in, run};
use descl::io::features::read_features;
use descl::io::matches::read_matches;
use std::path::{Path, PathBuf};

/// Small images keep these tests fast; every run of a test uses the same.
const SIZE: [&str; 2] = ["--max-image-size", "640"];

/// `n` fountain images linked into `dir/images`.
fn images(data: &Path, dir: &Path, n: usize) -> PathBuf {
    let src = data.join("strecha/fountain-P11/images");
    let out = dir.join("images");
    std::fs::create_dir(&out).unwrap();
    for i in 0..n {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(src.join(&name), out.join(&name)).unwrap();
    }
    out
}

/// `descl extract IMGS --out OUT --max-image-size 640 ARGS... --json`: its JSON summary.
fn extract(imgs: &Path, out: &Path, args: &[&str]) -> serde_json::Value {
    let (ok, stdout, err) = run(descl()
        .arg("extract")
        .arg(imgs)
        .arg("--out")
        .arg(out)
        .args(SIZE)
        .args(args)
        .arg("--json"));
    assert!(ok, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

/// `descl match --images FEATS --exhaustive --planar-check --out-dir OUT ARGS... --json`.
fn match_set(feats: &Path, out: &Path, args: &[&str]) -> serde_json::Value {
    let (ok, stdout, err) = run(descl()
        .args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(feats)
        .arg("--out-dir")
        .arg(out)
        .args(args)
        .arg("--json"));
    assert!(ok, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

fn merge(feats: &Path, matches: &Path, db: &Path, args: &[&str]) -> (bool, String, String) {
    run(descl()
        .args(["sfm", "merge", "--json", "--features"])
        .arg(feats)
        .arg("--matches")
        .arg(matches)
        .arg("--database")
        .arg(db)
        .args(args))
}

fn npz_in(dir: &Path) -> Vec<String> {
    files_in(dir)
        .into_iter()
        .filter(|n| n.ends_with(".npz"))
        .collect()
}

/// Case 1: features extracted again with another budget; the same match must redo the pairs,
/// and a merge of the stale matches must refuse, naming the file.
#[test]
fn matches_of_replaced_features_are_redone_and_never_merged() {
    let Some(data) = common::data_root_or_skip("matches_of_replaced_features_are_redone") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["--max-keypoints", "1000"]);
    let j = match_set(&feats, &m, &[]);
    assert_eq!(j["pairs"].as_array().unwrap().len(), 3, "{j}");
    let again = match_set(&feats, &m, &[]);
    assert_eq!(again["skipped_existing"], 3, "{again}");

    extract(&imgs, &feats, &["--max-keypoints", "500"]);
    // The stale matches index up to 1000 keypoints of features that now have 500.
    let (ok, _, err) = merge(&feats, &m, &dir.path().join("stale.db"), &[]);
    assert!(
        !ok && err.contains("__") && err.contains(".npz") && err.contains("match again"),
        "{err}"
    );
    assert!(!dir.path().join("stale.db").exists());

    let j = match_set(&feats, &m, &[]);
    assert_eq!(j["skipped_existing"], 0, "{j}");
    assert_eq!(j["redone_stale"], 3, "{j}");
    for name in npz_in(&m) {
        let f = read_matches(&m.join(&name)).unwrap();
        assert!(f.pairs.iter().all(|p| p[0] < 500 && p[1] < 500), "{name}");
    }
    let (ok, out, err) = merge(&feats, &m, &dir.path().join("fresh.db"), &[]);
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (s["images"].as_u64(), s["pairs"].as_u64()),
        (Some(3), Some(3))
    );

    // Other match settings are not the stored ones either.
    let j = match_set(&feats, &m, &["--ratio", "0.7"]);
    assert_eq!(j["redone_stale"], 3, "{j}");
}

/// Case 1 with hloc's files: the pair groups of matches.h5 record the features they index.
#[test]
fn h5_pairs_of_other_features_are_redone() {
    let Some(data) = common::data_root_or_skip("h5_pairs_of_other_features_are_redone") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let out = dir.path().join("h5");
    let run_h5 = |budget: &str| -> serde_json::Value {
        let (ok, stdout, err) = run(descl()
            .args(["match", "--exhaustive", "--format", "h5", "--images"])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(&out)
            .args(SIZE)
            .args(["--max-keypoints", budget, "--json"]));
        assert!(ok, "{err}");
        serde_json::from_str(&stdout).unwrap()
    };
    run_h5("1000");
    assert_eq!(run_h5("1000")["skipped_existing"], 3);
    let j = run_h5("500");
    assert_eq!(
        (j["skipped_existing"].as_u64(), j["redone_stale"].as_u64()),
        (Some(0), Some(3)),
        "{j}"
    );
    let f = common::h5_open(&out.join("matches.h5"));
    let m0 = f.dataset("0000.jpg/0001.jpg/matches0").unwrap();
    let kp = common::h5_open(&out.join("features.h5"))
        .dataset("0000.jpg/keypoints")
        .unwrap()
        .shape()[0];
    assert_eq!(m0.shape()[0], kp);
    assert!(kp <= 500);
}

/// Case 2: `--resume` reuses a features file only when the same image bytes went through the
/// same model and settings.
#[test]
fn resume_redoes_features_of_other_settings_or_image() {
    let Some(data) = common::data_root_or_skip("resume_redoes_features_of_other_settings") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let feats = dir.path().join("f");
    let first = extract(&imgs, &feats, &["--max-keypoints", "300"]);
    assert_eq!(first["images"].as_array().unwrap().len(), 3);
    let same = extract(&imgs, &feats, &["--max-keypoints", "300", "--resume"]);
    assert_eq!(same["skipped_existing"], 3, "{same}");

    let redo = |args: &[&str], field: &str| {
        let mut all = vec!["--resume"];
        all.extend_from_slice(args);
        let j = extract(&imgs, &feats, &all);
        assert_eq!(j["skipped_existing"], 0, "{args:?}: {j}");
        let why = j["redone_stale"].as_array().unwrap();
        assert_eq!(why.len(), 3, "{args:?}: {j}");
        assert!(
            why.iter().all(|w| w.as_str().unwrap().contains(field)),
            "{args:?}: {j}"
        );
    };
    redo(&["--max-keypoints", "200"], "max_keypoints");
    redo(
        &["--max-keypoints", "200", "-m", "rootsift"],
        "settings.model",
    );
    let f = read_features(&feats.join("0001.npz")).unwrap();
    assert_eq!(f.meta.model, "rootsift");
    redo(
        &[
            "--max-keypoints",
            "200",
            "-m",
            "rootsift",
            "--detector",
            "harris-affine",
        ],
        "detector.kind",
    );

    // Another image under the same name: only that one is extracted again.
    std::fs::remove_file(imgs.join("0001.jpg")).unwrap();
    std::os::unix::fs::symlink(
        data.join("strecha/fountain-P11/images/0005.jpg"),
        imgs.join("0001.jpg"),
    )
    .unwrap();
    let args = [
        "--max-keypoints",
        "200",
        "-m",
        "rootsift",
        "--detector",
        "harris-affine",
        "--resume",
    ];
    let j = extract(&imgs, &feats, &args);
    assert_eq!(j["skipped_existing"], 2, "{j}");
    let why = j["redone_stale"].as_array().unwrap();
    assert!(
        why.len() == 1
            && why[0].as_str().unwrap().contains("0001.npz")
            && why[0].as_str().unwrap().contains("image_sha256"),
        "{j}"
    );
}

/// Case 3: 2 of 3 extract shards and 1 of 2 match shards: merge refuses, naming what is
/// missing; with --allow-partial it merges what is there and says what is missing.
#[test]
fn merge_of_an_incomplete_run_is_refused_unless_allowed() {
    let Some(data) = common::data_root_or_skip("merge_of_an_incomplete_run_is_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 4);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    let sift = ["-m", "sift", "--max-keypoints", "500"];
    // Shards 0 and 1 of 3: images 0000, 0003 and 0001; 0002 (shard 2) is missing.
    for shard in ["0/3", "1/3"] {
        let mut args = sift.to_vec();
        args.extend(["--shard", shard]);
        extract(&imgs, &feats, &args);
    }
    assert_eq!(npz_in(&feats), ["0000.npz", "0001.npz", "0003.npz"]);
    // Matching before the extract shards are done is refused (it planned pairs over part of
    // the set, and the merge then missed the rest's pairs without a word), unless
    // --allow-partial: shard 0 of 2 of the 3 pairs, pairs 0 and 2.
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&m)
        .args(["--shard", "0/2"]));
    assert!(
        !ok && err.contains("0002.jpg") && err.contains("no features file yet"),
        "{err}"
    );
    match_set(&feats, &m, &["--shard", "0/2", "--allow-partial"]);
    assert_eq!(npz_in(&m).len(), 2);

    let db = dir.path().join("db.db");
    let (ok, _, err) = merge(&feats, &m, &db, &[]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("0002.jpg") && err.contains("1 images") && err.contains("1 pairs"),
        "{err}"
    );
    assert!(err.contains("--allow-partial"), "{err}");
    assert!(!db.exists());

    let (ok, out, err) = merge(&feats, &m, &db, &["--allow-partial"]);
    assert!(ok, "{err}");
    assert!(err.contains("missing image: 0002.jpg"), "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        s["missing_images"],
        serde_json::json!(["0002.jpg"]),
        "{out}"
    );
    assert_eq!(s["missing_pairs"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        (s["images"].as_u64(), s["pairs"].as_u64()),
        (Some(3), Some(2))
    );
    assert!(db.is_file());

    // The missing shards complete the run; the merge then needs no flag.
    extract(&imgs, &feats, &[&sift[..], &["--shard", "2/3"]].concat());
    match_set(&feats, &m, &["--shard", "0/2"]);
    match_set(&feats, &m, &["--shard", "1/2"]);
    let (ok, out, err) = merge(&feats, &m, &dir.path().join("whole.db"), &[]);
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (s["images"].as_u64(), s["pairs"].as_u64()),
        (Some(4), Some(6)),
        "{out}"
    );

    // Features of other settings in the folder (a run with another budget): refused, naming a
    // file and the field.
    extract(
        &imgs.join("0002.jpg"),
        &feats,
        &["-m", "sift", "--max-keypoints", "400"],
    );
    let (ok, _, err) = merge(&feats, &m, &dir.path().join("mixed.db"), &[]);
    assert!(
        !ok && err.contains(".npz") && err.contains("max_keypoints 500, wanted 400"),
        "{err}"
    );
}

/// Case 4: shard membership is a function of the sorted set, not of the argument order.
#[test]
fn shards_partition_whatever_the_argument_order() {
    let Some(data) = common::data_root_or_skip("shards_partition_whatever_the_argument_order")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 4);
    let out = dir.path().join("f");
    let list = |order: [usize; 4]| -> Vec<PathBuf> {
        order
            .iter()
            .map(|i| imgs.join(format!("{i:04}.jpg")))
            .collect()
    };
    let mut done = Vec::new();
    for (order, shard) in [([0, 1, 2, 3], "0/2"), ([3, 2, 1, 0], "1/2")] {
        let (ok, stdout, err) = run(descl()
            .arg("extract")
            .args(list(order))
            .arg("--out")
            .arg(&out)
            .args([
                "-m",
                "sift",
                "--max-keypoints",
                "100",
                "--json",
                "--shard",
                shard,
            ])
            .args(SIZE));
        assert!(ok, "{err}");
        let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        for i in j["images"].as_array().unwrap() {
            done.push(i["name"].as_str().unwrap().to_string());
        }
    }
    done.sort();
    assert_eq!(done, ["0000.jpg", "0001.jpg", "0002.jpg", "0003.jpg"]);
}

/// Case 10: the hloc recipe extracts once — `descl match` starts from the features.h5 of
/// `descl extract --format h5` (no describer is opened; a model flag is refused, as
/// tests/matching_cli.rs checks), keeps extract's settings, and resumes from it.
#[test]
fn match_starts_from_features_h5_without_extracting() {
    let Some(data) = common::data_root_or_skip("match_starts_from_features_h5") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let out = dir.path().join("out");
    extract(
        &imgs,
        &out,
        &["-m", "sift", "--max-keypoints", "300", "--format", "h5"],
    );
    let features = out.join("features.h5");
    let match_h5 = || -> serde_json::Value {
        let (ok, stdout, err) = run(descl()
            .args(["match", "--exhaustive", "--format", "h5", "--json"])
            .arg("--images")
            .arg(&features)
            .arg("--out-dir")
            .arg(&out));
        assert!(ok, "{err}");
        serde_json::from_str(&stdout).unwrap()
    };
    let j = match_h5();
    assert_eq!(j["pairs"].as_array().unwrap().len(), 3, "{j}");
    let f = common::h5_open(&features);
    let m = common::h5_open(&out.join("matches.h5"));
    for (a, b) in [("0000.jpg", "0001.jpg"), ("0001.jpg", "0002.jpg")] {
        let kp = f.dataset(&format!("{a}/keypoints")).unwrap().shape()[0];
        assert!(kp <= 300, "extract's --max-keypoints kept: {kp}");
        let m0 = m.dataset(&format!("{a}/{b}/matches0")).unwrap();
        assert_eq!(m0.shape()[0], kp);
    }
    drop((f, m));
    assert_eq!(match_h5()["skipped_existing"], 3);

    // A folder of .npz features: the same, into .npz matches.
    let feats = dir.path().join("npz");
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "300"]);
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(dir.path().join("npz-m")));
    assert!(ok, "{err}");
}

/// Case 6: a features.h5 descl did not write (another extractor's) is neither appended to nor
/// matched as descl's.
#[test]
fn foreign_features_h5_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    let file = common::h5_create(&foreign.join("features.h5"));
    let g = file.create_group("x.jpg").unwrap();
    g.new_dataset_builder()
        .with_data(&ndarray::Array2::<f32>::zeros((4, 2)))
        .create("keypoints")
        .unwrap();
    g.new_dataset_builder()
        .with_data(&ndarray::Array2::<f32>::zeros((256, 4)))
        .create("descriptors")
        .unwrap();
    drop(g);
    // Closed for good (every handle of the file invalidated), so that HDF5's file lock is
    // released before descl opens it.
    file.close().unwrap();
    let before = std::fs::read(foreign.join("features.h5")).unwrap();

    let img = dir.path().join("a.png");
    common::gray_image(160, 120, false).save(&img).unwrap();
    let (ok, _, err) = common::extract(&img, &foreign, &["-m", "sift", "--format", "h5"]);
    assert!(
        !ok && err.contains("features.h5") && err.contains("descl did not write"),
        "{err}"
    );
    assert_eq!(std::fs::read(foreign.join("features.h5")).unwrap(), before);

    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(foreign.join("features.h5"))
        .arg("--out-dir")
        .arg(dir.path().join("m")));
    assert!(
        !ok && err.contains("features.h5") && err.contains("not written by descl"),
        "{err}"
    );
}

/// Case 5 (names): an image whose name contains `__` (the pair-file separator) keeps its
/// features in folder matching and merge; names that would give one file two meanings
/// (`a__b.jpg` beside `a.jpg` and `b.jpg`) are refused before any pair is matched, and a
/// features file never replaces a matches file of the same name.
#[test]
fn names_with_the_pair_separator_are_kept_or_refused() {
    let Some(data) = common::data_root_or_skip("names_with_the_pair_separator") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = data.join("strecha/fountain-P11/images");
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for (from, to) in [
        ("0000.jpg", "left.jpg"),
        ("0001.jpg", "my__photo.jpg"),
        ("0002.jpg", "right.jpg"),
    ] {
        std::os::unix::fs::symlink(src.join(from), imgs.join(to)).unwrap();
    }
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    let sift = ["-m", "sift", "--max-keypoints", "500"];
    extract(&imgs, &feats, &sift);
    assert_eq!(npz_in(&feats), ["left.npz", "my__photo.npz", "right.npz"]);
    let j = match_set(&feats, &m, &[]);
    assert_eq!(j["pairs"].as_array().map(Vec::len), Some(3), "{j}");
    let (ok, out, err) = merge(&feats, &m, &dir.path().join("db.db"), &[]);
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (s["images"].as_u64(), s["pairs"].as_u64()),
        (Some(3), Some(3)),
        "{out}"
    );

    // `a__b` with `a` and `b`: the pair file of (a, b) is a__b.npz, a__b's features file too.
    let clash = dir.path().join("clash");
    std::fs::create_dir(&clash).unwrap();
    for (from, to) in [
        ("0000.jpg", "a.jpg"),
        ("0001.jpg", "a__b.jpg"),
        ("0002.jpg", "b.jpg"),
    ] {
        std::os::unix::fs::symlink(src.join(from), clash.join(to)).unwrap();
    }
    let out = dir.path().join("clash-out");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&clash)
        .arg("--out-dir")
        .arg(&out)
        .args(SIZE)
        .args(sift));
    assert!(!ok, "a clash of names must be refused");
    assert!(
        err.contains("a__b.npz") && err.contains("would hold both"),
        "{err}"
    );
    assert!(
        npz_in(&out).iter().all(|n| n != "a__b.npz"),
        "{:?}",
        npz_in(&out)
    );

    // A features file of that name over an existing matches file: refused, the matches kept.
    let (mf, ab) = (dir.path().join("mf"), dir.path().join("ab"));
    std::fs::create_dir(&ab).unwrap();
    for (from, to) in [("0000.jpg", "a.jpg"), ("0002.jpg", "b.jpg")] {
        std::os::unix::fs::symlink(src.join(from), ab.join(to)).unwrap();
    }
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&ab)
        .arg("--out-dir")
        .arg(&mf)
        .args(SIZE)
        .args(sift));
    assert!(ok, "{err}");
    let before = std::fs::read(mf.join("a__b.npz")).unwrap();
    let lone = dir.path().join("lone");
    std::fs::create_dir(&lone).unwrap();
    std::os::unix::fs::symlink(src.join("0001.jpg"), lone.join("a__b.jpg")).unwrap();
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(lone.join("a__b.jpg"))
        .arg("--out")
        .arg(&mf)
        .args(SIZE)
        .args(sift));
    assert!(
        !ok && err.contains("would replace the matches file"),
        "{err}"
    );
    assert_eq!(std::fs::read(mf.join("a__b.npz")).unwrap(), before);
}

/// One model per features folder: a run of another model is refused while a file of the old
/// model would remain (an image that is not the run's), and proceeds when the run replaces
/// them all (found by the property test: a whole `--resume` with a new model over a folder
/// whose every file it redoes was refused half-way).
#[test]
fn a_folder_changes_model_only_by_a_run_that_replaces_every_file() {
    let Some(data) = common::data_root_or_skip("a_folder_changes_model") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let feats = dir.path().join("f");
    let first = imgs.join("0000.jpg");
    let (ok, _, err) = common::extract(&first, &feats, &[&SIZE[..], &["-m", "rootsift"]].concat());
    assert!(ok, "{err}");
    // Another image with another model: 0000.npz (rootsift) would stay beside it.
    let (ok, _, err) = common::extract(
        &imgs.join("0001.jpg"),
        &feats,
        &[&SIZE[..], &["-m", "sift"]].concat(),
    );
    assert!(
        !ok && err.contains("0000.npz") && err.contains("rootsift"),
        "{err}"
    );
    assert_eq!(npz_in(&feats), ["0000.npz"]);
    // The whole set with the new model replaces 0000.npz too: allowed, and one model after.
    let j = extract(&imgs, &feats, &["-m", "sift", "--resume"]);
    assert_eq!(j["failed"].as_u64(), Some(0), "{j}");
    assert_eq!(npz_in(&feats), ["0000.npz", "0001.npz", "0002.npz"]);
    for f in npz_in(&feats) {
        let meta = descl::io::features::read_features_meta(&feats.join(&f)).unwrap();
        assert_eq!(meta.model, "sift", "{f}");
    }
}

/// A killed `--format h5` run keeps what it had at its last checkpoint (issue 24, case 6: a
/// killed run kept nothing and the whole run was redone): features.h5 is a whole HDF5 file
/// holding whole image groups, and `--resume` reuses them and extracts only the rest.
#[cfg(feature = "h5")]
#[test]
fn a_killed_h5_run_resumes_from_its_last_checkpoint() {
    let Some(data) = common::data_root_or_skip("a_killed_h5_run_resumes") else {
        return;
    };
    const N: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), N);
    let out = dir.path().join("h5");
    let target = out.join("features.h5");
    // Full-size images (a second or more each) and a checkpoint after every image.
    let mut child = descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5"])
        .env(descl::io::hloc::CHECKPOINT_ENV, "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !target.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(300),
            "no checkpoint written"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let kept = descl::io::hloc::list_features(&target).unwrap();
    assert!(
        !kept.is_empty() && kept.len() < N,
        "{} images at the kill",
        kept.len()
    );
    // Every kept group is whole: it reads back with its recorded identity.
    for name in &kept {
        descl::io::hloc::read_features(&target, name).unwrap();
    }
    let (ok, stdout, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5", "--resume", "--json"]));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        j["skipped_existing"].as_u64(),
        Some(kept.len() as u64),
        "{j}"
    );
    assert_eq!(descl::io::hloc::list_features(&target).unwrap().len(), N);
    // The killed run's temporary is gone; only the files and the plan stay.
    let left: Vec<String> = files_in(&out)
        .into_iter()
        .filter(|f| f.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `--format h5` with `--shard` is refused before any work, naming the npz route.
#[test]
fn h5_shards_are_refused_before_work_with_the_route_that_shards() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.png");
    common::gray_image(64, 48, false).save(&img).unwrap();
    let out = dir.path().join("h5");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5", "--shard", "0/2"]));
    assert!(
        !ok && err.contains("cannot be sharded") && err.contains("npz"),
        "{err}"
    );
    assert!(!out.exists());
    let (ok, _, err) = run(descl()
        .args([
            "match",
            "--exhaustive",
            "--format",
            "h5",
            "--shard",
            "1/2",
            "--images",
        ])
        .arg(dir.path())
        .arg("--out-dir")
        .arg(&out));
    assert!(!ok && err.contains("cannot be sharded"), "{err}");
    assert!(!out.exists());
}

/// Found by a hostile run of the staged paths (each merged or overwrote silently, exit 0):
/// match shards run with different pair settings, pair files another run left in the folder,
/// two images of one features file (`0000.jpg`, `0000.JPG`) in different extract shards, and a
/// run of other images into a features folder (now warned about).
#[test]
fn mixed_pair_plans_leftover_pairs_and_shared_features_files_are_refused() {
    let Some(data) = common::data_root_or_skip("mixed_pair_plans_leftover_pairs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 4);
    let feats = dir.path().join("f");
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "300"]);
    let pairs = dir.path().join("p1.txt");
    std::fs::write(&pairs, "0000.jpg 0001.jpg\n0002.jpg 0003.jpg\n").unwrap();

    // Shard 0 exhaustive, shard 1 from a pairs file: refused, the plan's pair selection
    // differs (issue 55); with --overwrite the plan is the last shard's, and the other shard's
    // files are refused (the merge gave a set of pairs no run planned).
    let m = dir.path().join("m");
    match_set(&feats, &m, &["--shard", "0/2"]);
    let pairs_shard = |extra: &[&str]| {
        run(descl()
            .args(["match", "--planar-check", "--images"])
            .arg(&feats)
            .arg("--pairs")
            .arg(&pairs)
            .arg("--out-dir")
            .arg(&m)
            .args(["--shard", "1/2"])
            .args(extra))
    };
    let (ok, _, err) = pairs_shard(&[]);
    assert!(!ok && err.contains("selection"), "{err}");
    let (ok, _, err) = pairs_shard(&["--overwrite"]);
    assert!(ok, "{err}");
    let (ok, _, err) = merge(&feats, &m, &dir.path().join("mixed.db"), &[]);
    assert!(
        !ok && err.contains("is not in") && err.contains("descl-match-plan.json"),
        "{err}"
    );
    assert!(!dir.path().join("mixed.db").exists());

    // A whole run from the pairs file into a folder of an exhaustive run: its leftovers too.
    let m2 = dir.path().join("m2");
    match_set(&feats, &m2, &[]);
    let (ok, _, err) = run(descl()
        .args(["match", "--planar-check", "--images"])
        .arg(&feats)
        .arg("--pairs")
        .arg(&pairs)
        .arg("--out-dir")
        .arg(&m2));
    assert!(ok, "{err}");
    let (ok, _, err) = merge(&feats, &m2, &dir.path().join("left.db"), &[]);
    assert!(!ok && err.contains("is not in"), "{err}");

    // Two images of one features file, in different shards: refused by each shard.
    let same = dir.path().join("same");
    std::fs::create_dir(&same).unwrap();
    let src = data.join("strecha/fountain-P11/images");
    std::os::unix::fs::symlink(src.join("0000.jpg"), same.join("0000.jpg")).unwrap();
    std::os::unix::fs::symlink(src.join("0001.jpg"), same.join("0000.JPG")).unwrap();
    std::os::unix::fs::symlink(src.join("0002.jpg"), same.join("0002.jpg")).unwrap();
    for shard in ["0/2", "1/2"] {
        let (ok, _, err) = run(descl()
            .arg("extract")
            .arg(&same)
            .arg("--out")
            .arg(dir.path().join("fs"))
            .args(SIZE)
            .args(["--shard", shard]));
        assert!(
            !ok && err.contains("0000.JPG") && err.contains("0000.jpg") && err.contains("0000.npz"),
            "{err}"
        );
    }

    // Another set extracted into the folder: warned, and its leftovers named on use.
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join("0001.jpg"))
        .arg("--out")
        .arg(&feats)
        .args(SIZE)
        .args(["-m", "sift", "--max-keypoints", "300"]));
    assert!(ok, "{err}");
    assert!(
        err.contains("warning") && err.contains("3 images that this run does not"),
        "{err}"
    );

    // Shards of another keypoint budget: `match` refuses them as the merge does (it matched
    // them together).
    let fm = dir.path().join("fm");
    extract(
        &imgs,
        &fm,
        &["-m", "sift", "--max-keypoints", "300", "--shard", "0/2"],
    );
    // Issue 55: the second shard of another budget is refused before it replaces the plan,
    // naming what differs; written anyway (its plan removed), `match` refuses the mix.
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&fm)
        .args(SIZE)
        .args(["-m", "sift", "--max-keypoints", "200", "--shard", "1/2"]));
    assert!(
        !ok && err.contains("max_keypoints") && err.contains("descl-extract-plan.json"),
        "{err}"
    );
    std::fs::remove_file(fm.join("descl-extract-plan.json")).unwrap();
    extract(
        &imgs,
        &fm,
        &["-m", "sift", "--max-keypoints", "200", "--shard", "1/2"],
    );
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&fm)
        .arg("--out-dir")
        .arg(dir.path().join("mm")));
    assert!(
        !ok && err.contains("max_keypoints") && err.contains("descl-extract-plan.json"),
        "{err}"
    );
}

/// An uncarded model is recorded by its path and its file's SHA-256: another network written to
/// the same path is another model. `--resume` redoes the features, and `match` refuses a
/// folder whose shards were described by the two files (before, both were recorded by the path
/// alone: the resume reused the old features and the match paired descriptors of two networks).
#[test]
fn an_uncarded_model_replaced_at_its_path_is_another_model() {
    let Some(data) = common::data_root_or_skip("an_uncarded_model_replaced_at_its_path") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let net = dir.path().join("net.onnx");
    let put = |model: &str| std::fs::copy(models.join(format!("{model}.onnx")), &net).unwrap();
    let net_arg = net.to_str().unwrap();
    let budget = ["--max-keypoints", "200", "-m", net_arg];

    put("descl-l2net-w0.5-hardnet-mix");
    let feats = dir.path().join("f");
    extract(&imgs, &feats, &budget);
    let before = read_features(&feats.join("0000.npz")).unwrap();
    assert_eq!(before.meta.model, net_arg);
    assert_eq!(
        before.meta.model_sha256.as_deref(),
        Some(descl::model::card::sha256_file(&net).unwrap().as_str())
    );
    put("descl-l2net-real25-b1024");
    let mut resume = budget.to_vec();
    resume.push("--resume");
    let j = extract(&imgs, &feats, &resume);
    assert_eq!(j["skipped_existing"], 0, "{j}");
    let why = j["redone_stale"].as_array().unwrap();
    assert!(
        why.len() == 3
            && why
                .iter()
                .all(|w| w.as_str().unwrap().contains("model_sha256")),
        "{j}"
    );

    // Shards of one folder described by the two files: the second is refused before it
    // replaces the plan (issue 55); written anyway (the plan removed), matching them is
    // refused.
    let shards = dir.path().join("s");
    put("descl-l2net-w0.5-hardnet-mix");
    let mut first = budget.to_vec();
    first.extend(["--shard", "0/2"]);
    extract(&imgs, &shards, &first);
    put("descl-l2net-real25-b1024");
    let mut second = budget.to_vec();
    second.extend(["--shard", "1/2"]);
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&shards)
        .args(SIZE)
        .args(&second));
    assert!(!ok && err.contains("settings.model_sha256"), "{err}");
    std::fs::remove_file(shards.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap();
    extract(&imgs, &shards, &second);
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&shards)
        .arg("--out-dir")
        .arg(dir.path().join("m")));
    assert!(!ok && err.contains("model_sha256"), "{err}");
}

/// An essential matrix (its inliers and pose) depends on the intrinsics: a rerun with other
/// intrinsics redoes the pairs, and shards verified with other intrinsics do not merge.
#[test]
fn pairs_verified_with_other_intrinsics_are_redone_and_never_merged() {
    let Some(data) = common::data_root_or_skip("pairs_verified_with_other_intrinsics") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "500"]);
    let essential = |k: &'static str| ["--geometry", "essential", "--intrinsics", k];
    let (k1, k2) = ("800,800,400,320", "2000,2000,100,100");
    let j = match_set(&feats, &m, &essential(k1));
    assert_eq!(j["pairs"].as_array().unwrap().len(), 3, "{j}");
    assert_eq!(match_set(&feats, &m, &essential(k1))["skipped_existing"], 3);
    let j = match_set(&feats, &m, &essential(k2));
    assert_eq!(
        (j["skipped_existing"].as_u64(), j["redone_stale"].as_u64()),
        (Some(0), Some(3)),
        "{j}"
    );
    let (ok, _, err) = merge(&feats, &m, &dir.path().join("one.db"), &[]);
    assert!(ok, "{err}");

    // Shard 0 of 2 (pairs 0000–0001, 0001–0002) and shard 1 (0000–0002) with other
    // intrinsics: the second is refused before matching (the plan records the camera), and a
    // merge of what the folder holds refuses it as incomplete.
    let mixed = dir.path().join("mixed");
    match_set(
        &feats,
        &mixed,
        &[&essential(k1)[..], &["--shard", "0/2"]].concat(),
    );
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&mixed)
        .args(essential(k2))
        .args(["--shard", "1/2"]));
    assert!(!ok && err.contains("camera"), "{err}");
    let db = dir.path().join("mixed.db");
    let (ok, _, err) = merge(&feats, &mixed, &db, &[]);
    assert!(!ok && err.contains("0002"), "{err}");
    assert!(!db.exists());
}

/// `sfm merge --images` reads the images for the database's cameras: one replaced since the
/// extraction (another content) is refused, naming it, not described by the old features.
#[test]
fn merge_refuses_an_image_replaced_since_extraction() {
    let Some(data) = common::data_root_or_skip("merge_refuses_an_image_replaced") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "500"]);
    match_set(&feats, &m, &[]);
    let (ok, _, err) = merge(
        &feats,
        &m,
        &dir.path().join("a.db"),
        &["--images", imgs.to_str().unwrap()],
    );
    assert!(ok, "{err}");

    let other = dir.path().join("imgsX");
    std::fs::create_dir(&other).unwrap();
    for name in ["0000.jpg", "0001.jpg"] {
        std::fs::copy(imgs.join(name), other.join(name)).unwrap();
    }
    std::fs::copy(data.join("oxford/graf/img1.png"), other.join("0002.jpg")).unwrap();
    let db = dir.path().join("b.db");
    let (ok, _, err) = merge(&feats, &m, &db, &["--images", other.to_str().unwrap()]);
    assert!(
        !ok && err.contains(&other.join("0002.jpg").display().to_string())
            && err.contains("not the image")
            && err.contains("0002.npz"),
        "{err}"
    );
    assert!(!db.exists());
}

/// An image's group in features.h5 without its `keypoints` dataset is an error naming the
/// group and the dataset, not an image silently left out of the set (as a missing
/// `descriptors` or `scores` already is).
#[cfg(feature = "h5")]
#[test]
fn an_h5_image_group_without_keypoints_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    for (k, name) in ["a.png", "b.png", "c.png"].into_iter().enumerate() {
        common::gray_image(160 + 16 * k as u32, 120, false)
            .save(imgs.join(name))
            .unwrap();
    }
    let out = dir.path().join("out");
    let (ok, _, err) = common::extract(&imgs, &out, &["-m", "sift", "--format", "h5"]);
    assert!(ok, "{err}");
    let features = out.join("features.h5");
    let file = hdf5_metno::File::with_options()
        .with_fapl(|p| p.file_locking(false))
        .open_rw(&features)
        .unwrap();
    file.group("b.png").unwrap().unlink("keypoints").unwrap();
    file.close().unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&features)
        .arg("--out-dir")
        .arg(dir.path().join("m")));
    assert!(
        !ok && err.contains(&features.join("b.png").display().to_string())
            && err.contains("`keypoints`"),
        "{err}"
    );
}

/// Issue 44: `sfm merge` skipped an image it could not find without a word — features that
/// record a path relative to another working folder, or `--images` without it — losing its
/// EXIF focal length and the check that it is the image they were extracted from. A missing
/// image is refused, naming it and its features file; with --allow-partial the merge goes on
/// and lists the images merged without their file.
#[test]
fn merge_refuses_an_image_it_cannot_find_unless_allowed() {
    let Some(data) = common::data_root_or_skip("merge_refuses_an_image_it_cannot_find") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    // Extracted in the temporary folder, of `images`: the features record `images/0000.jpg`.
    let (ok, _, err) = run(descl()
        .current_dir(dir.path())
        .args([
            "extract",
            "images",
            "--out",
            "f",
            "-m",
            "sift",
            "--max-keypoints",
            "500",
        ])
        .args(SIZE));
    assert!(ok, "{err}");
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    match_set(&feats, &m, &[]);
    // Merged from another working folder, where those paths lead nowhere.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let db = dir.path().join("a.db");
    let (ok, _, err) = run(descl()
        .current_dir(&elsewhere)
        .args(["sfm", "merge", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&m)
        .arg("--database")
        .arg(&db));
    assert!(!ok, "{err}");
    for part in [
        "images/0000.jpg",
        "images/0002.jpg",
        "0000.npz",
        "--allow-partial",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    assert!(!db.exists());

    // --images without one of them.
    let some = dir.path().join("some");
    std::fs::create_dir(&some).unwrap();
    for name in ["0000.jpg", "0001.jpg"] {
        std::fs::copy(imgs.join(name), some.join(name)).unwrap();
    }
    let with_some = ["--images", some.to_str().unwrap()];
    let (ok, _, err) = merge(&feats, &m, &db, &with_some);
    let missing = some.join("0002.jpg").display().to_string();
    assert!(
        !ok && err.contains(&missing) && err.contains("0002.npz"),
        "{err}"
    );
    assert!(!err.contains("0001.jpg"), "{err}");
    assert!(!db.exists());
    let (ok, out, err) = merge(
        &feats,
        &m,
        &db,
        &[&with_some[..], &["--allow-partial"]].concat(),
    );
    assert!(ok, "{err}");
    assert!(err.contains("0002.jpg"), "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        s["images_not_found"],
        serde_json::json!(["0002.jpg"]),
        "{out}"
    );
    assert_eq!(s["images"].as_u64(), Some(3), "{out}");
    assert!(db.is_file());
    // Every image there: merged without the flag, none listed.
    let (ok, out, err) = merge(
        &feats,
        &m,
        &dir.path().join("b.db"),
        &["--images", imgs.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["images_not_found"], serde_json::json!([]), "{out}");
}

/// Each camera of `db`: (camera_id, params as f64, prior_focal_length), by image name order.
fn cameras(db: &Path) -> Vec<(String, Vec<f64>, i64)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut s = c
        .prepare(
            "SELECT images.name, cameras.params, cameras.prior_focal_length FROM images \
             JOIN cameras ON images.camera_id = cameras.camera_id ORDER BY images.name",
        )
        .unwrap();
    s.query_map([], |r| {
        let blob: Vec<u8> = r.get(1)?;
        let params = blob
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        Ok((r.get(0)?, params, r.get(2)?))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Issue 44: pairs verified with `--geometry essential --intrinsics K` were merged as
/// CALIBRATED (config 2) beside cameras of COLMAP's guessed focal length (1.2 · max side,
/// `prior_focal_length = 0`). The merged cameras hold exactly the intrinsics the pairs were
/// verified with (COLMAP's pixel convention: the principal point + 0.5), as known focal
/// lengths; intrinsics a camera model cannot hold (fx ≠ fy in SIMPLE_RADIAL) are refused.
#[test]
fn merged_cameras_hold_the_intrinsics_their_pairs_were_verified_with() {
    let Some(data) = common::data_root_or_skip("merged_cameras_hold_the_intrinsics") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "500"]);
    let essential = [
        "--geometry",
        "essential",
        "--intrinsics",
        "800,800,319.5,213",
    ];
    match_set(&feats, &m, &essential);
    for (args, name) in [(&[][..], "one.db"), (&["--single-camera"][..], "single.db")] {
        let db = dir.path().join(name);
        let (ok, _, err) = merge(&feats, &m, &db, args);
        assert!(ok, "{err}");
        let cams = cameras(&db);
        assert_eq!(cams.len(), 3, "{cams:?}");
        for (image, params, prior) in &cams {
            // SIMPLE_RADIAL: f, cx, cy, k.
            assert_eq!(params, &vec![800.0, 320.0, 213.5, 0.0], "{name} {image}");
            assert_eq!(*prior, 1, "{name} {image}: focal length not marked known");
        }
        let configs = common::two_view_column(&db, "config");
        assert!(!configs.is_empty());
        assert!(configs.iter().all(|&c| c == 2), "{name}: {configs:?}");
    }

    // fx ≠ fy: SIMPLE_RADIAL has one focal length; PINHOLE holds both.
    let m2 = dir.path().join("m2");
    match_set(
        &feats,
        &m2,
        &[
            "--geometry",
            "essential",
            "--intrinsics",
            "800,820,319.5,213",
        ],
    );
    let db = dir.path().join("aniso.db");
    let (ok, _, err) = merge(&feats, &m2, &db, &[]);
    assert!(
        !ok && err.contains("0000.jpg") && err.contains("820") && err.contains("PINHOLE"),
        "{err}"
    );
    assert!(!db.exists());
    let (ok, _, err) = merge(&feats, &m2, &db, &["--camera-model", "PINHOLE"]);
    assert!(ok, "{err}");
    for (image, params, prior) in cameras(&db) {
        assert_eq!(params, vec![800.0, 820.0, 320.0, 213.5], "{image}");
        assert_eq!(prior, 1, "{image}");
    }
}

/// Issue 44: `sfm merge --hloc --overwrite` replaces features.h5 and matches.h5 one after the
/// other; a merge killed between the two renames left new features beside old matches, which
/// descl read as one pair. Both files of a merge carry its id, and descl refuses a pair whose
/// ids differ, naming both files; a whole merge's pair is read as before.
#[cfg(feature = "h5")]
#[test]
fn an_hloc_pair_half_replaced_by_a_merge_is_refused() {
    let Some(data) = common::data_root_or_skip("an_hloc_pair_half_replaced_by_a_merge") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 3);
    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["-m", "sift", "--max-keypoints", "300"]);
    match_set(&feats, &m, &[]);
    let out = dir.path().join("hloc");
    let merge_hloc = |extra: &[&str]| {
        let (ok, _, err) = run(descl()
            .args(["sfm", "merge", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&m)
            .arg("--hloc")
            .arg(&out)
            .args(extra));
        assert!(ok, "{err}");
    };
    // descl reading the pair to add to it.
    let match_into = || {
        run(descl()
            .args([
                "match",
                "--exhaustive",
                "--format",
                "h5",
                "-m",
                "sift",
                "--images",
            ])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(&out)
            .args(SIZE)
            .args(["--max-keypoints", "300"]))
    };
    merge_hloc(&[]);
    let old_matches = std::fs::read(out.join("matches.h5")).unwrap();
    merge_hloc(&["--overwrite"]);
    // Killed after features.h5 was renamed in, before matches.h5.
    std::fs::write(out.join("matches.h5"), &old_matches).unwrap();
    let (ok, _, err) = match_into();
    assert!(
        !ok && err.contains("features.h5")
            && err.contains("matches.h5")
            && err.contains("not one pair"),
        "{err}"
    );
    // A whole merge's pair is read, and added to.
    merge_hloc(&["--overwrite"]);
    let (ok, _, err) = match_into();
    assert!(ok, "{err}");
}

/// `descl sfm merge` of features that `descl sfm` would not have extracted (`descl extract`'s
/// defaults) says so, naming each setting; features extracted with `--preset sfm` merge without
/// the note (issue 45: one set of features for both jobs, or a clear word when not).
#[test]
fn merge_says_when_features_are_not_descl_sfms() {
    let Some(data) = common::data_root_or_skip("merge_says_when_features_are_not_descl_sfms")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path(), 2);
    let note = "not extracted as `descl sfm` extracts them";

    let (feats, m) = (dir.path().join("f"), dir.path().join("m"));
    extract(&imgs, &feats, &["-m", "rootsift"]);
    match_set(&feats, &m, &[]);
    let (ok, stdout, err) = merge(&feats, &m, &dir.path().join("extract.db"), &[]);
    assert!(ok, "{err}");
    assert!(err.contains(note), "{err}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let differs: Vec<&str> = j["differs_from_sfm"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(differs.len(), 4, "{differs:?}");
    assert!(differs[0].starts_with("model rootsift"), "{differs:?}");
    assert!(differs
        .iter()
        .any(|d| d.starts_with("2048 keypoints chosen strongest")));
    assert!(differs.iter().any(|d| d.starts_with("max image size 640")));
    for d in &differs {
        assert!(err.contains(d), "{d} not in {err}");
    }

    let (feats, m) = (dir.path().join("fs"), dir.path().join("ms"));
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&feats)
        .args(["--preset", "sfm"]));
    assert!(ok, "{err}");
    match_set(&feats, &m, &[]);
    let (ok, stdout, err) = merge(&feats, &m, &dir.path().join("sfm.db"), &[]);
    assert!(ok, "{err}");
    assert!(!err.contains(note), "{err}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["differs_from_sfm"], serde_json::json!([]), "{j}");
}
