//! Known cameras (`descl sfm --camera-params`, `--cameras-file`): written into the database as
//! given, held fixed by both mappers (COLMAP 3.8's and pycolmap's), refined only with
//! `--refine-intrinsics`; an impossible camera is refused naming its source. The model's
//! cameras are read back by COLMAP itself (`colmap model_converter` to TXT), not by descl.

use std::path::{Path, PathBuf};

mod common;

/// fountain-P11's ground-truth K of image 0003 (../shared/data/strecha, 1536×1024) as COLMAP
/// PINHOLE parameters: fx, fy, cx + ½, cy + ½ (COLMAP's pixels).
fn fountain_pinhole(root: &Path) -> [f64; 4] {
    let text =
        std::fs::read_to_string(root.join("strecha/fountain-P11/cameras/0003.jpg.camera")).unwrap();
    let k: Vec<Vec<f64>> = text
        .lines()
        .take(3)
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    [k[0][0], k[1][1], k[0][2] + 0.5, k[1][2] + 0.5]
}

/// Every camera of the largest model in `sparse`, as COLMAP writes cameras.txt: (model,
/// width, height, params).
fn model_cameras(sparse: &Path, work: &Path) -> Vec<(String, u32, u32, Vec<f64>)> {
    let model = descl::io::colmap_model::largest_model(sparse)
        .unwrap()
        .expect("a model");
    let txt = work.join("txt");
    std::fs::create_dir_all(&txt).unwrap();
    let out = std::process::Command::new(descl::sfm::mapper::colmap::colmap_exe())
        .args(["model_converter", "--output_type", "TXT", "--input_path"])
        .arg(&model.path)
        .arg("--output_path")
        .arg(&txt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(txt.join("cameras.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[1].to_string(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4..].iter().map(|v| v.parse().unwrap()).collect(),
            )
        })
        .collect()
}

/// The Python with pycolmap (`$DESCL_PYTHON`), None with a note when it has none.
fn pycolmap_python(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("DESCL_PYTHON").map(PathBuf::from);
    let ok = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", "import pycolmap"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: CI needs DESCL_PYTHON with pycolmap (scripts/test sets it)"
        );
        eprintln!("{test}: pycolmap part skipped (no DESCL_PYTHON with pycolmap)");
        return None;
    }
    python
}

/// `descl sfm --reconstruct` on the fountain quartet with `flags`; returns the sparse folder.
fn sfm(images: &Path, work: &Path, tag: &str, flags: &[String]) -> PathBuf {
    let db = work.join(format!("{tag}.db"));
    let sparse = work.join(format!("{tag}-sparse"));
    let (ok, _, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(images)
            .arg("--database")
            .arg(&db)
            .args([
                "--reconstruct",
                "--camera-model",
                "PINHOLE",
                "--max-keypoints",
                "1024",
            ])
            .args(flags),
    );
    assert!(ok, "descl sfm {flags:?} failed:\n{stderr}");
    sparse
}

/// Given cameras stay exactly as given through either mapper; with --refine-intrinsics the
/// mapper moves a focal length given 3 % too long.
#[test]
fn given_cameras_are_held_by_both_mappers_unless_refined() {
    const TEST: &str = "sfm --camera-params";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, work.path());
    let [fx, fy, cx, cy] = fountain_pinhole(&root);
    // 3 % too long: a mapper that refines focal lengths moves it.
    let given = [fx * 1.03, fy * 1.03, cx, cy];
    let params = given.map(|v| v.to_string()).join(",");
    let mut mappers = vec![("colmap", None)];
    if let Some(python) = pycolmap_python(TEST) {
        mappers.push(("pycolmap", Some(python)));
    }
    for (mapper, _) in &mappers {
        let flags = [
            "--camera-params".to_string(),
            params.clone(),
            "--mapper".to_string(),
            mapper.to_string(),
        ];
        let held = model_cameras(
            &sfm(&images, work.path(), &format!("held-{mapper}"), &flags),
            &work.path().join(format!("held-{mapper}")),
        );
        assert_eq!(held.len(), 4, "{mapper}: one camera per image");
        for (model, w, h, p) in &held {
            assert_eq!((model.as_str(), *w, *h), ("PINHOLE", 1536, 1024));
            for (got, want) in p.iter().zip(given) {
                assert!(
                    (got - want).abs() < 1e-6 * want,
                    "{mapper}: {p:?} != {given:?}"
                );
            }
        }
        let mut refine = flags.to_vec();
        refine.push("--refine-intrinsics".into());
        let refined = model_cameras(
            &sfm(&images, work.path(), &format!("refined-{mapper}"), &refine),
            &work.path().join(format!("refined-{mapper}")),
        );
        let moved = refined
            .iter()
            .map(|(_, _, _, p)| (p[0] - given[0]).abs() / given[0])
            .fold(0.0, f64::max);
        assert!(
            moved > 0.003,
            "{mapper}: --refine-intrinsics left the focal length at {:?} (given {})",
            refined.iter().map(|c| c.3[0]).collect::<Vec<_>>(),
            given[0]
        );
    }
}

