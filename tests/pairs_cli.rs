//! `descl pairs`: retrieval pairs from descl's own descriptors separate scenes, are written as
//! a pairs file of image names that `descl match --pairs` reads back, and are measured against
//! an exhaustive run's verified pairs.

mod common;

use common::{descl, files_in, run};
use std::path::{Path, PathBuf};

/// Three fountain and three graffiti images (two scenes) linked into `dir/images`.
fn two_scenes(data: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("images");
    std::fs::create_dir(&out).unwrap();
    let fountain = data.join("strecha/fountain-P11/images");
    let graffiti = data.join("hpatches-sequences/v_graffiti");
    for i in 0..3 {
        let f = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(fountain.join(&f), out.join(format!("fountain-{f}"))).unwrap();
        let g = format!("{}.ppm", i + 1);
        std::os::unix::fs::symlink(graffiti.join(&g), out.join(format!("graffiti-{g}"))).unwrap();
    }
    out
}

#[test]
fn retrieval_pairs_separate_scenes_and_feed_match() {
    let Some(data) = common::data_root_or_skip("retrieval_pairs_separate_scenes_and_feed_match")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = two_scenes(&data, dir.path());
    let feats = dir.path().join("features");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&feats)
        .args(["--max-keypoints", "512"]));
    assert!(ok, "{err}");
    let exhaustive = dir.path().join("exhaustive");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&exhaustive));
    assert!(ok, "{err}");

    // Two neighbours per image: each image's two scene mates, nothing across scenes.
    let pairs_file = dir.path().join("pairs.txt");
    let (ok, out, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "2", "--json", "--out"])
        .arg(&pairs_file)
        .arg("--reference")
        .arg(&exhaustive));
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&pairs_file).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "fountain-0000.jpg fountain-0001.jpg",
            "fountain-0000.jpg fountain-0002.jpg",
            "fountain-0001.jpg fountain-0002.jpg",
            "graffiti-1.ppm graffiti-2.ppm",
            "graffiti-1.ppm graffiti-3.ppm",
            "graffiti-2.ppm graffiti-3.ppm",
        ],
        "{text}"
    );
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["pairs"], 6, "{out}");
    assert_eq!(summary["reference"]["matched_pairs"], 15, "{out}");
    // Every pair the exhaustive run verified is within a scene, so all are kept.
    assert_eq!(summary["reference"]["recall"], 1.0, "{out}");
    assert!(
        summary["reference"]["verified_pairs"].as_u64().unwrap() >= 5,
        "{out}"
    );

    // The file's image names find the features files; the in-process --retrieval gives the
    // same pairs.
    let (from_file, in_process) = (dir.path().join("m-file"), dir.path().join("m-retrieval"));
    for (out_dir, flags) in [
        (&from_file, vec!["--pairs", pairs_file.to_str().unwrap()]),
        (&in_process, vec!["--retrieval", "2"]),
    ] {
        let (ok, _, err) = run(descl()
            .args(["match", "--images"])
            .arg(&feats)
            .args(&flags)
            .arg("--out-dir")
            .arg(out_dir));
        assert!(ok, "{err}");
    }
    assert_eq!(files_in(&from_file).len(), 6);
    assert_eq!(files_in(&from_file), files_in(&in_process));

    // K = 0 and a missing choice are usage errors.
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "0", "--out"])
        .arg(dir.path().join("x.txt")));
    assert!(!ok && err.contains("K ≥ 1"), "{err}");
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .arg("--out")
        .arg(dir.path().join("x.txt")));
    assert!(!ok && err.contains("choose the pairs"), "{err}");
}

