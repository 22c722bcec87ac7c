//! `descl.match` and `descl.verify`: the two halves of descl's pair path
//! (`matching::two_view::match_pair` = exact matching + verification), on arrays.

use crate::arrays::{descriptor_kind, descriptors, intrinsics, points};
use crate::errors::{to_py, value_error};
use descl::describe::Descriptors;
use descl::features::{FeatureMeta, Features};
use descl::frame::Frame;
use descl::geometry::{ModelKind, RansacConfig};
use descl::matching::filters::LOWE_RATIO;
use descl::matching::two_view::{verify_matches, PairConfig, COLMAP_MIN_NUM_INLIERS};
use descl::matching::{match_descriptors as match_lib, MatchConfig, Matches};
use ndarray::Array2;
use numpy::{PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `ratio=0.8` in `match`'s signature is the library's Lowe ratio (the command line's default).
const _: () = assert!(LOWE_RATIO == 0.8);

/// Matches two descriptor sets: exact nearest neighbours in both directions (float32 by L2 on
/// SGEMM, uint8 N×32 binary by Hamming popcount), then the filters, as `descl match`.
///
/// desc0, desc1: float32 N×D (unit rows, as models give) or uint8 N×32 (256-bit binary); both of
///     one kind and width.
/// mutual: keep i → j only if i is also j's nearest neighbour.
/// ratio: Lowe's ratio test, keep if d1 < ratio · d2; None turns it off.
/// max_distance: keep if d1 ≤ max_distance (L2, or bits for binary).
/// min_gap: keep if d2 − d1 ≥ min_gap, in bits: binary descriptors only (refused for float).
/// top_k: keep the k matches of smallest distance.
///
/// Returns a dict: matches (K×2 int64: index in desc0, index in desc1, sorted by the first),
/// distances (K float32: L2 distance, or Hamming bits). A side with no descriptors gives no
/// matches.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // one per keyword of the Python signature
#[pyo3(
    name = "match",
    signature = (desc0, desc1, *, mutual=true, ratio=Some(0.8), max_distance=None, min_gap=None, top_k=None),
    text_signature = "(desc0, desc1, *, mutual=True, ratio=0.8, max_distance=None, min_gap=None, top_k=None)"
)]
pub fn match_descriptors<'py>(
    py: Python<'py>,
    desc0: &Bound<'py, PyAny>,
    desc1: &Bound<'py, PyAny>,
    mutual: bool,
    ratio: Option<f32>,
    max_distance: Option<f32>,
    min_gap: Option<f32>,
    top_k: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = MatchConfig {
        mutual,
        ratio,
        ratio_both_ways: false,
        max_distance,
        min_gap,
        top_k,
    };
    config.check().map_err(|e| to_py(e, ""))?;
    let (a, b) = (descriptors(desc0, "desc0")?, descriptors(desc1, "desc1")?);
    let same_kind = match (&a, &b) {
        (Descriptors::Float(x), Descriptors::Float(y)) => x.ncols() == y.ncols(),
        (Descriptors::Binary(_), Descriptors::Binary(_)) => true,
        _ => false,
    };
    if !same_kind {
        return Err(value_error(format!(
            "desc0 is {} but desc1 is {}: match descriptors of one model",
            descriptor_kind(&a),
            descriptor_kind(&b)
        )));
    }
    // The library refuses empty sides ("nothing to match"); for an array API an image without
    // keypoints simply has no matches.
    let found = if a.is_empty() || b.is_empty() {
        Matches::default()
    } else {
        py.detach(|| match_lib(&a, &b, &config))
            .map_err(|e| to_py(e, ""))?
    };
    matches_dict(py, &found)
}

fn matches_dict<'py>(py: Python<'py>, m: &Matches) -> PyResult<Bound<'py, PyDict>> {
    let pairs = Array2::from_shape_fn((m.pairs.len(), 2), |(k, s)| m.pairs[k][s] as i64);
    let d = PyDict::new(py);
    d.set_item("matches", PyArray2::from_owned_array(py, pairs))?;
    d.set_item("distances", PyArray1::from_slice(py, &m.distances))?;
    Ok(d)
}

