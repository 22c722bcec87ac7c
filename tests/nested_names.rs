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

/// `--format h5` is one file per folder, written by one process: shards run in the npz format
/// and `descl sfm merge --hloc` writes hloc's files from them, equal to what the unsharded
/// `--format h5` recipe writes (every dataset and the recorded provenance), for a nested folder.
#[cfg(feature = "h5")]
#[test]
fn sharded_npz_runs_merge_into_the_hloc_files_of_one_run() {
    use common::h5_open;
    let Some(data) = common::data_root_or_skip("sharded_npz_runs_merge_into_the_hloc_files") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let pairs = dir.path().join("pairs.txt");
    std::fs::write(
        &pairs,
        "a/0000.jpg b/0000.jpg\nb/0000.jpg a/0000.jpg\ntop.jpg a/0001.jpg\na/0000.jpg a/0001.jpg\n",
    )
    .unwrap();
    // The one-process recipe.
    let one = dir.path().join("one");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--format", "h5", "--max-keypoints", KEYPOINTS, "--out"])
        .arg(&one));
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg("--images")
        .arg(one.join("features.h5"))
        .arg("--pairs")
        .arg(&pairs)
        .args(["--format", "h5", "--out-dir"])
        .arg(&one));
    assert!(ok, "{err}");
    // Sharded in npz, merged.
    let (feats, matches) = (dir.path().join("features"), dir.path().join("matches"));
    for i in 0..2 {
        let (ok, _, err) = run(descl()
            .arg("extract")
            .arg(&imgs)
            .args(["--max-keypoints", KEYPOINTS, "--out"])
            .arg(&feats)
            .args(["--shard", &format!("{i}/2")]));
        assert!(ok, "{err}");
    }
    let match_shard = |i: usize| {
        let (ok, _, err) = run(descl()
            .arg("match")
            .arg("--images")
            .arg(&feats)
            .arg("--pairs")
            .arg(&pairs)
            .arg("--out-dir")
            .arg(&matches)
            .args(["--shard", &format!("{i}/2")]));
        assert!(ok, "{err}");
    };
    match_shard(0);
    let merged = dir.path().join("merged");
    let merge = |extra: &[&str]| {
        run(descl()
            .args(["sfm", "merge", "--json", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&matches)
            .arg("--hloc")
            .arg(&merged)
            .args(extra))
    };
    // One match shard missing: refused, and no files left.
    let (ok, _, err) = merge(&[]);
    assert!(!ok && err.contains("incomplete run"), "{err}");
    assert!(!merged.join("features.h5").exists() && !merged.join("matches.h5").exists());
    match_shard(1);
    let (ok, out, err) = merge(&[]);
    assert!(ok, "{err}");
    assert_eq!(json(&out)["pairs"], 3, "{out}");

    let (a, b) = (
        h5_open(&one.join("features.h5")),
        h5_open(&merged.join("features.h5")),
    );
    for name in NAMES {
        let (fa, fb) = (a.group(name).unwrap(), b.group(name).unwrap());
        for ds in ["keypoints", "scores"] {
            let x: Vec<f32> = fa.dataset(ds).unwrap().read_raw().unwrap();
            let y: Vec<f32> = fb.dataset(ds).unwrap().read_raw().unwrap();
            assert_eq!(x, y, "{name}/{ds}");
        }
        let x: ndarray::Array2<f32> = fa.dataset("descriptors").unwrap().read_2d().unwrap();
        let y: ndarray::Array2<f32> = fb.dataset("descriptors").unwrap().read_2d().unwrap();
        assert_eq!(x, y, "{name}/descriptors");
        let x: Vec<i64> = fa.dataset("image_size").unwrap().read_raw().unwrap();
        let y: Vec<i64> = fb.dataset("image_size").unwrap().read_raw().unwrap();
        assert_eq!(x, y, "{name}/image_size");
    }
    let (a, b) = (
        h5_open(&one.join("matches.h5")),
        h5_open(&merged.join("matches.h5")),
    );
    let attr = |g: &hdf5_metno::Group| -> serde_json::Value {
        let s: hdf5_metno::types::VarLenUnicode = g
            .attr(descl::io::hloc::PAIR_PROVENANCE_ATTR)
            .unwrap()
            .read_scalar()
            .unwrap();
        serde_json::from_str(s.as_str()).unwrap()
    };
    for key in [
        "a-0000.jpg/a-0001.jpg",
        "a-0000.jpg/b-0000.jpg",
        "a-0001.jpg/top.jpg",
    ] {
        let (ga, gb) = (a.group(key).unwrap(), b.group(key).unwrap());
        let x: Vec<i16> = ga.dataset("matches0").unwrap().read_raw().unwrap();
        let y: Vec<i16> = gb.dataset("matches0").unwrap().read_raw().unwrap();
        assert_eq!(x, y, "{key}/matches0");
        assert!(
            x.iter().filter(|&&m| m >= 0).count() > 0,
            "{key}: no matches"
        );
        let x: Vec<half::f16> = ga.dataset("matching_scores0").unwrap().read_raw().unwrap();
        let y: Vec<half::f16> = gb.dataset("matching_scores0").unwrap().read_raw().unwrap();
        assert_eq!(x, y, "{key}/matching_scores0");
        assert_eq!(attr(&ga), attr(&gb), "{key}: provenance");
    }
    drop((a, b));
    // hloc's files are not replaced without --overwrite; with it they are.
    let (ok, _, err) = merge(&[]);
    assert!(!ok && err.contains("--overwrite"), "{err}");
    let (ok, _, err) = merge(&["--overwrite"]);
    assert!(ok, "{err}");
}

