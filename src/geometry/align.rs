//! Similarity alignment of two 3-D point sets (Umeyama) and the angle between rotations: what
//! `sfm` needs to compare a reconstruction with ground-truth cameras, whose frame and scale are
//! arbitrary. Separate from RANSAC: no matches, no image coordinates, only 3-D points.

use super::linalg::{mul3, transpose3, Mat3};
use crate::error::{Error, Result};
use opencv::core::Mat;
use opencv::prelude::*;
use serde::Serialize;

/// A similarity transform y = s·R·x + t.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Similarity {
    pub scale: f64,
    pub r: [[f64; 3]; 3],
    pub t: [f64; 3],
}

impl Similarity {
    pub fn apply(&self, x: [f64; 3]) -> [f64; 3] {
        [0, 1, 2].map(|i| self.scale * (0..3).map(|k| self.r[i][k] * x[k]).sum::<f64>() + self.t[i])
    }
}

/// Least-squares similarity mapping `src` onto `dst` (Umeyama 1991, "Least-squares estimation
/// of transformation parameters between two point patterns", eqs. 40–42): with Σ the
/// cross-covariance of the centred points and U D Vᵀ its SVD, R = U S Vᵀ (S fixes a
/// reflection), s = tr(D S) / σ²_src, t = μ_dst − s R μ_src.
pub fn umeyama(src: &[[f64; 3]], dst: &[[f64; 3]]) -> Result<Similarity> {
    let n = src.len();
    if n < 3 || n != dst.len() {
        return Err(Error::InvalidInput(format!(
            "similarity alignment needs ≥ 3 point pairs, got {n} and {}",
            dst.len()
        )));
    }
    let mean = |p: &[[f64; 3]]| [0, 1, 2].map(|k| p.iter().map(|q| q[k]).sum::<f64>() / n as f64);
    let (ms, md) = (mean(src), mean(dst));
    let mut cov = [[0.0f64; 3]; 3];
    let mut var_src = 0.0;
    for (a, b) in src.iter().zip(dst) {
        for i in 0..3 {
            for j in 0..3 {
                cov[i][j] += (b[i] - md[i]) * (a[j] - ms[j]) / n as f64;
            }
            var_src += (a[i] - ms[i]).powi(2) / n as f64;
        }
    }
    if var_src <= 0.0 {
        return Err(Error::InvalidInput(
            "similarity alignment: source points coincide".into(),
        ));
    }
    let (uu, d, vv) = svd3(&cov)?;
    let (r, sdiag) = nearest_rotation(&uu, &vv);
    let scale = (0..3).map(|k| d[k] * sdiag[k]).sum::<f64>() / var_src;
    let t = [0, 1, 2].map(|i| md[i] - scale * (0..3).map(|k| r[i][k] * ms[k]).sum::<f64>());
    Ok(Similarity { scale, r, t })
}

/// The 3×3 SVD of `m` by OpenCV: (U, singular values in descending order, Vᵀ).
fn svd3(m: &Mat3) -> Result<(Mat3, [f64; 3], Mat3)> {
    let flat: Vec<f64> = m.iter().flatten().copied().collect();
    let mat = Mat::new_rows_cols_with_data(3, 3, &flat)?;
    let (mut w, mut u, mut vt) = (Mat::default(), Mat::default(), Mat::default());
    opencv::core::SVD::compute_ext(&mat, &mut w, &mut u, &mut vt, 0)?;
    let (mut uu, mut vv, mut d) = ([[0.0; 3]; 3], [[0.0; 3]; 3], [0.0; 3]);
    for i in 0..3 {
        d[i] = *w.at::<f64>(i as i32)?;
        for j in 0..3 {
            uu[i][j] = *u.at_2d::<f64>(i as i32, j as i32)?;
            vv[i][j] = *vt.at_2d::<f64>(i as i32, j as i32)?;
        }
    }
    Ok((uu, d, vv))
}

/// The rotation U·S·Vᵀ of an SVD U·D·Vᵀ, S = diag(1, 1, ±1) turning a reflection into a
/// rotation (Umeyama's eq. 39), with S's diagonal.
fn nearest_rotation(u: &Mat3, vt: &Mat3) -> (Mat3, [f64; 3]) {
    let sign = if det3(u) * det3(vt) < 0.0 { -1.0 } else { 1.0 };
    let sdiag = [1.0, 1.0, sign];
    let r = [0, 1, 2]
        .map(|i| [0, 1, 2].map(|j| (0..3).map(|k| u[i][k] * sdiag[k] * vt[k][j]).sum::<f64>()));
    (r, sdiag)
}

fn det3(a: &[[f64; 3]; 3]) -> f64 {
    a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
}

/// The variances of `points` along their principal axes, largest first (the singular values
/// of their scatter matrix over n): one large and two near 0 for points on a line.
pub fn principal_variances(points: &[[f64; 3]]) -> Result<[f64; 3]> {
    let n = points.len().max(1) as f64;
    let mean = [0, 1, 2].map(|k| points.iter().map(|q| q[k]).sum::<f64>() / n);
    let mut scatter = [[0.0f64; 3]; 3];
    for p in points {
        for i in 0..3 {
            for j in 0..3 {
                scatter[i][j] += (p[i] - mean[i]) * (p[j] - mean[j]) / n;
            }
        }
    }
    Ok(svd3(&scatter)?.1)
}

/// How far (degrees) a camera's own answer to the alignment's rotation may lie from the
/// majority's to count in its mean ([`similarity_from_rotations`]): ten times the rotation
/// errors of the models descl keeps (well under 1°), far under a camera turned the wrong way.
pub const ORIENTATION_INLIER_DEG: f64 = 10.0;

