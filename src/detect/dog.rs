//! DoG keypoints from OpenCV's SIFT detector (Lowe 2004), their conversion to and from local
//! affine frames, and SIFT / RootSIFT descriptors on frames (the benchmark baselines).
//!
//! Frame convention (ARCHITECTURE.md "Conventions"): σ = size/2 and `a = m·σ·R(θ)` with
//! θ = `KeyPoint::angle` in degrees. OpenCV measures that angle in image coordinates (x right,
//! y down), i.e. it is the dominant gradient direction `atan2(∂I/∂y, ∂I/∂x)`, clockwise on
//! screen; `R(θ)` is the usual `[[cos θ, −sin θ], [sin θ, cos θ]]` in those coordinates, so the
//! patch's +u axis points along the dominant gradient.

use crate::error::{Error, Result};
use crate::frame::{Detection, Frame};
use crate::image::GrayImage;
use ndarray::Array2;
use opencv::core::{KeyPoint, Mat, Vector};
use opencv::prelude::*;
use std::collections::HashSet;

/// SIFT descriptor length (4×4 spatial bins × 8 orientations, Lowe 2004 §6.1).
pub const SIFT_DIM: usize = 128;
/// Lowe's scales per octave (OpenCV `nOctaveLayers`).
pub const SIFT_OCTAVE_LAYERS: i32 = 3;
/// Lowe's edge threshold r (principal-curvature ratio, Lowe 2004 §4.1).
pub const SIFT_EDGE_THRESHOLD: f64 = 10.0;
/// Lowe's base blur σ₀ of each octave.
pub const SIFT_SIGMA: f64 = 1.6;
/// Smallest side of the coarsest octave that a provided keypoint may be assigned to.
const MIN_OCTAVE_SIDE: f64 = 8.0;
/// How far OpenCV 4.6's SIFT positions sit right of and below descl's (the pixel centre at
/// integer coordinates, as hloc; COLMAP's files add ½). SIFT doubles the image for its first
/// octave (o = −1) with a centre-aligned bilinear resize, so doubled pixel i lies at
/// (i − ½)/2 of the input, but OpenCV maps positions back as i/2: +¼ px on both axes for every
/// keypoint of a doubled pyramid (the "upscale offset" OpenCV ≥ 4.8 removes with
/// `enable_precise_upscale`; VLFeat's, hence COLMAP's, doubling has none). Subtracted when
/// OpenCV's keypoints become frames ([`frame_from_keypoint`]) and added back when frames go to
/// OpenCV ([`keypoint_from_frame`]), so positions in descl's files follow their convention and
/// OpenCV still computes SIFT descriptors at the points it detected.
pub const OPENCV_SIFT_UPSCALE_OFFSET_PX: f32 = 0.25;

fn sift(contrast_threshold: f32) -> Result<opencv::core::Ptr<opencv::features2d::SIFT>> {
    Ok(opencv::features2d::SIFT::create(
        0,
        SIFT_OCTAVE_LAYERS,
        contrast_threshold as f64,
        SIFT_EDGE_THRESHOLD,
        SIFT_SIGMA,
    )?)
}

/// Runs OpenCV's SIFT detector and converts every keypoint to a [`Detection`] (score = SIFT
/// response). Exact duplicates (same x, y, size and angle) are dropped; the same point with
/// several orientations is kept, one frame per orientation. Unsorted.
pub fn detect_dog(
    img: &GrayImage,
    contrast_threshold: f32,
    magnification: f32,
) -> Result<Vec<Detection>> {
    let mat = img.to_mat_u8()?;
    let mut kps = Vector::<KeyPoint>::new();
    sift(contrast_threshold)?.detect(&mat, &mut kps, &opencv::core::no_array())?;
    let mut seen = HashSet::with_capacity(kps.len());
    let mut out = Vec::with_capacity(kps.len());
    for kp in kps.iter() {
        let p = kp.pt();
        let key = (
            p.x.to_bits(),
            p.y.to_bits(),
            kp.size().to_bits(),
            kp.angle().to_bits(),
        );
        if seen.insert(key) {
            out.push(Detection {
                frame: frame_from_keypoint(&kp, magnification),
                score: kp.response(),
            });
        }
    }
    Ok(out)
}

