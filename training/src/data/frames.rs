//! DoG frames and their patches for the track generator.
//!
//! TEMPORARY BRIDGE until `descl::detect` and `descl::patch::PatchSampler` land on main: OpenCV
//! SIFT keypoints → frames (A = m·σ·R(angle), σ = size/2, DESIGN) and bilinear 32×32 patches
//! from the pyramid level that keeps the sampling step ≤ 1 px.

use anyhow::Result;
use descl::frame::Frame;
use descl::image::GrayImage;
use opencv::core::{KeyPoint, Mat, Vector};
use opencv::prelude::*;

use super::{PATCH_PIXELS, PATCH_SIDE};

/// DoG frames of `img`, strongest `max_keypoints` first.
pub fn detect(img: &GrayImage, max_keypoints: usize, magnification: f64) -> Result<Vec<Frame>> {
    let bytes: Vec<u8> = img
        .data
        .iter()
        .map(|&v| (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8)
        .collect();
    let m =
        Mat::new_rows_cols_with_data(img.height as i32, img.width as i32, &bytes)?.try_clone()?;
    let mut sift = opencv::features2d::SIFT::create(0, 3, 0.04, 10.0, 1.6)?;
    let mut kps = Vector::<KeyPoint>::new();
    sift.detect(&m, &mut kps, &Mat::default())?;
    let mut kps: Vec<KeyPoint> = kps.to_vec();
    kps.sort_by(|a, b| b.response().total_cmp(&a.response()));
    kps.truncate(max_keypoints);
    Ok(kps
        .iter()
        .map(|k| {
            let r = magnification as f32 * k.size() / 2.0;
            let (s, c) = k.angle().to_radians().sin_cos();
            Frame {
                x: k.pt().x,
                y: k.pt().y,
                a: [[r * c, -r * s], [r * s, r * c]],
            }
        })
        .collect())
}

/// Image pyramid: level l is level l−1 blurred and halved (OpenCV pyrDown).
fn pyramid(img: &GrayImage, levels: usize) -> Result<Vec<GrayImage>> {
    let mut out = vec![img.clone()];
    while out.len() < levels {
        let Some(last) = out.last() else { break };
        if last.width < 16 || last.height < 16 {
            break;
        }
        let m = Mat::new_rows_cols_with_data(last.height as i32, last.width as i32, &last.data)?
            .try_clone()?;
        let mut down = Mat::default();
        opencv::imgproc::pyr_down_def(&m, &mut down)?;
        let data = down.data_typed::<f32>()?.to_vec();
        out.push(GrayImage {
            width: down.cols() as usize,
            height: down.rows() as usize,
            data,
        });
    }
    Ok(out)
}

fn bilinear(img: &GrayImage, x: f32, y: f32) -> f32 {
    let xc = x.clamp(0.0, (img.width - 1) as f32);
    let yc = y.clamp(0.0, (img.height - 1) as f32);
    let (x0, y0) = (xc.floor() as usize, yc.floor() as usize);
    let (x1, y1) = ((x0 + 1).min(img.width - 1), (y0 + 1).min(img.height - 1));
    let (fx, fy) = (xc - x0 as f32, yc - y0 as f32);
    let at = |x: usize, y: usize| img.data[y * img.width + x];
    let top = at(x0, y0) + fx * (at(x1, y0) - at(x0, y0));
    let bot = at(x0, y1) + fx * (at(x1, y1) - at(x0, y1));
    top + fy * (bot - top)
}

/// 32×32 patches of `frames` (N·1024 floats): patch pixel (i, j) samples the image at
/// (x, y) + A·(u_j, u_i), u_k = (2k + 1)/32 − 1.
pub fn sample(img: &GrayImage, frames: &[Frame]) -> Result<Vec<f32>> {
    let pyr = pyramid(img, 8)?;
    let mut out = Vec::with_capacity(frames.len() * PATCH_PIXELS);
    let n = PATCH_SIDE as f32;
    for f in frames {
        let step = 2.0 * f.scale() / n;
        let level = (step.max(1.0).log2().floor() as usize).min(pyr.len() - 1);
        let k = (1usize << level) as f32;
        let im = &pyr[level];
        for i in 0..PATCH_SIDE {
            let v = (2.0 * i as f32 + 1.0) / n - 1.0;
            for j in 0..PATCH_SIDE {
                let u = (2.0 * j as f32 + 1.0) / n - 1.0;
                let x = f.x + f.a[0][0] * u + f.a[0][1] * v;
                let y = f.y + f.a[1][0] * u + f.a[1][1] * v;
                out.push(bilinear(im, (x + 0.5) / k - 0.5, (y + 0.5) / k - 0.5));
            }
        }
    }
    Ok(out)
}

/// Loads a photo as gray [0, 1] (bridge for `descl::image::load_gray`).
pub fn load_gray(path: &std::path::Path) -> Result<GrayImage> {
    let p = path
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("{}: non-UTF-8 path", path.display()))?;
    let m = opencv::imgcodecs::imread(p, opencv::imgcodecs::IMREAD_GRAYSCALE)?;
    if m.empty() {
        anyhow::bail!("{}: cannot decode image", path.display());
    }
    let data = m
        .data_typed::<u8>()?
        .iter()
        .map(|&b| b as f32 / 255.0)
        .collect();
    Ok(GrayImage {
        width: m.cols() as usize,
        height: m.rows() as usize,
        data,
    })
}