/// The rotation R of the gauge taking the cameras of world-to-camera rotations `r_src` onto
/// those of `r_dst` (aligned, R_src,i · Rᵀ ≈ R_dst,i), from the orientations alone: the chordal
/// L2 mean of the cameras' own answers R_dst,iᵀ·R_src,i (Hartley, Trumpf, Dai, Li 2013,
/// "Rotation averaging", §5.3: the arithmetic mean projected onto SO(3) by its SVD) over those
/// within [`ORIENTATION_INLIER_DEG`] of their medoid.
pub fn rotation_from_orientations(
    r_src: &[[[f64; 3]; 3]],
    r_dst: &[[[f64; 3]; 3]],
) -> Result<Mat3> {
    if r_src.is_empty() || r_src.len() != r_dst.len() {
        return Err(Error::InvalidInput(format!(
            "rotation alignment needs ≥ 1 camera on each side, as many on both, got {} and {}",
            r_src.len(),
            r_dst.len()
        )));
    }
    // The medoid (the answer of least median angle to the others) picks the majority, so a
    // few cameras turned the wrong way do not move the rotation (hostile round of 3fe5bfb,
    // F9); the chordal mean of the answers within ORIENTATION_INLIER_DEG of it refines it.
    let answers: Vec<Mat3> = r_src
        .iter()
        .zip(r_dst)
        .map(|(a, b)| mul3(&transpose3(b), a))
        .collect();
    let median_angle = |c: &Mat3| {
        let mut angles: Vec<f64> = answers.iter().map(|o| rotation_angle_deg(c, o)).collect();
        angles.sort_by(f64::total_cmp);
        angles[angles.len() / 2]
    };
    let medoid = answers
        .iter()
        .map(|c| (median_angle(c), c))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| *c)
        .ok_or_else(|| Error::InvalidInput("rotation alignment: no cameras".into()))?;
    let mut sum = [[0.0f64; 3]; 3];
    for c in answers
        .iter()
        .filter(|c| rotation_angle_deg(&medoid, c) <= ORIENTATION_INLIER_DEG)
    {
        for i in 0..3 {
            for j in 0..3 {
                sum[i][j] += c[i][j];
            }
        }
    }
    let (u, _, vt) = svd3(&sum)?;
    Ok(nearest_rotation(&u, &vt).0)
}

/// The similarity mapping the cameras of centres `src` and world-to-camera rotations `r_src`
/// onto those of `dst`, `r_dst`, with its rotation from the cameras' orientations
/// ([`rotation_from_orientations`]), then the scale and translation that fit the centres best
/// under it (Umeyama's eqs. 41–42 with R fixed). For centres on a line, where [`umeyama`]
/// leaves the rotation about the line to noise.
pub fn similarity_from_rotations(
    src: &[[f64; 3]],
    dst: &[[f64; 3]],
    r_src: &[[[f64; 3]; 3]],
    r_dst: &[[[f64; 3]; 3]],
) -> Result<Similarity> {
    let n = src.len();
    if n < 2 || dst.len() != n || r_src.len() != n || r_dst.len() != n {
        return Err(Error::InvalidInput(format!(
            "similarity alignment needs ≥ 2 cameras on each side, got {n} and {}",
            dst.len()
        )));
    }
    let r = rotation_from_orientations(r_src, r_dst)?;
    let mean = |p: &[[f64; 3]]| [0, 1, 2].map(|k| p.iter().map(|q| q[k]).sum::<f64>() / n as f64);
    let (ms, md) = (mean(src), mean(dst));
    let (mut num, mut den) = (0.0, 0.0);
    for (a, b) in src.iter().zip(dst) {
        let da = [0, 1, 2].map(|k| a[k] - ms[k]);
        let rda = [0, 1, 2].map(|i| (0..3).map(|k| r[i][k] * da[k]).sum::<f64>());
        num += (0..3).map(|k| (b[k] - md[k]) * rda[k]).sum::<f64>();
        den += (0..3).map(|k| da[k] * da[k]).sum::<f64>();
    }
    if den <= 0.0 {
        return Err(Error::InvalidInput(
            "similarity alignment: source points coincide".into(),
        ));
    }
    // A negative scale would mirror the centres through their mean: a model whose cameras run
    // backwards along the line scored 0 (hostile round of 3fe5bfb, F1). At 0 every centre
    // sits at the mean, and the errors say how far off the model is.
    let scale = (num / den).max(0.0);
    let t = [0, 1, 2].map(|i| md[i] - scale * (0..3).map(|k| r[i][k] * ms[k]).sum::<f64>());
    Ok(Similarity { scale, r, t })
}

/// Angle in degrees of the rotation taking `a` to `b` (angle of a·bᵀ).
pub fn rotation_angle_deg(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> f64 {
    let trace: f64 = (0..3)
        .map(|i| (0..3).map(|k| a[i][k] * b[i][k]).sum::<f64>())
        .sum();
    ((trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos().to_degrees()
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn umeyama_recovers_a_known_similarity() {
        let (s, c) = 0.7f64.sin_cos();
        let truth = Similarity {
            scale: 2.5,
            r: [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]],
            t: [1.0, -2.0, 3.0],
        };
        let src = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 2.0, 0.0],
            [0.0, 0.0, 3.0],
            [1.0, 1.0, 1.0],
        ];
        let dst: Vec<[f64; 3]> = src.iter().map(|&p| truth.apply(p)).collect();
        let est = umeyama(&src, &dst).unwrap();
        assert!((est.scale - 2.5).abs() < 1e-9);
        assert!(rotation_angle_deg(&est.r, &truth.r) < 1e-6);
        for i in 0..3 {
            assert!((est.t[i] - truth.t[i]).abs() < 1e-9);
        }
    }
}
