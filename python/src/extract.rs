//! `descl.Extractor`: the describer and detector settings of `descl extract`, loaded once and
//! run on any number of images (paths or numpy arrays).

use crate::arrays::{features_dict, gray_image};
use crate::errors::{to_py, value_error, DesclError};
use crate::progress::PyProgress;
use descl::describe::Describer;
use descl::detect::{
    DetectorConfig, DetectorKind, Selection, DEFAULT_CONTRAST_THRESHOLD, DEFAULT_MAX_KEYPOINTS,
};
use descl::features::Features;
use descl::image_set::extract_all;
use descl::io::writer::{ImageRecord, PairRecord, Writer};
use descl::model::{Device, DEFAULT_MODEL};
use descl::pipeline::COLMAP_MAX_IMAGE_SIZE;
use numpy::PyUntypedArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The signature below spells the library's defaults as literals (pyo3 shows literals in
/// `help()`); these keep them equal to the library's constants.
const _: () = assert!(COLMAP_MAX_IMAGE_SIZE == 3200);
const _: () = assert!(DEFAULT_MAX_KEYPOINTS == 2048);

/// Detects keypoints and describes them, with the settings of `descl extract`.
///
/// model: a model name (see `descl.models()`), a path to an .onnx file or a model card,
///     "sift" or "rootsift"; None is the default model (`descl.DEFAULT_MODEL`).
/// device: "cpu", "cuda" (an error where CUDA is unavailable) or "auto".
/// max_keypoints: keep the N strongest keypoints (0 keeps all).
/// detector: "dog" (OpenCV SIFT detector) or "harris-affine".
/// contrast_threshold: DoG contrast threshold; None is OpenCV's 0.04.
/// max_image_size: images whose longer side exceeds this are detected shrunk (COLMAP's 3200;
///     0 = never); keypoints are always in the original image's pixels.
/// selection: how max_keypoints chooses: "strongest" (by response) or "colmap" (as COLMAP's
///     SIFT extraction keeps max_num_features: whole DoG levels from the coarsest down until
///     they hold more than max_keypoints locations, at most 2 orientations per location;
///     `descl extract --selection colmap`).
/// The choice of `all` whose `name` is `given`, else a ValueError naming `what` and the choices
/// (the command line's `choice` parsers, src/cli/args.rs).
fn by_name<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
    given: &str,
) -> PyResult<T> {
    all.iter()
        .copied()
        .find(|&k| name(k) == given)
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|&k| name(k)).collect();
            value_error(format!("unknown {what} `{given}` ({})", names.join(", ")))
        })
}

#[pyclass(module = "descl", frozen)]
pub struct Extractor {
    inner: descl::pipeline::Extractor,
    device: Device,
    max_image_size: usize,
}

#[pymethods]
impl Extractor {
    #[new]
    // One Rust argument per Python keyword argument.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (model=None, device="cpu", max_keypoints=2048, detector="dog", contrast_threshold=None, max_image_size=3200, selection="strongest"))]
    fn new(
        py: Python<'_>,
        model: Option<String>,
        device: &str,
        max_keypoints: usize,
        detector: &str,
        contrast_threshold: Option<f32>,
        max_image_size: usize,
        selection: &str,
    ) -> PyResult<Extractor> {
        let device: Device = device.parse().map_err(|e| to_py(e, "device"))?;
        let kind = by_name(DetectorKind::ALL, DetectorKind::name, "detector", detector)?;
        let contrast_threshold = contrast_threshold.unwrap_or(DEFAULT_CONTRAST_THRESHOLD);
        if !(contrast_threshold.is_finite() && contrast_threshold > 0.0) {
            return Err(value_error(format!(
                "contrast_threshold must be a positive number, got {contrast_threshold}"
            )));
        }
        let selection = by_name(Selection::ALL, Selection::name, "selection", selection)?;
        // Refused here, as the command line refuses it, not at the first image.
        descl::pipeline::check_max_image_size(max_image_size)
            .map_err(|e| value_error(e.to_string()))?;
        let model = model.unwrap_or_else(|| DEFAULT_MODEL.to_string());
        // As `DescribeArgs::extractor` (src/cli/args.rs): resolving and loading a model reads
        // and hashes files, so it runs without the GIL.
        let describer = py
            .detach(|| Describer::open(&model, device))
            .map_err(|e| to_py(e, &format!("describer `{model}`")))?;
        let detector = DetectorConfig {
            kind,
            max_keypoints,
            contrast_threshold,
            selection,
            ..DetectorConfig::default()
        };
        let inner = descl::pipeline::Extractor::with_describer(describer, detector)
            .max_image_size(max_image_size);
        Ok(Extractor {
            inner,
            device,
            max_image_size,
        })
    }