/// A camera that cannot be the images' is refused naming its source, and no database is left;
/// a cameras file that lacks an image is refused naming the file and the image.
#[test]
fn impossible_or_missing_cameras_are_refused() {
    const TEST: &str = "sfm --camera-params refused";
    let Some(root) = common::data_root_or_skip(TEST) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, work.path());
    let db = work.path().join("x.db");
    // cx = 2000 px lies outside the 1536 px wide images.
    for (flags, says) in [
        (
            vec!["--camera-params", "1000,2000,512,0"],
            "outside the 1536×1024 image",
        ),
        (
            vec!["--camera-params", "1000,768"],
            "SIMPLE_RADIAL takes 4 parameters",
        ),
        (
            vec!["--refine-intrinsics"],
            "--refine-intrinsics refines the cameras",
        ),
    ] {
        let (ok, _, stderr) = common::run(
            common::descl()
                .arg("sfm")
                .arg(&images)
                .arg("--database")
                .arg(&db)
                .args(["--max-keypoints", "256"])
                .args(&flags),
        );
        assert!(!ok && stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!db.exists(), "{flags:?} left a database");
    }
    let file = work.path().join("cams.txt");
    std::fs::write(
        &file,
        "0003.jpg PINHOLE 1536 1024 1379 1379 768 512\n0004.jpg PINHOLE 1536 1024 1379 1379 768 512\n",
    )
    .unwrap();
    let (ok, _, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args(["--max-keypoints", "256", "--cameras-file"])
            .arg(&file),
    );
    assert!(
        !ok && stderr.contains("cams.txt") && stderr.contains("0005.jpg"),
        "{stderr}"
    );
    assert!(!db.exists());
}

/// A per-image file's cameras land in the database as given, marked as known focal lengths.
#[test]
fn cameras_file_is_written_as_given() {
    const TEST: &str = "sfm --cameras-file";
    let Some(root) = common::data_root_or_skip(TEST) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, work.path());
    let file = work.path().join("cams.txt");
    let lines: String = ["0003", "0004", "0005", "0006"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "{n}.jpg SIMPLE_RADIAL 1536 1024 {} 768.5 512.5 0.01\n",
                1370 + i
            )
        })
        .collect();
    std::fs::write(&file, lines).unwrap();
    let db = work.path().join("f.db");
    let (ok, _, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args(["--max-keypoints", "256", "--cameras-file"])
            .arg(&file),
    );
    assert!(ok, "{stderr}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut rows: Vec<(String, i64, i64, Vec<u8>)> = conn
        .prepare(
            "SELECT images.name, cameras.model, cameras.prior_focal_length, cameras.params \
             FROM images JOIN cameras USING (camera_id) ORDER BY images.name",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.sort();
    assert_eq!(rows.len(), 4);
    for (i, (name, model, prior, blob)) in rows.iter().enumerate() {
        let params: Vec<f64> = blob
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        // COLMAP's SIMPLE_RADIAL is model 2; the file's numbers, the file's distortion.
        assert_eq!((*model, *prior), (2, 1), "{name}");
        assert_eq!(
            params,
            vec![1370.0 + i as f64, 768.5, 512.5, 0.01],
            "{name}"
        );
    }
}
