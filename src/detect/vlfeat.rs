//! VLFeat's covariant detectors (`vl_covdet`, VLFeat 0.9.21 as Debian's `libvlfeat-dev` ships
//! it) as reference implementations: Harris-Affine (Harris-Laplace + affine shape adaptation)
//! and DoG, run exactly as VLFeat's own MATLAB front end `vl_covdet` runs them with its
//! defaults (`toolbox/sift/vl_covdet.c`), so that `descl bench matching-score` can put
//! descl's detectors beside a reference that researchers trust, on the same images, frames
//! described by the same descriptor.
//!
//! Why a binding and not a port: the point is an *independent* implementation. The FFI below
//! is the handful of `vl/covdet.h` calls `vl_covdet.c` makes, in its order:
//! `vl_covdet_new(method)` → `put_image` → `detect` (Harris-Laplace selects each point's
//! Laplacian scales inside `detect`) → `drop_features_outside(margin)` → optionally
//! `extract_affine_shape` → `extract_orientations`.
//!
//! Conventions. VLFeat's C API takes a row-major image (`transposed` false: x is the column),
//! pixel centres at integer coordinates (the MATLAB front end adds 1) — the frame convention
//! of [`Frame`] — and gives each feature an oriented ellipse `(x, y, A)` whose matrix maps the
//! unit circle of the canonical frame to the region of radius σ, the detector's characteristic
//! scale (DoG: SIFT's σ; Harris-Laplace: the scale where the normalised Laplacian peaks). A
//! descl frame maps the patch square [-1, 1]² to `m·σ` (ARCHITECTURE.md "Conventions"), so
//! `a = m·A`. The response is VLFeat's `peakScore` (|DoG| or the Harris cornerness), by which
//! frames are ranked and capped like descl's own.
//!
//! Built only with the cargo feature `vlfeat` (links `libvl.so`); without it both detectors
//! are an error naming the feature, and the matching-score suite reports them as skipped.

use crate::error::{Error, Result};
use crate::frame::Detection;
#[cfg(feature = "vlfeat")]
use crate::frame::Frame;
use crate::image::GrayImage;

/// `vl_covdet.c`'s default boundary margin: with its default SIFT descriptor
/// (`PatchRelativeExtent` 7.5) and without padded warping, features whose disc of 7.5 σ leaves
/// the image are dropped before affine adaptation.
pub const VL_COVDET_BOUNDARY_MARGIN: f64 = 7.5;

/// `vl_covdet.c`'s default `DoubleImage`: the first octave is the image upsampled ×2.
pub const VL_COVDET_FIRST_OCTAVE: isize = -1;

/// Which VLFeat method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `VL_COVDET_METHOD_DOG`, with orientations.
    Dog,
    /// `VL_COVDET_METHOD_HARRIS_LAPLACE` + `vl_covdet_extract_affine_shape`, with orientations
    /// (`vl_covdet(I, 'Method', 'HarrisLaplace', 'EstimateAffineShape', true,
    /// 'EstimateOrientation', true)`).
    HarrisAffine,
}

#[cfg(feature = "vlfeat")]
mod ffi {
    use std::os::raw::{c_double, c_float, c_int, c_void};

    /// `VlCovDetMethod` (vl/covdet.h): DoG = 1, Hessian, HessianLaplace, HarrisLaplace, …
    pub const VL_COVDET_METHOD_DOG: c_int = 1;
    pub const VL_COVDET_METHOD_HARRIS_LAPLACE: c_int = 4;
    /// `VL_ERR_OK` (vl/generic.h).
    pub const VL_ERR_OK: c_int = 0;

    /// `VlFrameOrientedEllipse`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct VlFrameOrientedEllipse {
        pub x: c_float,
        pub y: c_float,
        pub a11: c_float,
        pub a12: c_float,
        pub a21: c_float,
        pub a22: c_float,
    }

    /// `VlCovDetFeature`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct VlCovDetFeature {
        pub frame: VlFrameOrientedEllipse,
        pub peak_score: c_float,
        pub edge_score: c_float,
        pub orientation_score: c_float,
        pub laplacian_scale_score: c_float,
    }

    #[link(name = "vl")]
    extern "C" {
        pub fn vl_covdet_new(method: c_int) -> *mut c_void;
        pub fn vl_covdet_delete(this: *mut c_void);
        pub fn vl_covdet_set_first_octave(this: *mut c_void, o: isize);
        pub fn vl_covdet_put_image(
            this: *mut c_void,
            image: *const c_float,
            width: usize,
            height: usize,
        ) -> c_int;
        pub fn vl_covdet_detect(this: *mut c_void);
        pub fn vl_covdet_drop_features_outside(this: *mut c_void, margin: c_double);
        pub fn vl_covdet_extract_affine_shape(this: *mut c_void);
        pub fn vl_covdet_extract_orientations(this: *mut c_void);
        pub fn vl_covdet_get_num_features(this: *const c_void) -> usize;
        pub fn vl_covdet_get_features(this: *mut c_void) -> *mut c_void;
    }
}

/// Owns a `VlCovDet` and deletes it on every path.
#[cfg(feature = "vlfeat")]
struct CovDet(*mut std::os::raw::c_void);

