//! Geometric verification: homography, fundamental or essential matrix by OpenCV calib3d with
//! USAC MAGSAC (Barath et al., "MAGSAC++", CVPR 2020), returning the model and an inlier mask.
//! Too few matches or no model found is a result that says so, not an error. The essential
//! matrix needs intrinsics (flag, file or EXIF, see [`Intrinsics`]); its pose comes from
//! `recoverPose` (cheirality check).

use crate::error::{Error, Result};
use opencv::core::{Mat, Point2f, Vector};
use opencv::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Minimal sample sizes: 4 points for H, 7 for F (7-point algorithm), 5 for E (5-point).
/// Verification asks for one more than the minimum so the model is over-determined.
pub const MIN_MATCHES_HOMOGRAPHY: usize = 5;
pub const MIN_MATCHES_FUNDAMENTAL: usize = 8;
pub const MIN_MATCHES_ESSENTIAL: usize = 6;

/// Which two-view model to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Homography,
    Fundamental,
    Essential,
}

impl ModelKind {
    pub fn min_matches(self) -> usize {
        match self {
            ModelKind::Homography => MIN_MATCHES_HOMOGRAPHY,
            ModelKind::Fundamental => MIN_MATCHES_FUNDAMENTAL,
            ModelKind::Essential => MIN_MATCHES_ESSENTIAL,
        }
    }
}

/// RANSAC settings. Threshold in pixels (for E it is converted to normalised coordinates with
/// the mean focal length, as OpenCV does).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RansacConfig {
    pub threshold_px: f64,
    pub confidence: f64,
    pub max_iters: i32,
}

impl Default for RansacConfig {
    /// 1 px, 0.9999, 10 000 iterations: OpenCV's USAC_MAGSAC preset (`UsacParams` for
    /// `USAC_MAGSAC` uses threshold 1.0 and confidence 0.99 with up to 10 000 iterations);
    /// confidence is raised to 0.9999 as MAGSAC's σ-marginalisation makes the threshold an
    /// upper bound rather than a hard cut.
    fn default() -> Self {
        RansacConfig {
            threshold_px: 1.0,
            confidence: 0.9999,
            max_iters: 10_000,
        }
    }
}

/// Pinhole intrinsics (pixels; OpenCV convention: pixel centres at integer coordinates).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Intrinsics {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// The long side of the 35 mm film frame: EXIF `FocalLengthIn35mmFilm` refers to it.
pub const FILM_35MM_LONG_SIDE_MM: f64 = 36.0;
/// Prior focal length when nothing better is known: 1.2 · max(width, height), COLMAP's
/// default (`ImageReaderOptions::default_focal_length_factor`).
pub const DEFAULT_FOCAL_FACTOR: f64 = 1.2;

