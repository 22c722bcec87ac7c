//! Covariance evidence for Harris-Affine beside DoG: repeatability (ellipse overlap error
//! < 40 %, Mikolajczyk 2005) on a real photo warped by a known affine map, and on Oxford graf 1→2.

mod vision_common;

use descl::detect::{detect, DetectorConfig, DetectorKind};
use descl::eval::overlap::{repeatability, Homography, DEFAULT_OVERLAP_THRESHOLD};
use descl::frame::Frame;
use descl::image::{load_gray, GrayImage};
use opencv::core::{Mat, Scalar, Size};
use std::time::Instant;

const TOP_K: usize = 1000;

fn frames(img: &GrayImage, kind: DetectorKind) -> Vec<Frame> {
    let cfg = DetectorConfig {
        kind,
        max_keypoints: TOP_K,
        ..Default::default()
    };
    let t = Instant::now();
    let d = detect(img, &cfg).unwrap();
    eprintln!(
        "  {kind}: {} frames on {}×{} in {:.2?}",
        d.len(),
        img.width,
        img.height,
        t.elapsed()
    );
    assert!(d.windows(2).all(|w| w[0].score >= w[1].score));
    d.into_iter().map(|d| d.frame).collect()
}

fn rep(img1: &GrayImage, img2: &GrayImage, h: &Homography, kind: DetectorKind) -> f64 {
    let (f1, f2) = (frames(img1, kind), frames(img2, kind));
    let r = repeatability(
        &f1,
        &f2,
        h,
        (img1.width, img1.height),
        (img2.width, img2.height),
        DEFAULT_OVERLAP_THRESHOLD,
    )
    .unwrap();
    eprintln!(
        "  {kind}: repeatability {:.1} % ({} correspondences, n1 {}, n2 {})",
        100.0 * r.repeatability,
        r.correspondences,
        r.n1,
        r.n2
    );
    r.repeatability
}

#[test]
fn harris_affine_is_covariant_under_a_known_affine_warp() {
    let Some(root) = vision_common::data_root("vision_harris_affine") else {
        return;
    };
    let full = load_gray(&root.join("train/lightglue/dsc_0410.jpg")).unwrap();
    let (w, h) = (480, 360);
    let data = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .map(|(x, y)| full.get(x + 250, y + 150))
        .collect();
    let img1 = GrayImage::from_vec(w, h, data).unwrap();
    // A = R(30°)·diag(1.2, 0.8)·R(−15°): rotation plus anisotropic scaling (tilt ≈ 1.5).
    let rot = |d: f64| {
        let (s, c) = d.to_radians().sin_cos();
        [[c, -s], [s, c]]
    };
    let m = |a: [[f64; 2]; 2], b: [[f64; 2]; 2]| {
        [
            [
                a[0][0] * b[0][0] + a[0][1] * b[1][0],
                a[0][0] * b[0][1] + a[0][1] * b[1][1],
            ],
            [
                a[1][0] * b[0][0] + a[1][1] * b[1][0],
                a[1][0] * b[0][1] + a[1][1] * b[1][1],
            ],
        ]
    };
    let a = m(m(rot(30.0), [[1.2, 0.0], [0.0, 0.8]]), rot(-15.0));
    // translate so the warped image's bounding box starts at 0
    let corners = [
        (0.0, 0.0),
        (w as f64, 0.0),
        (0.0, h as f64),
        (w as f64, h as f64),
    ];
    let xs: Vec<f64> = corners
        .iter()
        .map(|&(x, y)| a[0][0] * x + a[0][1] * y)
        .collect();
    let ys: Vec<f64> = corners
        .iter()
        .map(|&(x, y)| a[1][0] * x + a[1][1] * y)
        .collect();
    let (minx, maxx) = (
        xs.iter().cloned().fold(f64::MAX, f64::min),
        xs.iter().cloned().fold(f64::MIN, f64::max),
    );
    let (miny, maxy) = (
        ys.iter().cloned().fold(f64::MAX, f64::min),
        ys.iter().cloned().fold(f64::MIN, f64::max),
    );
    let hmat: Homography = [
        [a[0][0], a[0][1], -minx],
        [a[1][0], a[1][1], -miny],
        [0.0, 0.0, 1.0],
    ];
    let (w2, h2) = ((maxx - minx).ceil() as i32, (maxy - miny).ceil() as i32);
    let mm = Mat::from_slice_2d(&[hmat[0], hmat[1]]).unwrap();
    let src = img1.to_mat_f32().unwrap();
    let mut dst = Mat::default();
    opencv::imgproc::warp_affine(
        &src,
        &mut dst,
        &mm,
        Size::new(w2, h2),
        opencv::imgproc::INTER_LINEAR,
        opencv::core::BORDER_CONSTANT,
        Scalar::all(0.5),
    )
    .unwrap();
    let img2 = GrayImage::from_mat_f32(&dst).unwrap();
    eprintln!("affine warp (rotation 30°, scales 1.2/0.8, 480×360 crop of dsc_0410):");
    let ha = rep(&img1, &img2, &hmat, DetectorKind::HarrisAffine);
    let dog = rep(&img1, &img2, &hmat, DetectorKind::Dog);
    assert!(ha > 0.3, "Harris-Affine repeatability {ha}");
    assert!(dog > 0.3, "DoG repeatability {dog}");
}

#[test]
fn oxford_graf_repeatability_beside_dog() {
    let Some(root) = vision_common::data_root("vision_harris_affine") else {
        return;
    };
    let dir = root.join("oxford/graf");
    let img1 = load_gray(&dir.join("img1.png")).unwrap();
    let mut results = Vec::new();
    for k in [2, 5] {
        let imgk = load_gray(&dir.join(format!("img{k}.png"))).unwrap();
        let h = vision_common::read_homography(&dir.join(format!("H1to{k}p")));
        eprintln!("Oxford graf 1→{k} (top {TOP_K}):");
        let ha = rep(&img1, &imgk, &h, DetectorKind::HarrisAffine);
        let dog = rep(&img1, &imgk, &h, DetectorKind::Dog);
        results.push((ha, dog));
    }
    let ((ha2, dog2), (ha5, dog5)) = (results[0], results[1]);
    assert!(
        ha2 > 0.3 && dog2 > 0.3,
        "graf 1→2: Harris-Affine {ha2}, DoG {dog2}"
    );
    // At 50° viewpoint change circles no longer fit the mapped regions; affine-adapted ones do.
    assert!(
        ha5 > 0.08 && ha5 > dog5 + 0.05,
        "graf 1→5: Harris-Affine {ha5}, DoG {dog5}"
    );
}

/// The whole graf sequence (slow in debug builds; run with `--ignored` for reports).
#[test]
#[ignore]
fn oxford_graf_sequence_repeatability() {
    let Some(root) = vision_common::data_root("vision_harris_affine") else {
        return;
    };
    let dir = root.join("oxford/graf");
    let img1 = load_gray(&dir.join("img1.png")).unwrap();
    for k in 2..=6 {
        let imgk = load_gray(&dir.join(format!("img{k}.png"))).unwrap();
        let h = vision_common::read_homography(&dir.join(format!("H1to{k}p")));
        eprintln!("Oxford graf 1→{k} (top {TOP_K}):");
        let ha = rep(&img1, &imgk, &h, DetectorKind::HarrisAffine);
        let dog = rep(&img1, &imgk, &h, DetectorKind::Dog);
        assert!((0.0..=1.0).contains(&ha) && (0.0..=1.0).contains(&dog));
    }
}
