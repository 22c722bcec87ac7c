//! `descl sfm --reconstruct` on forward street motion: opensfm_lund (29 frames from a car,
//! 1024×768, no EXIF, a training set of ../shared/data/train). With COLMAP's mapper defaults
//! the database of `descl-l2net-real25-b1024` (the default until 2026-11-26, night) gives no
//! model at all ("failed to create sparse model": COLMAP's own relaxation of
//! a failed initialisation tries 100 inliers at 16°, 50 at 16°, 50 at 8°, 25 at 8°, 25 at 4°).
//! `descl sfm` then maps once more at 8° with COLMAP's full inlier minimum
//! (`sfm::FALLBACK_INIT_MIN_TRI_ANGLE_DEG`), which registers every frame. Before that fallback
//! the command failed with exit status 1 (2026-11-26, and so did COLMAP's own SIFT pipeline).
//! `descl sfm`'s first mapper run, at a 1 px filter (`sfm::map`), makes no model here either.
//! With the full-width HyNet's database no run from COLMAP's 1.2 · max(w, h) focal prior makes
//! a model, at either angle; `descl sfm` then maps from a wide camera's focal prior
//! (`sfm::FALLBACK_FOCAL_PRIOR_FACTOR`) on a copy of the database, which registers the street.
//! Every model must be the street (`assert_a_straight_street`), not only hold its frames: a
//! folded model registers them too. With the default model's database COLMAP 3.8 makes no
//! model at all, and `--mapper pycolmap` maps it.

use descl::sfm::mapper::COLMAP_FILTER_MAX_REPROJ_ERROR_PX;
use descl::sfm::{FALLBACK_FOCAL_PRIOR_FACTOR, FALLBACK_INIT_MIN_TRI_ANGLE_DEG};

use serde_json::Value;
use std::path::PathBuf;

mod common;

/// Frames of the scene.
const FRAMES: u64 = 29;
/// Frames the fallback must register: all 29 on the machine where it was measured; the
/// mapper is not deterministic, so a few may drop out elsewhere, but a model of most of the
/// street, not a fragment.
const MIN_REGISTERED: u64 = 25;

/// `descl sfm LUND --database lund.db -m MODEL --single-camera --reconstruct --json` as a user
/// runs it (and `extra` arguments): its folder (kept alive), the database, the JSON
/// reconstruction and stderr; None when the data or colmap are missing.
/// With COLMAP 3.8's mapper, whose fallbacks these tests are about (the CLI's default is
/// pycolmap's).
fn sfm_lund(test: &str, model: &str) -> Option<(tempfile::TempDir, PathBuf, Value, String)> {
    sfm_lund_with(test, model, &["--mapper", "colmap"])
}

