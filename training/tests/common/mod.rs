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

/// A toy track file at `path`: `classes` classes of 3 views of a random smooth patch (a
/// sinusoid of random frequency and phase), each view with its own uniform noise of ±`noise`.
pub fn toy_tracks(path: &std::path::Path, classes: usize, noise: f32) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut set = descl_training::data::TrackSet::new(
        3,
        f64::from(descl::detect::DEFAULT_MAGNIFICATION),
        serde_json::json!({"generator": "test"}),
    );
    for _ in 0..classes {
        let (a, b, c) = (
            rng.gen_range(1.0..6.0f32),
            rng.gen_range(1.0..6.0f32),
            rng.gen_range(0.0..std::f32::consts::TAU),
        );
        let views: Vec<Vec<f32>> = (0..3)
            .map(|_| {
                (0..descl_training::data::PATCH_PIXELS)
                    .map(|i| {
                        let (x, y) = ((i % 32) as f32 / 32.0, (i / 32) as f32 / 32.0);
                        (0.5 + 0.3 * (a * x * 6.0 + b * y * 6.0 + c).sin()
                            + rng.gen_range(-noise..noise))
                        .clamp(0.0, 1.0)
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[f32]> = views.iter().map(|v| v.as_slice()).collect();
        set.push_class(&refs).unwrap();
    }
    set.save(path).unwrap();
}

/// The tiny run the training tests share: TFeat ×0.25, HardNet, batch 16 on the toy tracks
/// `dir/tracks.bin`, output `dir/out`, installed into `dir/models`. `overrides` replaces
/// top-level fields; its `data` object is merged into the default `data`.
pub fn tiny_config(
    dir: &std::path::Path,
    name: &str,
    out: &str,
    iterations: usize,
    overrides: serde_json::Value,
) -> descl_training::train::RunConfig {
    let mut config = serde_json::json!({
        "name": name,
        "net": {"arch": "tfeat", "width": 0.25},
        "loss": {"name": "hardnet"},
        "data": {"tracks": dir.join("tracks.bin")},
        "iterations": iterations,
        "batch": 16,
        "lr": 0.01,
        "schedule": {"decay": "linear", "warmup": 2},
        "optimizer": {"name": "adam"},
        "seed": 3,
        "threads": 1,
        "out": dir.join(out),
        "install": dir.join("models"),
    });
    if let serde_json::Value::Object(fields) = overrides {
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("data", serde_json::Value::Object(data)) => {
                    for (dk, dv) in data {
                        config["data"][dk] = dv;
                    }
                }
                (_, v) => config[k] = v,
            }
        }
    }
    serde_json::from_value(config).unwrap()
}