/// The frame of a keypoint of OpenCV's SIFT detector (a doubled pyramid): centre = `pt` less
/// [`OPENCV_SIFT_UPSCALE_OFFSET_PX`] on both axes, `a = m·(size/2)·R(angle)`.
pub fn frame_from_keypoint(kp: &KeyPoint, magnification: f32) -> Frame {
    let p = kp.pt();
    let s = magnification * kp.size() / 2.0;
    let (sin, cos) = kp.angle().to_radians().sin_cos();
    Frame {
        x: p.x - OPENCV_SIFT_UPSCALE_OFFSET_PX,
        y: p.y - OPENCV_SIFT_UPSCALE_OFFSET_PX,
        a: [[s * cos, -s * sin], [s * sin, s * cos]],
    }
}

/// The OpenCV keypoint of a frame (inverse of [`frame_from_keypoint`] for similarity frames):
/// position in OpenCV's doubled-pyramid convention (+[`OPENCV_SIFT_UPSCALE_OFFSET_PX`]),
/// size = 2·scale/m with scale = √|det a|, angle = direction of a's first column in degrees
/// [0, 360). The octave field is packed as SIFT would have for that size (octave, layer,
/// sub-layer offset), so OpenCV computes the descriptor at the right pyramid level.
/// An affine frame keeps only its scale and the direction of its u axis.
pub fn keypoint_from_frame(f: &Frame, magnification: f32) -> Result<KeyPoint> {
    let size = 2.0 * f.scale() / magnification;
    if !(size.is_finite() && size > 0.0 && f.x.is_finite() && f.y.is_finite()) {
        return Err(Error::InvalidInput(format!("degenerate frame {f:?}")));
    }
    let mut angle = f.a[1][0].atan2(f.a[0][0]).to_degrees();
    if angle < 0.0 {
        angle += 360.0;
    }
    if angle >= 360.0 {
        angle -= 360.0;
    }
    Ok(KeyPoint::new_coords(
        f.x + OPENCV_SIFT_UPSCALE_OFFSET_PX,
        f.y + OPENCV_SIFT_UPSCALE_OFFSET_PX,
        size,
        angle,
        0.0,
        pack_octave(size, i32::MAX),
        -1,
    )?)
}

/// SIFT's packed octave word for a keypoint of `size`: σ = size/2 = σ₀·2^(o + (layer+ξ)/S),
/// layer ∈ [1, S], ξ ∈ [−½, ½), o ≥ −1 (SIFT's doubled first octave) and o ≤ `max_octave`.
fn pack_octave(size: f32, max_octave: i32) -> i32 {
    let s_layers = SIFT_OCTAVE_LAYERS as f64;
    let t = ((size as f64 / 2.0) / SIFT_SIGMA).log2() * s_layers; // = S·o + layer + ξ
    let mut o = ((t - 0.5) / s_layers).floor() as i32;
    o = o.clamp(-1, max_octave.max(-1));
    let rem = t - s_layers * o as f64;
    let layer = (rem.round() as i32).clamp(1, SIFT_OCTAVE_LAYERS);
    let xi = (rem - layer as f64).clamp(-0.5, 0.5);
    let xi_code = ((xi + 0.5) * 255.0).round() as i32;
    (o & 255) | (layer << 8) | (xi_code << 16)
}