fn sfm_lund_with(
    test: &str,
    model: &str,
    extra: &[&str],
) -> Option<(tempfile::TempDir, PathBuf, Value, String)> {
    let root = common::data_and_colmap_or_skip(test)?;
    let images = root.join("train").join("opensfm_lund");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lund.db");
    let (ok, stdout, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args(["-m", model])
            .args(["--single-camera", "--reconstruct", "--json"])
            .args(extra),
    );
    assert!(ok, "descl sfm failed:\n{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    Some((dir, db, out["reconstruction"].clone(), stderr))
}

/// The street of frames 01.jpg … 29.jpg is one drive forward: a right model places their
/// centres in name order along its main direction and its path is nearly straight. A folded
/// model passes a count of registered images: COLMAP 3.8's 24-frame model of the distilled
/// student's database (2026-11-28) steps backwards 15 times in 23 and its path is 3.1 times
/// the distance between its ends; pycolmap's of every database steps back none and its path
/// is 1.01 times (`docs/bench/sfm-lund-mappers-2026-11-28.json`).
fn assert_a_straight_street(r: &Value) {
    let mut images: Vec<(String, [f64; 3])> = r["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let f = |key: &str, k: usize| i[key][k].as_f64().unwrap();
            let image = descl::io::colmap_model::RegisteredImage {
                image_id: 0,
                camera_id: 0,
                name: i["name"].as_str().unwrap().to_string(),
                qvec: [0, 1, 2, 3].map(|k| f("qvec", k)),
                tvec: [0, 1, 2].map(|k| f("tvec", k)),
            };
            (image.name.clone(), image.centre())
        })
        .collect();
    images.sort_by(|a, b| a.0.cmp(&b.0));
    let c: Vec<[f64; 3]> = images.iter().map(|i| i.1).collect();
    let n = c.len() as f64;
    let mean = [0, 1, 2].map(|k| c.iter().map(|p| p[k]).sum::<f64>() / n);
    // The main direction: the covariance's leading eigenvector, by power iteration.
    let mut cov = [[0.0; 3]; 3];
    for p in &c {
        for a in 0..3 {
            for b in 0..3 {
                cov[a][b] += (p[a] - mean[a]) * (p[b] - mean[b]);
            }
        }
    }
    let mut u = [1.0, 1.0, 1.0];
    for _ in 0..200 {
        let v = [0, 1, 2].map(|a| (0..3).map(|b| cov[a][b] * u[b]).sum::<f64>());
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        u = v.map(|x| x / norm);
    }
    let along: Vec<f64> = c
        .iter()
        .map(|p| (0..3).map(|k| (p[k] - mean[k]) * u[k]).sum())
        .collect();
    let sign = if along[along.len() - 1] >= along[0] {
        1.0
    } else {
        -1.0
    };
    let backward = along
        .windows(2)
        .filter(|w| sign * (w[1] - w[0]) < 0.0)
        .count();
    let dist = |p: [f64; 3], q: [f64; 3]| (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f64>().sqrt();
    let path: f64 = c.windows(2).map(|w| dist(w[0], w[1])).sum();
    let ratio = path / dist(c[0], c[c.len() - 1]);
    assert!(
        backward <= 1 && ratio < 1.2,
        "not the street: {backward} backward steps in {}, path {ratio:.2} × its ends' distance",
        c.len() - 1
    );
}

/// `descl sfm --mapper pycolmap` with the default model, where COLMAP 3.8's mapper makes no
/// model from its database (with or without either fallback): pycolmap maps every frame, the
/// street straight, and the JSON names the mapper.
#[test]
fn pycolmap_maps_the_street_colmaps_mapper_does_not() {
    const TEST: &str = "sfm lund pycolmap";
    if std::env::var_os(descl::sfm::mapper::pycolmap::PYTHON_ENV).is_none() {
        eprintln!("{TEST}: skipped, DESCL_PYTHON (a Python with pycolmap) is not set");
        return;
    }
    let Some((_dir, _, r, _)) =
        sfm_lund_with(TEST, descl::model::DEFAULT_MODEL, &["--mapper", "pycolmap"])
    else {
        return;
    };
    assert!(
        r["mapper"].as_str().unwrap().starts_with("pycolmap "),
        "{r}"
    );
    assert_eq!(r["registered_images"].as_u64(), Some(FRAMES), "{r}");
    assert_a_straight_street(&r);
}

#[test]
fn descl_sfm_reconstructs_forward_street_motion_where_colmaps_mapper_defaults_make_no_model() {
    const TEST: &str = "sfm fallback";
    let Some((_dir, _, r, stderr)) = sfm_lund(TEST, "descl-l2net-real25-b1024") else {
        return;
    };
    let r = &r;
    assert_eq!(r["total_images"].as_u64(), Some(FRAMES), "{r}");
    // With COLMAP 3.8 (Debian's, CI's) its defaults made nothing and the fallback made the
    // model, and says so; a COLMAP whose defaults do reconstruct the street needs none.
    if r["fallback"].as_bool() == Some(true) && r["focal_prior_factor"].is_null() {
        assert_eq!(
            r["init_min_tri_angle_deg"].as_f64(),
            Some(FALLBACK_INIT_MIN_TRI_ANGLE_DEG)
        );
        // The mapper's runs in order (2 with COLMAP 3.8: COLMAP's defaults made nothing): the
        // last one, at the fallback angle and COLMAP's 4 px filter, made the kept model, then
        // refined (1024 px frames: at 1 px).
        let runs = r["mapper_runs"].as_array().unwrap();
        assert!(runs.len() >= 2, "{r}");
        assert_eq!(
            runs[0]["filter_max_reproj_error_px"].as_f64(),
            Some(COLMAP_FILTER_MAX_REPROJ_ERROR_PX)
        );
        let last = &runs[runs.len() - 1];
        assert_eq!(last["kept"].as_bool(), Some(true), "{r}");
        assert_eq!(
            last["init_min_tri_angle_deg"].as_f64(),
            Some(FALLBACK_INIT_MIN_TRI_ANGLE_DEG)
        );
        assert_eq!(
            r["filter_max_reproj_error_px"].as_f64(),
            Some(COLMAP_FILTER_MAX_REPROJ_ERROR_PX)
        );
        // Not refined: descl sfm's default since 2026-11-28.
        assert!(r["refined_at_filter_px"].is_null(), "{r}");
        let ran = format!("colmap mapper ran {} times", runs.len());
        assert!(stderr.contains(&ran), "{stderr}");
    } else if r["fallback"].as_bool() == Some(true) {
        // The mapper is not deterministic: the 8° run may miss where it registered all 29,
        // and the focal-prior fallback made the model.
        assert_eq!(
            r["focal_prior_factor"].as_f64(),
            Some(FALLBACK_FOCAL_PRIOR_FACTOR),
            "{r}"
        );
    } else {
        assert_eq!(r["fallback"].as_bool(), Some(false), "{r}");
        eprintln!("{TEST}: COLMAP's defaults reconstructed the scene; fallback not exercised");
    }
    let registered = r["registered_images"].as_u64().unwrap_or(0);
    assert!(registered >= MIN_REGISTERED, "{registered}/{FRAMES}: {r}");
    assert!(r["num_points"].as_u64() > Some(1000), "{r}");
    assert_a_straight_street(r);
}

/// `descl sfm -m descl-hynet-sdgm-real25all-b1024` (the default since 2026-11-26, night) on the
/// same street: with COLMAP's focal
/// prior (1229 px for a lens of about 750 px) the 1 px, 4 px and 8° runs all made no model, and
/// the command failed with exit status 1 (CI, 2026-11-26). The focal-prior fallback maps a copy
/// of the database whose cameras start from 0.85 · 1024 px and registers the street; the
/// database itself keeps COLMAP's prior.
#[test]
fn descl_sfm_maps_from_a_wide_focal_prior_when_colmaps_makes_no_model() {
    const TEST: &str = "sfm focal fallback";
    let Some((dir, db, r, stderr)) = sfm_lund(TEST, "descl-hynet-sdgm-real25all-b1024") else {
        return;
    };
    let r = &r;
    let registered = r["registered_images"].as_u64().unwrap_or(0);
    assert!(registered >= MIN_REGISTERED, "{registered}/{FRAMES}: {r}");
    assert_a_straight_street(r);
    let runs = r["mapper_runs"].as_array().unwrap();
    let kept: Vec<_> = runs.iter().filter(|a| a["kept"] == true).collect();
    assert_eq!(kept.len(), 1, "{r}");
    // Whichever run made it, every run before it made no model; a run from the wide prior
    // comes only after every run from the database's own.
    let first_wide = runs
        .iter()
        .position(|a| !a["focal_prior_factor"].is_null())
        .unwrap_or(runs.len());
    assert!(
        runs[first_wide..]
            .iter()
            .all(|a| a["focal_prior_factor"].as_f64() == Some(FALLBACK_FOCAL_PRIOR_FACTOR)),
        "{r}"
    );
    if first_wide < runs.len() {
        assert!(
            runs[..first_wide].iter().all(|a| a["registered"].is_null()),
            "{r}"
        );
        assert_eq!(
            r["focal_prior_factor"].as_f64(),
            Some(FALLBACK_FOCAL_PRIOR_FACTOR)
        );
        assert_eq!(r["fallback"].as_bool(), Some(true), "{r}");
        assert!(
            stderr.contains("focal length started from 0.85"),
            "{stderr}"
        );
    } else {
        eprintln!("{TEST}: a run from COLMAP's focal prior made the model; fallback not exercised");
    }
    // The database keeps COLMAP's prior, 1.2 · 1024 px.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let params: Vec<u8> = conn
        .query_row("SELECT params FROM cameras", [], |row| row.get(0))
        .unwrap();
    let focal = f64::from_le_bytes(params[..8].try_into().unwrap());
    assert_eq!(focal, descl::geometry::DEFAULT_FOCAL_FACTOR * 1024.0);
    // The copy it mapped from is gone with the staging folders.
    let sparse = dir.path().join("lund-sparse");
    let left: Vec<_> = std::fs::read_dir(&sparse)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A model folder left by an earlier run is refused before the mapper runs: the mapper numbers
/// its models from 0, and the largest model in the folder was read back as this run's (a
/// stale reconstruction with exit status 0). `descl sfm --overwrite` removes them first.
#[test]
fn the_mapper_refuses_a_folder_holding_an_earlier_runs_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sparse");
    std::fs::create_dir_all(out.join("0")).unwrap();
    std::fs::write(out.join("0").join("images.bin"), b"").unwrap();
    let options = descl::sfm::mapper::MapperOptions::default();
    let err = descl::sfm::mapper::run_mapper(&dir.path().join("p.db"), dir.path(), &out, &options)
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("earlier run"), "{msg}");
    assert!(msg.contains(&out.join("0").display().to_string()), "{msg}");
    // And through sfm::map: refused, not retried at the fallback angle.
    let err =
        descl::sfm::map(&dir.path().join("p.db"), dir.path(), &out, &options, false).unwrap_err();
    assert!(matches!(err, descl::Error::InvalidInput(_)), "{err}");
}

