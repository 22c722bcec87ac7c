//! numpy arrays in and out, checked at the boundary: every input's dtype and shape are checked
//! here, with a message that names the argument and says what was expected and what came
//! ("desc0: expected float32 N×D or uint8 N×32, got float64 (5, 128)"), so nothing malformed
//! reaches the library. Inputs are copied into the library's own types (descriptors, points,
//! images are small next to the work done on them), which also lets the work run with the GIL
//! released.

use crate::errors::value_error;
use descl::describe::{BinaryDescriptor, Descriptors, BINARY_BITS};
use descl::features::Features;
use descl::frame::Frame;
use descl::geometry::Intrinsics;
use descl::image::{GrayImage, LUMA_BT601, MAX_IMAGE_PIXELS, MIN_IMAGE_SIDE};
use ndarray::Array2;
use numpy::{
    PyArray2, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Bytes of one binary descriptor in numpy (bit i = bit i % 8 of byte i / 8, as in features
/// files).
pub const BINARY_BYTES: usize = BINARY_BITS / 8;

/// `obj` as a numpy array: arrays as they are, anything else through `numpy.asarray` (lists,
/// tuples), so a message can always report a dtype and a shape.
fn as_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return Ok(a.clone());
    }
    let np = numpy::get_array_module(obj.py())?;
    let a = np.call_method1("asarray", (obj,))?;
    Ok(a.cast_into::<PyUntypedArray>()?)
}

