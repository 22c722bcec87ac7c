//! descl: learned local features.
//!
//! image file ─load─▶ [`image::GrayImage`] ─detect─▶ [`frame::Frame`]s ─sample─▶ patches
//! (N×32×32) ─describe (ONNX Runtime)─▶ [`describe::Descriptors`] ─match─▶ matches ─verify─▶
//! inliers + model, and out to `.npz` features files or a COLMAP database.
//! `ARCHITECTURE.md` at the repository root draws the whole picture.

pub mod data;
pub mod describe;
pub mod detect;
pub mod draw;
pub mod error;
pub mod eval;
pub mod features;
pub mod frame;
pub mod geometry;
pub mod image;
pub mod image_set;
pub mod io;
pub mod matching;
pub mod model;
pub mod patch;
pub mod pipeline;
pub mod progress;
pub mod retrieval;
pub mod sfm;
pub mod shard;

pub use error::{Error, Result};
