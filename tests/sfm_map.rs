//! `descl sfm`'s mapping (`sfm::map`): a `colmap mapper` run at COLMAP's 4 px filter, refined
//! at 1 px (`run_point_filtering`, `run_bundle_adjuster`), its points then triangulated again
//! at 4 px with its cameras held fixed (`run_point_triangulator`); a filter given is used as
//! is. On four fountain-P11 images (1024 DoG frames each, a model in seconds).

use descl::io::colmap_model::model_folders;
use descl::sfm::mapper::{
    run_bundle_adjuster, run_mapper, run_point_filtering, run_point_triangulator,
    BundleTermination, MapperKind as Mapper, MapperOptions, COLMAP_FILTER_MAX_REPROJ_ERROR_PX,
};
use descl::sfm::{
    map, FALLBACK_FOCAL_PRIOR_FACTOR, FALLBACK_INIT_MIN_TRI_ANGLE_DEG,
    SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX,
};
use std::path::{Path, PathBuf};

mod common;

/// Four neighbouring fountain-P11 images and the database `descl sfm` writes for them.
fn small_database(root: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let images = common::fountain_quartet(root, dir);
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

/// The refinement's three colmap steps on a 4 px model: the filter drops observations and
/// keeps the poses; the bundle adjustment moves the poses and keeps the points (the
/// triangulation after it: `retriangulation_keeps_the_cameras_and_adds_points`).
#[test]
fn refinement_steps_filter_adjust_and_triangulate_again() {
    const TEST: &str = "sfm map refinement";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());
    let mapped = run_mapper(
        &db,
        &images,
        &dir.path().join("m4"),
        &MapperOptions::default(),
    )
    .unwrap();
    let px = SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX;
    let filtered = run_point_filtering(&mapped.path, &dir.path().join("f"), px).unwrap();
    assert_eq!(filtered.images.len(), mapped.images.len());
    for (a, b) in mapped.images.iter().zip(&filtered.images) {
        assert_eq!(
            (a.qvec, a.tvec),
            (b.qvec, b.tvec),
            "{}: pose changed",
            a.name
        );
    }
    assert!(
        filtered.num_points < mapped.num_points,
        "{} points after the 1 px filter, {} before",
        filtered.num_points,
        mapped.num_points
    );
    assert!(filtered.mean_reprojection_error < mapped.mean_reprojection_error);
    assert!(filtered.mean_reprojection_error <= px);
    let adjusted = run_bundle_adjuster(
        &filtered.path,
        &dir.path().join("a"),
        &MapperOptions::default(),
    )
    .unwrap();
    // COLMAP's report says how the solver ended.
    assert_eq!(adjusted.termination, Some(BundleTermination::Convergence));
    let adjusted = adjusted.reconstruction;
    assert_eq!(adjusted.num_points, filtered.num_points);
    assert!(
        filtered
            .images
            .iter()
            .zip(&adjusted.images)
            .any(|(a, b)| a.tvec != b.tvec),
        "the bundle adjustment moved no camera"
    );
    // A folder holding a model is refused by each step, not overwritten.
    let err = run_point_filtering(&mapped.path, &dir.path().join("f"), px)
        .unwrap_err()
        .to_string();
    assert!(err.contains("earlier run"), "{err}");
    let err = run_bundle_adjuster(
        &filtered.path,
        &dir.path().join("a"),
        &MapperOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("earlier run"), "{err}");
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
        filter_max_reproj_error_px: Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX),
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
fn map_refines_its_four_pixel_model_and_a_given_filter_is_used_as_is() {
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
    // A file by that prefix too (it stopped the mapping with "Not a directory").
    std::fs::write(out.join(".descl-tmp-map-file"), b"").unwrap();
    let refined = MapperOptions {
        refine: true,
        ..Default::default()
    };
    let m = map(&db, &images, &out, &refined, false).unwrap();
    assert!(
        !stale.exists(),
        "a killed run's staging folder is still there"
    );
    assert!(hidden(&out).is_empty(), "left behind: {:?}", hidden(&out));
    assert_eq!(m.registrable_images, 4);
    // One mapper run at COLMAP's 4 px, kept, refined at 1 px (1536 px images: no scaling).
    assert_eq!(m.attempts.len(), 1, "{:?}", m.attempts);
    assert!(m.attempts[0].kept);
    assert_eq!(
        m.filter_max_reproj_error_px,
        COLMAP_FILTER_MAX_REPROJ_ERROR_PX
    );
    assert_eq!(m.refined_at_px, Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX));
    assert_eq!(m.refinement_error, None);
    assert_eq!(m.reconstruction.images.len(), 4);
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
    assert!(ok, "descl sfm evaluate failed:\n{stderr}");
    // Four of eleven cameras: said to be not comparable with a complete model's errors.
    assert!(stderr.contains("4 of the scene's 11 cameras"), "{stderr}");
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

    // A filter given is used as is, 1 px included: one run at it, nothing refined.
    let out1 = dir.path().join("sparse1");
    let given = MapperOptions {
        filter_max_reproj_error_px: Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX),
        ..Default::default()
    };
    let m1 = map(&db, &images, &out1, &given, false).unwrap();
    // Each model of the run is its mapper's own, none with an error.
    assert!(!m1.models.is_empty());
    for model in &m1.models {
        assert_eq!(
            (model.refined_at_px, &model.error),
            (None, &None),
            "{model:?}"
        );
        assert_eq!(model.bundle_adjustment, None);
    }
    assert_eq!(m1.attempts.len(), 1);
    assert_eq!(
        m1.filter_max_reproj_error_px,
        SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX
    );
    assert_eq!(m1.refined_at_px, None);
    assert_eq!(
        Some(m1.reconstruction.num_points),
        m1.attempts[0].num_points
    );
    assert!(hidden(&out1).is_empty(), "left behind: {:?}", hidden(&out1));

    // A second map into a folder holding a model is refused before any mapper run; with
    // overwrite the earlier model is replaced.
    let err = map(&db, &images, &out, &MapperOptions::default(), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("earlier run"), "{err}");
    let again = map(&db, &images, &out, &given, true).unwrap();
    assert_eq!(
        model_folders(&out).unwrap(),
        vec![again.reconstruction.path]
    );

    // A folder named as the mapper names its models, but not one, is refused before any
    // mapper run (it was found only when the kept model was moved in, after all the mapping).
    let taken = dir.path().join("sparse-taken");
    std::fs::create_dir_all(taken.join("0")).unwrap();
    std::fs::write(taken.join("0").join("notes.txt"), b"mine").unwrap();
    let err = map(&db, &images, &taken, &MapperOptions::default(), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&taken.join("0").display().to_string()),
        "{err}"
    );
    assert!(taken.join("0").join("notes.txt").is_file());
}

