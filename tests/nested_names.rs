//! Nested image folders (issue 24): images are named as hloc names them, by their paths under
//! the image folder (`a/0000.jpg`), in every output and every input a later stage reads —
//! `.npz` features (`a/0000.npz`) and pair files, COLMAP databases, pairs files, run plans,
//! `features.h5` groups and `matches.h5` pair keys. Before, a folder was read one level deep
//! (`descl extract images/` with subfolders said "no images") and names were file names, so
//! `a/0000.jpg` and `b/0000.jpg` could not be in one set and hloc's `get_matches` failed.

mod common;

use common::{descl, run};
use std::path::{Path, PathBuf};

const KEYPOINTS: &str = "512";

/// Four fountain images in nested folders, with what a folder read must skip beside them: a
/// hidden folder (Python's `glob`, hence hloc, skips it), a hidden file, a text file.
fn nested_images(data: &Path, dir: &Path) -> PathBuf {
    let src = data.join("strecha/fountain-P11/images");
    let out = dir.join("images");
    for (k, name) in ["a/0000.jpg", "a/0001.jpg", "b/0000.jpg", "top.jpg"]
        .iter()
        .enumerate()
    {
        let p = out.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(src.join(format!("{k:04}.jpg")), &p).unwrap();
    }
    std::fs::create_dir_all(out.join(".thumbs")).unwrap();
    std::os::unix::fs::symlink(src.join("0004.jpg"), out.join(".thumbs/0004.jpg")).unwrap();
    std::os::unix::fs::symlink(src.join("0005.jpg"), out.join("a/.0005.jpg")).unwrap();
    std::fs::write(out.join("b/notes.txt"), "not an image").unwrap();
    out
}

const NAMES: [&str; 4] = ["a/0000.jpg", "a/0001.jpg", "b/0000.jpg", "top.jpg"];

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn nested_folders_are_named_by_their_paths_through_the_staged_pipeline() {
    let Some(data) = common::data_root_or_skip("nested_folders_staged") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let full = dir.path().join("full.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&full)
        .args(["--max-keypoints", KEYPOINTS]));
    assert!(ok, "{err}");
    let names: Vec<String> = rusqlite::Connection::open(&full)
        .unwrap()
        .prepare("SELECT name FROM images ORDER BY image_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        names, NAMES,
        "COLMAP's image names are paths under --image_path"
    );

    // Staged: two extract shards, two match shards, merge: the same database.
    let (feats, matches) = (dir.path().join("features"), dir.path().join("matches"));
    for i in 0..2 {
        let (ok, _, err) = run(descl()
            .arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(&feats)
            .args(["--max-keypoints", KEYPOINTS, "--preset", "sfm"])
            .args(["--shard", &format!("{i}/2")]));
        assert!(ok, "{err}");
    }
    for name in NAMES {
        let file = feats.join(name).with_extension("npz");
        let f = descl::io::features::read_features(&file).unwrap();
        assert_eq!(f.meta.name.as_deref(), Some(name), "{}", file.display());
    }
    let plan: serde_json::Value = serde_json::from_slice(
        &std::fs::read(feats.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["images"], serde_json::json!(NAMES));
    for i in 0..2 {
        let (ok, _, err) = run(descl()
            .args(["match", "--exhaustive", "--planar-check", "--images"])
            .arg(&feats)
            .arg("--out-dir")
            .arg(&matches)
            .args(["--shard", &format!("{i}/2")]));
        assert!(ok, "{err}");
    }
    // One pair file per pair at the top, `/` written `%2F`.
    assert!(
        matches.join("a%2F0000__b%2F0000.npz").is_file(),
        "{:?}",
        common::files_in(&matches)
    );
    let merged = dir.path().join("merged.db");
    let (ok, out, err) = run(descl()
        .args(["sfm", "merge", "--json", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&matches)
        .arg("--images")
        .arg(&imgs)
        .arg("--database")
        .arg(&merged));
    assert!(ok, "{err}");
    assert_eq!(json(&out)["pairs"], 6, "{out}");
    common::assert_same_databases(&merged, &full);

    // A resumed extraction finds every nested file.
    let (ok, out, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&feats)
        .args([
            "--max-keypoints",
            KEYPOINTS,
            "--preset",
            "sfm",
            "--resume",
            "--json",
        ]));
    assert!(ok, "{err}");
    assert_eq!(json(&out)["skipped_existing"], 4, "{out}");

    // `descl pairs` writes the names, and a pairs file of them is read back.
    let pairs = dir.path().join("pairs.txt");
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .arg("--out")
        .arg(&pairs)
        .args(["--sequential", "1"]));
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(&pairs).unwrap(),
        "a/0000.jpg a/0001.jpg\na/0001.jpg b/0000.jpg\nb/0000.jpg top.jpg\n"
    );
    let (ok, out, err) = run(descl()
        .args(["match", "--json", "--images"])
        .arg(&imgs)
        .arg("--pairs")
        .arg(&pairs)
        .arg("--out-dir")
        .arg(dir.path().join("from-pairs"))
        .args(["--max-keypoints", KEYPOINTS]));
    assert!(ok, "{err}");
    assert_eq!(json(&out)["pairs"].as_array().unwrap().len(), 3, "{out}");

    // Named files of one name from two folders are still two images of one name.
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join("a/0000.jpg"))
        .arg(imgs.join("b/0000.jpg"))
        .arg("--out")
        .arg(dir.path().join("clash")));
    assert!(
        !ok && err.contains("two inputs named \"0000.jpg\""),
        "{err}"
    );
}

