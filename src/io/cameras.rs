//! Known cameras for `descl sfm`: the intrinsics a calibrated rig, a robot or a car already
//! has, given as COLMAP takes them, so that the mapper starts from them and holds them fixed.
//!
//! Two forms, both in COLMAP's own parameter order and pixel convention (the top-left pixel's
//! centre at (0.5, 0.5)), so that numbers copied from a COLMAP `cameras.txt` or a calibration
//! tool that targets COLMAP mean the same here:
//!
//! - `--camera-params P1,P2,…` for every image, as COLMAP's `ImageReader.camera_params`, in the
//!   order of `--camera-model` (SIMPLE_PINHOLE `f,cx,cy`; PINHOLE `fx,fy,cx,cy`; SIMPLE_RADIAL
//!   `f,cx,cy,k`);
//! - a per-image file in hloc's `queries_with_intrinsics.txt` layout, one image a line:
//!   `NAME MODEL WIDTH HEIGHT P1 P2 …` (blank lines and `#` comments skipped).
//!
//! A camera that cannot be right for its image is refused before any work: another size than
//! the image's (the file gives one), a principal point outside the image, a focal length that
//! is not positive, or a distortion that folds the image.

use crate::error::{Error, Result};
use crate::geometry::Intrinsics;
use crate::io::colmap::{CameraModel, COLMAP_PIXEL_OFFSET};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest per-image cameras file read: one line of ~100 bytes per image, so 64 MiB holds
/// several hundred thousand images while `/dev/zero` or a wrong huge file fails at once.
pub const MAX_CAMERAS_FILE_BYTES: u64 = 64 << 20;

/// The largest |k| of a SIMPLE_RADIAL camera accepted, in COLMAP's units (k · r² with r in
/// focal lengths). Past it the radial term bends the corners of any real field of view back
/// towards the centre; real lenses, fisheyes aside, stay well under 1.
pub const MAX_RADIAL_K: f64 = 1.0;

// The focal range of every camera descl takes (one definition, beside EXIF's reader).
pub use crate::geometry::{check_focal_length, MAX_FOCAL_FACTOR, MIN_FOCAL_FACTOR};

/// The largest ratio of a pinhole's two focal lengths (fx/fy or fy/fx, the pixel aspect)
/// accepted: 2.5, over the 2× squeeze of anamorphic cinema lenses, the widest of real optics.
/// Past it the two focal lengths are a typing error, not a lens.
pub const MAX_PIXEL_ASPECT: f64 = 2.5;

/// Whether the pinhole `k` (OpenCV's pixels) can be the camera of a `width`×`height` image:
/// both focal lengths within [`check_focal_length`]'s range and within [`MAX_PIXEL_ASPECT`]
/// of each other, the principal point inside the image (its border included: the crop of a
/// photograph's half has it there). `Err` says why not.
pub fn check_pinhole(k: &Intrinsics, width: u32, height: u32) -> std::result::Result<(), String> {
    for f in [k.fx, k.fy] {
        check_focal_length(f, width, height)?;
    }
    if k.fx.max(k.fy) > MAX_PIXEL_ASPECT * k.fx.min(k.fy) {
        return Err(format!(
            "fx {} and fy {} differ by more than {MAX_PIXEL_ASPECT}× (no lens squeezes pixels more)",
            k.fx, k.fy
        ));
    }
    // COLMAP's pixels, whose image spans 0..=width.
    let offset = f64::from(COLMAP_PIXEL_OFFSET);
    let (cx, cy) = (k.cx + offset, k.cy + offset);
    if !(0.0..=f64::from(width)).contains(&cx) || !(0.0..=f64::from(height)).contains(&cy) {
        return Err(format!(
            "the principal point ({cx}, {cy}) (COLMAP's pixels) is outside the {width}×{height} image"
        ));
    }
    Ok(())
}

/// Refuses, before mapping, a camera of the COLMAP database at `path` that cannot be right
/// for its images, as `--camera-params` is refused: a parameter that is not a finite number,
/// a focal length outside [`check_focal_length`]'s range, and for the models descl writes the
/// parameter count, the principal point outside the image and the radial term
/// ([`MAX_RADIAL_K`]). A NaN or 1e-4 px focal length (an edited database, another tool's) sent
/// pycolmap's mapper into a search that did not end; a negative one was held and "mapped".
pub fn check_database_cameras(path: &Path) -> Result<()> {
    for c in crate::io::colmap::camera_rows(path)? {
        let why = camera_row_problem(&c);
        if let Some(why) = why {
            return Err(Error::format(
                path,
                format!(
                    "camera {} ({}×{}, model {}): {why}; correct or remove it before mapping",
                    c.camera_id, c.width, c.height, c.model
                ),
            ));
        }
    }
    Ok(())
}