/// A `colmap` that behaves as COLMAP except in `mode`: `dropall` takes image 0006.jpg out of
/// every mapper run's models (`colmap image_deleter`), `trifail` makes `point_triangulator`
/// fail (the refinement's last step); `splitfail` adds a second, smaller model to each mapper
/// run (model 0 without 0006.jpg, as model 1) and makes `point_triangulator` fail on that one
/// only; `noconverge` stops `bundle_adjuster` after one iteration (COLMAP then reports "No
/// convergence").
fn faulty_colmap(dir: &Path, mode: &str) -> PathBuf {
    let script = dir.join(format!("colmap-{mode}"));
    let body = format!(
        r#"#!/usr/bin/env bash
mode={mode}
sub=$1; out=""; db=""; prev=""
for a in "$@"; do
  [ "$prev" = --output_path ] && out=$a
  [ "$prev" = --database_path ] && db=$a
  prev=$a
done
# nomodel: every mapper run fails to initialise; widefocal: all but those from the
# focal-prior fallback's copy of the database.
if [ "$sub" = mapper ] && {{ [ $mode = nomodel ] || {{ [ $mode = widefocal ] && [ "${{db##*/}}" != focal-prior.db ]; }}; }}; then
  echo "ERROR: failed to create sparse model" >&2; exit 1
fi
if [ "$sub" = point_triangulator ] && [ $mode = trifail ]; then
  echo "ERROR: simulated failure" >&2; exit 1
fi
if [ "$sub" = point_triangulator ] && [ $mode = splitfail ] && [ "${{out##*/}}" = 1 ]; then
  echo "ERROR: simulated failure of model 1" >&2; exit 1
fi
if [ "$sub" = mapper ] && [ $mode = splitfail ]; then
  colmap "$@" || exit $?
  cp -r "$out/0" "$out/1" || exit 1
  echo 0006.jpg > "$out/drop.txt"
  colmap image_deleter --input_path "$out/1" --output_path "$out/1" --image_names_path "$out/drop.txt" >/dev/null || exit 1
  rm "$out/drop.txt"; exit 0
fi
if [ "$sub" = bundle_adjuster ] && [ $mode = noconverge ]; then
  exec colmap "$@" --BundleAdjustment.max_num_iterations 1
fi
if [ "$sub" = mapper ] && [ $mode = dropall ]; then
  colmap "$@" || exit $?
  echo 0006.jpg > "$out/drop.txt"
  for m in "$out"/*/; do
    colmap image_deleter --input_path "$m" --output_path "$m" --image_names_path "$out/drop.txt" >/dev/null || exit 1
  done
  rm "$out/drop.txt"; exit 0
fi
exec colmap "$@"
"#
    );
    std::fs::write(&script, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// `descl sfm --reconstruct` through a faulty colmap: its JSON reconstruction and stderr.
fn sfm_with(images: &Path, dir: &Path, colmap: &Path) -> (serde_json::Value, String) {
    let db = dir.join(format!(
        "{}.db",
        colmap.file_name().unwrap().to_string_lossy()
    ));
    let (ok, stdout, stderr) = common::run(
        common::descl()
            .env("DESCL_COLMAP", colmap)
            .arg("sfm")
            .arg(images)
            .arg("--database")
            .arg(&db)
            .args(["--single-camera", "--max-keypoints", "1024"])
            .args(["--reconstruct", "--mapper", "colmap", "--refine", "--json"]),
    );
    assert!(ok, "descl sfm failed:\n{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // `seconds.stages`: each mapper run's own time, as the reconstruction lists the runs, and
    // the rest of the mapper stage as the refinement.
    let runs: Vec<f64> = out["reconstruction"]["mapper_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seconds"].as_f64().unwrap())
        .collect();
    let (seconds, stages) = (&out["seconds"], &out["seconds"]["stages"]);
    assert_eq!(stages["mapper_runs"], serde_json::json!(runs), "{seconds}");
    let rest = seconds["mapper"].as_f64().unwrap() - runs.iter().sum::<f64>();
    assert_eq!(
        stages["refinement"].as_f64(),
        Some(rest.max(0.0)),
        "{seconds}"
    );
    (out["reconstruction"].clone(), stderr)
}

#[test]
fn map_keeps_an_incomplete_model_and_survives_a_failed_refinement() {
    const TEST: &str = "sfm map choice";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, images) = small_database(&root, dir.path());

    // The mapper leaves an image out: its one run is kept (no fallback: it made a model) and
    // refined.
    let (r, _) = sfm_with(&images, dir.path(), &faulty_colmap(dir.path(), "dropall"));
    let runs = r["mapper_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{r}");
    assert_eq!(runs[0]["kept"].as_bool(), Some(true), "{r}");
    assert_eq!(r["registered_images"].as_u64(), Some(3), "{r}");
    assert_eq!(
        r["filter_max_reproj_error_px"].as_f64(),
        Some(COLMAP_FILTER_MAX_REPROJ_ERROR_PX)
    );
    assert_eq!(
        r["refined_at_filter_px"].as_f64(),
        Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX)
    );

    // The refinement's last step fails: the model is kept as the mapper made it, and the
    // failure is reported, naming the model folder.
    let (r, stderr) = sfm_with(&images, dir.path(), &faulty_colmap(dir.path(), "trifail"));
    assert_eq!(r["registered_images"].as_u64(), Some(4), "{r}");
    assert!(r["refined_at_filter_px"].is_null(), "{r}");
    let why = r["refinement_error"].as_str().unwrap_or_default();
    // Named by the model's folder in the output, not the staging folder that is gone.
    let model = r["path"].as_str().unwrap_or_default();
    assert!(
        why.contains("simulated failure") && why.starts_with(model),
        "{r}"
    );
    assert!(!why.contains(".descl-tmp-"), "{r}");
    assert_eq!(
        r["num_points"].as_u64(),
        r["mapper_runs"][0]["num_points"].as_u64()
    );
    assert!(
        stderr.contains("warning: the 4 px model is kept as the mapper made it"),
        "{stderr}"
    );
    // The one model's outcome says the same.
    let models = r["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{r}");
    assert_eq!(models[0]["largest"].as_bool(), Some(true), "{r}");
    assert!(models[0]["refined_at_px"].is_null(), "{r}");
    assert_eq!(models[0]["error"].as_str(), Some(why), "{r}");
    for sparse in ["colmap-dropall", "colmap-trifail"] {
        let folder = dir.path().join(format!("{sparse}-sparse"));
        assert!(
            hidden(&folder).is_empty(),
            "left behind: {:?}",
            hidden(&folder)
        );
    }
}

/// Each model of the kept run is refined on its own: a smaller model whose refinement fails
/// is kept as the mapper made it, and the largest (the one reported) is refined all the same
/// (a failure of any model threw away the refinement of all). The JSON says which models were
/// refined, and why one was not.
#[test]
fn a_smaller_models_failed_refinement_keeps_the_largest_refined() {
    const TEST: &str = "sfm map refinement per model";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, dir.path());
    let (r, stderr) = sfm_with(&images, dir.path(), &faulty_colmap(dir.path(), "splitfail"));
    assert_eq!(r["registered_images"].as_u64(), Some(4), "{r}");
    assert_eq!(
        r["refined_at_filter_px"].as_f64(),
        Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX),
        "{r}"
    );
    assert!(r["refinement_error"].is_null(), "{r}");
    let sparse = dir.path().join("colmap-splitfail-sparse");
    let models = r["models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{r}");
    let (largest, smaller) = (&models[0], &models[1]);
    assert_eq!(largest["path"].as_str(), r["path"].as_str(), "{r}");
    assert_eq!(largest["largest"].as_bool(), Some(true), "{r}");
    assert_eq!(
        largest["refined_at_px"].as_f64(),
        Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX)
    );
    assert!(largest["error"].is_null(), "{r}");
    assert_eq!(largest["bundle_adjustment"].as_str(), Some("convergence"));
    // The smaller model: the mapper's own, in the output folder, its failure named.
    let one = sparse.join("1");
    assert_eq!(smaller["path"].as_str(), Some(one.to_str().unwrap()), "{r}");
    assert_eq!(smaller["largest"].as_bool(), Some(false), "{r}");
    assert!(smaller["refined_at_px"].is_null(), "{r}");
    let why = smaller["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with(one.to_str().unwrap()) && why.contains("simulated failure of model 1"),
        "{r}"
    );
    assert_eq!(
        descl::io::colmap_model::read_model(&one)
            .unwrap()
            .images
            .len(),
        3
    );
    assert!(
        stderr.contains(&format!(
            "warning: the smaller model {} is kept",
            one.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("warning: the 4 px model"), "{stderr}");
    assert!(
        hidden(&sparse).is_empty(),
        "left behind: {:?}",
        hidden(&sparse)
    );
}

/// A refinement whose bundle adjustment stops before it converges still refines the model,
/// and says so (COLMAP's report: "Termination : No convergence").
#[test]
fn a_bundle_adjustment_that_does_not_converge_is_reported() {
    const TEST: &str = "sfm map refinement convergence";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, dir.path());
    let (r, stderr) = sfm_with(
        &images,
        dir.path(),
        &faulty_colmap(dir.path(), "noconverge"),
    );
    assert_eq!(
        r["refined_at_filter_px"].as_f64(),
        Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX),
        "{r}"
    );
    let models = r["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{r}");
    assert_eq!(
        models[0]["bundle_adjustment"].as_str(),
        Some("no_convergence"),
        "{r}"
    );
    assert!(
        stderr.contains("bundle adjustment did not converge"),
        "{stderr}"
    );
}

/// `descl sfm --reconstruct` checks its sparse folder before any extraction (it was checked
/// only after the database was built, which then had to be built again): a file there, an
/// earlier model without --overwrite, or a numbered folder that is no model (which
/// --overwrite does not remove: the earlier model beside it stays).
#[test]
fn descl_sfm_checks_the_sparse_folder_before_any_work() {
    const TEST: &str = "sfm sparse folder";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = common::fountain_quartet(&root, dir.path());
    let sfm = |sparse: &Path, overwrite: bool| {
        let db = dir.path().join("s.db");
        let mut cmd = common::descl();
        cmd.arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args(["--reconstruct", "--mapper", "colmap", "--sparse-dir"])
            .arg(sparse);
        if overwrite {
            cmd.arg("--overwrite");
        }
        let (ok, _, stderr) = common::run(&mut cmd);
        assert!(!ok, "descl sfm ran into {}", sparse.display());
        assert!(!db.exists(), "a database was built before the refusal");
        stderr
    };
    let file = dir.path().join("afile");
    std::fs::write(&file, b"x").unwrap();
    let err = sfm(&file, false);
    assert!(err.contains("not a folder"), "{err}");

    let sparse = dir.path().join("sparse");
    std::fs::create_dir_all(sparse.join("0")).unwrap();
    std::fs::write(sparse.join("0").join("images.bin"), b"").unwrap();
    let err = sfm(&sparse, false);
    assert!(
        err.contains("earlier run") && err.contains("--overwrite"),
        "{err}"
    );

    std::fs::create_dir_all(sparse.join("7")).unwrap();
    let err = sfm(&sparse, true);
    assert!(
        err.contains(&sparse.join("7").display().to_string()),
        "{err}"
    );
    assert!(err.contains("but not one"), "{err}");
    assert!(
        sparse.join("0").join("images.bin").is_file(),
        "model 0 was removed"
    );
}

/// The focal-prior fallback through a colmap whose mapper makes no model except from the
/// fallback's copy of the database: the runs in order (16°, 8°, then the copy at COLMAP's
/// angle), the copy's model kept and refined (triangulated from the copy), the user's database
/// keeping COLMAP's prior, no copy left; and with a mapper that never makes a model, every run
/// named in the error (four: the fallback's two angles included) and nothing left either.
#[test]
fn map_falls_back_to_a_wide_focal_prior_on_a_copy_of_the_database() {
    const TEST: &str = "sfm map focal fallback";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, images) = small_database(&root, dir.path());
    let colmap = faulty_colmap(dir.path(), "widefocal");
    let (r, stderr) = sfm_with(&images, dir.path(), &colmap);
    let runs = r["mapper_runs"].as_array().unwrap();
    let settings: Vec<_> = runs
        .iter()
        .map(|a| {
            (
                a["filter_max_reproj_error_px"].as_f64().unwrap(),
                a["init_min_tri_angle_deg"].as_f64().unwrap(),
                a["focal_prior_factor"].as_f64(),
                a["kept"].as_bool().unwrap(),
            )
        })
        .collect();
    let px4 = COLMAP_FILTER_MAX_REPROJ_ERROR_PX;
    let wide = Some(FALLBACK_FOCAL_PRIOR_FACTOR);
    assert_eq!(
        settings,
        [
            (px4, 16.0, None, false),
            (px4, FALLBACK_INIT_MIN_TRI_ANGLE_DEG, None, false),
            (px4, 16.0, wide, true),
        ],
        "{r}"
    );
    assert_eq!(r["registered_images"].as_u64(), Some(4), "{r}");
    assert_eq!(r["focal_prior_factor"].as_f64(), wide, "{r}");
    assert_eq!(r["fallback"].as_bool(), Some(true), "{r}");
    assert_eq!(r["angle_fallback"].as_bool(), Some(false), "{r}");
    assert_eq!(
        r["refined_at_filter_px"].as_f64(),
        Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX),
        "{r}"
    );
    assert!(
        stderr.contains("focal length started from 0.85"),
        "{stderr}"
    );
    // The user's database keeps COLMAP's prior; the model's camera is the mapper's refinement
    // from 0.85 · max(w, h), not 1.2 ·.
    let db = dir.path().join("colmap-widefocal.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (w, h, params): (u32, u32, Vec<u8>) = conn
        .query_row("SELECT width, height, params FROM cameras", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .unwrap();
    let focal = f64::from_le_bytes(params[..8].try_into().unwrap());
    assert_eq!(
        focal,
        descl::geometry::DEFAULT_FOCAL_FACTOR * w.max(h) as f64
    );
    let sparse = dir.path().join("colmap-widefocal-sparse");
    assert!(
        hidden(&sparse).is_empty(),
        "left behind: {:?}",
        hidden(&sparse)
    );

    // No run makes a model: all four named in the error, the database untouched, no copy left.
    let colmap = faulty_colmap(dir.path(), "nomodel");
    let db = dir.path().join("colmap-nomodel.db");
    let (ok, _, stderr) = common::run(
        common::descl()
            .env("DESCL_COLMAP", &colmap)
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(&db)
            .args([
                "--single-camera",
                "--max-keypoints",
                "1024",
                "--reconstruct",
                "--mapper",
                "colmap",
            ]),
    );
    assert!(!ok, "{stderr}");
    assert_eq!(
        stderr.matches("failed to create sparse model").count(),
        4,
        "{stderr}"
    );
    assert_eq!(stderr.matches("focal prior 0.85").count(), 2, "{stderr}");
    let sparse = dir.path().join("colmap-nomodel-sparse");
    assert!(
        hidden(&sparse).is_empty(),
        "left behind: {:?}",
        hidden(&sparse)
    );
    assert!(model_folders(&sparse).unwrap().is_empty());
}

/// The Python with pycolmap that `--mapper pycolmap` runs: `$DESCL_PYTHON` (scripts/test sets
/// it to .deps/pyenv's, which installs python/requirements-test.txt's pycolmap before the Rust
/// tests), None with a note when it cannot import pycolmap.
fn pycolmap_or_skip(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os(descl::sfm::mapper::pycolmap::PYTHON_ENV).map(PathBuf::from)?;
    let ok = std::process::Command::new(&python)
        .args(["-c", "import pycolmap"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "{test}: skipped, {} cannot import pycolmap",
            python.display()
        );
        return None;
    }
    Some(python)
}

/// Camera centres of `m` by image name.
fn centres(m: &descl::io::colmap_model::Reconstruction) -> Vec<(String, [f64; 3])> {
    let mut c: Vec<_> = m
        .images
        .iter()
        .map(|i| (i.name.clone(), i.centre()))
        .collect();
    c.sort_by(|a, b| a.0.cmp(&b.0));
    c
}

/// `map` with pycolmap's mapper on the fountain quartet: the whole pipeline as with colmap's
/// (one run at 4 px, kept, refined at 1 px with colmap's tools), the mapper and its version
/// reported, the cameras those of `colmap mapper`'s model of the same database (the
/// independent reference: same scene, another implementation) and of the scene's ground truth,
/// the user's database keeping COLMAP 3.8's schema (pycolmap maps a snapshot: it would add its
/// own tables) and
/// no snapshot left. A Python without pycolmap is refused by name before any run.
#[test]
fn pycolmap_maps_a_snapshot_and_agrees_with_colmaps_mapper() {
    const TEST: &str = "sfm map pycolmap";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let Some(_python) = pycolmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());
    let tables = |db: &Path| common::db_rows(db, "sqlite_master", "type, name");
    let before = tables(&db);
    let copy = dir.path().join("before.db");
    std::fs::copy(&db, &copy).unwrap();
    let options = MapperOptions {
        mapper: Mapper::Pycolmap,
        refine: true,
        ..Default::default()
    };
    let out = dir.path().join("py");
    let m = map(&db, &images, &out, &options, false).unwrap();
    assert!(m.mapper.starts_with("pycolmap "), "{}", m.mapper);
    assert_eq!(m.attempts.len(), 1, "{:?}", m.attempts);
    assert_eq!(m.attempts[0].mapper, Mapper::Pycolmap);
    assert_eq!(m.reconstruction.images.len(), 4);
    assert_eq!(m.refined_at_px, Some(SFM_REFINE_FILTER_MAX_REPROJ_ERROR_PX));
    assert_eq!(m.refinement_error, None);
    assert!(hidden(&out).is_empty(), "left behind: {:?}", hidden(&out));
    // pycolmap would have added its rigs and frames tables, which COLMAP 3.8 does not know.
    assert_eq!(tables(&db), before, "the database's schema changed");
    common::assert_same_databases(&copy, &db);

    // The same database through colmap mapper: the same four cameras, up to a similarity.
    let reference = map(
        &db,
        &images,
        &dir.path().join("c"),
        &MapperOptions::default(),
        false,
    )
    .unwrap();
    let (a, b) = (
        centres(&m.reconstruction),
        centres(&reference.reconstruction),
    );
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    let pa: Vec<[f64; 3]> = a.iter().map(|x| x.1).collect();
    let pb: Vec<[f64; 3]> = b.iter().map(|x| x.1).collect();
    let sim = descl::geometry::umeyama(&pa, &pb).unwrap();
    let dist = |p: [f64; 3], q: [f64; 3]| (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f64>().sqrt();
    let mut errors: Vec<f64> = pa
        .iter()
        .zip(&pb)
        .map(|(&p, &q)| dist(sim.apply(p), q))
        .collect();
    errors.sort_by(f64::total_cmp);
    let extent = pb
        .iter()
        .flat_map(|&p| pb.iter().map(move |&q| dist(p, q)))
        .fold(0.0, f64::max);
    assert!(
        errors[errors.len() / 2] < 0.005 * extent,
        "{errors:?} of {extent}"
    );
    // And the scene's ground truth, as `descl sfm evaluate` scores it.
    let truth = descl::sfm::read_strecha_scene(&root.join("strecha/fountain-P11")).unwrap();
    let scored = descl::sfm::evaluate(&m.reconstruction, &truth).unwrap();
    assert!(scored.median_centre_error_rel < 0.01, "{scored:?}");

    // A Python without pycolmap: refused naming it and pycolmap, before any mapper run.
    let fake = dir.path().join("python-without-pycolmap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'No module named pycolmap' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sparse = dir.path().join("nopy-sparse");
    let (ok, _, stderr) = common::run(
        common::descl()
            .env(descl::sfm::mapper::pycolmap::PYTHON_ENV, &fake)
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(dir.path().join("nopy.db"))
            .args([
                "--single-camera",
                "--max-keypoints",
                "1024",
                "--reconstruct",
            ])
            .args(["--mapper", "pycolmap", "--sparse-dir"])
            .arg(&sparse),
    );
    assert!(!ok);
    assert!(
        stderr.contains("cannot import pycolmap") && stderr.contains(&fake.display().to_string()),
        "{stderr}"
    );
    assert!(
        !dir.path().join("nopy.db").exists(),
        "a database was written"
    );
}

/// `descl sfm map DB --images IMAGES`, for more arguments.
fn sfm_map(db: &Path, images: &Path) -> std::process::Command {
    let mut c = common::descl();
    // COLMAP 3.8's mapper, which these tests were written against (the CLI's default is pycolmap's).
    c.args(["sfm", "map", "--mapper", "colmap"])
        .arg(db)
        .arg("--images")
        .arg(images);
    c
}

/// `descl sfm map DB --images DIR` maps a database as `descl sfm --reconstruct` does (a run at
/// COLMAP's 4 px) and reports it as `--json`'s `reconstruction`, with the mapper named;
/// a missing database, a file that is not one and a mapping flag without `--reconstruct` are
/// refused by name before any work.
#[test]
fn sfm_map_maps_an_existing_database() {
    const TEST: &str = "sfm map command";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());
    let sparse = dir.path().join("mapped");
    let (ok, stdout, stderr) = common::run(
        sfm_map(&db, &images)
            .arg("--sparse-dir")
            .arg(&sparse)
            .arg("--json"),
    );
    assert!(ok, "{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let r = &out["reconstruction"];
    assert_eq!(r["mapper"].as_str(), Some("colmap"), "{r}");
    assert_eq!(r["registered_images"].as_u64(), Some(4), "{r}");
    assert_eq!(r["total_images"].as_u64(), Some(4), "{r}");
    // Not refined: the default since 2026-11-28 (`--refine` refines).
    assert!(r["refined_at_filter_px"].is_null(), "{r}");
    assert_eq!(model_folders(&sparse).unwrap().len(), 1);
    // Again into the same folder: refused (its model is an earlier run's).
    let (ok, _, stderr) = common::run(sfm_map(&db, &images).arg("--sparse-dir").arg(&sparse));
    assert!(!ok && stderr.contains("earlier run"), "{stderr}");

    let missing = dir.path().join("missing.db");
    let (ok, _, stderr) = common::run(&mut sfm_map(&missing, &images));
    assert!(
        !ok && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );
    let not_db = dir.path().join("notes.db");
    std::fs::write(&not_db, b"not a database at all, just some words").unwrap();
    let (ok, _, stderr) = common::run(
        sfm_map(&not_db, &images)
            .arg("--sparse-dir")
            .arg(dir.path().join("never")),
    );
    assert!(
        !ok && stderr.contains(&not_db.display().to_string()),
        "{stderr}"
    );
    assert!(!dir.path().join("never").join("0").exists());

    // An image folder without the database's images (the points would be coloured from
    // whatever is there, exit 0): refused naming an image, before the sparse folder is made.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let (ok, _, stderr) = common::run(
        sfm_map(&db, &elsewhere)
            .arg("--sparse-dir")
            .arg(dir.path().join("never2")),
    );
    assert!(
        !ok && stderr.contains(".jpg") && stderr.contains(&elsewhere.display().to_string()),
        "{stderr}"
    );
    assert!(!dir.path().join("never2").exists());
    // A database inside the earlier model --overwrite would remove: refused, both kept (the
    // model folder and the database in it were removed, then the mapping failed).
    let inside = sparse.join("0").join("inside.db");
    std::fs::copy(&db, &inside).unwrap();
    let (ok, _, stderr) = common::run(
        sfm_map(&inside, &images)
            .arg("--sparse-dir")
            .arg(&sparse)
            .arg("--overwrite"),
    );
    assert!(
        !ok && stderr.contains("--overwrite would remove"),
        "{stderr}"
    );
    assert!(inside.is_file() && sparse.join("0").join("images.bin").is_file());
    // A Python that is not there: named with DESCL_PYTHON, nothing made; the default mapper
    // is pycolmap's, and its refusal names both ways out.
    let without_python = |extra: &[&str], sparse: &str| {
        common::run(
            common::descl()
                .args(["sfm", "map"])
                .arg(&db)
                .arg("--images")
                .arg(&images)
                .env(
                    descl::sfm::mapper::pycolmap::PYTHON_ENV,
                    dir.path().join("no-python"),
                )
                .args(extra)
                .arg("--sparse-dir")
                .arg(dir.path().join(sparse)),
        )
    };
    let (ok, _, stderr) = without_python(&["--mapper", "pycolmap"], "never3");
    assert!(
        !ok && stderr.contains("DESCL_PYTHON") && stderr.contains("no-python"),
        "{stderr}"
    );
    let (ok, _, stderr) = without_python(&[], "never4");
    assert!(
        !ok && stderr.contains("pip install pycolmap") && stderr.contains("--mapper colmap"),
        "{stderr}"
    );
    assert!(!dir.path().join("never3").exists() && !dir.path().join("never4").exists());
    // A seed neither mapper takes (COLMAP's and pycolmap's are 32-bit signed).
    let (ok, _, stderr) = common::run(sfm_map(&db, &images).args(["--random-seed", "2147483648"]));
    assert!(!ok && stderr.contains("--random-seed"), "{stderr}");
    let (ok, _, stderr) = common::run(
        common::descl()
            .arg("sfm")
            .arg(&images)
            .arg("--database")
            .arg(dir.path().join("flag.db"))
            .args(["--mapper", "pycolmap"]),
    );
    assert!(
        !ok && stderr.contains("--mapper") && stderr.contains("--reconstruct"),
        "{stderr}"
    );
    assert!(!dir.path().join("flag.db").exists());
}

/// `map` with pycolmap's global mapper (`--mapper pycolmap-global`) on the fountain quartet:
/// every image registered, the mapper named with its version in the report and in the run's
/// record, and no snapshot left.
#[test]
fn pycolmap_global_mapper_registers_the_quartet_and_is_named() {
    const TEST: &str = "sfm map pycolmap-global";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let Some(_python) = pycolmap_or_skip(TEST) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, images) = small_database(&root, dir.path());
    let options = MapperOptions {
        mapper: Mapper::PycolmapGlobal,
        ..Default::default()
    };
    let out = dir.path().join("global");
    let m = map(&db, &images, &out, &options, false).unwrap();
    assert!(m.mapper.starts_with("pycolmap-global "), "{}", m.mapper);
    assert_eq!(m.attempts[0].mapper, Mapper::PycolmapGlobal);
    assert!(m.attempts[0].kept, "{:?}", m.attempts);
    assert_eq!(m.reconstruction.images.len(), 4, "{:?}", m.attempts);
    assert!(m.reconstruction.num_points > 0);
    assert!(hidden(&out).is_empty(), "left behind: {:?}", hidden(&out));
}