/// "float64 (5, 128)": an array's dtype and shape as numpy prints them.
fn describe(a: &Bound<'_, PyUntypedArray>) -> String {
    let dtype = a
        .dtype()
        .str()
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    let shape = match a.shape() {
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{dtype} {shape}")
}

fn is<T: numpy::Element>(a: &Bound<'_, PyUntypedArray>) -> bool {
    a.dtype().is_equiv_to(&numpy::dtype::<T>(a.py()))
}

/// numpy's kind letter of the dtype: b'f' float, b'i' signed, b'u' unsigned, ...
fn kind(a: &Bound<'_, PyUntypedArray>) -> u8 {
    a.dtype().kind()
}

/// `a` converted to `T` (numpy `astype`, a copy) and read as a 2-D array.
fn as_2d<T: numpy::Element + Clone>(a: &Bound<'_, PyUntypedArray>) -> PyResult<Array2<T>> {
    let converted = a.call_method1("astype", (numpy::dtype::<T>(a.py()),))?;
    Ok(converted
        .cast::<PyArray2<T>>()?
        .readonly()
        .as_array()
        .to_owned())
}

/// Descriptors: float32 N×D (compared by L2) or uint8 N×32 (256-bit binary, Hamming). The
/// dtype decides; nothing is converted, since a float64 or int array is more likely a mistake
/// than a descriptor set.
pub fn descriptors(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Descriptors> {
    let a = as_array(obj)?;
    let bad = || {
        value_error(format!(
            "{name}: expected float32 N×D or uint8 N×{BINARY_BYTES}, got {}",
            describe(&a)
        ))
    };
    if a.ndim() != 2 {
        return Err(bad());
    }
    if is::<f32>(&a) {
        let d = a.cast::<PyArray2<f32>>()?.readonly().as_array().to_owned();
        return Ok(Descriptors::Float(d));
    }
    if is::<u8>(&a) && a.shape()[1] == BINARY_BYTES {
        let d = a.cast::<PyArray2<u8>>()?.readonly();
        let codes = d
            .as_array()
            .outer_iter()
            .map(|row| {
                let mut code: BinaryDescriptor = [0; 4];
                for (w, word) in code.iter_mut().enumerate() {
                    let bytes: [u8; 8] = std::array::from_fn(|b| row[w * 8 + b]);
                    *word = u64::from_le_bytes(bytes);
                }
                code
            })
            .collect();
        return Ok(Descriptors::Binary(codes));
    }
    Err(bad())
}

/// The kind and width of descriptors for messages: "float32 N×128", "uint8 N×32 (binary)".
pub fn descriptor_kind(d: &Descriptors) -> String {
    match d {
        Descriptors::Float(a) => format!("float32 N×{}", a.ncols()),
        Descriptors::Binary(_) => format!("uint8 N×{BINARY_BYTES} (binary)"),
    }
}

/// Keypoint positions: a real-valued N×2 array (x, y in descl's pixel convention). Frames
/// (N×6, as `Extractor.extract` returns them) are accepted too: their first two columns.
pub fn points(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<[f32; 2]>> {
    let a = as_array(obj)?;
    let ok =
        a.ndim() == 2 && matches!(a.shape()[1], 2 | 6) && matches!(kind(&a), b'f' | b'i' | b'u');
    if !ok {
        return Err(value_error(format!(
            "{name}: expected a float N×2 array of keypoints (x, y) or N×6 frames, got {}",
            describe(&a)
        )));
    }
    let p = as_2d::<f64>(&a)?;
    if let Some((i, _)) = p
        .outer_iter()
        .enumerate()
        .find(|(_, r)| !(r[0].is_finite() && r[1].is_finite()))
    {
        return Err(value_error(format!("{name}: keypoint {i} is not finite")));
    }
    // Frames and the library's verification hold positions as f32 (OpenCV's Point2f).
    Ok(p.outer_iter().map(|r| [r[0] as f32, r[1] as f32]).collect())
}

/// Frames: a real-valued N×6 array (x, y, a11, a12, a21, a22), as `Extractor.extract` returns
/// them. Finiteness and position are the library's checks (`features::check_frames`), which
/// know the image.
pub fn frames(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<Frame>> {
    let a = as_array(obj)?;
    let ok = a.ndim() == 2 && a.shape()[1] == 6 && matches!(kind(&a), b'f' | b'i' | b'u');
    if !ok {
        return Err(value_error(format!(
            "{name}: expected a float N×6 array of frames (x, y, a11, a12, a21, a22), got {}",
            describe(&a)
        )));
    }
    let f = as_2d::<f32>(&a)?;
    Ok(f.outer_iter()
        .map(|r| Frame::from_row([r[0], r[1], r[2], r[3], r[4], r[5]]))
        .collect())
}

/// Matches: an integer K×2 array of (index in 0, index in 1), each within its side's count.
pub fn matches(obj: &Bound<'_, PyAny>, name: &str, n: [usize; 2]) -> PyResult<Vec<[u32; 2]>> {
    let a = as_array(obj)?;
    let ok = a.ndim() == 2 && a.shape()[1] == 2 && matches!(kind(&a), b'i' | b'u');
    if !ok {
        return Err(value_error(format!(
            "{name}: expected an integer K×2 array of index pairs, got {}",
            describe(&a)
        )));
    }
    let m = as_2d::<i64>(&a)?;
    let mut out = Vec::with_capacity(m.nrows());
    for (k, row) in m.outer_iter().enumerate() {
        let mut pair = [0u32; 2];
        for side in 0..2 {
            let v = row[side];
            if v < 0 || v as u64 >= n[side] as u64 {
                return Err(value_error(format!(
                    "{name}: match {k} has index {v} for kpts{side}, which has {} keypoints",
                    n[side]
                )));
            }
            pair[side] = v as u32;
        }
        out.push(pair);
    }
    Ok(out)
}

/// Intrinsics from a 3×3 calibration matrix K = [[fx, s, cx], [0, fy, cy], [0, 0, 1]] (the
/// skew s is ignored, as descl's intrinsics have none).
pub fn intrinsics(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Intrinsics> {
    let a = as_array(obj)?;
    if !(a.shape() == [3, 3] && matches!(kind(&a), b'f' | b'i' | b'u')) {
        return Err(value_error(format!(
            "{name}: expected a 3×3 calibration matrix, got {}",
            describe(&a)
        )));
    }
    let k = as_2d::<f64>(&a)?;
    let (fx, fy, cx, cy) = (k[[0, 0]], k[[1, 1]], k[[0, 2]], k[[1, 2]]);
    let valid =
        [fx, fy].iter().all(|f| f.is_finite() && *f > 0.0) && cx.is_finite() && cy.is_finite();
    if !valid || k[[2, 2]] != 1.0 || k[[1, 0]] != 0.0 || k[[2, 0]] != 0.0 || k[[2, 1]] != 0.0 {
        return Err(value_error(format!(
            "{name}: expected [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0, got {k}"
        )));
    }
    Ok(Intrinsics { fx, fy, cx, cy })
}

/// A gray image from an array, converted exactly as `descl::image::load_gray` converts a
/// decoded file: H×W uint8 (v / 255), H×W float32 already in [0, 1], H×W×3 uint8 RGB or
/// H×W×4 RGBA (BT.601 luma of R, G, B, alpha ignored). Sizes are held to the library's limits.
pub fn gray_image(obj: &Bound<'_, PyAny>) -> PyResult<GrayImage> {
    let a = as_array(obj)?;
    let expected = "expected an H×W uint8 or float32 (values in [0, 1]) gray array, or an \
                    H×W×3 (RGB) / H×W×4 (RGBA) uint8 array";
    let bad = || value_error(format!("image: {expected}, got {}", describe(&a)));
    let shape = a.shape().to_vec();
    let (h, w) = match shape[..] {
        [h, w] => (h, w),
        [h, w, 3 | 4] => (h, w),
        _ => return Err(bad()),
    };
    if w < MIN_IMAGE_SIDE || h < MIN_IMAGE_SIDE {
        return Err(value_error(format!(
            "image: array is {w}×{h}, smaller than the minimum {MIN_IMAGE_SIDE}×{MIN_IMAGE_SIDE}"
        )));
    }
    if (w as u64) * (h as u64) > MAX_IMAGE_PIXELS {
        return Err(value_error(format!(
            "image: array is {w}×{h} = {} pixels, more than the limit of {MAX_IMAGE_PIXELS}",
            w as u64 * h as u64
        )));
    }
    let data: Vec<f32> = if is::<u8>(&a) {
        let v = a.cast::<PyArrayDyn<u8>>()?.readonly();
        let v = v.as_array();
        if shape.len() == 2 {
            v.iter().map(|&p| p as f32 / 255.0).collect()
        } else {
            // The same expression as the library's `luma` (image.rs), in the same order.
            v.rows()
                .into_iter()
                .map(|p| {
                    (LUMA_BT601[0] * p[0] as f32
                        + LUMA_BT601[1] * p[1] as f32
                        + LUMA_BT601[2] * p[2] as f32)
                        / 255.0
                })
                .collect()
        }
    } else if is::<f32>(&a) && shape.len() == 2 {
        let v = a.cast::<PyArrayDyn<f32>>()?.readonly();
        let data: Vec<f32> = v.as_array().iter().copied().collect();
        if let Some(bad) = data.iter().find(|v| !(0.0..=1.0).contains(*v)) {
            return Err(value_error(format!(
                "image: float32 values must be in [0, 1], found {bad} (divide 8-bit values by \
                 255, or pass the uint8 array)"
            )));
        }
        data
    } else {
        return Err(bad());
    };
    GrayImage::from_vec(w, h, data).map_err(|e| crate::errors::to_py(e, "image"))
}

/// One image's features as a dict of numpy arrays (the members of a features file, plus the
/// keypoint positions alone): `keypoints` N×2 float32, `frames` N×6 float32 (x, y, a11, a12,
/// a21, a22), `scores` N float32, `descriptors` N×D float32 or N×32 uint8, `image_size`
/// (W, H), and the provenance (`model`, `model_sha256`, `detector`, `image`).
pub fn features_dict<'py>(py: Python<'py>, f: Features) -> PyResult<Bound<'py, PyDict>> {
    let n = f.frames.len();
    let keypoints =
        Array2::from_shape_fn(
            (n, 2),
            |(i, j)| {
                if j == 0 {
                    f.frames[i].x
                } else {
                    f.frames[i].y
                }
            },
        );
    let rows: Vec<[f32; 6]> = f.frames.iter().map(|fr| fr.to_row()).collect();
    let frames = Array2::from_shape_fn((n, 6), |(i, j)| rows[i][j]);
    let d = PyDict::new(py);
    d.set_item("keypoints", PyArray2::from_owned_array(py, keypoints))?;
    d.set_item("frames", PyArray2::from_owned_array(py, frames))?;
    d.set_item("scores", numpy::PyArray1::from_vec(py, f.scores))?;
    match f.descriptors {
        Descriptors::Float(a) => d.set_item("descriptors", PyArray2::from_owned_array(py, a))?,
        Descriptors::Binary(codes) => {
            let bytes: Vec<u8> = codes
                .iter()
                .flat_map(|words| words.iter().flat_map(|w| w.to_le_bytes()))
                .collect();
            let a = Array2::from_shape_vec((codes.len(), BINARY_BYTES), bytes)
                .map_err(|e| value_error(format!("binary descriptors: {e}")))?;
            d.set_item("descriptors", PyArray2::from_owned_array(py, a))?
        }
    }
    d.set_item("image_size", (f.meta.image_width, f.meta.image_height))?;
    d.set_item("model", f.meta.model)?;
    d.set_item("model_sha256", f.meta.model_sha256)?;
    d.set_item("detector", f.meta.detector)?;
    d.set_item("image", f.meta.image)?;
    Ok(d)
}
