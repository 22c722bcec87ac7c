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
    /// `colmap mapper` ran and made no model of the database (no initial pair it accepted):
    /// an outcome of the data and the mapper's settings, not of a broken installation.
    #[error("{0}")]
    NoModel(String),
    /// An image read again after its features were extracted (for its EXIF, to draw on, into a
    /// database) whose content is not the one they were extracted from
    /// ([`crate::provenance::check_image`]).
    #[error("{}: its content is not the image {} was extracted from (sha256 {actual}, the features record {recorded}): extract it again, or give the original image", image.display(), features.display())]
    ImageReplaced {
        image: PathBuf,
        features: PathBuf,
        actual: String,
        recorded: String,
    },
    /// An image read again after its features were extracted that is not there.
    #[error("{}: not found, the image {} was extracted from (moved, or recorded relative to another working folder): give the image, or extract it again", image.display(), features.display())]
    ImageMissing { image: PathBuf, features: PathBuf },
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

impl Error {
    /// The same error, told of one of several images that shared the work that failed (a
    /// network run over patches of a block of images): same variant, so callers that tell
    /// kinds apart (a device error from a bad image) still can, with `image` named first.
    pub fn for_image(&self, image: &str) -> Error {
        let tell = |reason: &str| format!("{image}: {reason}");
        match self {
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), tell(&source.to_string())),
            },
            Error::Image { path, reason } => Error::Image {
                path: path.clone(),
                reason: tell(reason),
            },
            Error::Format { path, reason } => Error::Format {
                path: path.clone(),
                reason: tell(reason),
            },
            Error::Model { path, reason } => Error::Model {
                path: path.clone(),
                reason: tell(reason),
            },
            Error::OrtMissing(reason) => Error::OrtMissing(tell(reason)),
            Error::Ort(reason) => Error::Ort(tell(reason)),
            Error::Device(reason) => Error::Device(tell(reason)),
            Error::OpenCv(reason) => Error::OpenCv(tell(reason)),
            Error::InvalidInput(reason) => Error::InvalidInput(tell(reason)),
            Error::NoModel(reason) => Error::NoModel(tell(reason)),
            // They name their image already.
            Error::ImageReplaced {
                image,
                features,
                actual,
                recorded,
            } => Error::ImageReplaced {
                image: image.clone(),
                features: features.clone(),
                actual: actual.clone(),
                recorded: recorded.clone(),
            },
            Error::ImageMissing { image, features } => Error::ImageMissing {
                image: image.clone(),
                features: features.clone(),
            },
            Error::Database { path, reason } => Error::Database {
                path: path.clone(),
                reason: tell(reason),
            },
        }
    }
}

#[cfg(feature = "full")]
impl From<opencv::Error> for Error {
    fn from(e: opencv::Error) -> Self {
        Error::OpenCv(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_image_keeps_the_kind_and_names_the_image_first() {
        let device = Error::Device("CUDA out of memory".into()).for_image("a.jpg");
        assert!(matches!(device, Error::Device(_)));
        assert_eq!(device.to_string(), "device: a.jpg: CUDA out of memory");
        let model = Error::Model {
            path: "m.onnx".into(),
            reason: "bad output".into(),
        }
        .for_image("b.png");
        assert!(matches!(&model, Error::Model { path, .. } if path == &PathBuf::from("m.onnx")));
        assert_eq!(model.to_string(), "model m.onnx: b.png: bad output");
        let io = Error::io(
            "x",
            std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        )
        .for_image("c.jpg");
        assert!(
            matches!(&io, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
        assert_eq!(io.to_string(), "x: c.jpg: gone");
    }
}
