//! Helpers shared by the vision tests: data lookup (skip or fail in CI), homographies.
#![allow(dead_code)]

use descl::frame::Frame;

#[path = "../common/mod.rs"]
mod common;

/// `../shared/data`, or None (with a message) on a checkout without it; panics under `CI`.
pub use common::data_root_or_skip as data_root;
/// Whether ONNX Runtime is installed (skip, or fail under `CI`).
#[allow(unused_imports)]
pub use common::ort_or_skip;

/// Reads a 3×3 homography text file (Oxford `H1to2p`, HPatches `H_1_2`), normalised to h33 = 1.
pub fn read_homography(path: &std::path::Path) -> [[f64; 3]; 3] {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(v.len(), 9, "{}", path.display());
    let mut h = [[0.0; 3]; 3];
    for i in 0..9 {
        h[i / 3][i % 3] = v[i] / v[8];
    }
    h
}

/// Maps a point through `h`.
pub fn map_point(h: &[[f64; 3]; 3], x: f64, y: f64) -> (f64, f64) {
    let w = h[2][0] * x + h[2][1] * y + h[2][2];
    (
        (h[0][0] * x + h[0][1] * y + h[0][2]) / w,
        (h[1][0] * x + h[1][1] * y + h[1][2]) / w,
    )
}

/// Maps a frame through `h`: centre by `h`, shape by the local affine Jacobian of `h` there.
pub fn map_frame(h: &[[f64; 3]; 3], f: &Frame) -> Frame {
    let (x, y) = (f.x as f64, f.y as f64);
    let w = h[2][0] * x + h[2][1] * y + h[2][2];
    let (u, v) = map_point(h, x, y);
    let j = [
        [(h[0][0] - u * h[2][0]) / w, (h[0][1] - u * h[2][1]) / w],
        [(h[1][0] - v * h[2][0]) / w, (h[1][1] - v * h[2][1]) / w],
    ];
    let a = f.a.map(|r| r.map(|e| e as f64));
    let m = |r: usize, c: usize| (j[r][0] * a[0][c] + j[r][1] * a[1][c]) as f32;
    Frame {
        x: u as f32,
        y: v as f32,
        a: [[m(0, 0), m(0, 1)], [m(1, 0), m(1, 1)]],
    }
}

/// Patches at ground-truth correspondences of Oxford graf 1→2: the strongest 600 DoG frames of
/// image 1 and their images under H1to2p, kept where the mapped frame is 40 px inside image 2.
/// Row i of both arrays shows the same surface; None without the shared data.
pub fn graf_correspondence_patches(
    test: &str,
) -> Option<(ndarray::Array3<f32>, ndarray::Array3<f32>)> {
    use descl::detect::{detect, DetectorConfig};
    use descl::patch::PatchSampler;
    let root = data_root(test)?;
    let dir = root.join("oxford/graf");
    let img1 = descl::image::load_gray(&dir.join("img1.png")).unwrap();
    let img2 = descl::image::load_gray(&dir.join("img2.png")).unwrap();
    let h = read_homography(&dir.join("H1to2p"));
    let cfg = DetectorConfig {
        max_keypoints: 600,
        ..Default::default()
    };
    let margin = 40.0;
    let (f1, f2): (Vec<Frame>, Vec<Frame>) = detect(&img1, &cfg)
        .unwrap()
        .into_iter()
        .map(|d| (d.frame, map_frame(&h, &d.frame)))
        .filter(|(_, g)| {
            g.x > margin
                && g.y > margin
                && g.x < img2.width as f32 - margin
                && g.y < img2.height as f32 - margin
        })
        .unzip();
    assert!(f1.len() > 200, "{}", f1.len());
    Some((
        PatchSampler::new(&img1).sample(&f1),
        PatchSampler::new(&img2).sample(&f2),
    ))
}

/// A fixed "random" partner j ≠ i among n (n ≥ 2) for patch i: the negative of pair tests.
pub fn unrelated_index(i: usize, n: usize) -> usize {
    let j = (i * 7919 + 13) % n;
    if j == i {
        (j + 1) % n
    } else {
        j
    }
}
