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
//! `vl_sift` (VLFeat's SIFT filter, not `vl_covdet`) is the third: [`detect_vlfeat_sift`] runs
//! it as COLMAP 4's CPU SIFT extraction does (`SiftCPUFeatureExtractor::Extract`,
//! colmap/feature/sift.cc: 4 octaves from −1, 3 levels, its peak and edge thresholds, every
//! orientation `vl_sift_calc_keypoint_orientations` finds, in its order). Why: descl's network
//! on COLMAP 4's own keypoints maps Herz-Jesus-P8 better than pycolmap 4's whole pipeline and
//! than the network on descl's OpenCV DoG (docs/BENCHMARKS.md "Stage swaps"); OpenCV's and
//! VLFeat's DoG agree on 89 % of locations within 1 px but only 57 % within 0.1 px.
//!
//! Built only with the cargo feature `vlfeat` (links `libvl.so`); without it these detectors
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

/// COLMAP's `SiftExtractionOptions::num_octaves` default: `vl_sift_new`'s octaves, from
/// [`VL_SIFT_FIRST_OCTAVE`].
pub const COLMAP_SIFT_NUM_OCTAVES: i32 = 4;

/// COLMAP's `SiftExtractionOptions::octave_resolution` default: DoG levels per octave.
pub const COLMAP_SIFT_OCTAVE_RESOLUTION: i32 = 3;

