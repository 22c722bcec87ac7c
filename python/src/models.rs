//! `descl.models()`: the model cards of the models folder, with the fields of
//! `descl models --json` (src/cli/models.rs; a test compares the two), and where descl finds
//! its models and ONNX Runtime.

use crate::errors::to_py;
use descl::model::list_cards_lenient;
use pyo3::prelude::*;

/// The models descl can use by name, sorted by name: a list of dicts with name, default (the
/// one `Extractor()` uses), architecture, kind ("float" or "binary"), dim, magnification,
/// training_method, metrics (benchmark numbers from the card), card and file (paths).
/// Unreadable cards are skipped with a warning naming them (as `descl models` does).
#[pyfunction]
pub fn models(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let (cards, bad) = py
        .detach(list_cards_lenient)
        .map_err(|e| to_py(e, "models"))?;
    let warnings = py.import("warnings")?;
    for e in &bad {
        warnings.call_method1("warn", (e.to_string(),))?;
    }
    let list: Vec<serde_json::Value> = cards.iter().map(|(c, path)| c.listing(path)).collect();
    // Through Python's json: plain dicts, lists, str, float, bool and None.
    let text = serde_json::Value::Array(list).to_string();
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// The folder models are looked up in by name: `$DESCL_MODELS` (the package sets it to its
/// bundled models unless it was set before import).
#[pyfunction]
pub fn models_dir() -> std::path::PathBuf {
    descl::model::models_dir()
}

/// The ONNX Runtime library descl loads: `$ORT_DYLIB_PATH` (the package sets it to the
/// `onnxruntime` wheel's library unless it was set before import). An error if there is none.
#[pyfunction]
pub fn ort_library() -> PyResult<std::path::PathBuf> {
    descl::model::engine::find_ort_library().map_err(|e| to_py(e, ""))
}
