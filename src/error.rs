//! The library's one error type. Every variant that concerns a file names it.

use std::path::PathBuf;

/// Shorthand used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed at the OS level.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An image file that cannot be decoded or is unusable (empty, too small, too large).
    #[error("{}: {reason}", path.display())]
    Image { path: PathBuf, reason: String },
    /// A file in one of our formats (features `.npz`, matches, model card, dataset file) is malformed.
    #[error("{}: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    /// A model file that cannot be loaded or does not have the expected inputs/outputs.
    #[error("model {}: {reason}", path.display())]
    Model { path: PathBuf, reason: String },
    /// The ONNX Runtime shared library could not be found or loaded.
    #[error("ONNX Runtime library not available: {0}. Run `scripts/setup` (installs it into .deps/) or set ORT_DYLIB_PATH to libonnxruntime.so")]
    OrtMissing(String),
    /// An error reported by ONNX Runtime while building a session or running it.
    #[error("ONNX Runtime: {0}")]
    Ort(String),
    /// The requested execution device is not usable (e.g. `--device cuda` without CUDA).
    #[error("device: {0}")]
    Device(String),
    /// An error reported by OpenCV.
    #[error("OpenCV: {0}")]
    OpenCv(String),
    /// Arguments or data that cannot be processed (mismatched descriptor kinds, NaN, ...).
    #[error("{0}")]
    InvalidInput(String),
    /// An error reported by SQLite while writing a COLMAP database.
    #[error("{}: SQLite: {reason}", path.display())]
    Database { path: PathBuf, reason: String },
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// An [`Error::Format`] for `path`.
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl From<opencv::Error> for Error {
    fn from(e: opencv::Error) -> Self {
        Error::OpenCv(e.to_string())
    }
}