/// SIFT descriptors (OpenCV) at `frames`, L2-unit rows; with `root`, RootSIFT (Arandjelović &
/// Zisserman 2012): L1-normalise, element-wise square root (which is L2-unit). N×128; an empty
/// frame list gives 0×128. An all-zero descriptor (flat region) stays zero.
pub fn sift_descriptors(
    img: &GrayImage,
    frames: &[Frame],
    magnification: f32,
    root: bool,
) -> Result<Array2<f32>> {
    if frames.is_empty() {
        return Ok(Array2::zeros((0, SIFT_DIM)));
    }
    let max_octave = ((img.width.min(img.height) as f64 / MIN_OCTAVE_SIDE)
        .log2()
        .floor() as i32)
        .max(0);
    let mut kps = Vector::<KeyPoint>::with_capacity(frames.len());
    let mut packed = Vec::with_capacity(frames.len());
    for f in frames {
        let mut kp = keypoint_from_frame(f, magnification)?;
        kp.set_octave(pack_octave(kp.size(), max_octave));
        packed.push(kp);
    }
    // OpenCV doubles the image only when a keypoint lies in octave −1; without one its
    // positions carry no upscale offset.
    let doubled = packed.iter().any(|k| (k.octave() & 255) == 255);
    for mut kp in packed {
        if !doubled {
            let p = kp.pt();
            kp.set_pt(opencv::core::Point2f::new(
                p.x - OPENCV_SIFT_UPSCALE_OFFSET_PX,
                p.y - OPENCV_SIFT_UPSCALE_OFFSET_PX,
            ));
        }
        kps.push(kp);
    }
    let mat = img.to_mat_u8()?;
    let mut desc = Mat::default();
    sift(crate::detect::DEFAULT_CONTRAST_THRESHOLD)?.compute(&mat, &mut kps, &mut desc)?;
    if kps.len() != frames.len()
        || desc.rows() as usize != frames.len()
        || desc.cols() as usize != SIFT_DIM
    {
        return Err(Error::OpenCv(format!(
            "SIFT compute returned {}×{} descriptors for {} frames",
            desc.rows(),
            desc.cols(),
            frames.len()
        )));
    }
    let cont = if desc.is_continuous() {
        desc
    } else {
        desc.try_clone()?
    };
    let data = cont.data_typed::<f32>()?.to_vec();
    let mut out = Array2::from_shape_vec((frames.len(), SIFT_DIM), data)
        .map_err(|e| Error::OpenCv(format!("SIFT descriptor shape: {e}")))?;
    for mut row in out.rows_mut() {
        if root {
            let l1: f32 = row.iter().map(|v| v.abs()).sum();
            if l1 > 0.0 {
                row.mapv_inplace(|v| (v.abs() / l1).sqrt());
            }
        }
        let l2 = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        if l2 > 0.0 {
            row.mapv_inplace(|v| v / l2);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unpack(oct: i32) -> (i32, i32) {
        let o = oct & 255;
        let o = if o < 128 { o } else { -128 | o };
        (o, (oct >> 8) & 255)
    }

    #[test]
    fn pack_octave_inverts_sift_size_formula() {
        for o in -1..4 {
            for layer in 1..=3 {
                for xi in [-0.4f64, 0.0, 0.3] {
                    let sigma = SIFT_SIGMA * 2f64.powf(o as f64 + (layer as f64 + xi) / 3.0);
                    let packed = pack_octave((2.0 * sigma) as f32, 10);
                    assert_eq!(unpack(packed), (o, layer), "o={o} layer={layer} xi={xi}");
                }
            }
        }
    }

    #[test]
    fn frame_keypoint_round_trip() {
        for (size, angle) in [(3.2f32, 0.0f32), (10.0, 45.0), (25.5, 181.0), (7.0, 359.5)] {
            let kp = KeyPoint::new_coords(12.5, 40.25, size, angle, 0.1, 0, -1).unwrap();
            let f = frame_from_keypoint(&kp, 6.0);
            assert!((f.scale() - 3.0 * size).abs() < 1e-3);
            let back = keypoint_from_frame(&f, 6.0).unwrap();
            assert_eq!((back.pt().x, back.pt().y), (12.5, 40.25));
            assert!((back.size() - size).abs() < 1e-4 * size);
            let da = (back.angle() - angle).rem_euclid(360.0);
            assert!(da.min(360.0 - da) < 1e-3, "{angle} -> {}", back.angle());
        }
    }

    #[test]
    fn frame_axis_follows_angle_in_image_coordinates() {
        // 90° in OpenCV (y down) points the patch u axis straight down the image.
        let kp = KeyPoint::new_coords(0.0, 0.0, 2.0, 90.0, 0.0, 0, -1).unwrap();
        let f = frame_from_keypoint(&kp, 1.0);
        assert!(f.a[0][0].abs() < 1e-6 && (f.a[1][0] - 1.0).abs() < 1e-6);
    }
}