    /// Features of one image: a path (str or os.PathLike) or a numpy array (H×W uint8 or
    /// float32 in [0, 1] gray; H×W×3 RGB or H×W×4 RGBA uint8, converted to gray as descl
    /// converts image files, BT.601).
    ///
    /// Returns a dict: keypoints (N×2 float32: x, y; the top-left pixel's centre is (0, 0)),
    /// frames (N×6 float32: x, y, a11, a12, a21, a22), scores (N float32, strongest first),
    /// descriptors (N×D float32, or N×32 uint8 for binary models), image_size (W, H), model,
    /// model_sha256, detector, image (the path, or "<array>").
    fn extract<'py>(
        &self,
        py: Python<'py>,
        image: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let features = if image.cast::<PyUntypedArray>().is_ok() {
            let gray = gray_image(image)?;
            py.detach(|| self.inner.extract_image(&gray, "<array>"))
                .map_err(|e| to_py(e, "image array"))?
        } else {
            let path = image_path(image)?;
            py.detach(|| self.inner.extract(&path))
                .map_err(|e| to_py(e, ""))?
        };
        features_dict(py, features)
    }

    /// Descriptors of frames detected elsewhere (another detector's keypoints, COLMAP's SIFT
    /// keypoints read from a database), with this extractor's describer; its detector does not
    /// run. image: as for `extract`. frames: N×6 (x, y, a11, a12, a21, a22), the centre in
    /// descl's pixels (the top-left pixel's centre is (0, 0); COLMAP's is (0.5, 0.5), so
    /// subtract 0.5 from COLMAP's x and y) and `a` mapping the patch square [-1, 1]² to image
    /// offsets. magnification: the m the frames' `a` includes (`a = m·σ·R`): None is this
    /// extractor's (`self.magnification`, as `extract` returns frames); 1.0 for COLMAP's
    /// `σ·R` shapes. The patch covers the same region as `extract`'s, so `extract`'s frames
    /// described again get the descriptors `extract` gave them.
    ///
    /// Returns a dict as `extract` does, frames in the given order, scores 0 and detector
    /// "given".
    #[pyo3(signature = (image, frames, *, magnification=None))]
    fn describe<'py>(
        &self,
        py: Python<'py>,
        image: &Bound<'py, PyAny>,
        frames: &Bound<'py, PyAny>,
        magnification: Option<f32>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let frames = crate::arrays::frames(frames, "frames")?;
        let m = magnification.unwrap_or(self.inner.detector().magnification);
        let (gray, source) = if image.cast::<PyUntypedArray>().is_ok() {
            (gray_image(image)?, "<array>".to_string())
        } else {
            let path = image_path(image)?;
            let gray = py
                .detach(|| descl::image::load_gray(&path))
                .map_err(|e| to_py(e, ""))?;
            (gray, path.display().to_string())
        };
        let features = py
            .detach(|| self.inner.describe_given(&gray, &frames, m, &source))
            .map_err(|e| to_py(e, ""))?;
        features_dict(py, features)
    }

    /// Features of many image files, in parallel, as a list of dicts (as `extract`), in input
    /// order; the library's extract path (`descl extract` runs the same).
    ///
    /// progress: True (a tqdm bar if tqdm is installed, else a counter on stderr), False, a
    ///     callable `f(done, total)`, or an object with the methods of descl's Progress trait
    ///     (start(stage, total), set_length(total), message(text), inc(n), note(line),
    ///     finish()).
    /// skip_errors: False raises `DesclError` naming every image that failed (after trying
    ///     them all); True puts None in their place (each failure is noted through progress).
    #[pyo3(
        signature = (images, *, progress=true.into(), skip_errors=false),
        text_signature = "(self, /, images, *, progress=True, skip_errors=False)"
    )]
    fn extract_many<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        progress: ProgressArg<'py>,
        skip_errors: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        if images.is_instance_of::<pyo3::types::PyString>() {
            return Err(value_error(
                "images: expected a sequence of paths, got one str (wrap it in a list)",
            ));
        }
        let paths = images
            .try_iter()?
            .map(|p| image_path(&p?))
            .collect::<PyResult<Vec<PathBuf>>>()?;
        let inputs = descl::names::SetInput::files(&paths).map_err(|e| to_py(e, ""))?;
        let progress = match progress {
            ProgressArg::Flag(false) => None,
            ProgressArg::Flag(true) => {
                let target = py
                    .import("descl._progress")?
                    .call_method0("default_progress")?;
                Some(PyProgress::new(&target)?)
            }
            ProgressArg::Object(o) => Some(PyProgress::new(&o)?),
        };
        let collected = Arc::new(Mutex::new(Vec::new()));
        let writer = Box::new(Collect(Arc::clone(&collected)));
        let result = py.detach(|| match &progress {
            Some(pr) => extract_all(&inputs, &self.inner, writer, pr),
            None => extract_all(&inputs, &self.inner, writer, &descl::progress::Silent),
        });
        if let Some(e) = progress.as_ref().and_then(|p| p.take_error()) {
            return Err(e);
        }
        let (_, reports) = result.map_err(|e| to_py(e, ""))?;
        let mut features = collected
            .lock()
            .map_err(|_| DesclError::new_err("extract_many: result lock poisoned"))?
            .drain(..)
            .collect::<Vec<_>>()
            .into_iter();
        let failures: Vec<String> = reports.iter().filter_map(|r| r.error.clone()).collect();
        if !failures.is_empty() && !skip_errors {
            return Err(DesclError::new_err(format!(
                "{} of {} images failed:\n  {}",
                failures.len(),
                reports.len(),
                failures.join("\n  ")
            )));
        }
        let out = PyList::empty(py);
        for r in &reports {
            if r.error.is_some() {
                out.append(py.None())?;
                continue;
            }
            let f = features.next().ok_or_else(|| {
                DesclError::new_err(format!(
                    "extract_many: no features kept for {}",
                    r.path.display()
                ))
            })?;
            out.append(features_dict(py, f)?)?;
        }
        Ok(out)
    }

    /// The describer's name (a model card's name, "sift", "rootsift", or an .onnx file's stem).
    #[getter]
    fn model(&self) -> String {
        self.inner.describer().name().to_string()
    }

    /// The name features record as their model (`model` of `extract`'s dict).
    #[getter]
    fn provenance(&self) -> String {
        self.inner.describer().provenance()
    }

    /// The measurement-region magnification frames are detected with (the model's).
    #[getter]
    fn magnification(&self) -> f32 {
        self.inner.detector().magnification
    }

    #[getter]
    fn detector(&self) -> &'static str {
        self.inner.detector().kind.name()
    }

    #[getter]
    fn max_keypoints(&self) -> usize {
        self.inner.detector().max_keypoints
    }

    #[getter]
    fn contrast_threshold(&self) -> f32 {
        self.inner.detector().contrast_threshold
    }

    #[getter]
    fn selection(&self) -> &'static str {
        self.inner.detector().selection.name()
    }

    #[getter]
    fn max_image_size(&self) -> usize {
        self.max_image_size
    }

    /// The device asked for ("cpu", "cuda", "auto").
    #[getter]
    fn device(&self) -> String {
        self.device.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Extractor(model={:?}, device={:?}, max_keypoints={}, detector={:?}, \
             contrast_threshold={}, max_image_size={})",
            self.model(),
            self.device(),
            self.max_keypoints(),
            self.detector(),
            self.contrast_threshold(),
            self.max_image_size
        )
    }
}

