//! `descl sfm`'s mapping (`sfm::map`): a first `colmap mapper` run at a 1 px filter, kept when
//! it registers every image, its points then triangulated again at COLMAP's 4 px with its
//! cameras held fixed (`run_point_triangulator`); a filter given is used as is. On four
//! fountain-P11 images (1024 DoG frames each, a model in seconds).

use descl::io::colmap_model::{
    model_folders, run_mapper, run_point_triangulator, MapperOptions,
    COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
};
use descl::sfm::{map, SFM_FIRST_FILTER_MAX_REPROJ_ERROR_PX};
use std::path::{Path, PathBuf};

mod common;

/// Four neighbouring fountain-P11 images and the database `descl sfm` writes for them.
fn small_database(root: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for name in ["0003.jpg", "0004.jpg", "0005.jpg", "0006.jpg"] {
        std::fs::copy(
            root.join("strecha/fountain-P11/images").join(name),
            images.join(name),
        )
        .unwrap();
    }
    let db = dir.join("f.db");
    let (ok, _, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args(["--single-camera", "--max-keypoints", "1024"]),
    );
    assert!(ok, "descl sfm failed:\n{stderr}");
    (db, images)
}

/// Entries of `dir` whose names start with a dot (descl's staging folders are hidden).
fn hidden(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn retriangulation_keeps_the_cameras_and_adds_points() {
    const TEST: &str = "sfm map retriangulation";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());
    let tight = MapperOptions {
        filter_max_reproj_error_px: Some(SFM_FIRST_FILTER_MAX_REPROJ_ERROR_PX),
        ..Default::default()
    };
    let mapped = run_mapper(&db, &images, &dir.path().join("tight"), &tight).unwrap();
    let again = run_point_triangulator(
        &db,
        &images,
        &mapped.path,
        &dir.path().join("again"),
        &MapperOptions::default(),
    )
    .unwrap();
    // The same images with the same poses, to the bit (COLMAP holds them constant)...
    assert_eq!(again.images.len(), mapped.images.len());
    for (a, b) in mapped.images.iter().zip(&again.images) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.qvec, b.qvec, "{}: rotation changed", a.name);
        assert_eq!(a.tvec, b.tvec, "{}: translation changed", a.name);
    }
    // ...and the observations 1-4 px off back in: more points than the 1 px model kept.
    assert!(
        again.num_points > mapped.num_points,
        "{} points after, {} before",
        again.num_points,
        mapped.num_points
    );
    // A folder holding a model is refused, not overwritten.
    let err = run_point_triangulator(
        &db,
        &images,
        &mapped.path,
        &dir.path().join("again"),
        &MapperOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("earlier run"), "{err}");
}

#[test]
fn map_keeps_a_complete_one_pixel_model_and_a_given_filter_is_used_as_is() {
    const TEST: &str = "sfm map";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());

    // A staging folder of a killed run is removed; no other hidden entry is left behind.
    let out = dir.path().join("sparse");
    let stale = out.join(".descl-tmp-map-killed");
    std::fs::create_dir_all(stale.join("0")).unwrap();
    std::fs::write(stale.join("0").join("images.bin"), b"").unwrap();
    let m = map(&db, &images, &out, &MapperOptions::default()).unwrap();
    assert!(
        !stale.exists(),
        "a killed run's staging folder is still there"
    );
    assert!(hidden(&out).is_empty(), "left behind: {:?}", hidden(&out));
    assert_eq!(m.database_images, 4);
    // All four images registered at 1 px: one mapper run, kept, its points triangulated again
    // at COLMAP's 4 px.
    assert_eq!(m.attempts.len(), 1, "{:?}", m.attempts);
    assert!(m.attempts[0].kept);
    assert_eq!(
        m.filter_max_reproj_error_px,
        SFM_FIRST_FILTER_MAX_REPROJ_ERROR_PX
    );
    assert_eq!(
        m.retriangulated_at_px,
        Some(COLMAP_FILTER_MAX_REPROJ_ERROR_PX)
    );
    assert_eq!(m.reconstruction.images.len(), 4);
    assert!(m.reconstruction.num_points >= m.attempts[0].num_points.unwrap());
    assert!(!m.angle_fallback());
    // The reported model is the one in the output folder.
    assert_eq!(m.reconstruction.path.parent(), Some(out.as_path()));
    assert!(model_folders(&out)
        .unwrap()
        .contains(&m.reconstruction.path));

    // `descl sfm evaluate` scores the folder's model against the scene's cameras with
    // sfm::evaluate: 4 of fountain-P11's 11 cameras, placed within 1 % of its extent.
    let fountain = root.join("strecha/fountain-P11");
    let (ok, stdout, stderr) = common::run(
        common::descl()
            .args(["sfm", "evaluate"])
            .arg(&out)
            .arg("--strecha")
            .arg(&fountain)
            .arg("--json"),
    );
    assert!(
        ok,
        "descl sfm evaluate failed:
{stderr}"
    );
    let scored: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let truth = descl::sfm::read_strecha_scene(&fountain).unwrap();
    let expected = descl::sfm::evaluate(&m.reconstruction, &truth).unwrap();
    assert_eq!(scored["registered"].as_u64(), Some(4), "{scored}");
    assert_eq!(scored["total"].as_u64(), Some(11), "{scored}");
    assert_eq!(
        scored["median_centre_error_rel"].as_f64(),
        Some(expected.median_centre_error_rel)
    );
    assert!(expected.median_centre_error_rel < 0.01, "{expected:?}");
    // A folder without a model is refused, naming it.
    let (ok, _, stderr) = common::run(
        common::descl()
            .args(["sfm", "evaluate"])
            .arg(dir.path())
            .arg("--strecha")
            .arg(&fountain),
    );
    assert!(!ok);
    assert!(
        stderr.contains(&dir.path().display().to_string()) && stderr.contains("no model"),
        "{stderr}"
    );

    // A filter given is used as is: one run at it, nothing triangulated again.
    let out4 = dir.path().join("sparse4");
    let given = MapperOptions {
        filter_max_reproj_error_px: Some(COLMAP_FILTER_MAX_REPROJ_ERROR_PX),
        ..Default::default()
    };
    let m4 = map(&db, &images, &out4, &given).unwrap();
    assert_eq!(m4.attempts.len(), 1);
    assert_eq!(
        m4.filter_max_reproj_error_px,
        COLMAP_FILTER_MAX_REPROJ_ERROR_PX
    );
    assert_eq!(m4.retriangulated_at_px, None);
    assert!(hidden(&out4).is_empty(), "left behind: {:?}", hidden(&out4));

    // A second map into a folder holding a model is refused before any mapper run.
    let err = map(&db, &images, &out, &MapperOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("earlier run"), "{err}");
}
