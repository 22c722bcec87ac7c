//! Where the shared benchmark/training data lives: `$DESCL_DATA`, else `../shared/data` beside
//! the repository. Data is never copied into the repository.

use std::path::PathBuf;

/// Environment variable that overrides the data root.
pub const DATA_ENV: &str = "DESCL_DATA";

/// The data root if it exists: `$DESCL_DATA`, else `<repo>/../shared/data`.
pub fn data_root() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(DATA_ENV) {
        let p = PathBuf::from(p);
        return p.is_dir().then_some(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("shared")
        .join("data");
    p.is_dir().then_some(p)
}