/// What is wrong with one database camera ([`check_database_cameras`]), if anything.
fn camera_row_problem(c: &crate::io::colmap::CameraRow) -> Option<String> {
    let (Ok(width), Ok(height)) = (u32::try_from(c.width), u32::try_from(c.height)) else {
        return Some("not a size".into());
    };
    if width == 0 || height == 0 {
        return Some("not a size".into());
    }
    if let Some(v) = c.params.iter().find(|v| !v.is_finite()) {
        return Some(format!("a parameter is not a finite number: {v}"));
    }
    match CameraModel::from_id(c.model) {
        Some(model) => {
            let camera = KnownCamera {
                model,
                params: c.params.clone(),
                size: Some((width, height)),
            };
            camera
                .check_own()
                .and_then(|()| camera.check_image(width, height))
                .err()
        }
        // COLMAP's other models (RADIAL, OPENCV, …) start with the focal length too.
        None => match (COLMAP_MODEL_PARAMS.get(c.model as usize), c.params.first()) {
            (Some(&n), _) if c.model >= 0 && c.params.len() != n => Some(format!(
                "{} parameters, where COLMAP's camera model {} takes {n}",
                c.params.len(),
                c.model
            )),
            (None, _) => Some(format!(
                "camera model {}, not one of COLMAP's (0–{})",
                c.model,
                COLMAP_MODEL_PARAMS.len() - 1
            )),
            (_, None) => Some("no parameters".into()),
            (_, Some(&f)) => check_focal_length(f, width, height).err(),
        },
    }
}

/// The parameter count of each of COLMAP's camera models by id (`colmap/sensor/models.h`:
/// SIMPLE_PINHOLE 3, PINHOLE 4, SIMPLE_RADIAL 4, RADIAL 5, OPENCV 8, OPENCV_FISHEYE 8,
/// FULL_OPENCV 12, FOV 5, SIMPLE_RADIAL_FISHEYE 4, RADIAL_FISHEYE 5, THIN_PRISM_FISHEYE 12).
/// Another id made pycolmap's mapper fail with a traceback and COLMAP's abort (hostile round
/// of 564787c, M4).
const COLMAP_MODEL_PARAMS: [usize; 11] = [3, 4, 4, 5, 8, 8, 12, 5, 4, 5, 12];

/// One known camera: its model and COLMAP parameters, and its size when the source gave one.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownCamera {
    pub model: CameraModel,
    /// COLMAP's parameters in the model's order, COLMAP's pixel convention.
    pub params: Vec<f64>,
    /// Width and height in pixels, when given (the per-image file gives them).
    pub size: Option<(u32, u32)>,
}

impl KnownCamera {
    /// From `model` and `"P1,P2,…"` (`--camera-params`).
    pub fn parse(model: CameraModel, text: &str) -> Result<Self> {
        let params = parse_numbers(text.split(','), || {
            format!(
                "--camera-params {text:?}: expected {} numbers for {} ({})",
                model.num_params(),
                model.name(),
                param_names(model)
            )
        })?;
        let camera = KnownCamera {
            model,
            params,
            size: None,
        };
        camera
            .check_own()
            .map_err(|why| Error::InvalidInput(format!("--camera-params {text:?}: {why}")))?;
        Ok(camera)
    }

    /// Its intrinsics in descl's pixels (OpenCV convention), for verifying pairs.
    pub fn intrinsics(&self) -> Intrinsics {
        let offset = f64::from(COLMAP_PIXEL_OFFSET);
        let p = &self.params;
        let (fx, fy, cx, cy) = match self.model {
            CameraModel::Pinhole => (p[0], p[1], p[2], p[3]),
            CameraModel::SimplePinhole | CameraModel::SimpleRadial => (p[0], p[0], p[1], p[2]),
        };
        Intrinsics {
            fx,
            fy,
            cx: cx - offset,
            cy: cy - offset,
        }
    }

