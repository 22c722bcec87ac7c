//! descl: learned local features.
//!
//! image file ─load─▶ [`image::GrayImage`] ─detect─▶ [`frame::Frame`]s ─sample─▶ patches
//! (N×32×32) ─describe (ONNX Runtime)─▶ [`describe::Descriptors`] ─match─▶ matches ─verify─▶
//! inliers + model, and out to `.npz` features files or a COLMAP database.
//! `ARCHITECTURE.md` at the repository root draws the whole picture.
//!
//! Cargo feature `full` (default) is the whole toolkit and links OpenCV and HDF5. Without it
//! (`default-features = false`) the crate is the format core — frames, patch and image types,
//! model cards, ONNX metadata, the ONNX Runtime engine, descriptor types, atomic writes — which
//! is what `descl-train` needs to train and export on a machine without OpenCV (a GPU host).

pub mod data;
pub mod describe;
pub mod detect;
#[cfg(feature = "full")]
pub mod draw;
pub mod error;
#[cfg(feature = "full")]
pub mod eval;
#[cfg(feature = "full")]
pub mod features;
pub mod frame;
#[cfg(feature = "full")]
pub mod geometry;
pub mod hash;
#[cfg(feature = "full")]
pub mod identity;
pub mod image;
#[cfg(feature = "full")]
pub mod image_set;
pub mod io;
#[cfg(feature = "full")]
pub mod matching;
#[cfg(feature = "full")]
pub mod memory;
pub mod model;
pub mod names;
pub mod patch;
#[cfg(feature = "full")]
pub mod pipeline;
#[cfg(feature = "full")]
pub mod progress;
#[cfg(feature = "full")]
pub mod provenance;
#[cfg(feature = "full")]
pub mod retrieval;
#[cfg(feature = "full")]
pub mod sfm;
#[cfg(feature = "full")]
pub mod shard;

pub use error::{Error, Result};