#[cfg(feature = "vlfeat")]
impl Drop for CovDet {
    fn drop(&mut self) {
        // SAFETY: the pointer came from vl_covdet_new, is non-null, and is deleted once.
        unsafe { ffi::vl_covdet_delete(self.0) }
    }
}

/// VLFeat's frames of `img` with `method`, as descl frames of magnification `magnification`
/// (unsorted; [`crate::detect::detect`] ranks and caps them).
#[cfg(feature = "vlfeat")]
pub fn detect_vlfeat(
    img: &GrayImage,
    method: Method,
    magnification: f32,
) -> Result<Vec<Detection>> {
    let (w, h) = (img.width, img.height);
    if w < 2 || h < 2 {
        return Ok(Vec::new());
    }
    let code = match method {
        Method::Dog => ffi::VL_COVDET_METHOD_DOG,
        Method::HarrisAffine => ffi::VL_COVDET_METHOD_HARRIS_LAPLACE,
    };
    // SAFETY: vl_covdet_new has no preconditions; a null result (allocation failure) is
    // checked before use.
    let det = CovDet(unsafe { ffi::vl_covdet_new(code) });
    if det.0.is_null() {
        return Err(Error::InvalidInput("VLFeat: vl_covdet_new failed".into()));
    }
    let pixels = &img.data;
    // SAFETY: `det.0` is a live VlCovDet; `pixels` holds w·h floats in row-major order and
    // outlives the calls (VLFeat copies the image into its scale space in put_image).
    unsafe {
        ffi::vl_covdet_set_first_octave(det.0, VL_COVDET_FIRST_OCTAVE);
        if ffi::vl_covdet_put_image(det.0, pixels.as_ptr(), w, h) != ffi::VL_ERR_OK {
            return Err(Error::InvalidInput(format!(
                "VLFeat: vl_covdet_put_image failed on a {w}×{h} image"
            )));
        }
        ffi::vl_covdet_detect(det.0);
        ffi::vl_covdet_drop_features_outside(det.0, VL_COVDET_BOUNDARY_MARGIN);
        if method == Method::HarrisAffine {
            ffi::vl_covdet_extract_affine_shape(det.0);
        }
        ffi::vl_covdet_extract_orientations(det.0);
    }
    // SAFETY: after the calls above the detector holds `n` features at `get_features`, valid
    // until the detector is changed or deleted; they are copied out before `det` drops.
    let features: Vec<ffi::VlCovDetFeature> = unsafe {
        let n = ffi::vl_covdet_get_num_features(det.0);
        let p = ffi::vl_covdet_get_features(det.0) as *const ffi::VlCovDetFeature;
        if n == 0 || p.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(p, n).to_vec()
        }
    };
    let m = magnification;
    Ok(features
        .iter()
        .filter(|f| {
            let e = &f.frame;
            [e.x, e.y, e.a11, e.a12, e.a21, e.a22, f.peak_score]
                .iter()
                .all(|v| v.is_finite())
        })
        .map(|f| {
            let e = &f.frame;
            Detection {
                frame: Frame {
                    x: e.x,
                    y: e.y,
                    a: [[m * e.a11, m * e.a12], [m * e.a21, m * e.a22]],
                },
                score: f.peak_score.abs(),
            }
        })
        .collect())
}

/// Without the cargo feature `vlfeat`: an error naming it.
#[cfg(not(feature = "vlfeat"))]
pub fn detect_vlfeat(
    _img: &GrayImage,
    method: Method,
    _magnification: f32,
) -> Result<Vec<Detection>> {
    Err(Error::InvalidInput(format!(
        "VLFeat's {method:?} needs descl built with the cargo feature `vlfeat` (Debian: libvlfeat-dev)"
    )))
}

#[cfg(all(test, feature = "vlfeat"))]
mod tests {
    use super::*;

    /// A bright square (corners at (80, 70) and (120, 110)) on a dark ground, blurred.
    fn square(w: usize, h: usize) -> GrayImage {
        let mut data = vec![0.1f32; w * h];
        for y in 70..=110 {
            for x in 80..=120 {
                data[y * w + x] = 0.9;
            }
        }
        GrayImage::from_vec(w, h, data).unwrap().gaussian_blur(1.0)
    }

    /// Harris-Affine on a square: frames at its corners (each within 3 px of one), ellipses
    /// of positive area; and a tiny image gives no frames, not a crash.
    #[test]
    fn harris_affine_finds_the_corners_of_a_square() {
        let img = square(200, 180);
        let d = detect_vlfeat(&img, Method::HarrisAffine, 6.0).unwrap();
        assert!(!d.is_empty());
        let corners = [(80.0, 70.0), (120.0, 70.0), (80.0, 110.0), (120.0, 110.0)];
        let mut seen = [false; 4];
        for f in &d {
            assert!(f.frame.scale() > 0.0);
            for (k, (x, y)) in corners.iter().enumerate() {
                if (f.frame.x - x).abs() < 3.0 && (f.frame.y - y).abs() < 3.0 {
                    seen[k] = true;
                }
            }
        }
        assert_eq!(
            seen,
            [true; 4],
            "{:?}",
            d.iter().map(|f| (f.frame.x, f.frame.y)).collect::<Vec<_>>()
        );
        let tiny = GrayImage::filled(1, 1, 0.5);
        assert!(detect_vlfeat(&tiny, Method::HarrisAffine, 6.0)
            .unwrap()
            .is_empty());
    }
}
