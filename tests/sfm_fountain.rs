//! End-to-end: `descl sfm`'s library path on Strecha fountain-P11 (11 images, ground truth),
//! reconstructed by the real `colmap mapper`, aligned to the ground truth; and COLMAP's own SIFT
//! pipeline on the same images, printed side by side.

use descl::detect::DetectorConfig;
use descl::io::colmap_model::Reconstruction;
use descl::sfm::mapper::{run_colmap, run_mapper, MapperOptions};
use descl::sfm::{
    build_database, evaluate, read_strecha_camera, GroundTruthCamera, SfmAccuracy, SfmConfig,
};
use std::path::Path;

mod common;

/// Keypoints per image: keeps the test at a few minutes on 2 cores in a debug build.
const MAX_KEYPOINTS: usize = 2048;

fn ground_truth(dir: &Path) -> Vec<GroundTruthCamera> {
    (0..11)
        .map(|i| {
            let name = format!("{i:04}.jpg");
            read_strecha_camera(&dir.join("cameras").join(format!("{name}.camera")), &name).unwrap()
        })
        .collect()
}

fn colmap_sift(images: &Path, work: &Path) -> Reconstruction {
    descl::eval::reconstruction::colmap_sift_pipeline(
        images,
        work,
        MAX_KEYPOINTS,
        true,
        &mapper_options(),
    )
    .unwrap()
}

/// Same mapper settings for both pipelines. The principal point is refined: fountain-P11's is
/// (760.3, 503.4) against the image centre (768, 512), ~0.5° of rotation bias if held fixed.
fn mapper_options() -> MapperOptions {
    MapperOptions {
        mapper: Default::default(),
        refine: false,
        num_threads: None,
        refine_principal_point: true,
        init_min_tri_angle_deg: None,
        filter_max_reproj_error_px: None,
        random_seed: None,
        hold_intrinsics: false,
    }
}

fn row(label: &str, a: &SfmAccuracy) -> String {
    format!(
        "{label:<28} {:>2}/{:<2} {:>10.3} {:>12.4} {:>10.3} {:>8}",
        a.registered,
        a.total,
        a.median_rotation_error_deg,
        a.median_centre_error_rel * 100.0,
        a.mean_reprojection_error,
        a.num_points
    )
}

/// A 3-D point as compared: id, mean reprojection error, track of (image_id, point2D_idx).
type PointRow = (u64, f64, Vec<(u32, u32)>);

/// `read_points` against COLMAP's own reading of the model: `colmap model_converter` to text,
/// then every point's id, error and track compared.
fn points_agree_with_colmaps_text_export(model: &Path, work: &Path) {
    let txt = work.join("model-txt");
    std::fs::create_dir_all(&txt).unwrap();
    run_colmap(&[
        "model_converter".as_ref(),
        "--input_path".as_ref(),
        model.as_os_str(),
        "--output_path".as_ref(),
        txt.as_os_str(),
        "--output_type".as_ref(),
        "TXT".as_ref(),
    ])
    .unwrap();
    let text = std::fs::read_to_string(txt.join("points3D.txt")).unwrap();
    let mut theirs: Vec<PointRow> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            // POINT3D_ID X Y Z R G B ERROR TRACK[] as (IMAGE_ID, POINT2D_IDX)
            let f: Vec<&str> = l.split_whitespace().collect();
            let track = f[8..]
                .chunks(2)
                .map(|c| (c[0].parse().unwrap(), c[1].parse().unwrap()))
                .collect();
            (f[0].parse().unwrap(), f[7].parse().unwrap(), track)
        })
        .collect();
    let mut ours: Vec<_> = descl::io::colmap_model::read_points(model)
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.error, p.track))
        .collect();
    theirs.sort_by_key(|p| p.0);
    ours.sort_by_key(|p| p.0);
    assert!(!ours.is_empty());
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!((a.0, &a.2), (b.0, &b.2));
        // The text export prints the error with limited precision.
        assert!((a.1 - b.1).abs() <= 1e-5 * b.1.max(1.0), "{a:?} vs {b:?}");
    }
}

#[test]
fn fountain_p11_reconstructs_accurately_and_compares_with_colmap_sift() {
    const TEST: &str = "fountain-P11 sfm";
    let Some(root) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let dir = root.join("strecha").join("fountain-P11");
    let images = dir.join("images");
    let truth = ground_truth(&dir);
    let work = tempfile::tempdir().unwrap();

    let db = work.path().join("descl.db");
    let cfg = SfmConfig {
        single_camera: true,
        ..Default::default()
    };
    // descl with `descl sfm`'s shipped default model (committed in models/).
    let extractor = descl::pipeline::Extractor::new(descl::pipeline::ExtractorConfig {
        model: descl::model::DEFAULT_MODEL.into(),
        device: descl::model::Device::Cpu,
        detector: DetectorConfig {
            max_keypoints: MAX_KEYPOINTS,
            ..Default::default()
        },
        max_image_size: descl::pipeline::COLMAP_MAX_IMAGE_SIZE,
    })
    .unwrap();
    let label = format!("descl ({})", extractor.describer().provenance());
    let extract = |p: &Path| extractor.extract(p);
    let summary = build_database(
        &images,
        &db,
        false,
        &cfg,
        &extract,
        &descl::progress::Silent,
    )
    .unwrap();
    eprintln!(
        "descl database: {} images, {} pairs, {} verified, mean {:.0} matches / {:.0} inliers per pair",
        summary.images.len(),
        summary.pairs,
        summary.verified_pairs,
        summary.mean_matches,
        summary.mean_inliers
    );
    // The database exists now: writing it again without overwrite is refused.
    assert!(build_database(
        &images,
        &db,
        false,
        &cfg,
        &extract,
        &descl::progress::Silent
    )
    .unwrap_err()
    .to_string()
    .contains("--overwrite"));
    let ours = run_mapper(
        &db,
        &images,
        &work.path().join("descl-sparse"),
        &mapper_options(),
    )
    .unwrap();
    points_agree_with_colmaps_text_export(&ours.path, work.path());
    let ours = evaluate(&ours, &truth).unwrap();

    let theirs = colmap_sift(&images, work.path());
    let theirs = evaluate(&theirs, &truth).unwrap();
    eprintln!(
        "{:<28} {:>5} {:>10} {:>12} {:>10} {:>8}",
        "fountain-P11", "reg", "rot° med", "centre % med", "reproj px", "points"
    );
    eprintln!("{}", row(&label, &ours));
    eprintln!("{}", row("COLMAP SIFT (CPU)", &theirs));

    assert_eq!(ours.registered, 11, "{ours:?}");
    assert!(ours.median_rotation_error_deg <= 0.5, "{ours:?}");
    assert!(ours.median_centre_error_rel <= 0.01, "{ours:?}");
}