/// `progress=` of `extract_many`: a flag or a Python object.
#[derive(FromPyObject)]
pub enum ProgressArg<'py> {
    Flag(bool),
    Object(Bound<'py, PyAny>),
}

impl From<bool> for ProgressArg<'_> {
    fn from(b: bool) -> Self {
        ProgressArg::Flag(b)
    }
}

/// A path argument: str or os.PathLike (through `os.fspath`, as `open()` takes them).
fn image_path(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    obj.extract::<PathBuf>().map_err(|_| {
        let type_name = obj
            .get_type()
            .name()
            .map_or_else(|_| "?".to_string(), |n| n.to_string());
        pyo3::exceptions::PyTypeError::new_err(format!(
            "image: expected a path (str or os.PathLike) or a numpy array, got {type_name}"
        ))
    })
}

/// A `Writer` that keeps every image's features in memory, in the order `extract_all` hands
/// them over (input order, failures left out), for `extract_many` to return.
struct Collect(Arc<Mutex<Vec<Features>>>);

impl Writer for Collect {
    fn add_image(&mut self, image: &ImageRecord<'_>) -> descl::Result<Option<PathBuf>> {
        self.0
            .lock()
            .map_err(|_| descl::Error::InvalidInput("extract_many: result lock poisoned".into()))?
            .push(image.features.clone());
        Ok(None)
    }

    fn add_pair(&mut self, _pair: &PairRecord<'_>) -> descl::Result<Option<PathBuf>> {
        Err(descl::Error::InvalidInput(
            "extract_many stores images only".into(),
        ))
    }

    fn finish(self: Box<Self>) -> descl::Result<PathBuf> {
        Ok(PathBuf::new())
    }
}