    /// The checks that need no image: the count, finite values, positive focal lengths, a
    /// radial term within [`MAX_RADIAL_K`].
    fn check_own(&self) -> std::result::Result<(), String> {
        let model = self.model;
        if self.params.len() != model.num_params() {
            return Err(format!(
                "{} takes {} parameters ({}), got {}",
                model.name(),
                model.num_params(),
                param_names(model),
                self.params.len()
            ));
        }
        if let Some(v) = self.params.iter().find(|v| !v.is_finite()) {
            return Err(format!("a parameter is not a finite number: {v}"));
        }
        if let Some(f) = self.params[..model.focal_params()]
            .iter()
            .find(|&&f| f <= 0.0)
        {
            return Err(format!("a focal length must be positive, got {f}"));
        }
        if model == CameraModel::SimpleRadial && self.params[3].abs() > MAX_RADIAL_K {
            return Err(format!(
                "radial distortion k = {} is beyond ±{MAX_RADIAL_K}, which folds a real lens's image",
                self.params[3]
            ));
        }
        Ok(())
    }

    /// Whether this camera can be the camera of an image of `width`×`height` pixels: the same
    /// size when it has one, the principal point inside the image. `Err` says why not.
    pub fn check_image(&self, width: u32, height: u32) -> std::result::Result<(), String> {
        if let Some((w, h)) = self.size {
            if (w, h) != (width, height) {
                return Err(format!(
                    "its camera is {w}×{h} pixels but the image is {width}×{height}"
                ));
            }
        }
        for &f in &self.params[..self.model.focal_params()] {
            check_focal_length(f, width, height)?;
        }
        check_pinhole(&self.intrinsics(), width, height)
    }
}

/// The cameras `descl sfm` knows before it starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum KnownCameras {
    /// None: focal length from EXIF or COLMAP's prior, refined by the mapper.
    #[default]
    Unknown,
    /// One camera's parameters for every image (`--camera-params`).
    All(KnownCamera),
    /// A camera per image name, from `file`.
    PerImage {
        file: PathBuf,
        cameras: BTreeMap<String, KnownCamera>,
    },
}

impl KnownCameras {
    /// Reads a per-image file (`NAME MODEL WIDTH HEIGHT P1 P2 …` a line).
    pub fn read_file(path: &Path) -> Result<Self> {
        let text = crate::io::bounded::read_text(path, MAX_CAMERAS_FILE_BYTES, "cameras file")?;
        let mut cameras = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |why: String| Error::format(path, format!("line {}: {why}", i + 1));
            let (name, camera) = parse_line(line).map_err(at)?;
            if cameras.insert(name.clone(), camera).is_some() {
                return Err(at(format!("{name} has a camera on an earlier line too")));
            }
        }
        if cameras.is_empty() {
            return Err(Error::format(
                path,
                "no camera in it: a line is NAME MODEL WIDTH HEIGHT PARAMS… (hloc's queries_with_intrinsics.txt)",
            ));
        }
        Ok(KnownCameras::PerImage {
            file: path.to_path_buf(),
            cameras,
        })
    }

    pub fn is_known(&self) -> bool {
        !matches!(self, KnownCameras::Unknown)
    }

    /// The known camera of the image `name` (its name in the set) of `width`×`height` pixels,
    /// checked against it. An image the per-image file lacks is an error: a set half calibrated
    /// is a mistake more often than a plan.
    pub fn camera_of(&self, name: &str, width: u32, height: u32) -> Result<Option<&KnownCamera>> {
        let (camera, source) = match self {
            KnownCameras::Unknown => return Ok(None),
            KnownCameras::All(c) => (c, "--camera-params".to_string()),
            KnownCameras::PerImage { file, cameras } => match cameras.get(name) {
                Some(c) => (c, file.display().to_string()),
                None => {
                    return Err(Error::InvalidInput(format!(
                        "{}: no camera for the image {name}; give every image of the set a line \
                         (NAME MODEL WIDTH HEIGHT PARAMS…)",
                        file.display()
                    )))
                }
            },
        };
        camera.check_image(width, height).map_err(|why| {
            Error::InvalidInput(format!("{source}: cannot be the camera of {name}: {why}"))
        })?;
        Ok(Some(camera))
    }
}

/// One line of a per-image file.
fn parse_line(line: &str) -> std::result::Result<(String, KnownCamera), String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, model, width, height, params @ ..] = &fields[..] else {
        return Err(format!(
            "{line:?}: expected NAME MODEL WIDTH HEIGHT PARAMS…"
        ));
    };
    let model = CameraModel::parse(model).map_err(|e| e.to_string())?;
    let size = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| format!("{s:?} is not a positive whole number of pixels"))
    };
    let size = (size(width)?, size(height)?);
    let params = parse_numbers(params.iter().copied(), || {
        format!(
            "{name}: the parameters of {} are {} numbers ({})",
            model.name(),
            model.num_params(),
            param_names(model)
        )
    })
    .map_err(|e| e.to_string())?;
    let camera = KnownCamera {
        model,
        params,
        size: Some(size),
    };
    camera.check_own().map_err(|why| format!("{name}: {why}"))?;
    camera
        .check_image(size.0, size.1)
        .map_err(|why| format!("{name}: {why}"))?;
    Ok((name.to_string(), camera))
}