/// What a hostile run of the nested-name paths found (each gave a wrong answer with exit 0, or
/// an error, before): a features file another run left in a subfolder, a folder of images and
/// features together, an ignored extra path after --images.
#[test]
fn leftovers_of_other_runs_and_mixed_folders_are_refused() {
    let Some(data) = common::data_root_or_skip("leftovers_of_other_runs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let feats = dir.path().join("features");
    let extract = || {
        run(descl()
            .arg("extract")
            .arg(&imgs)
            .args(["--max-keypoints", "64", "--out"])
            .arg(&feats))
    };
    let (ok, _, err) = extract();
    assert!(ok, "{err}");
    // The image moves to another folder and the set is extracted again: a/0000.npz stays, and
    // it must not stand for an image (it was matched with its own copy, 64 of 64 inliers, and
    // merged into the database under a name that no longer exists).
    std::fs::create_dir(imgs.join("c")).unwrap();
    std::fs::rename(imgs.join("a/0000.jpg"), imgs.join("c/0000.jpg")).unwrap();
    let (ok, _, err) = extract();
    assert!(ok, "{err}");
    let matches = dir.path().join("matches");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&matches));
    assert!(
        !ok && err.contains("a/0000.npz") && err.contains("does not list"),
        "{err}"
    );
    // The merge refuses it too (the matches are made after removing it).
    std::fs::rename(feats.join("a/0000.npz"), dir.path().join("stale.npz")).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--planar-check", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&matches));
    assert!(ok, "{err}");
    std::fs::rename(dir.path().join("stale.npz"), feats.join("a/0000.npz")).unwrap();
    let (ok, _, err) = run(descl()
        .args(["sfm", "merge", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&matches)
        .arg("--database")
        .arg(dir.path().join("d.db")));
    assert!(
        !ok && err.contains("a/0000.npz") && err.contains("does not list"),
        "{err}"
    );
    assert!(!dir.path().join("d.db").exists());

    // One features file in a subfolder of an image folder: ambiguous, refused (it made every
    // image be ignored: "0 pairs", exit 0).
    std::fs::create_dir(imgs.join("old")).unwrap();
    std::fs::copy(feats.join("top.npz"), imgs.join("old/top.npz")).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&imgs)
        .arg("--out-dir")
        .arg(dir.path().join("m2")));
    assert!(!ok && err.contains("both images"), "{err}");

    // A path after --images DIR was dropped without a word.
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg(&imgs)
        .arg("--out-dir")
        .arg(dir.path().join("m3")));
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}