#[cfg(feature = "h5")]
#[test]
fn hloc_files_of_a_nested_folder_use_hlocs_names() {
    use common::h5_open;
    let Some(data) = common::data_root_or_skip("hloc_files_of_a_nested_folder") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let out = dir.path().join("hloc");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--format", "h5", "--max-keypoints", KEYPOINTS, "--out"])
        .arg(&out));
    assert!(ok, "{err}");
    // hloc's pairs_from_retrieval lists both orders.
    let pairs = dir.path().join("pairs.txt");
    std::fs::write(
        &pairs,
        "a/0000.jpg b/0000.jpg\nb/0000.jpg a/0000.jpg\ntop.jpg a/0001.jpg\n",
    )
    .unwrap();
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg("--images")
        .arg(out.join("features.h5"))
        .arg("--pairs")
        .arg(&pairs)
        .args(["--format", "h5", "--out-dir"])
        .arg(&out));
    assert!(ok, "{err}");
    let f = h5_open(&out.join("features.h5"));
    for name in NAMES {
        assert!(f.link_exists(&format!("{name}/keypoints")), "{name}");
    }
    let m = h5_open(&out.join("matches.h5"));
    // hloc's names_to_pair: `/` inside a name → `-`.
    for key in ["a-0000.jpg/b-0000.jpg", "a-0001.jpg/top.jpg"] {
        assert!(m.link_exists(&format!("{key}/matches0")), "{key}");
    }
    drop((f, m));

    // A folder of `.npz` features matched into h5: groups named by the images (recorded in the
    // features files), not by the features files (`a/0000.npz` before).
    let feats = dir.path().join("npz");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--max-keypoints", KEYPOINTS, "--out"])
        .arg(&feats));
    assert!(ok, "{err}");
    let from_npz = dir.path().join("from-npz");
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg("--images")
        .arg(&feats)
        .arg("--pairs")
        .arg(&pairs)
        .args(["--format", "h5", "--out-dir"])
        .arg(&from_npz));
    assert!(ok, "{err}");
    let names = descl::io::hloc::list_features(&from_npz.join("features.h5")).unwrap();
    assert_eq!(names, NAMES);
    let m = h5_open(&from_npz.join("matches.h5"));
    assert!(m.link_exists("a-0000.jpg/b-0000.jpg/matches0"));
}

/// A features file's recorded name is checked before it names an output: `../x.jpg` would put
/// the image's features (or a database row's image) outside the folder.
#[test]
fn a_recorded_name_that_leaves_the_folder_is_refused() {
    let Some(data) = common::data_root_or_skip("a_recorded_name_that_leaves_the_folder") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let feats = dir.path().join("features");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--max-keypoints", "64", "--out"])
        .arg(&feats));
    assert!(ok, "{err}");
    let file = feats.join("b/0000.npz");
    let mut f = descl::io::features::read_features(&file).unwrap();
    f.meta.name = Some("../../escaped.jpg".into());
    descl::io::features::write_features(&file, &f).unwrap();
    let out = dir.path().join("out");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&out));
    assert!(!ok, "accepted");
    assert!(
        err.contains("b/0000.npz") && err.contains("\"../../escaped.jpg\""),
        "{err}"
    );
    assert!(!dir.path().join("escaped.npz").exists() && !out.exists());
    let (ok, _, err) = run(descl()
        .args(["sfm", "merge", "--allow-partial", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&feats)
        .arg("--database")
        .arg(dir.path().join("m.db")));
    assert!(!ok && err.contains("escaped.jpg"), "{err}");
}