/// Fits a two-view model to matched keypoints with OpenCV's USAC MAGSAC, as `descl match`
/// verifies (the same call).
///
/// kpts0, kpts1: N×2 keypoints (x, y) or N×6 frames of each image, in pixels.
/// matches: K×2 integer index pairs (as `descl.match` returns).
/// model: "fundamental", "homography" or "essential" (needs K0, and K1 if the second camera
///     differs).
/// threshold: inlier threshold in pixels (None: descl's 1.0); confidence (None: 0.9999),
///     max_iters (None: 10000): RANSAC settings.
/// min_inliers: fewer inliers than this is no model (None: COLMAP's 15, the command line's).
/// K0, K1: 3×3 calibration matrices.
///
/// Returns a dict: model (3×3 float64 mapping image 0 to image 1, or None), inliers (K bool),
/// num_inliers, reason (why there is no model, else None), kind, and for the essential matrix
/// pose (R 3×3, t 3 with |t| = 1, num_in_front: x1 = R x0 + t), else None. Too few matches is a
/// result (model None with its reason), not an error.
#[pyfunction]
#[allow(non_snake_case, clippy::too_many_arguments)] // K0, K1: the usual names of calibration matrices
#[pyo3(signature = (kpts0, kpts1, matches, *, model="fundamental", threshold=None, confidence=None, max_iters=None, min_inliers=None, K0=None, K1=None))]
pub fn verify<'py>(
    py: Python<'py>,
    kpts0: &Bound<'py, PyAny>,
    kpts1: &Bound<'py, PyAny>,
    matches: &Bound<'py, PyAny>,
    model: &str,
    threshold: Option<f64>,
    confidence: Option<f64>,
    max_iters: Option<i32>,
    min_inliers: Option<usize>,
    K0: Option<&Bound<'py, PyAny>>,
    K1: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = match model {
        "fundamental" => ModelKind::Fundamental,
        "homography" => ModelKind::Homography,
        "essential" => ModelKind::Essential,
        _ => {
            return Err(value_error(format!(
                "unknown model `{model}` (fundamental, homography or essential)"
            )))
        }
    };
    let p0 = points(kpts0, "kpts0")?;
    let p1 = points(kpts1, "kpts1")?;
    let pairs = crate::arrays::matches(matches, "matches", [p0.len(), p1.len()])?;
    let k0 = K0.map(|k| intrinsics(k, "K0")).transpose()?;
    let k1 = K1.map(|k| intrinsics(k, "K1")).transpose()?;
    let cameras = match (k0, k1) {
        (Some(a), Some(b)) => Some((a, b)),
        (Some(a), None) => Some((a, a)),
        (None, Some(_)) => return Err(value_error("K1 given without K0")),
        (None, None) => None,
    };
    if kind == ModelKind::Essential && cameras.is_none() {
        return Err(value_error(
            "the essential matrix needs intrinsics: give K0 (and K1 when the second camera \
             differs)",
        ));
    }
    let defaults = RansacConfig::default();
    let config = PairConfig {
        geometry: Some(kind),
        ransac: RansacConfig {
            threshold_px: threshold.unwrap_or(defaults.threshold_px),
            confidence: confidence.unwrap_or(defaults.confidence),
            max_iters: max_iters.unwrap_or(defaults.max_iters),
            ..defaults
        },
        min_inliers: min_inliers.unwrap_or(COLMAP_MIN_NUM_INLIERS),
        ..PairConfig::default()
    };
    // `verify_matches` is the library's verification of a pair (the fit, then the inlier
    // minimum); it takes features, of which it reads the frame positions only.
    let (fa, fb) = (positions_only(&p0, "kpts0"), positions_only(&p1, "kpts1"));
    let found = Matches {
        distances: vec![0.0; pairs.len()],
        pairs,
    };
    let result = py
        .detach(|| {
            verify_matches(
                &fa,
                &fb,
                found,
                &config,
                cameras.as_ref().map(|(a, b)| (a, b)),
            )
        })
        .map_err(|e| to_py(e, ""))?;
    let v = result
        .verification
        .ok_or_else(|| value_error("verify: no verification ran"))?;
    let d = PyDict::new(py);
    let model = v
        .model
        .map(|m| PyArray2::from_owned_array(py, Array2::from_shape_fn((3, 3), |(r, c)| m[r][c])));
    d.set_item("model", model)?;
    d.set_item("inliers", PyArray1::from_slice(py, &v.inliers))?;
    d.set_item("num_inliers", v.num_inliers)?;
    d.set_item("reason", v.reason)?;
    d.set_item("kind", model_name(v.kind))?;
    let pose = match v.pose {
        Some(p) => {
            let pd = PyDict::new(py);
            let r = Array2::from_shape_fn((3, 3), |(i, j)| p.r[i][j]);
            pd.set_item("R", PyArray2::from_owned_array(py, r))?;
            pd.set_item("t", PyArray1::from_slice(py, &p.t))?;
            pd.set_item("num_in_front", p.num_in_front)?;
            Some(pd)
        }
        None => None,
    };
    d.set_item("pose", pose)?;
    Ok(d)
}

fn model_name(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Fundamental => "fundamental",
        ModelKind::Homography => "homography",
        ModelKind::Essential => "essential",
    }
}

/// Features holding only keypoint positions (what verification reads); `name` stands for the
/// image in the library's messages.
fn positions_only(points: &[[f32; 2]], name: &str) -> Features {
    Features {
        frames: points
            .iter()
            .map(|p| Frame {
                x: p[0],
                y: p[1],
                a: [[1.0, 0.0], [0.0, 1.0]],
            })
            .collect(),
        scores: vec![0.0; points.len()],
        descriptors: Descriptors::Float(Array2::zeros((points.len(), 0))),
        meta: FeatureMeta {
            model: String::new(),
            model_sha256: None,
            detector: String::new(),
            image_width: 0,
            image_height: 0,
            image: name.to_string(),
            name: None,
            provenance: None,
            content: None,
        },
    }
}