/// hloc's `names_to_pair` writes `/` in a name as `-`: `a/0000.jpg` and `a-0000.jpg` give one
/// key, and the pair of them the same key in both orders. matches.h5 overwrote one pair with
/// the other (exit 0); now refused before any pair is matched. And a folder called
/// `keypoints` is a folder, not an image, when features.h5 is read back.
#[cfg(feature = "h5")]
#[test]
fn pairs_that_hlocs_keys_cannot_tell_apart_are_refused() {
    let Some(data) = common::data_root_or_skip("pairs_that_hlocs_keys_cannot_tell_apart") else {
        return;
    };
    let src = data.join("strecha/fountain-P11/images");
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    for (k, name) in ["a/0000.jpg", "a-0000.jpg", "b.jpg", "keypoints/1.jpg"]
        .iter()
        .enumerate()
    {
        let p = imgs.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(src.join(format!("{k:04}.jpg")), &p).unwrap();
    }
    let out = dir.path().join("hloc");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--format", "h5", "--max-keypoints", "64", "--out"])
        .arg(&out));
    assert!(ok, "{err}");
    let names = descl::io::hloc::list_features(&out.join("features.h5")).unwrap();
    assert_eq!(
        names,
        ["a-0000.jpg", "a/0000.jpg", "b.jpg", "keypoints/1.jpg"]
    );
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg("--images")
        .arg(out.join("features.h5"))
        .args(["--exhaustive", "--format", "h5", "--out-dir"])
        .arg(&out));
    assert!(
        !ok && err.contains("a/0000.jpg") && err.contains("a-0000.jpg") && err.contains("key"),
        "{err}"
    );
    assert!(!out.join("matches.h5").exists());
    // Pairs that do not meet are matched.
    let pairs = dir.path().join("pairs.txt");
    std::fs::write(&pairs, "a/0000.jpg b.jpg\nkeypoints/1.jpg b.jpg\n").unwrap();
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg("--images")
        .arg(out.join("features.h5"))
        .arg("--pairs")
        .arg(&pairs)
        .args(["--format", "h5", "--out-dir"])
        .arg(&out));
    assert!(ok, "{err}");
}

/// A failed `sfm merge --hloc` leaves the folder as it was: the merge is built in a staging
/// folder and put in place only when complete (before, with checkpoints, a refused merge left a
/// partial features.h5 in place and the originals renamed aside; a second try destroyed them).
#[cfg(feature = "h5")]
#[test]
fn a_failed_hloc_merge_leaves_the_folder_as_it_was() {
    let Some(data) = common::data_root_or_skip("a_failed_hloc_merge_leaves_the_folder") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = nested_images(&data, dir.path());
    let (feats, matches) = (dir.path().join("features"), dir.path().join("matches"));
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .args(["--max-keypoints", "128", "--out"])
        .arg(&feats));
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&matches));
    assert!(ok, "{err}");
    let out = dir.path().join("hloc");
    let merge = |extra: &[&str]| {
        run(descl()
            .env(descl::io::hloc::CHECKPOINT_ENV, "0")
            .args(["sfm", "merge", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&matches)
            .arg("--hloc")
            .arg(&out)
            .args(extra))
    };
    // A killed merge's staging folder, or a file of that name, is cleared by the next (a
    // file stayed before io::atomic::remove_stale_staging).
    let stale = out.join(".descl-tmp-hloc-merge-killed");
    std::fs::create_dir_all(&stale).unwrap();
    let stale_file = out.join(".descl-tmp-hloc-merge-file");
    std::fs::write(&stale_file, b"").unwrap();
    let (ok, _, err) = merge(&[]);
    assert!(ok, "{err}");
    assert!(!stale.exists());
    assert!(!stale_file.exists());
    let before: Vec<Vec<u8>> = ["features.h5", "matches.h5"]
        .iter()
        .map(|f| std::fs::read(out.join(f)).unwrap())
        .collect();
    // One pair file gone: the merge is refused, twice, and the files stay byte for byte.
    let gone = matches.join("a%2F0000__b%2F0000.npz");
    std::fs::remove_file(&gone).unwrap();
    for _ in 0..2 {
        let (ok, _, err) = merge(&["--overwrite"]);
        assert!(!ok && err.contains("incomplete run"), "{err}");
        for (f, b) in ["features.h5", "matches.h5"].iter().zip(&before) {
            assert_eq!(&std::fs::read(out.join(f)).unwrap(), b, "{f} changed");
        }
    }
    let mut left = common::files_in(&out);
    left.retain(|n| !n.ends_with(".lock"));
    assert_eq!(left, ["features.h5", "matches.h5"], "{left:?}");
    // Into an empty folder: nothing is left either.
    let empty = dir.path().join("empty");
    let (ok, _, err) = run(descl()
        .env(descl::io::hloc::CHECKPOINT_ENV, "0")
        .args(["sfm", "merge", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&matches)
        .arg("--hloc")
        .arg(&empty));
    assert!(!ok, "{err}");
    let mut left = common::files_in(&empty);
    left.retain(|n| !n.ends_with(".lock"));
    assert!(left.is_empty(), "{left:?}");
}
