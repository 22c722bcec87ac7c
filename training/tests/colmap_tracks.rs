//! Real tracks from a reconstruction: a database, a binary sparse model and images written by the
//! test (COLMAP's documented binary layout), then `data::colmap::generate`. Each kept class must
//! hold exactly the patches `PatchSampler` cuts at each view's stored frame rescaled to the
//! wanted magnification; points with a high error or too few distinct images are left out.

use descl::frame::Frame;
use descl::image::load_gray;
use descl::io::colmap::{CameraModel, Database};
use descl::patch::PatchSampler;
use descl_training::data::colmap::{generate, ColmapTracksConfig};
use descl_training::data::PATCH_PIXELS;
use std::path::Path;

const W: usize = 80;
const H: usize = 60;

/// A textured 8-bit PGM (binary P5).
fn write_pgm(path: &Path, seed: u32) {
    let mut bytes = format!("P5\n{W} {H}\n255\n").into_bytes();
    for y in 0..H {
        for x in 0..W {
            let v = ((x as f32 * (0.3 + 0.05 * seed as f32)).sin()
                * (y as f32 * 0.21 + seed as f32).cos()
                * 100.0
                + 128.0) as u8;
            bytes.push(v);
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// A 3-D point of the test model: id, mean reprojection error, track of (image_id, point2D_idx).
type TestPoint = (u64, f64, Vec<(u32, u32)>);

/// points3D.bin in COLMAP's binary layout.
fn write_points(path: &Path, points: &[TestPoint]) {
    let mut b = Vec::new();
    b.extend((points.len() as u64).to_le_bytes());
    for (id, error, track) in points {
        b.extend(id.to_le_bytes());
        for v in [1.0f64, 2.0, 3.0] {
            b.extend(v.to_le_bytes());
        }
        b.extend([10u8, 20, 30]);
        b.extend(error.to_le_bytes());
        b.extend((track.len() as u64).to_le_bytes());
        for (image, idx) in track {
            b.extend(image.to_le_bytes());
            b.extend(idx.to_le_bytes());
        }
    }
    std::fs::write(path, b).unwrap();
}

fn frame(x: f32, y: f32, s: f32, angle: f32) -> Frame {
    let (c, n) = (angle.cos() * s, angle.sin() * s);
    Frame {
        x,
        y,
        a: [[c, -n], [n, c]],
    }
}

fn setup(dir: &Path) -> (ColmapTracksConfig, Vec<Vec<Frame>>) {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let db_path = dir.join("scene.db");
    let db = Database::create(&db_path, false).unwrap();
    let cam = db
        .add_camera(
            CameraModel::SimplePinhole,
            W as u32,
            H as u32,
            &[70.0, 40.0, 30.0],
            false,
        )
        .unwrap();
    let mut all = Vec::new();
    for i in 0..3u32 {
        let name = format!("img{i}.pgm");
        write_pgm(&images.join(&name), i);
        let frames: Vec<Frame> = (0..4)
            .map(|k| {
                frame(
                    15.0 + 12.0 * k as f32 + i as f32,
                    20.0 + 5.0 * k as f32,
                    6.0 * (1.5 + k as f32 * 0.5),
                    0.3 * k as f32 + 0.1 * i as f32,
                )
            })
            .collect();
        let id = db.add_image(&name, cam).unwrap();
        assert_eq!(id, i as i64 + 1);
        db.add_keypoints(id, &frames).unwrap();
        all.push(frames);
    }
    db.finish().unwrap();
    let sparse = dir.join("sparse");
    std::fs::create_dir_all(&sparse).unwrap();
    write_points(
        &sparse.join("points3D.bin"),
        &[
            (1, 0.5, vec![(1, 0), (2, 1), (3, 2)]),
            (2, 2.0, vec![(1, 1), (2, 2), (3, 3)]),
            (3, 0.3, vec![(1, 1), (1, 2), (2, 0)]),
            (4, 0.2, vec![(1, 3), (2, 3), (3, 3), (3, 1)]),
        ],
    );
    let cfg = ColmapTracksConfig {
        sparse,
        database: db_path,
        images,
        views: 3,
        max_reprojection_error: 1.0,
        stored_magnification: 6.0,
        magnification: 12.0,
        seed: 7,
        jitter: None,
    };
    (cfg, all)
}

/// The u8 patch the generator must store for `frame` of image `i` at twice its magnification.
fn expected(cfg: &ColmapTracksConfig, i: usize, f: Frame) -> Vec<u8> {
    let img = load_gray(&cfg.images.join(format!("img{i}.pgm"))).unwrap();
    let scaled = Frame {
        a: f.a.map(|r| r.map(|v| v * 2.0)),
        ..f
    };
    PatchSampler::new(&img)
        .sample(&[scaled])
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect()
}

#[test]
fn classes_hold_each_views_own_frame_and_bad_points_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, frames) = setup(dir.path());
    let set = generate(&cfg).unwrap();
    // Point 2: error 2 px; point 3: two distinct images only. Points 1 and 4 stay.
    assert_eq!(set.header.classes, 2);
    assert_eq!(set.header.views, 3);
    assert_eq!(set.header.magnification, 12.0);
    let stats = &set.header.source["stats"];
    assert_eq!(
        (stats["high_error"].as_u64(), stats["short"].as_u64()),
        (Some(1), Some(1))
    );
    for (class, track) in [[(0, 0), (1, 1), (2, 2)], [(0, 3), (1, 3), (2, 3)]]
        .iter()
        .enumerate()
    {
        let mut want: Vec<Vec<u8>> = track
            .iter()
            .map(|&(i, k)| expected(&cfg, i, frames[i][k]))
            .collect();
        let mut got: Vec<Vec<u8>> = (0..3).map(|v| set.patch(class, v).to_vec()).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "class {class}");
        assert_eq!(got[0].len(), PATCH_PIXELS);
    }
    // Views of a point differ (different images and frames): no view was duplicated.
    assert_ne!(set.patch(0, 0), set.patch(0, 1));
}

#[test]
fn a_track_pointing_past_the_keypoints_is_an_error_naming_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(dir.path());
    write_points(
        &cfg.sparse.join("points3D.bin"),
        &[(9, 0.1, vec![(1, 0), (2, 40), (3, 1)])],
    );
    let err = format!("{:#}", generate(&cfg).unwrap_err());
    assert!(
        err.contains("sparse") && err.contains("keypoint 40"),
        "{err}"
    );
    write_points(
        &cfg.sparse.join("points3D.bin"),
        &[(9, 0.1, vec![(1, 0), (7, 0), (3, 1)])],
    );
    let err = format!("{:#}", generate(&cfg).unwrap_err());
    assert!(err.contains("image 7"), "{err}");
}
