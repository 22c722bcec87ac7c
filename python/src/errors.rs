//! Library errors as Python exceptions. The message is the library's own (`Display` of
//! `descl::Error`, which names the file for every file-related error), with the same context
//! the command line adds, so a Python user reads what `descl` would print. The type says what
//! kind of failure it is:
//!
//! - `FileNotFoundError`: the image an error is about does not exist;
//! - `ValueError`: arguments or data the library refuses (`Error::InvalidInput`: a ratio
//!   outside (0, 1], descriptors of different kinds, ...) and every dtype / shape check of
//!   this crate at the boundary;
//! - `descl.DesclError` (a `RuntimeError`): everything else: an image that does not decode, a
//!   model that cannot be found or loaded (an unknown model name too: its message lists the
//!   known ones), ONNX Runtime, OpenCV.

use descl::Error;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use std::path::Path;

pyo3::create_exception!(
    descl,
    DesclError,
    PyRuntimeError,
    "An error of the descl library (image decoding, model loading, ONNX Runtime, OpenCV). \
     The message is the one the `descl` command prints and names the file concerned."
);

/// `e` as a Python exception; `context` (may be empty) is put in front of the message as the
/// command line does (`describer `NAME`: ...`).
pub fn to_py(e: Error, context: &str) -> PyErr {
    let message = if context.is_empty() {
        e.to_string()
    } else {
        format!("{context}: {e}")
    };
    match &e {
        Error::InvalidInput(_) => PyValueError::new_err(message),
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(message)
        }
        Error::Image { path, .. } if missing(path) => PyFileNotFoundError::new_err(message),
        _ => DesclError::new_err(message),
    }
}

/// A path that names nothing on disk (not even a dangling link).
fn missing(path: &Path) -> bool {
    !path.as_os_str().is_empty() && std::fs::symlink_metadata(path).is_err()
}

/// A `ValueError` with `message`.
pub fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