/// Names (issue 24): `descl pairs` writes only names that descl and hloc read back as written
/// (a name with a space was written unquoted and could not be read back); two inputs of one
/// file name are refused for every format (features.h5 kept one of two `x.png`).
#[test]
fn names_that_cannot_round_trip_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for name in ["a b.png", "c.png"] {
        common::gray_image(64, 48, false)
            .save(imgs.join(name))
            .unwrap();
    }
    let out = dir.path().join("pairs.txt");
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&imgs)
        .args(["--exhaustive", "--out"])
        .arg(&out));
    assert!(
        !ok && err.contains("\"a b.png\"") && err.contains("whitespace"),
        "{err}"
    );
    assert!(!out.exists());

    // One name in two folders: refused before any output, npz and h5 alike.
    let (d1, d2) = (dir.path().join("d1"), dir.path().join("d2"));
    for d in [&d1, &d2] {
        std::fs::create_dir(d).unwrap();
        common::gray_image(96, 80, false)
            .save(d.join("x.png"))
            .unwrap();
    }
    for format in ["npz", "h5"] {
        let o = dir.path().join(format!("out-{format}"));
        let (ok, _, err) = run(descl()
            .arg("extract")
            .arg(d1.join("x.png"))
            .arg(d2.join("x.png"))
            .args(["-m", "sift", "--format", format, "--out"])
            .arg(&o));
        assert!(!ok, "{format}: {err}");
        assert!(
            err.contains("d1/x.png")
                && err.contains("d2/x.png")
                && err.contains("two inputs named"),
            "{format}: {err}"
        );
        assert!(
            !o.exists() || files_in(&o).is_empty(),
            "{format}: {:?}",
            files_in(&o)
        );
    }
}

/// Issue 44, item 5: a folder of features files without an extract plan (assembled from two
/// runs) that mixes two models, or one model under two detector settings, is refused before
/// retrieval mixes their descriptors, naming two files that disagree and what differs.
#[test]
fn a_features_folder_of_two_models_or_settings_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = common::small_images(dir.path(), &["a.png", "b.png", "c.png"]);
    for (case, other, expect) in [
        (
            "model",
            &["-m", "rootsift"][..],
            &["`sift`", "`rootsift`"][..],
        ),
        (
            "settings",
            &["-m", "sift", "--max-keypoints", "20"][..],
            &["max_keypoints"][..],
        ),
    ] {
        let feats = dir.path().join(format!("features-{case}"));
        common::extract_images(&imgs, &["a.png", "b.png"], &feats, &["-m", "sift"]);
        let later = dir.path().join(format!("later-{case}"));
        common::extract_images(&imgs, &["c.png"], &later, other);
        std::fs::copy(later.join("c.npz"), feats.join("c.npz")).unwrap();
        std::fs::remove_file(feats.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap();
        for mode in [&["--retrieval", "1"][..], &["--exhaustive"][..]] {
            let out = dir.path().join(format!("pairs-{case}.txt"));
            let (ok, _, err) = run(descl()
                .arg("pairs")
                .arg(&feats)
                .args(mode)
                .arg("--out")
                .arg(&out));
            assert!(!ok, "{case} {mode:?}: mixed features accepted: {err}");
            for e in expect.iter().chain(&["a.npz", "c.npz"]) {
                assert!(err.contains(e), "{case} {mode:?}: no {e:?} in: {err}");
            }
            assert!(!out.exists(), "{case} {mode:?}");
        }
    }
}

/// Issue 44: the model, preset and detector flags are usage errors when every input is a
/// features file (they changed nothing, silently); the message names the flag and the model
/// the features were extracted with. Images still take them.
#[test]
fn extraction_flags_for_features_files_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = common::small_images(dir.path(), &["a.png", "b.png", "c.png"]);
    let feats = dir.path().join("features");
    common::extract_images(&imgs, &["a.png", "b.png", "c.png"], &feats, &["-m", "sift"]);
    let out = dir.path().join("pairs.txt");
    for (flags, named) in [
        (&["-m", "rootsift"][..], "-m/--model"),
        (&["--model", "sift"][..], "-m/--model"),
        (&["--preset", "sfm"][..], "--preset"),
        (&["--detector", "harris-affine"][..], "--detector"),
        (&["--max-keypoints", "100"][..], "--max-keypoints"),
        (&["--max-image-size", "640"][..], "--max-image-size"),
    ] {
        let o = descl()
            .arg("pairs")
            .arg(&feats)
            .args(["--retrieval", "1", "--out"])
            .arg(&out)
            .args(flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(
            err.contains(named) && err.contains("already extracted with `sift`"),
            "{flags:?}: {err}"
        );
        assert!(!out.exists(), "{flags:?}");
    }
    // Images: the flags choose the extraction.
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&imgs)
        .args(["--exhaustive", "--out"])
        .arg(&out)
        .args(["-m", "sift", "--max-keypoints", "100"]));
    assert!(ok, "{err}");
}
