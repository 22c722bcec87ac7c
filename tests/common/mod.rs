//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod onnx;

use std::path::PathBuf;

/// The shared data root, or None (with a message) when it is absent on a user's checkout.
/// In CI (`CI` set) missing data is a failure.
pub fn data_root_or_skip(test: &str) -> Option<PathBuf> {
    match descl::data::data_root() {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => panic!("{test}: shared data missing in CI"),
        None => {
            eprintln!("{test}: skipped, no shared data (set DESCL_DATA)");
            None
        }
    }
}

/// The default model's ONNX file, or None (with a message) when no model is installed yet.
pub fn default_model_or_skip(test: &str) -> Option<descl::model::ResolvedModel> {
    match descl::model::resolve(descl::model::DEFAULT_MODEL) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("{test}: skipped, default model unavailable: {e}");
            None
        }
    }
}

/// Whether the ONNX Runtime library can be found (it is installed by scripts/setup).
pub fn ort_or_skip(test: &str) -> bool {
    match descl::model::engine::find_ort_library() {
        Ok(_) => true,
        Err(e) if std::env::var_os("CI").is_some() => panic!("{test}: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, {e}");
            false
        }
    }
}