impl Intrinsics {
    /// From `"fx,fy,cx,cy"`.
    pub fn parse(s: &str) -> Result<Self> {
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| {
                Error::InvalidInput(format!("intrinsics {s:?}: {e} (expected fx,fy,cx,cy)"))
            })?;
        match v[..] {
            [fx, fy, cx, cy] => Self::checked(fx, fy, cx, cy).map_err(Error::InvalidInput),
            _ => Err(Error::InvalidInput(format!(
                "intrinsics {s:?}: expected 4 numbers fx,fy,cx,cy"
            ))),
        }
    }

    fn checked(fx: f64, fy: f64, cx: f64, cy: f64) -> std::result::Result<Self, String> {
        if [fx, fy, cx, cy].iter().all(|v| v.is_finite()) && fx > 0.0 && fy > 0.0 {
            Ok(Intrinsics { fx, fy, cx, cy })
        } else {
            Err(format!(
                "intrinsics need finite values and positive focal lengths, got {fx},{fy},{cx},{cy}"
            ))
        }
    }

    /// From a file: JSON `{"fx":..,"fy":..,"cx":..,"cy":..}`, or text whose first nine numbers
    /// are the 3×3 matrix K row by row (e.g. Strecha `.camera` files).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        if let Ok(k) = serde_json::from_str::<Intrinsics>(&text) {
            return Self::checked(k.fx, k.fy, k.cx, k.cy).map_err(|r| Error::format(path, r));
        }
        let nums: Vec<f64> = text
            .split_whitespace()
            .take(9)
            .filter_map(|t| t.parse().ok())
            .collect();
        if nums.len() < 9 {
            return Err(Error::format(
                path,
                "expected JSON {fx,fy,cx,cy} or a 3×3 matrix K",
            ));
        }
        Self::checked(nums[0], nums[4], nums[2], nums[5]).map_err(|r| Error::format(path, r))
    }

    /// From the EXIF `FocalLengthIn35mmFilm` tag of an image (None when absent):
    /// f = f35 / 36 mm · max(width, height), principal point at the image centre.
    pub fn from_exif(path: &Path, width: u32, height: u32) -> Result<Option<Self>> {
        use image::ImageDecoder;
        let reader = image::ImageReader::open(path)
            .map_err(|e| Error::io(path, e))?
            .with_guessed_format()
            .map_err(|e| Error::io(path, e))?;
        let mut decoder = reader.into_decoder().map_err(|e| Error::Image {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let exif = decoder.exif_metadata().map_err(|e| Error::Image {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let f35 = exif.as_deref().and_then(exif_focal_35mm);
        Ok(f35.map(|f35| {
            let f = f35 / FILM_35MM_LONG_SIDE_MM * width.max(height) as f64;
            Intrinsics::centred(f, width, height)
        }))
    }

    /// Focal `f`, principal point at the image centre ((w − 1)/2, (h − 1)/2 in OpenCV pixels).
    pub fn centred(f: f64, width: u32, height: u32) -> Self {
        Intrinsics {
            fx: f,
            fy: f,
            cx: (width as f64 - 1.0) / 2.0,
            cy: (height as f64 - 1.0) / 2.0,
        }
    }

    /// COLMAP's prior when nothing is known: f = 1.2 · max(w, h), centred.
    pub fn default_prior(width: u32, height: u32) -> Self {
        Self::centred(
            DEFAULT_FOCAL_FACTOR * width.max(height) as f64,
            width,
            height,
        )
    }
}

/// `FocalLengthIn35mmFilm` (tag 0xA405 in the Exif IFD) from raw EXIF (TIFF) bytes.
pub fn exif_focal_35mm(raw: &[u8]) -> Option<f64> {
    const EXIF_IFD_POINTER: u16 = 0x8769;
    const FOCAL_35MM: u16 = 0xA405;
    let tiff = raw.strip_prefix(b"Exif\0\0").unwrap_or(raw);
    let le = match tiff.get(0..2)? {
        b"II" => true,
        b"MM" => false,
        _ => return None,
    };
    let u16_at = |o: usize| {
        tiff.get(o..o + 2).map(|b| {
            if le {
                u16::from_le_bytes([b[0], b[1]])
            } else {
                u16::from_be_bytes([b[0], b[1]])
            }
        })
    };
    let u32_at = |o: usize| {
        tiff.get(o..o + 4).map(|b| {
            let a = [b[0], b[1], b[2], b[3]];
            if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        })
    };
    // Entries of the IFD at `off`: (tag, offset of the 4-byte value field).
    let entries = |off: usize| -> Vec<(u16, usize)> {
        let n = u16_at(off).unwrap_or(0) as usize;
        (0..n)
            .filter_map(|k| u16_at(off + 2 + 12 * k).map(|tag| (tag, off + 2 + 12 * k + 8)))
            .collect()
    };
    let ifd0 = u32_at(4)? as usize;
    let exif_ifd = entries(ifd0)
        .into_iter()
        .find(|(t, _)| *t == EXIF_IFD_POINTER)
        .and_then(|(_, v)| u32_at(v))? as usize;
    let (_, v) = entries(exif_ifd)
        .into_iter()
        .find(|(t, _)| *t == FOCAL_35MM)?;
    let f = u16_at(v)? as f64;
    (f > 0.0).then_some(f)
}

/// Relative pose of camera B with respect to camera A: x_B = R x_A + t, |t| = 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pose {
    pub r: [[f64; 3]; 3],
    pub t: [f64; 3],
    /// Inliers that pass the cheirality check.
    pub num_in_front: usize,
}

/// The outcome of verification. `model` is None when there were too few matches or RANSAC
/// found no model; `reason` then says which.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verification {
    pub kind: ModelKind,
    pub model: Option<[[f64; 3]; 3]>,
    /// One flag per input match.
    pub inliers: Vec<bool>,
    pub num_inliers: usize,
    pub reason: Option<String>,
    /// Essential matrix only.
    pub pose: Option<Pose>,
}

impl Verification {
    fn failed(kind: ModelKind, n: usize, reason: String) -> Self {
        Verification {
            kind,
            model: None,
            inliers: vec![false; n],
            num_inliers: 0,
            reason: Some(reason),
            pose: None,
        }
    }
}

fn points(p: &[[f64; 2]]) -> Vector<Point2f> {
    p.iter()
        .map(|q| Point2f::new(q[0] as f32, q[1] as f32))
        .collect()
}

fn mat3(m: &Mat) -> Result<Option<[[f64; 3]; 3]>> {
    if m.rows() < 3 || m.cols() != 3 {
        return Ok(None);
    }
    let mut out = [[0.0; 3]; 3];
    for (r, row) in out.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            *v = *m.at_2d::<f64>(r as i32, c as i32)?;
        }
    }
    Ok(out.iter().flatten().all(|v| v.is_finite()).then_some(out))
}