/// COLMAP's `SiftExtractionOptions::first_octave` default: the image upsampled ×2.
pub const VL_SIFT_FIRST_OCTAVE: i32 = -1;

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

    /// `VlSiftKeypoint` (vl/sift.h, VLFeat 0.9.21).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct VlSiftKeypoint {
        pub o: c_int,
        pub ix: c_int,
        pub iy: c_int,
        pub is: c_int,
        pub x: c_float,
        pub y: c_float,
        pub s: c_float,
        pub sigma: c_float,
    }

    /// `VlSiftFilt` (vl/sift.h, VLFeat 0.9.21), field for field: its getters and setters
    /// (`vl_sift_get_keypoints`, `vl_sift_set_peak_thresh`, …) are inline in the header, with
    /// no symbol to link, so this layout stands in for them. The test
    /// `sift_filter_layout_matches_the_library` checks it against what `vl_sift_new` and the
    /// setters write.
    #[repr(C)]
    pub struct VlSiftFilt {
        pub sigman: c_double,
        pub sigma0: c_double,
        pub sigmak: c_double,
        pub dsigma0: c_double,
        pub width: c_int,
        pub height: c_int,
        pub octaves: c_int,
        pub levels: c_int,
        pub o_min: c_int,
        pub s_min: c_int,
        pub s_max: c_int,
        pub o_cur: c_int,
        pub temp: *mut c_float,
        pub octave: *mut c_float,
        pub dog: *mut c_float,
        pub octave_width: c_int,
        pub octave_height: c_int,
        pub gauss_filter: *mut c_float,
        pub gauss_filter_sigma: c_double,
        pub gauss_filter_width: usize,
        pub keys: *mut VlSiftKeypoint,
        pub nkeys: c_int,
        pub keys_res: c_int,
        pub peak_thresh: c_double,
        pub edge_thresh: c_double,
        pub norm_thresh: c_double,
        pub magnif: c_double,
        pub window_size: c_double,
        pub grad: *mut c_float,
        pub grad_o: c_int,
    }

    /// `VL_ERR_EOF` (vl/generic.h): `vl_sift_process_*_octave` has no further octave.
    pub const VL_ERR_EOF: c_int = 5;

    #[link(name = "vl")]
    extern "C" {
        pub fn vl_sift_new(
            width: c_int,
            height: c_int,
            noctaves: c_int,
            nlevels: c_int,
            o_min: c_int,
        ) -> *mut VlSiftFilt;
        pub fn vl_sift_delete(f: *mut VlSiftFilt);
        pub fn vl_sift_process_first_octave(f: *mut VlSiftFilt, im: *const c_float) -> c_int;
        pub fn vl_sift_process_next_octave(f: *mut VlSiftFilt) -> c_int;
        pub fn vl_sift_detect(f: *mut VlSiftFilt);
        pub fn vl_sift_calc_keypoint_orientations(
            f: *mut VlSiftFilt,
            angles: *mut c_double,
            k: *const VlSiftKeypoint,
        ) -> c_int;

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

/// Owns a `VlSiftFilt` and deletes it on every path.
#[cfg(feature = "vlfeat")]
struct SiftFilt(*mut ffi::VlSiftFilt);

#[cfg(feature = "vlfeat")]
impl Drop for SiftFilt {
    fn drop(&mut self) {
        // SAFETY: the pointer came from vl_sift_new, is non-null, and is deleted once.
        unsafe { ffi::vl_sift_delete(self.0) }
    }
}

/// VLFeat's SIFT keypoints of `img` as COLMAP 4's CPU extraction finds them, before its
/// `max_num_features` selection: `vl_sift` with [`COLMAP_SIFT_NUM_OCTAVES`] octaves from
/// [`VL_SIFT_FIRST_OCTAVE`], [`COLMAP_SIFT_OCTAVE_RESOLUTION`] levels, `peak_threshold` (on
/// |DoG| of the image in [0, 1]) and `edge_threshold`; one frame per orientation
/// `vl_sift_calc_keypoint_orientations` finds (≤ 4), in VLFeat's order (octave, then the
/// keypoints of `vl_sift_detect`), as descl frames `a = m·σ·R(θ)` (COLMAP's `FeatureKeypoint`
/// shape times `magnification`). The score is |DoG| at the extremum's sample, shared by the
/// frames of one location ([`crate::detect::Selection::Colmap`] then keeps COLMAP's levels
/// and its first two orientations).
#[cfg(feature = "vlfeat")]
pub fn detect_vlfeat_sift(
    img: &GrayImage,
    peak_threshold: f64,
    edge_threshold: f64,
    magnification: f32,
) -> Result<Vec<Detection>> {
    let (w, h) = (img.width, img.height);
    // VLFeat's smallest octave must hold a pixel; such tiny images have no keypoints.
    if w < 8 || h < 8 {
        return Ok(Vec::new());
    }
    let dim = |v: usize| {
        std::os::raw::c_int::try_from(v)
            .map_err(|_| Error::InvalidInput(format!("VLFeat: a {w}×{h} image is too large")))
    };
    // SAFETY: positive sizes and VLFeat's documented octave/level arguments; a null result
    // (allocation failure) is checked before use.
    let filt = SiftFilt(unsafe {
        ffi::vl_sift_new(
            dim(w)?,
            dim(h)?,
            COLMAP_SIFT_NUM_OCTAVES,
            COLMAP_SIFT_OCTAVE_RESOLUTION,
            VL_SIFT_FIRST_OCTAVE,
        )
    });
    if filt.0.is_null() {
        return Err(Error::InvalidInput("VLFeat: vl_sift_new failed".into()));
    }
    let m = magnification;
    let mut out = Vec::new();
    let mut angles = [0f64; 4];
    // SAFETY: `filt.0` is a live filter for a w×h image; `img.data` holds w·h floats in
    // row-major order (VLFeat copies it into its scale space). After `vl_sift_detect` the
    // filter holds `nkeys` keypoints at `keys` and the octave's DoG (levels s_min..s_max−1,
    // octave_width × octave_height each) at `dog`, valid until the next octave is processed;
    // every read below happens before that.
    unsafe {
        // vl_sift_set_peak_thresh and vl_sift_set_edge_thresh, which are inline.
        (*filt.0).peak_thresh = peak_threshold;
        (*filt.0).edge_thresh = edge_threshold;
        let mut status = ffi::vl_sift_process_first_octave(filt.0, img.data.as_ptr());
        while status == ffi::VL_ERR_OK {
            ffi::vl_sift_detect(filt.0);
            let f = &*filt.0;
            let n = usize::try_from(f.nkeys).unwrap_or(0);
            let keys: &[ffi::VlSiftKeypoint] = if n == 0 || f.keys.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(f.keys, n)
            };
            let (ow, oh) = (f.octave_width as isize, f.octave_height as isize);
            for k in keys {
                let at = (k.is - f.s_min) as isize * ow * oh + k.iy as isize * ow + k.ix as isize;
                let inside = (0..(f.s_max - f.s_min) as isize * ow * oh).contains(&at);
                let score = if inside && !f.dog.is_null() {
                    (*f.dog.offset(at)).abs()
                } else {
                    0.0
                };
                let found = ffi::vl_sift_calc_keypoint_orientations(filt.0, angles.as_mut_ptr(), k);
                for &theta in &angles[..found.clamp(0, 4) as usize] {
                    let (sin, cos) = (theta as f32).sin_cos();
                    let s = m * k.sigma;
                    let frame = Frame {
                        x: k.x,
                        y: k.y,
                        a: [[s * cos, -s * sin], [s * sin, s * cos]],
                    };
                    if frame.to_row().iter().all(|v| v.is_finite()) {
                        out.push(Detection { frame, score });
                    }
                }
            }
            status = ffi::vl_sift_process_next_octave(filt.0);
        }
        if status != ffi::VL_ERR_EOF && status != ffi::VL_ERR_OK {
            return Err(Error::InvalidInput(format!(
                "VLFeat: vl_sift failed on a {w}×{h} image (error {status})"
            )));
        }
    }
    Ok(out)
}

