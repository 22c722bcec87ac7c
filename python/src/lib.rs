//! `descl._descl`, the native module of the `descl` Python package: the library the `descl`
//! command runs (crate `descl`), called from Python with numpy arrays.
//!
//! | Python | library |
//! |---|---|
//! | `Extractor(...)` | `describe::Describer::open` + `pipeline::Extractor::with_describer`, as `descl extract` |
//! | `Extractor.extract(path or array)` | `pipeline::Extractor::{extract, extract_image}` |
//! | `Extractor.extract_many(paths)` | `image_set::extract_all` (parallel, progress through `progress::Progress`) |
//! | `match(desc0, desc1, ...)` | `matching::match_descriptors` with a `MatchConfig` |
//! | `verify(kpts0, kpts1, matches, ...)` | `matching::two_view::verify_matches` (`geometry::verify` + the inlier minimum) |
//! | `models()` | `model::list_cards_lenient`, the fields of `descl models --json` |
//!
//! Why a thin layer: the Python results must equal the command line's, so every default and
//! every step comes from the library; this crate only converts arrays (checking dtype and shape
//! at the boundary), releases the GIL around the work, and maps errors to exceptions
//! (`errors`).

mod arrays;
mod errors;
mod extract;
mod matching;
mod models;
mod progress;

use pyo3::prelude::*;

#[pymodule]
fn _descl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DesclError", py.get_type::<errors::DesclError>())?;
    m.add("DEFAULT_MODEL", descl::model::DEFAULT_MODEL)?;
    m.add(
        "DEFAULT_MAX_KEYPOINTS",
        descl::detect::DEFAULT_MAX_KEYPOINTS,
    )?;
    m.add(
        "DEFAULT_MAX_IMAGE_SIZE",
        descl::pipeline::COLMAP_MAX_IMAGE_SIZE,
    )?;
    m.add(
        "DEFAULT_CONTRAST_THRESHOLD",
        descl::detect::DEFAULT_CONTRAST_THRESHOLD,
    )?;
    m.add("LOWE_RATIO", descl::matching::filters::LOWE_RATIO)?;
    m.add(
        "MIN_INLIERS",
        descl::matching::two_view::COLMAP_MIN_NUM_INLIERS,
    )?;
    let detectors: Vec<&str> = descl::detect::DetectorKind::ALL
        .iter()
        .map(|k| k.name())
        .collect();
    m.add("DETECTORS", detectors)?;
    m.add_class::<extract::Extractor>()?;
    m.add_function(wrap_pyfunction!(matching::match_descriptors, m)?)?;
    m.add_function(wrap_pyfunction!(matching::verify, m)?)?;
    m.add_function(wrap_pyfunction!(models::models, m)?)?;
    m.add_function(wrap_pyfunction!(models::models_dir, m)?)?;
    m.add_function(wrap_pyfunction!(models::ort_library, m)?)?;
    Ok(())
}
