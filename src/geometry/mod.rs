//! Geometric verification: homography, fundamental or essential matrix by OpenCV calib3d with
//! USAC MAGSAC (Barath et al., "MAGSAC++", CVPR 2020), returning the model and an inlier mask.
//! Too few matches or no model found is a result that says so, not an error. The essential
//! matrix needs intrinsics (flag, file or EXIF, see [`Intrinsics`]); its pose comes from
//! `recoverPose` (cheirality check).
//!
//! This file is the RANSAC part. What surrounds it lives in private submodules re-exported
//! here, so every item keeps its `geometry::` path: `intrinsics` ([`Intrinsics`] from a flag,
//! a file, EXIF or COLMAP's prior), `align` ([`umeyama`] similarity, [`rotation_angle_deg`])
//! and `linalg` (the one 3×3 inverse, [`invert3`]).

mod align;
mod intrinsics;
mod linalg;

pub use align::{
    principal_variances, rotation_angle_deg, rotation_from_orientations, similarity_from_rotations,
    umeyama, Similarity,
};
pub use intrinsics::{
    check_focal_length, exif_focal_35mm, Intrinsics, DEFAULT_FOCAL_FACTOR, FILM_35MM_LONG_SIDE_MM,
    MAX_FOCAL_FACTOR, MAX_INTRINSICS_FILE_BYTES, MIN_FOCAL_FACTOR,
};
pub use linalg::{invert3, mul3, transpose3, Mat3};

use crate::error::{Error, Result};
use opencv::core::{Mat, Point2f, Vector};
use opencv::prelude::*;
use serde::{Deserialize, Serialize};

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
    /// Which of USAC's draws: OpenCV seeds its USAC with a fixed state, so the same matches in
    /// the same order always give the same model. 0 hands the matches over in their order;
    /// k > 0 shuffles them by seed k first ([`shuffled_order`]), so USAC's uniform sampler
    /// draws other minimal samples: another run of the same estimator, which is what a
    /// scene's spread across runs is made of (`descl sfm --random-seed`, `descl bench sfm`'s
    /// runs). Records without it (before 2026-11-29) read as 0.
    #[serde(default)]
    pub seed: u64,
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
            seed: 0,
        }
    }
}

impl RansacConfig {
    /// Checks the settings: a positive finite threshold, a confidence strictly between 0 and
    /// 1, at least one iteration (the command line refuses others when it parses them).
    pub fn check(&self) -> Result<()> {
        if !(self.threshold_px.is_finite() && self.threshold_px > 0.0) {
            return Err(Error::InvalidInput(format!(
                "RANSAC threshold must be a positive number of pixels, got {}",
                self.threshold_px
            )));
        }
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(Error::InvalidInput(format!(
                "RANSAC confidence must be between 0 and 1 (both excluded), got {}",
                self.confidence
            )));
        }
        if self.max_iters < 1 {
            return Err(Error::InvalidInput(format!(
                "RANSAC iteration cap must be at least 1, got {}",
                self.max_iters
            )));
        }
        Ok(())
    }
}

/// Relative pose of camera B with respect to camera A: x_B = R x_A + t, |t| = 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
    /// A homography fitted to the same matches, when asked for (see
    /// [`crate::matching::two_view::PairConfig::planar_check`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub homography: Option<HomographyCheck>,
}

/// A homography fitted to the matches that F or E verified, and the pair's own model fitted
/// again, both at one threshold: when nearly all of F's inliers also fit one homography the
/// scene is planar or the camera only rotated, and COLMAP labels the pair so
/// (`crate::io::colmap::TwoViewConfig::of`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HomographyCheck {
    pub model: Mat3,
    /// The homography's inliers.
    pub num_inliers: usize,
    /// The inliers of the pair's model kind (F or E) at the same threshold.
    pub model_inliers: usize,
    /// The threshold of both fits, pixels.
    pub threshold_px: f64,
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
            homography: None,
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

