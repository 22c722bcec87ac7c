//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared data folder, or None (skip) — but in CI (env `CI` set) its absence is a failure.
pub fn data_root_or_skip(test: &str) -> Option<PathBuf> {
    match descl::data::data_root() {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => {
            panic!("{test}: CI is set but the shared data folder is missing")
        }
        None => {
            eprintln!("{test}: skipped, no shared data folder (set DESCL_DATA)");
            None
        }
    }
}

/// Deterministic test patches in [0, 1]: smooth structure plus texture, different per patch.
pub fn test_patches(n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * 1024);
    for k in 0..n {
        let (a, b) = (0.3 + 0.17 * k as f32, 1.1 + 0.23 * k as f32);
        for i in 0..32 {
            for j in 0..32 {
                let (x, y) = (j as f32 / 31.0, i as f32 / 31.0);
                let v = 0.5
                    + 0.25 * (a * 9.0 * x + b * 5.0 * y).sin()
                    + 0.2 * ((i * 7 + j * 13 + k * 31) % 17) as f32 / 17.0
                    - 0.1;
                out.push(v.clamp(0.0, 1.0));
            }
        }
    }
    out
}
