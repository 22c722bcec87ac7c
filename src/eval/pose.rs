//! Relative pose on image sets with known cameras (Strecha et al. 2008 `.camera` files, read by
//! [`crate::io::strecha`]): ground truth relative poses, the pose error of SuperGlue's
//! evaluation and the pair list.

use crate::error::{Error, Result};
use crate::eval::sequences::Mat3;
use crate::geometry::{mul3, transpose3};
use std::path::{Path, PathBuf};

/// Largest index gap of the evaluated pairs i < j (j − i ≤ 2).
pub const MAX_PAIR_GAP: usize = 2;

pub use crate::io::strecha::{read_camera, Camera};

fn mul_vec(a: &Mat3, v: &[f64; 3]) -> [f64; 3] {
    [0, 1, 2].map(|i| (0..3).map(|k| a[i][k] * v[k]).sum())
}

/// Ground-truth relative pose (R, t) taking camera-`a` coordinates to camera-`b` coordinates,
/// x_b = R·x_a + t: with world-to-camera Rᵀ, R = R_bᵀ R_a and t = R_bᵀ (C_a − C_b).
pub fn relative_pose(a: &Camera, b: &Camera) -> (Mat3, [f64; 3]) {
    let rbt = transpose3(&b.r);
    let r = mul3(&rbt, &a.r);
    let d = [a.c[0] - b.c[0], a.c[1] - b.c[1], a.c[2] - b.c[2]];
    (r, mul_vec(&rbt, &d))
}

/// Angle (degrees) of the rotation R_estᵀ·R_gt.
pub fn rotation_error_deg(r_est: &Mat3, r_gt: &Mat3) -> f64 {
    let m = mul3(&transpose3(r_est), r_gt);
    let cos = ((m[0][0] + m[1][1] + m[2][2] - 1.0) / 2.0).clamp(-1.0, 1.0);
    cos.acos().to_degrees()
}

/// Angle (degrees) between translation directions, folded to [0, 90°] as SuperGlue's
/// `compute_pose_error` does (`min(e, 180 − e)`: the essential matrix leaves the sign of t open).
pub fn translation_error_deg(t_est: &[f64; 3], t_gt: &[f64; 3]) -> f64 {
    let n1 = t_est.iter().map(|v| v * v).sum::<f64>().sqrt();
    let n2 = t_gt.iter().map(|v| v * v).sum::<f64>().sqrt();
    if n1 < f64::EPSILON || n2 < f64::EPSILON {
        return 90.0;
    }
    let cos =
        (t_est.iter().zip(t_gt).map(|(a, b)| a * b).sum::<f64>() / (n1 * n2)).clamp(-1.0, 1.0);
    let e = cos.acos().to_degrees();
    e.min(180.0 - e)
}

/// Pose error of a pair: max(rotation error, translation direction error), degrees.
pub fn pose_error_deg(r_est: &Mat3, t_est: &[f64; 3], r_gt: &Mat3, t_gt: &[f64; 3]) -> f64 {
    rotation_error_deg(r_est, r_gt).max(translation_error_deg(t_est, t_gt))
}

/// One image set: images (sorted by name) and their cameras (`cameras/<image file>.camera`).
#[derive(Debug, Clone)]
pub struct PoseScene {
    pub name: String,
    pub images: Vec<PathBuf>,
    pub cameras: Vec<Camera>,
}

/// Loads a Strecha set: `<dir>/images/*.jpg|png` with `<dir>/cameras/<file name>.camera`.
pub fn load_scene(dir: &Path) -> Result<PoseScene> {
    let img_dir = dir.join("images");
    let rd = std::fs::read_dir(&img_dir).map_err(|e| Error::io(&img_dir, e))?;
    let mut images: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .map(|e| {
                    matches!(
                        e.to_string_lossy().to_lowercase().as_str(),
                        "jpg" | "jpeg" | "png" | "ppm"
                    )
                })
                .unwrap_or(false)
        })
        .collect();
    images.sort();
    if images.len() < 2 {
        return Err(Error::format(
            &img_dir,
            "a pose scene needs at least two images",
        ));
    }
    let cameras = images
        .iter()
        .map(|p| {
            let file = p
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let camera_file = crate::io::strecha::camera_path(dir, &file);
            let camera = read_camera(&camera_file)?;
            // K is in the pixels of the camera file's image size: images of another size
            // (resized copies) scored 0.0 against it with exit 0 (issue 55).
            let got = ::image::image_dimensions(p).map_err(|e| Error::Image {
                path: p.clone(),
                reason: e.to_string(),
            })?;
            if got != (camera.width, camera.height) {
                return Err(Error::InvalidInput(format!(
                    "{}: {}×{} pixels, but its ground-truth camera {} is for a {}×{} image (K is in that image's pixels); give the images the cameras were calibrated for",
                    p.display(),
                    got.0,
                    got.1,
                    camera_file.display(),
                    camera.width,
                    camera.height
                )));
            }
            Ok(camera)
        })
        .collect::<Result<_>>()?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    Ok(PoseScene {
        name,
        images,
        cameras,
    })
}

/// The evaluated pairs (i, j): i < j ≤ i + [`MAX_PAIR_GAP`].
pub fn pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|i| (i + 1..n.min(i + MAX_PAIR_GAP + 1)).map(move |j| (i, j)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rot_z(deg: f64) -> Mat3 {
        let (s, c) = deg.to_radians().sin_cos();
        [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
    }

    #[test]
    fn relative_pose_maps_points_between_cameras() {
        let k = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let a = Camera {
            k,
            r: rot_z(10.0),
            c: [1.0, 2.0, 3.0],
            width: 10,
            height: 10,
        };
        let b = Camera {
            k,
            r: rot_z(-25.0),
            c: [-1.0, 0.5, 2.0],
            width: 10,
            height: 10,
        };
        let x = [0.3, -2.0, 7.0];
        // Camera coordinates: x_cam = Rᵀ (X − C).
        let to_cam = |cam: &Camera| {
            mul_vec(
                &transpose3(&cam.r),
                &[x[0] - cam.c[0], x[1] - cam.c[1], x[2] - cam.c[2]],
            )
        };
        let (xa, xb) = (to_cam(&a), to_cam(&b));
        let (r, t) = relative_pose(&a, &b);
        let pred = mul_vec(&r, &xa);
        for i in 0..3 {
            assert!((pred[i] + t[i] - xb[i]).abs() < 1e-12);
        }
        // R = R_bᵀ R_a = Rz(25°)·Rz(10°) = Rz(35°).
        assert!(rotation_error_deg(&r, &rot_z(35.0)) < 1e-6);
    }

    #[test]
    fn errors_by_hand() {
        assert!((rotation_error_deg(&rot_z(0.0), &rot_z(30.0)) - 30.0).abs() < 1e-9);
        assert!((translation_error_deg(&[1.0, 0.0, 0.0], &[1.0, 1.0, 0.0]) - 45.0).abs() < 1e-9);
        // Opposite direction folds to 0.
        assert!(translation_error_deg(&[1.0, 0.0, 0.0], &[-2.0, 0.0, 0.0]) < 1e-9);
        assert!(
            (pose_error_deg(&rot_z(5.0), &[1.0, 0.0, 0.0], &rot_z(0.0), &[1.0, 1.0, 0.0]) - 45.0)
                .abs()
                < 1e-9
        );
        assert_eq!(pairs(4), vec![(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]);
    }
}