/// Without the cargo feature `vlfeat`: an error naming it.
#[cfg(not(feature = "vlfeat"))]
pub fn detect_vlfeat_sift(
    _img: &GrayImage,
    _peak_threshold: f64,
    _edge_threshold: f64,
    _magnification: f32,
) -> Result<Vec<Detection>> {
    Err(Error::InvalidInput(
        "VLFeat's SIFT needs descl built with the cargo feature `vlfeat` (Debian: libvlfeat-dev)"
            .into(),
    ))
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

    /// `ffi::VlSiftFilt` mirrors the library's struct: what `vl_sift_new`, the setters and the
    /// first octave write is read back at the mirrored fields (a wrong layout reads garbage
    /// and would make `detect_vlfeat_sift` read keypoints from the wrong place).
    #[test]
    fn sift_filter_layout_matches_the_library() {
        let img = square(200, 180);
        // SAFETY: as in detect_vlfeat_sift.
        unsafe {
            let f = SiftFilt(ffi::vl_sift_new(200, 180, 4, 3, -1));
            assert!(!f.0.is_null());
            let r = &*f.0;
            assert_eq!(
                (r.width, r.height, r.octaves, r.levels, r.o_min),
                (200, 180, 4, 3, -1)
            );
            assert_eq!((r.s_min, r.s_max), (-1, 4));
            // vl_sift_new's defaults: no peak threshold, edge 10, magnif 3, window 2 (NBP / 2).
            assert_eq!(
                (r.peak_thresh, r.edge_thresh, r.magnif, r.window_size),
                (0.0, 10.0, 3.0, 2.0)
            );
            assert_eq!(ffi::vl_sift_process_first_octave(f.0, img.data.as_ptr()), 0);
            let r = &*f.0;
            assert_eq!((r.o_cur, r.octave_width, r.octave_height), (-1, 400, 360));
            ffi::vl_sift_detect(f.0);
            let r = &*f.0;
            assert!(r.nkeys >= 0 && r.nkeys <= r.keys_res);
        }
    }

    /// SIFT on a Gaussian blob of σ = 6 at (100, 90): a keypoint at its centre whose scale is
    /// the blob's (the DoG of a Gaussian of σ peaks at scale σ/√… within the level spacing),
    /// every frame finite with a positive score; a tiny image gives none.
    #[test]
    fn vlfeat_sift_finds_a_blob() {
        let (w, h, sigma) = (200usize, 180usize, 6.0f32);
        let data = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as f32 - 100.0, (i / w) as f32 - 90.0);
                0.1 + 0.8 * (-(x * x + y * y) / (2.0 * sigma * sigma)).exp()
            })
            .collect();
        let img = GrayImage::from_vec(w, h, data).unwrap();
        let d = detect_vlfeat_sift(&img, 0.02 / 3.0, 10.0, 6.0).unwrap();
        let centre = d
            .iter()
            .find(|f| (f.frame.x - 100.0).abs() < 0.5 && (f.frame.y - 90.0).abs() < 0.5);
        let scales: Vec<_> = d
            .iter()
            .map(|f| (f.frame.x, f.frame.y, f.frame.scale() / 6.0))
            .collect();
        let c = centre.unwrap_or_else(|| panic!("no keypoint at the centre: {scales:?}"));
        let s = c.frame.scale() / 6.0;
        assert!((sigma / 2.0..sigma * 2.0).contains(&s), "{scales:?}");
        assert!(d.iter().all(|f| f.score > 0.0));
        let tiny = GrayImage::filled(4, 4, 0.5);
        assert!(detect_vlfeat_sift(&tiny, 0.0, 10.0, 6.0)
            .unwrap()
            .is_empty());
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
