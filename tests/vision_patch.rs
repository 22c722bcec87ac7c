//! Patch sampler against OpenCV `warpAffine` on the same frames, and on an Oxford pair a patch at
//! a ground-truth correspondence resembles its partner far more than other patches.

mod vision_common;

use descl::detect::{detect, DetectorConfig};
use descl::frame::Frame;
use descl::image::load_gray;
use descl::patch::{PatchSampler, PATCH_SIZE};
use opencv::core::{Mat, Scalar, Size};
use opencv::prelude::*;

/// OpenCV reference patch: the inverse map of warpAffine sends patch pixel (j, i) to
/// (x, y) + a·(u, v) with u = (2j+1)/32 − 1 = j/16 + 1/32 − 1 (same for v).
fn opencv_patch(src: &Mat, f: &Frame) -> Vec<f32> {
    let c = 1.0 / PATCH_SIZE as f32 - 1.0;
    let s = 2.0 / PATCH_SIZE as f32;
    let m = Mat::from_slice_2d(&[
        [
            (f.a[0][0] * s) as f64,
            (f.a[0][1] * s) as f64,
            (f.x + (f.a[0][0] + f.a[0][1]) * c) as f64,
        ],
        [
            (f.a[1][0] * s) as f64,
            (f.a[1][1] * s) as f64,
            (f.y + (f.a[1][0] + f.a[1][1]) * c) as f64,
        ],
    ])
    .unwrap();
    let mut dst = Mat::default();
    opencv::imgproc::warp_affine(
        src,
        &mut dst,
        &m,
        Size::new(PATCH_SIZE as i32, PATCH_SIZE as i32),
        opencv::imgproc::INTER_LINEAR | opencv::imgproc::WARP_INVERSE_MAP,
        opencv::core::BORDER_REPLICATE,
        Scalar::all(0.0),
    )
    .unwrap();
    dst.data_typed::<f32>().unwrap().to_vec()
}

#[test]
fn level0_patches_match_opencv_warp_affine() {
    let Some(root) = vision_common::data_root("vision_patch") else {
        return;
    };
    let img = load_gray(&root.join("oxford/boat/img1.png")).unwrap();
    let sampler = PatchSampler::new(&img);
    let src = img.to_mat_f32().unwrap();
    // DoG frames small enough for level 0, plus anisotropic/sheared frames and border frames.
    let mut frames: Vec<Frame> = detect(&img, &DetectorConfig::default())
        .unwrap()
        .into_iter()
        .map(|d| d.frame)
        .filter(|f| sampler.level_for(f) == 0)
        .take(300)
        .collect();
    assert!(frames.len() > 100);
    frames.push(Frame {
        x: 200.3,
        y: 150.7,
        a: [[14.0, 3.0], [-2.0, 6.5]],
    });
    frames.push(Frame {
        x: 2.0,
        y: 3.0,
        a: [[10.0, 0.0], [0.0, 10.0]],
    }); // crosses the border
    frames.push(Frame {
        x: img.width as f32 - 1.5,
        y: 40.0,
        a: [[-8.0, 5.0], [5.0, 8.0]],
    });
    let patches = sampler.sample(&frames);
    let (mut maxd, mut sum, mut signed, mut n) = (0.0f32, 0.0f64, 0.0f64, 0usize);
    for (k, f) in frames.iter().enumerate() {
        assert_eq!(sampler.level_for(f), 0);
        let cv = opencv_patch(&src, f);
        for (a, b) in patches.slice(ndarray::s![k, .., ..]).iter().zip(&cv) {
            maxd = maxd.max((a - b).abs());
            sum += (a - b).abs() as f64;
            signed += (a - b) as f64;
            n += 1;
        }
    }
    let mean = sum / n as f64;
    let bias = signed / n as f64;
    eprintln!("patch vs warpAffine over {} frames: max |diff| {maxd:.5}, mean |diff| {mean:.6}, mean diff {bias:.2e}", frames.len());
    // OpenCV quantises sample positions to 1/32 px (INTER_BITS = 5), an error of up to 1/64 px
    // times the local gradient, zero on average: small differences, no bias (a grid offset of
    // even 1/10 px would show as a large mean and bias).
    assert!(maxd < 0.02 && mean < 2.5e-3, "max {maxd} mean {mean}");
    assert!(bias.abs() < 2e-4, "bias {bias}");
    assert!(patches.iter().all(|&v| (0.0..=1.0).contains(&v)));
}

fn normalised(p: ndarray::ArrayView2<f32>) -> Vec<f32> {
    let n = p.len() as f32;
    let mean = p.sum() / n;
    let sd = (p.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n)
        .sqrt()
        .max(1e-6);
    p.iter().map(|v| (v - mean) / sd).collect()
}

fn dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f32>()
        .sqrt()
}

#[test]
fn ground_truth_correspondences_give_similar_patches_on_graf() {
    let Some((p1, p2)) = vision_common::graf_correspondence_patches("vision_patch") else {
        return;
    };
    let n = p1.shape()[0];
    let n1: Vec<_> = p1.outer_iter().map(normalised).collect();
    let n2: Vec<_> = p2.outer_iter().map(normalised).collect();
    let mut pos = Vec::new();
    let mut neg = Vec::new();
    let mut wins = 0;
    for i in 0..n {
        let dp = dist(&n1[i], &n2[i]);
        let j = vision_common::unrelated_index(i, n);
        let dn = dist(&n1[i], &n2[j]);
        pos.push(dp);
        neg.push(dn);
        wins += (dp < dn) as usize;
    }
    pos.sort_by(f32::total_cmp);
    neg.sort_by(f32::total_cmp);
    let (mp, mn) = (pos[n / 2], neg[n / 2]);
    let win = wins as f32 / n as f32;
    eprintln!("graf 1→2, {n} correspondences: median normalised L2 positive {mp:.2}, negative {mn:.2}, positive closer in {:.1}%", 100.0 * win);
    // Unrelated normalised 32×32 patches sit near √(2·1024) ≈ 45.
    assert!(mp < 0.6 * mn, "positive {mp} vs negative {mn}");
    assert!(win > 0.9, "{win}");
}