fn parse_numbers<'a>(
    parts: impl Iterator<Item = &'a str>,
    expected: impl Fn() -> String,
) -> Result<Vec<f64>> {
    parts
        .map(|p| p.trim().parse::<f64>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", expected())))
}

/// The parameter names of `model`, in COLMAP's order.
fn param_names(model: CameraModel) -> &'static str {
    match model {
        CameraModel::SimplePinhole => "f,cx,cy",
        CameraModel::Pinhole => "fx,fy,cx,cy",
        CameraModel::SimpleRadial => "f,cx,cy,k",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_in_colmaps_order_and_pixels() {
        let c =
            KnownCamera::parse(CameraModel::SimpleRadial, "718.856, 607.19, 185.22, 0.01").unwrap();
        // COLMAP's principal point is half a pixel further from the top-left corner.
        let k = c.intrinsics();
        assert_eq!((k.fx, k.fy), (718.856, 718.856));
        assert!((k.cx - 606.69).abs() < 1e-9 && (k.cy - 184.72).abs() < 1e-9);
        let p = KnownCamera::parse(CameraModel::Pinhole, "700,710,320,240").unwrap();
        assert_eq!((p.intrinsics().fx, p.intrinsics().fy), (700.0, 710.0));
    }

    #[test]
    fn impossible_cameras_are_refused() {
        for (model, text) in [
            (CameraModel::SimpleRadial, "700,320,240"),
            (CameraModel::SimplePinhole, "-700,320,240"),
            (CameraModel::Pinhole, "700,0,320,240"),
            (CameraModel::SimpleRadial, "700,320,240,3"),
            (CameraModel::SimplePinhole, "700,320,nan"),
            (CameraModel::SimplePinhole, "700;320;240"),
        ] {
            assert!(KnownCamera::parse(model, text).is_err(), "{text}");
        }
        let c = KnownCamera::parse(CameraModel::SimplePinhole, "700,1000,240").unwrap();
        let why = c.check_image(640, 480).unwrap_err();
        assert!(why.contains("outside the 640×480 image"), "{why}");
        assert!(c.check_image(1241, 376).is_ok());
        // Hostile round 1 of issue 55, M1: focal lengths 10× apart were taken as a lens; an
        // anamorphic 2× squeeze is one.
        let typo = KnownCamera::parse(CameraModel::Pinhole, "700,7000,320,240").unwrap();
        let why = typo.check_image(640, 480).unwrap_err();
        assert!(why.contains("differ by more than 2.5×"), "{why}");
        let squeezed = KnownCamera::parse(CameraModel::Pinhole, "700,350,320,240").unwrap();
        assert!(squeezed.check_image(640, 480).is_ok());
    }

    #[test]
    fn per_image_file_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cams.txt");
        std::fs::write(
            &path,
            "# name model w h params\n000000.png SIMPLE_RADIAL 1241 376 718.8 607.2 185.2 0\n\n\
             seq/000001.png PINHOLE 1241 376 718.8 718.8 607.2 185.2\n",
        )
        .unwrap();
        let cams = KnownCameras::read_file(&path).unwrap();
        assert!(cams
            .camera_of("seq/000001.png", 1241, 376)
            .unwrap()
            .is_some());
        let e = cams
            .camera_of("000000.png", 1242, 375)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1241×376") && e.contains("000000.png"), "{e}");
        let e = cams
            .camera_of("000002.png", 1241, 376)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cams.txt") && e.contains("000002.png"), "{e}");
        for bad in [
            "a.png SIMPLE_PINHOLE 640 480 500 320\n",
            "a.png OPENCV 640 480 500 500 320 240 0 0 0 0\n",
            "a.png SIMPLE_PINHOLE 640 0 500 320 240\n",
            "a.png SIMPLE_PINHOLE 640 480 500 320 240\na.png SIMPLE_PINHOLE 640 480 500 320 240\n",
            "# only a comment\n",
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = KnownCameras::read_file(&path).unwrap_err().to_string();
            assert!(e.contains("cams.txt"), "{bad}: {e}");
        }
    }
}
