//! `descl sfm` with every matcher: the one pair path serves `descl match` and `descl sfm`
//! alike, so `--matcher guided` and `--matcher approx` build a database too.

mod common;

use common::{descl, run};
use rusqlite::Connection;
use std::path::Path;

/// Three consecutive fountain-P11 images in a folder of their own.
fn three_fountain_images(data: &Path, dir: &Path) {
    for name in ["0000.jpg", "0001.jpg", "0002.jpg"] {
        std::fs::copy(
            data.join("strecha/fountain-P11/images").join(name),
            dir.join(name),
        )
        .unwrap();
    }
}

/// A temporary folder holding `images/` with three fountain-P11 images: the folder (kept
/// alive by the caller) and `images/`.
fn fountain_folder(data: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    three_fountain_images(data, &images);
    (dir, images)
}

/// `descl sfm IMAGES --database DB -m sift ARGS` on three fountain-P11 images in a folder of
/// their own, beside copies of `extra` (data-relative path, file name): the folder (kept
/// alive), the database's path and the run's (success, stdout, stderr); None without data.
fn sift_sfm_on_three_fountain_images(
    test: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Option<(
    tempfile::TempDir,
    std::path::PathBuf,
    (bool, String, String),
)> {
    let data = common::data_root_or_skip(test)?;
    let (dir, images) = fountain_folder(&data);
    for (from, name) in extra {
        std::fs::copy(data.join(from), images.join(name)).unwrap();
    }
    let db = dir.path().join("t.db");
    let out = run(descl()
        .arg("sfm")
        .arg(&images)
        .arg("--database")
        .arg(&db)
        .args(["-m", "sift"])
        .args(args));
    Some((dir, db, out))
}

fn count(db: &Path, table: &str) -> i64 {
    let c = Connection::open(db).unwrap();
    c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn sfm_with_each_matcher() {
    let Some(data) = common::data_root_or_skip("sfm_with_each_matcher") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    three_fountain_images(&data, &images);
    let sfm = |matcher: &str, model: &str| {
        let db = dir.path().join(format!("{matcher}-{model}.db"));
        let r = run(descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args([
                "--matcher",
                matcher,
                "-m",
                model,
                "--max-keypoints",
                "1000",
                "--json",
            ]));
        (r, db)
    };
    let mut per_matcher = Vec::new();
    for matcher in ["exact", "guided", "approx"] {
        let ((ok, stdout, stderr), db) = sfm(matcher, "rootsift");
        assert!(ok, "{matcher}: {stderr}");
        let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(j["database"]["verified_pairs"], 3, "{matcher}: {j}");
        assert_eq!(
            (count(&db, "images"), count(&db, "matches")),
            (3, 3),
            "{matcher}"
        );
        let n = common::two_view_column(&db, "rows");
        assert_eq!(n.len(), 3, "{matcher}");
        assert!(n.iter().all(|&k| k >= 100), "{matcher}: inliers {n:?}");
        per_matcher.push(n);
    }
    // Guided matching searches again near the verified model: it keeps at least about the
    // exact matcher's inliers on these well-matched pairs.
    let (exact, guided) = (&per_matcher[0], &per_matcher[1]);
    let sum = |v: &Vec<i64>| v.iter().sum::<i64>();
    assert!(
        sum(guided) as f64 >= 0.95 * sum(exact) as f64,
        "guided {guided:?} vs exact {exact:?}"
    );

    // A binary model with the float-only approximate matcher: every pair fails with a clear
    // error, and the exit status says so.
    let ((ok, _, stderr), _) = sfm("approx", "descl-tfeat-cdf-binary256");
    assert!(
        !ok && stderr.contains("approx matcher needs float descriptors"),
        "{stderr}"
    );
}

/// Two `descl sfm` runs on one database: the second is refused while the first holds the lock.
/// A run killed with SIGKILL leaves its temporary database (and journal) behind; the next run
/// removes them and writes the database as an uninterrupted run does.
#[test]
fn concurrent_runs_are_refused_and_killed_runs_leave_nothing_stale() {
    let Some(data) = common::data_root_or_skip("concurrent_runs_are_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    three_fountain_images(&data, &images);
    let db = dir.path().join("scene.db");
    let lock = dir.path().join("scene.db.lock");
    let sfm = || {
        let mut c = descl();
        c.arg("sfm").arg(&images).arg("--database").arg(&db).args([
            "-m",
            "sift",
            "--max-keypoints",
            "4000",
        ]);
        c
    };
    let stale = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".descl-tmp-"))
            .count()
    };
    let wait_for_lock = |child: &mut std::process::Child| {
        let t = std::time::Instant::now();
        while !lock.exists() {
            assert!(child.try_wait().unwrap().is_none(), "first run ended early");
            assert!(t.elapsed().as_secs() < 60, "no lock file");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };

    let mut first = sfm().stderr(std::process::Stdio::null()).spawn().unwrap();
    wait_for_lock(&mut first);
    let (ok, _, stderr) = run(&mut sfm());
    assert!(!ok && stderr.contains("another descl run"), "{stderr}");
    // SIGKILL: no cleanup code runs.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(!db.exists());
    // The temporary database, and its SQLite journal if the kill came after the first write.
    assert!(
        (1..=2).contains(&stale()),
        "the killed run's temporary database: {} files",
        stale()
    );

    let (ok, _, stderr) = run(&mut sfm());
    assert!(ok, "{stderr}");
    assert_eq!(stale(), 0, "stale temporaries removed");
    assert!(!lock.exists(), "lock file removed after a finished run");
    assert_eq!((count(&db, "images"), count(&db, "matches")), (3, 3));

    // The run after the kill wrote what an uninterrupted run writes, to the byte.
    let clean = dir.path().join("clean.db");
    let (ok, _, stderr) = run(descl()
        .arg("sfm")
        .arg(&images)
        .arg("--database")
        .arg(&clean)
        .args(["-m", "sift", "--max-keypoints", "4000"]));
    assert!(ok, "{stderr}");
    common::assert_same_databases(&db, &clean);
}

/// Issue 24: what would fail at the end fails before any work — a `--database` that is a
/// folder, `--reconstruct` without `colmap`, an unwritable `bench --json` — each error printed
/// once. The describer given cannot load: were the check after it, that error would come first.
#[test]
fn unusable_outputs_and_a_missing_colmap_fail_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for name in ["a.png", "b.png"] {
        common::gray_image(96, 80, false)
            .save(imgs.join(name))
            .unwrap();
    }
    let missing_model = dir.path().join("no-such-model.onnx");
    let folder = dir.path().join("db-folder");
    std::fs::create_dir(&folder).unwrap();
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&folder)
        .arg("--overwrite")
        .arg("-m")
        .arg(&missing_model));
    assert!(!ok && err.contains("is a folder"), "{err}");
    assert!(!err.contains("no-such-model"), "{err}");

    let db = dir.path().join("p.db");
    let (ok, _, err) = run(descl()
        .env("DESCL_COLMAP", dir.path().join("no-colmap-here"))
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(["--reconstruct", "--mapper", "colmap"])
        .arg("-m")
        .arg(&missing_model));
    assert!(!ok && err.contains("DESCL_COLMAP"), "{err}");
    assert_eq!(err.matches("no-colmap-here").count(), 1, "{err}");
    assert!(!db.exists() && !err.contains("no-such-model"), "{err}");

    let report = dir.path().join("no-such-folder").join("r.json");
    let (ok, _, err) = run(descl()
        .arg("bench")
        .arg("--json")
        .arg(&report)
        .arg("-m")
        .arg(&missing_model));
    assert!(!ok && err.contains("r.json"), "{err}");
    assert!(!err.contains("no-such-model"), "{err}");
    // An I/O cause is told once (the library's message already holds it).
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// An image without keypoints (a flat frame) is part of a set like any other: its pairs have
/// no matches and `descl sfm` succeeds (it used to exit 1 after writing a good database, each
/// of its pairs reported as an error).
#[test]
fn an_image_without_keypoints_is_a_set_member_not_a_failure() {
    let Some(data) = common::data_root_or_skip("an_image_without_keypoints") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    three_fountain_images(&data, &images);
    common::gray_image(320, 240, true)
        .save(images.join("flat.png"))
        .unwrap();
    let db = dir.path().join("p.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&images)
        .arg("--database")
        .arg(&db)
        .args([
            "-m",
            "sift",
            "--max-keypoints",
            "500",
            "--max-image-size",
            "640",
        ]));
    assert!(ok, "{err}");
    assert!(!err.contains("error"), "{err}");
    assert_eq!(count(&db, "images"), 4);
    assert_eq!(count(&db, "matches"), 6);
    let c = Connection::open(&db).unwrap();
    let flat: i64 = c
        .query_row(
            "SELECT image_id FROM images WHERE name = 'flat.png'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let keypoints: i64 = c
        .query_row(
            "SELECT rows FROM keypoints WHERE image_id = ?1",
            [flat],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(keypoints, 0);
    // Its three pairs hold no matches; the three others are verified.
    let empty: i64 = c
        .query_row("SELECT COUNT(*) FROM matches WHERE rows = 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(empty, 3);
    let inliers = common::two_view_column(&db, "rows");
    assert_eq!(inliers.len(), 3, "{inliers:?}");
}

/// One image that cannot be decoded fails the run: no database (written whole or not at all),
/// no temporaries beside it, and each error names the image once.
#[test]
fn a_failing_image_leaves_no_database() {
    let Some(data) = common::data_root_or_skip("a_failing_image_leaves_no_database") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    three_fountain_images(&data, &images);
    let png = std::fs::read(data.join("oxford/graf/img1.png")).unwrap();
    let trunc = images.join("trunc.png");
    std::fs::write(&trunc, &png[..png.len() / 3]).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let db = out.join("t.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&images)
        .arg("--database")
        .arg(&db)
        .args([
            "-m",
            "sift",
            "--max-keypoints",
            "500",
            "--max-image-size",
            "640",
        ]));
    assert!(!ok, "{err}");
    assert!(!db.exists(), "{err}");
    assert!(
        common::files_in(&out).is_empty(),
        "{:?}",
        common::files_in(&out)
    );
    let path = trunc.display().to_string();
    assert!(err.contains(&path), "{err}");
    assert!(err.lines().all(|l| l.matches(&path).count() <= 1), "{err}");
    assert!(err.contains("1 of 4 images"), "{err}");
}

/// `--single-camera` over images of two sizes is refused (issue 44): a COLMAP camera has one
/// size, and before, the database got one camera of the first image's size with the other
/// image's keypoints outside it (exit 0). The error names the odd image, both sizes and the
/// image that set the camera's; no database is left.
#[test]
fn single_camera_over_images_of_two_sizes_is_refused() {
    let Some((_dir, db, (ok, _, err))) = sift_sfm_on_three_fountain_images(
        "single_camera_over_images_of_two_sizes_is_refused",
        &[("oxford/graf/img1.png", "zz.png")],
        &[
            "--max-keypoints",
            "300",
            "--max-image-size",
            "640",
            "--single-camera",
        ],
    ) else {
        return;
    };
    assert!(!ok, "{err}");
    assert!(!db.exists(), "{err}");
    assert!(err.contains("zz.png: 800×640 pixels"), "{err}");
    assert!(err.contains("1536×1024 (0000.jpg)"), "{err}");
}

/// `descl sfm --json` says what made the database and where the time went (issue 43): the
/// model and every detector setting (`extract`, as features files record them), the pair
/// settings, and the seconds of each stage, which add up to no more than the whole run.
#[test]
fn the_json_summary_names_its_settings_and_times_each_stage() {
    let Some((_dir, _, (ok, stdout, err))) = sift_sfm_on_three_fountain_images(
        "the_json_summary_names_its_settings_and_times_each_stage",
        &[],
        &[
            "--max-keypoints",
            "500",
            "--max-image-size",
            "640",
            "--json",
        ],
    ) else {
        return;
    };
    assert!(ok, "{err}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["extract"]["model"], "sift", "{out}");
    assert_eq!(out["extract"]["detector"]["max_keypoints"], 500, "{out}");
    assert_eq!(out["extract"]["max_image_size"], 640, "{out}");
    assert_eq!(
        out["database"]["pair_config"]["planar_check"], true,
        "{out}"
    );
    let s = &out["seconds"];
    let (features, pairs, total) = (
        s["features"].as_f64().unwrap(),
        s["pairs"].as_f64().unwrap(),
        s["total"].as_f64().unwrap(),
    );
    assert!(features > 0.0 && pairs > 0.0, "{s}");
    assert!(features + pairs <= total, "{s}");
    // No --reconstruct: no mapper time.
    assert!(s.get("mapper").is_none(), "{s}");
    assert!(err.contains("time: "), "{err}");
    // Each stage split: the extractor's two stages (SIFT describes while preparing, so
    // decode + detect holds nearly all of it), matching and verification of the pairs.
    let st = &s["stages"];
    let stage = |k: &str| st[k].as_f64().unwrap_or_else(|| panic!("{k}: {st}"));
    assert!(stage("decode_detect_thread_seconds") > 0.0, "{st}");
    assert!(stage("describe") >= 0.0, "{st}");
    assert!(stage("matching_thread_seconds") > 0.0, "{st}");
    assert!(stage("verification_thread_seconds") > 0.0, "{st}");
    // Thread-seconds, summed over parallel work: bounded by the wall time times the threads.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        stage("decode_detect_thread_seconds") <= features * threads + 0.1,
        "{st}"
    );
    assert!(
        stage("matching_thread_seconds") + stage("verification_thread_seconds")
            <= pairs * threads + 0.1,
        "{st}"
    );
    assert!(st.get("mapper_runs").is_none(), "{st}");
    assert!(err.contains("stages: "), "{err}");
}

/// With `--geometry none` no pair is verified: the summary said "0 verified (mean … matches,
/// 0 inliers per pair)", which reads as every verification failing. It says the pairs were
/// not verified.
#[test]
fn geometry_none_says_the_pairs_were_not_verified() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    for name in ["a.png", "b.png"] {
        common::gray_image(320, 240, false)
            .save(images.join(name))
            .unwrap();
    }
    let db = dir.path().join("g.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&images)
        .arg("--database")
        .arg(&db)
        .args(["-m", "sift", "--max-keypoints", "300", "--geometry", "none"]));
    assert!(ok, "{err}");
    assert!(
        err.contains("1 pairs, not verified (--geometry none; mean ")
            && !err.contains("0 verified")
            && !err.contains("inliers per pair"),
        "{err}"
    );
    assert_eq!(count(&db, "matches"), 1);
}

/// `descl sfm --geometry essential` on images without EXIF (issue 44): before, each pair was
/// verified with an essential matrix from COLMAP's guessed focal length (1.2 · max side) and
/// stored as CALIBRATED (2) with E and a pose, beside cameras whose `prior_focal_length` = 0
/// says the focal length is unknown. A guess is not knowledge: such pairs are verified with F
/// and stored as COLMAP stores an F pair, UNCALIBRATED (3), E zero and no pose.
#[test]
fn essential_without_known_intrinsics_verifies_f_and_is_not_calibrated() {
    let Some((_dir, db, (ok, _, err))) = sift_sfm_on_three_fountain_images(
        "essential_without_known_intrinsics_verifies_f_and_is_not_calibrated",
        &[],
        &["--max-keypoints", "800", "--geometry", "essential"],
    ) else {
        return;
    };
    assert!(ok, "{err}");
    let c = Connection::open(&db).unwrap();
    let unknown: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM cameras WHERE prior_focal_length = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unknown, 3, "the fountain copies carry no EXIF focal length");
    let mut s = c
        .prepare("SELECT config, E, qvec IS NULL FROM two_view_geometries WHERE rows > 0")
        .unwrap();
    let rows: Vec<(i64, Vec<u8>, bool)> = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 3);
    for (config, e, no_pose) in rows {
        assert_eq!(config, 3, "UNCALIBRATED");
        assert!(e.iter().all(|&b| b == 0), "E stored: {e:?}");
        assert!(no_pose);
    }
}

/// The F fallback above is `descl sfm`'s, for a focal length that is only COLMAP's guess:
/// `descl match --images --geometry essential` on images without intrinsics fails each pair
/// as a single pair does (hostile review: a first version verified them with F, exit 0, and
/// `descl sfm merge` then refused the files as "written by an older descl").
#[test]
fn match_images_essential_without_intrinsics_still_fails_each_pair() {
    let Some(data) = common::data_root_or_skip(
        "match_images_essential_without_intrinsics_still_fails_each_pair",
    ) else {
        return;
    };
    let (dir, images) = fountain_folder(&data);
    let out = dir.path().join("m");
    let (ok, _, err) = run(descl()
        .args(["match", "--images"])
        .arg(&images)
        .args(["--exhaustive", "-m", "sift", "--max-keypoints", "500"])
        .args(["--geometry", "essential", "--out-dir"])
        .arg(&out));
    assert!(!ok, "{err}");
    assert!(err.contains("needs both images' intrinsics"), "{err}");
}
