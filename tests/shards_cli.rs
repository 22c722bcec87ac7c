//! Sharded extraction and matching (`--shard I/N`, also from the schedulers' index variables):
//! three shard processes running at once write what one unsharded run writes, and `--resume`
//! skips what is already there.

mod common;

use common::{db_rows, descl, files_in, run};
use descl::io::features::read_features;
use descl::io::matches::read_matches;
use std::path::{Path, PathBuf};

const SHARDS: usize = 3;
const KEYPOINTS: &str = "512";

/// Four fountain images linked into `dir`.
fn images(data: &Path, dir: &Path) -> PathBuf {
    let src = data.join("strecha/fountain-P11/images");
    let out = dir.join("images");
    std::fs::create_dir(&out).unwrap();
    for i in 0..4 {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(src.join(&name), out.join(&name)).unwrap();
    }
    out
}

/// Three fountain images and two graffiti images (a planar scene, so that COLMAP's planar
/// label is written) linked into `dir`.
fn mixed_images(data: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("images");
    std::fs::create_dir(&out).unwrap();
    let fountain = data.join("strecha/fountain-P11/images");
    for i in 0..3 {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(fountain.join(&name), out.join(&name)).unwrap();
    }
    let graffiti = data.join("hpatches-sequences/v_graffiti");
    for i in 1..3 {
        let name = format!("{i}.ppm");
        std::os::unix::fs::symlink(graffiti.join(&name), out.join(format!("graffiti-{name}")))
            .unwrap();
    }
    out
}

/// `descl extract IMGS --out OUT --max-keypoints KEYPOINTS ARGS...`.
fn extract(imgs: &Path, out: &Path, args: &[&str]) -> std::process::Command {
    let mut c = descl();
    c.arg("extract")
        .arg(imgs)
        .arg("--out")
        .arg(out)
        .args(["--max-keypoints", KEYPOINTS, "--preset", "sfm"])
        .args(args);
    c
}

/// Runs one command per shard at the same time; each must succeed.
fn run_shards(make: impl Fn(usize) -> std::process::Command) {
    let children: Vec<_> = (0..SHARDS)
        .map(|i| {
            make(i)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("panicked"),
            "shard {i}: {err}"
        );
    }
}

#[test]
fn three_shards_write_what_one_run_writes() {
    let Some(data) = common::data_root_or_skip("three_shards_write_what_one_run_writes") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = images(&data, dir.path());
    let (full, sharded) = (dir.path().join("full"), dir.path().join("sharded"));
    let (full_m, sharded_m) = (dir.path().join("full-m"), dir.path().join("sharded-m"));

    let (ok, _, err) = run(&mut extract(&imgs, &full, &[]));
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&full)
        .arg("--out-dir")
        .arg(&full_m));
    assert!(ok, "{err}");

    // Extraction by explicit index, matching by the Slurm and Kubernetes index variables.
    run_shards(|i| extract(&imgs, &sharded, &["--shard", &format!("{i}/{SHARDS}")]));
    run_shards(|i| {
        let mut c = descl();
        let (var, spec) = if i % 2 == 0 {
            ("SLURM_ARRAY_TASK_ID", format!("slurm/{SHARDS}"))
        } else {
            ("JOB_COMPLETION_INDEX", format!("k8s/{SHARDS}"))
        };
        c.args(["match", "--exhaustive", "--images"])
            .arg(&sharded)
            .arg("--out-dir")
            .arg(&sharded_m)
            .args(["--shard", &spec])
            .env(var, i.to_string());
        c
    });

    assert_eq!(files_in(&full), files_in(&sharded));
    for name in files_in(&full) {
        let (a, b) = (
            read_features(&full.join(&name)),
            read_features(&sharded.join(&name)),
        );
        let (mut a, mut b) = (a.unwrap(), b.unwrap());
        // The recorded source differs only by the folder.
        a.meta.image.clear();
        b.meta.image.clear();
        assert_eq!(a, b, "{name}");
    }
    let pairs = files_in(&full_m);
    assert_eq!(pairs.len(), 6);
    assert_eq!(pairs, files_in(&sharded_m));
    for name in pairs {
        let (a, b) = (
            read_matches(&full_m.join(&name)),
            read_matches(&sharded_m.join(&name)),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            (&a.pairs, &a.inliers, &a.model),
            (&b.pairs, &b.inliers, &b.model),
            "{name}"
        );
    }

    // A repeated shard (0 of 3: images 0 and 3) with --resume does nothing; without the
    // variable it says what is missing.
    let (ok, out, err) = run(&mut extract(
        &imgs,
        &sharded,
        &["--shard", "0/3", "--resume", "--json"],
    ));
    assert!(ok, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["skipped_existing"], 2, "{out}");
    assert_eq!(summary["images"].as_array().unwrap().len(), 0, "{out}");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--shard", "slurm/3"])
        .env_remove("SLURM_ARRAY_TASK_ID"));
    assert!(
        !ok && err.contains("SLURM_ARRAY_TASK_ID is not set"),
        "{err}"
    );
}

#[test]
fn sharded_stages_merge_into_the_database_sfm_writes() {
    let Some(data) = common::data_root_or_skip("sharded_stages_merge_into_the_database_sfm_writes")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = mixed_images(&data, dir.path());
    let full = dir.path().join("full.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&full)
        .args(["--max-keypoints", KEYPOINTS]));
    assert!(ok, "{err}");

    let (feats, matches) = (dir.path().join("features"), dir.path().join("matches"));
    run_shards(|i| extract(&imgs, &feats, &["--shard", &format!("{i}/{SHARDS}")]));
    run_shards(|i| {
        let mut c = descl();
        c.args(["match", "--exhaustive", "--planar-check", "--images"])
            .arg(&feats)
            .arg("--out-dir")
            .arg(&matches)
            .args(["--shard", &format!("{i}/{SHARDS}")]);
        c
    });
    let merged = dir.path().join("merged.db");
    let merge = |db: &Path, m: &Path| {
        let mut c = descl();
        c.args(["sfm", "merge", "--json", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(m)
            .arg("--images")
            .arg(&imgs)
            .arg("--database")
            .arg(db);
        c
    };
    let (ok, out, err) = run(&mut merge(&merged, &matches));
    assert!(ok, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["pairs"], 10, "{out}");
    assert_eq!(summary["pairs_without_planar_check"], 0, "{out}");
    common::assert_same_databases(&merged, &full);
    // Both scenes verified, and the planar one labelled as COLMAP labels it.
    let configs = db_rows(&full, "two_view_geometries", "config");
    assert!(configs.contains(&"Integer(3)".to_string()), "{configs:?}");
    assert!(configs.contains(&"Integer(6)".to_string()), "{configs:?}");

    // The merge refuses to replace a database, and a pair matched twice.
    let (ok, _, err) = run(&mut merge(&merged, &matches));
    assert!(!ok && err.contains("merged.db"), "{err}");
    let first = matches.join(&files_in(&matches)[0]);
    let (a, b) = first
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .split_once("__")
        .unwrap();
    std::fs::copy(&first, matches.join(format!("{b}__{a}.npz"))).unwrap();
    let (ok, _, err) = run(&mut merge(&dir.path().join("twice.db"), &matches));
    assert!(!ok && err.contains("matched twice"), "{err}");
    assert!(!dir.path().join("twice.db").exists());
}