/// `descl sfm --reconstruct` into a sparse folder holding an earlier run's models: without
/// `--overwrite` the database is refused before any work; with it, the earlier models are
/// removed and this run's model is the one reported. A stale `7/` planted beside the first
/// run's `0/` stands for a model of other images that the mapper would not have written over;
/// before `--overwrite` removed old models, the mapper's runner refused it (or, before that
/// refusal, read the largest model in the folder as this run's).
#[test]
fn descl_sfm_overwrite_replaces_an_earlier_runs_models() {
    const TEST: &str = "sfm overwrite";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Four neighbouring fountain-P11 images and 1024 frames each: a small, quick model.
    let images = common::fountain_quartet(&root, dir.path());
    let db = dir.path().join("f.db");
    let sparse = dir.path().join("f-sparse");
    let sfm = |overwrite: bool| {
        let mut cmd = common::descl();
        cmd.arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args([
                "--single-camera",
                "--reconstruct",
                "--mapper",
                "colmap",
                "--json",
            ])
            .args(["--max-keypoints", "1024"]);
        if overwrite {
            cmd.arg("--overwrite");
        }
        common::run(&mut cmd)
    };
    let (ok, _, stderr) = sfm(false);
    assert!(ok, "first run failed:\n{stderr}");
    assert!(sparse.join("0").join("images.bin").is_file());
    let stale = sparse.join("7");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::copy(sparse.join("0/images.bin"), stale.join("images.bin")).unwrap();

    let (ok, _, stderr) = sfm(false);
    assert!(!ok, "a second run without --overwrite must be refused");
    assert!(stderr.contains("--overwrite"), "{stderr}");
    assert!(
        stale.join("images.bin").is_file(),
        "refused run removed files"
    );

    let (ok, stdout, stderr) = sfm(true);
    assert!(ok, "run with --overwrite failed:\n{stderr}");
    assert!(!stale.exists(), "the earlier run's model 7/ is still there");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let r = &out["reconstruction"];
    // This run's model, in the folder: not the stale 7/ (the mapper numbers from 0; which
    // number and how many images are the mapper's business, not this test's).
    let path = r["path"].as_str().map(std::path::PathBuf::from).unwrap();
    assert_eq!(path.parent(), Some(sparse.as_path()), "{r}");
    assert_ne!(path, stale, "{r}");
    assert!(r["registered_images"].as_u64() >= Some(3), "{r}");
}