fn mask_vec(mask: &Mat, n: usize) -> Result<Vec<bool>> {
    if mask.empty() {
        return Ok(vec![false; n]);
    }
    let data = mask.data_bytes()?;
    Ok((0..n)
        .map(|i| data.get(i).is_some_and(|&b| b != 0))
        .collect())
}

/// Fits `kind` to the matched points `pa[k] ↔ pb[k]` (pixels). `intrinsics` (of A and B) is
/// required for [`ModelKind::Essential`] and ignored otherwise.
pub fn verify(
    pa: &[[f64; 2]],
    pb: &[[f64; 2]],
    kind: ModelKind,
    config: &RansacConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<Verification> {
    if pa.len() != pb.len() {
        return Err(Error::InvalidInput(format!(
            "verify: {} points in A but {} in B",
            pa.len(),
            pb.len()
        )));
    }
    let valid = config.threshold_px > 0.0 && config.confidence > 0.0 && config.confidence < 1.0;
    if !valid || config.max_iters < 1 {
        return Err(Error::InvalidInput(format!(
            "RANSAC needs threshold > 0, confidence in (0, 1), max_iters ≥ 1; got {config:?}"
        )));
    }
    if pa.iter().chain(pb).flatten().any(|v| !v.is_finite()) {
        return Err(Error::InvalidInput(
            "verify: non-finite keypoint coordinates".into(),
        ));
    }
    let n = pa.len();
    if n < kind.min_matches() {
        return Ok(Verification::failed(
            kind,
            n,
            format!(
                "too few matches for a {kind:?} model: {n} < {}",
                kind.min_matches()
            )
            .to_lowercase(),
        ));
    }
    let method = opencv::calib3d::USAC_MAGSAC;
    let mut mask = Mat::default();
    let (model, pose) = match kind {
        ModelKind::Homography => {
            let m = opencv::calib3d::find_homography_ext(
                &points(pa),
                &points(pb),
                method,
                config.threshold_px,
                &mut mask,
                config.max_iters,
                config.confidence,
            )?;
            (mat3(&m)?, None)
        }
        ModelKind::Fundamental => {
            let m = opencv::calib3d::find_fundamental_mat(
                &points(pa),
                &points(pb),
                method,
                config.threshold_px,
                config.confidence,
                config.max_iters,
                &mut mask,
            )?;
            (mat3(&m)?, None)
        }
        ModelKind::Essential => {
            let (ka, kb) = intrinsics.ok_or_else(|| {
                Error::InvalidInput(
                    "the essential matrix needs intrinsics (flag, file or EXIF)".into(),
                )
            })?;
            // Normalised coordinates with each camera's K, so A and B may differ; the pixel
            // threshold becomes a normalised one through the mean focal length.
            let norm = |p: &[[f64; 2]], k: &Intrinsics| -> Vec<[f64; 2]> {
                p.iter()
                    .map(|q| [(q[0] - k.cx) / k.fx, (q[1] - k.cy) / k.fy])
                    .collect()
            };
            let (na, nb) = (points(&norm(pa, ka)), points(&norm(pb, kb)));
            let f_mean = (ka.fx + ka.fy + kb.fx + kb.fy) / 4.0;
            let eye = Mat::eye(3, 3, opencv::core::CV_64F)?.to_mat()?;
            let m = opencv::calib3d::find_essential_mat(
                &na,
                &nb,
                &eye,
                method,
                config.confidence,
                config.threshold_px / f_mean,
                config.max_iters,
                &mut mask,
            )?;
            let e = mat3(&m)?;
            let pose = match e {
                Some(_) if !mask.empty() => {
                    let e3 = m.row_range(&opencv::core::Range::new(0, 3)?)?.try_clone()?;
                    let (mut r, mut t) = (Mat::default(), Mat::default());
                    let mut pose_mask = mask.try_clone()?;
                    let good = opencv::calib3d::recover_pose_estimated(
                        &e3,
                        &na,
                        &nb,
                        &eye,
                        &mut r,
                        &mut t,
                        &mut pose_mask,
                    )?;
                    match mat3(&r)? {
                        Some(rr) => Some(Pose {
                            r: rr,
                            t: [
                                *t.at_2d::<f64>(0, 0)?,
                                *t.at_2d::<f64>(1, 0)?,
                                *t.at_2d::<f64>(2, 0)?,
                            ],
                            num_in_front: good.max(0) as usize,
                        }),
                        None => None,
                    }
                }
                _ => None,
            };
            (e, pose)
        }
    };
    match model {
        None => Ok(Verification::failed(
            kind,
            n,
            format!("RANSAC found no {kind:?} model").to_lowercase(),
        )),
        Some(model) => {
            let inliers = mask_vec(&mask, n)?;
            let num_inliers = inliers.iter().filter(|&&b| b).count();
            Ok(Verification {
                kind,
                model: Some(model),
                inliers,
                num_inliers,
                reason: None,
                pose,
            })
        }
    }
}

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
    let flat: Vec<f64> = cov.iter().flatten().copied().collect();
    let m = Mat::new_rows_cols_with_data(3, 3, &flat)?;
    let (mut w, mut u, mut vt) = (Mat::default(), Mat::default(), Mat::default());
    opencv::core::SVD::compute_ext(&m, &mut w, &mut u, &mut vt, 0)?;
    let get =
        |m: &Mat, r: usize, c: usize| -> Result<f64> { Ok(*m.at_2d::<f64>(r as i32, c as i32)?) };
    let mut uu = [[0.0; 3]; 3];
    let mut vv = [[0.0; 3]; 3];
    let mut d = [0.0; 3];
    for i in 0..3 {
        d[i] = *w.at::<f64>(i as i32)?;
        for j in 0..3 {
            uu[i][j] = get(&u, i, j)?;
            vv[i][j] = get(&vt, i, j)?;
        }
    }
    let det3 = |a: &[[f64; 3]; 3]| {
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    };
    let sign = if det3(&uu) * det3(&vv) < 0.0 {
        -1.0
    } else {
        1.0
    };
    let sdiag = [1.0, 1.0, sign];
    let r = [0, 1, 2]
        .map(|i| [0, 1, 2].map(|j| (0..3).map(|k| uu[i][k] * sdiag[k] * vv[k][j]).sum::<f64>()));
    let scale = (0..3).map(|k| d[k] * sdiag[k]).sum::<f64>() / var_src;
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
    use rand::{Rng, SeedableRng};

    fn apply_h(h: &[[f64; 3]; 3], p: [f64; 2]) -> [f64; 2] {
        let w = h[2][0] * p[0] + h[2][1] * p[1] + h[2][2];
        [
            (h[0][0] * p[0] + h[0][1] * p[1] + h[0][2]) / w,
            (h[1][0] * p[0] + h[1][1] * p[1] + h[1][2]) / w,
        ]
    }

    #[test]
    fn homography_recovered_with_outliers_marked() {
        let h = [[0.9, 0.1, 20.0], [-0.05, 1.1, -10.0], [1e-4, -5e-5, 1.0]];
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let pa: Vec<[f64; 2]> = (0..200)
            .map(|_| [rng.gen_range(0.0..640.0), rng.gen_range(0.0..480.0)])
            .collect();
        let mut pb: Vec<[f64; 2]> = pa.iter().map(|&p| apply_h(&h, p)).collect();
        for p in pb.iter_mut().take(40) {
            *p = [rng.gen_range(0.0..640.0), rng.gen_range(0.0..480.0)];
        }
        let v = verify(
            &pa,
            &pb,
            ModelKind::Homography,
            &RansacConfig::default(),
            None,
        )
        .unwrap();
        let m = v.model.unwrap();
        for r in 0..3 {
            for c in 0..3 {
                assert!(
                    (m[r][c] - h[r][c]).abs() < 1e-3 * h[r][c].abs().max(1e-2),
                    "{m:?}"
                );
            }
        }
        assert!(v.inliers[40..].iter().all(|&b| b));
        assert!(v.inliers[..40].iter().filter(|&&b| b).count() <= 1);
    }

    #[test]
    fn too_few_matches_is_a_result_not_an_error() {
        let p = vec![[0.0, 0.0]; 4];
        let v = verify(
            &p,
            &p,
            ModelKind::Fundamental,
            &RansacConfig::default(),
            None,
        )
        .unwrap();
        assert!(v.model.is_none() && v.reason.unwrap().contains("too few matches"));
        assert_eq!(v.inliers, vec![false; 4]);
    }

    #[test]
    fn essential_gives_the_true_pose() {
        // Points in front of camera A; B rotated 10° about y and translated along x.
        let k = Intrinsics {
            fx: 800.0,
            fy: 800.0,
            cx: 320.0,
            cy: 240.0,
        };
        let (s, c) = 10f64.to_radians().sin_cos();
        let r = [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]];
        let t = [-1.0, 0.0, 0.1];
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        for _ in 0..150 {
            let x = [
                rng.gen_range(-2.0..2.0),
                rng.gen_range(-1.5..1.5),
                rng.gen_range(4.0..9.0),
            ];
            let y: Vec<f64> = (0..3)
                .map(|i| r[i][0] * x[0] + r[i][1] * x[1] + r[i][2] * x[2] + t[i])
                .collect();
            pa.push([k.fx * x[0] / x[2] + k.cx, k.fy * x[1] / x[2] + k.cy]);
            pb.push([k.fx * y[0] / y[2] + k.cx, k.fy * y[1] / y[2] + k.cy]);
        }
        let v = verify(
            &pa,
            &pb,
            ModelKind::Essential,
            &RansacConfig::default(),
            Some((&k, &k)),
        )
        .unwrap();
        let pose = v.pose.unwrap();
        assert!(v.num_inliers >= 145, "{}", v.num_inliers);
        for i in 0..3 {
            for j in 0..3 {
                assert!((pose.r[i][j] - r[i][j]).abs() < 1e-3, "{:?}", pose.r);
            }
        }
        let tn = (t[0] * t[0] + t[2] * t[2]).sqrt();
        assert!(
            (pose.t[0] - t[0] / tn).abs() < 1e-2 && (pose.t[2] - t[2] / tn).abs() < 1e-2,
            "{:?}",
            pose.t
        );
        assert!(verify(
            &pa,
            &pb,
            ModelKind::Essential,
            &RansacConfig::default(),
            None
        )
        .is_err());
    }

    #[test]
    fn intrinsics_from_flag_file_and_exif() {
        let k = Intrinsics::parse("800, 810,320.5,240").unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (800.0, 810.0, 320.5, 240.0));
        assert!(Intrinsics::parse("800,810,320").is_err());
        assert!(Intrinsics::parse("-1,1,0,0").is_err());
        let dir = tempfile::tempdir().unwrap();
        let cam = dir.path().join("a.camera");
        std::fs::write(&cam, "1379.74 0 760.3\n0 1382.08 503.4\n0 0 1\n0 0 0\n").unwrap();
        let k = Intrinsics::from_file(&cam).unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (1379.74, 1382.08, 760.3, 503.4));
        // Hand-made little-endian TIFF: IFD0 with one entry (Exif pointer → offset 26),
        // Exif IFD with FocalLengthIn35mmFilm = 28 (SHORT).
        let mut t = b"II*\0".to_vec();
        t.extend(8u32.to_le_bytes());
        t.extend(1u16.to_le_bytes());
        t.extend([0x69, 0x87, 4, 0]);
        t.extend(1u32.to_le_bytes());
        t.extend(26u32.to_le_bytes());
        t.extend(0u32.to_le_bytes());
        t.extend(1u16.to_le_bytes());
        t.extend([0x05, 0xA4, 3, 0]);
        t.extend(1u32.to_le_bytes());
        t.extend([28, 0, 0, 0]);
        assert_eq!(exif_focal_35mm(&t), Some(28.0));
        assert_eq!(exif_focal_35mm(b"garbage"), None);
    }

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