/// The essential matrix of `pa ↔ pb` in normalised coordinates (USAC MAGSAC) and, when one
/// is found, the relative pose from `recoverPose`; `mask` receives the inliers.
fn essential(
    pa: &[[f64; 2]],
    pb: &[[f64; 2]],
    config: &RansacConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
    mask: &mut Mat,
) -> Result<(Option<Mat3>, Option<Pose>)> {
    let method = opencv::calib3d::USAC_MAGSAC;
    let (ka, kb) = intrinsics.ok_or_else(|| {
        Error::InvalidInput("the essential matrix needs intrinsics (flag, file or EXIF)".into())
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
    #[cfg(not(descl_opencv_essential_no_max_iters))]
    let m = opencv::calib3d::find_essential_mat(
        &na,
        &nb,
        &eye,
        method,
        config.confidence,
        config.threshold_px / f_mean,
        config.max_iters,
        mask,
    )?;
    // OpenCV < 4.5.2 (Debian 11's 4.5.1, scripts/wheel-bullseye) has no `maxIters` argument
    // here: its own iteration limit applies (build.rs sets the cfg).
    #[cfg(descl_opencv_essential_no_max_iters)]
    let m = opencv::calib3d::find_essential_mat_matrix(
        &na,
        &nb,
        &eye,
        method,
        config.confidence,
        config.threshold_px / f_mean,
        mask,
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
    Ok((e, pose))
}

/// The homography of `pa ↔ pb` by USAC with MAGSAC++ scoring and the inner-and-iterative
/// local optimisation (`LOCAL_OPTIM_INNER_AND_ITER_LO`), the other settings `UsacParams`'
/// defaults (uniform sampling, seed 0, serial); `mask` receives the inliers.
///
/// Not the `USAC_MAGSAC` preset that F and E use: the preset's local optimisation,
/// σ-consensus (`LOCAL_OPTIM_SIGMA`), crashes with SIGSEGV in OpenCV 4.5.1 (Debian 11: the
/// bullseye wheel and bundle) on hard pairs: on Oxford wall 1→6 with any threshold from 1 to
/// 10 px and any score, never with another local optimisation (issue 57;
/// `scripts/usac-homography-repro.cpp` shows it outside descl). Every build uses this one
/// configuration so that every build finds the same homographies: with it, `descl bench
/// sequences` on the dev data gives the same numbers on OpenCV 4.5.1 and 4.6 (corner errors
/// equal to 1e-11 relative), where the preset on 4.6 and this on 4.5.1 differed at 1 px on 2
/// of the 35 pairs of the default model. Over those 35 pairs it is as accurate as the preset
/// on 4.6 for the default model and RootSIFT, and more accurate for SIFT (docs/BENCHMARKS.md
/// "Homography sequences").
fn homography(
    pa: &[[f64; 2]],
    pb: &[[f64; 2]],
    config: &RansacConfig,
    mask: &mut Mat,
) -> Result<Mat> {
    use opencv::calib3d::{LocalOptimMethod, ScoreMethod};
    let mut params = opencv::calib3d::UsacParams::default()?;
    params.score = ScoreMethod::SCORE_METHOD_MAGSAC;
    params.lo_method = LocalOptimMethod::LOCAL_OPTIM_INNER_AND_ITER_LO;
    params.threshold = config.threshold_px;
    params.max_iterations = config.max_iters;
    params.confidence = config.confidence;
    Ok(opencv::calib3d::find_homography_1(
        &points(pa),
        &points(pb),
        mask,
        params,
    )?)
}

/// The order [`RansacConfig::seed`] `seed` (> 0) hands `n` matches to USAC in: a Fisher–Yates
/// shuffle driven by ChaCha8 seeded with `seed` (portable: the same order on every machine
/// and build).
pub fn shuffled_order(n: usize, seed: u64) -> Vec<usize> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    order
}

/// Fits `kind` to the matched points `pa[k] ↔ pb[k]` (pixels). `intrinsics` (of A and B) is
/// required for [`ModelKind::Essential`] and ignored otherwise. With a [`RansacConfig::seed`]
/// the matches reach USAC in [`shuffled_order`]; the inlier flags come back in the caller's
/// order either way.
pub fn verify(
    pa: &[[f64; 2]],
    pb: &[[f64; 2]],
    kind: ModelKind,
    config: &RansacConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<Verification> {
    if config.seed == 0 || pa.len() != pb.len() {
        return verify_in_order(pa, pb, kind, config, intrinsics);
    }
    let order = shuffled_order(pa.len(), config.seed);
    let qa: Vec<[f64; 2]> = order.iter().map(|&i| pa[i]).collect();
    let qb: Vec<[f64; 2]> = order.iter().map(|&i| pb[i]).collect();
    let mut v = verify_in_order(&qa, &qb, kind, config, intrinsics)?;
    let mut inliers = vec![false; order.len()];
    for (&i, &flag) in order.iter().zip(&v.inliers) {
        inliers[i] = flag;
    }
    v.inliers = inliers;
    Ok(v)
}

/// [`verify`] of the matches in the order given.
fn verify_in_order(
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
    config.check()?;
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
        ModelKind::Homography => (mat3(&homography(pa, pb, config, &mut mask)?)?, None),
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
        ModelKind::Essential => essential(pa, pb, config, intrinsics, &mut mask)?,
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
                homography: None,
            })
        }
    }
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

    /// 200 matches of a homography H, the first 40 replaced by random points: (H, A, B).
    #[allow(clippy::type_complexity)]
    fn homography_with_outliers() -> ([[f64; 3]; 3], Vec<[f64; 2]>, Vec<[f64; 2]>) {
        let h = [[0.9, 0.1, 20.0], [-0.05, 1.1, -10.0], [1e-4, -5e-5, 1.0]];
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let pa: Vec<[f64; 2]> = (0..200)
            .map(|_| [rng.gen_range(0.0..640.0), rng.gen_range(0.0..480.0)])
            .collect();
        let mut pb: Vec<[f64; 2]> = pa.iter().map(|&p| apply_h(&h, p)).collect();
        for p in pb.iter_mut().take(40) {
            *p = [rng.gen_range(0.0..640.0), rng.gen_range(0.0..480.0)];
        }
        (h, pa, pb)
    }

    #[test]
    fn homography_recovered_with_outliers_marked() {
        let (h, pa, pb) = homography_with_outliers();
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
    fn a_seeded_draw_returns_the_flags_in_the_callers_order() {
        let order = shuffled_order(100, 7);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "not a permutation");
        assert_ne!(order, sorted, "seed 7 left the order as it was");
        assert_eq!(
            order,
            shuffled_order(100, 7),
            "the same seed, another order"
        );
        assert_ne!(order, shuffled_order(100, 8));
        // The outliers are the first 40 matches: every seed must flag them there.
        let (_, pa, pb) = homography_with_outliers();
        for seed in [0, 1, 2, 3] {
            let config = RansacConfig {
                seed,
                ..RansacConfig::default()
            };
            for kind in [ModelKind::Homography, ModelKind::Fundamental] {
                let v = verify(&pa, &pb, kind, &config, None).unwrap();
                assert!(v.model.is_some(), "seed {seed} {kind:?}");
                assert_eq!(v.inliers.len(), 200);
                assert!(
                    v.inliers[40..].iter().all(|&b| b),
                    "seed {seed} {kind:?}: an inlier lost"
                );
                // Each flag belongs to its match: a flagged match fits the model (an
                // outlier may fit F, whose constraint is one line, by chance).
                let m = v.model.unwrap();
                for (i, _) in v.inliers.iter().enumerate().filter(|(_, &f)| f) {
                    let err = match kind {
                        ModelKind::Homography => {
                            let q = apply_h(&m, pa[i]);
                            (q[0] - pb[i][0]).hypot(q[1] - pb[i][1])
                        }
                        _ => {
                            let x = [pa[i][0], pa[i][1], 1.0];
                            let l: Vec<f64> = (0..3)
                                .map(|r| (0..3).map(|c| m[r][c] * x[c]).sum())
                                .collect();
                            (l[0] * pb[i][0] + l[1] * pb[i][1] + l[2]).abs() / l[0].hypot(l[1])
                        }
                    };
                    assert!(
                        err < 3.0,
                        "seed {seed} {kind:?}: match {i} flagged at {err} px"
                    );
                }
            }
        }
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
}
