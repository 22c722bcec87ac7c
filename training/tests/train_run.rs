//! A tiny training run end to end: config → log, checkpoint, weights, ONNX, model card; and
//! `--resume` after an interruption reproduces the uninterrupted run exactly.

use descl_training::data::{TrackSet, PATCH_PIXELS};
use descl_training::train::{train, train_until, RunConfig};
use rand::{Rng, SeedableRng};
use std::path::Path;

/// Classes of 3 noisy views of a random smooth patch.
fn toy_tracks(path: &Path, classes: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut set = TrackSet::new(3, serde_json::json!({"generator": "test"}));
    for _ in 0..classes {
        let (a, b, c) = (
            rng.gen_range(1.0..6.0f32),
            rng.gen_range(1.0..6.0f32),
            rng.gen_range(0.0..std::f32::consts::TAU),
        );
        let views: Vec<Vec<f32>> = (0..3)
            .map(|_| {
                (0..PATCH_PIXELS)
                    .map(|i| {
                        let (x, y) = ((i % 32) as f32 / 32.0, (i / 32) as f32 / 32.0);
                        (0.5 + 0.3 * (a * x * 6.0 + b * y * 6.0 + c).sin()
                            + rng.gen_range(-0.05..0.05f32))
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

fn config(dir: &Path, out: &str, iterations: usize) -> RunConfig {
    serde_json::from_value(serde_json::json!({
        "name": "tiny",
        "net": {"arch": "tfeat", "width": 0.25},
        "loss": {"name": "hardnet"},
        "data": {"tracks": dir.join("tracks.bin"), "augment": {"flip": true, "rot90": true}, "validation": 16},
        "iterations": iterations,
        "batch": 16,
        "lr": 0.01,
        "schedule": {"decay": "linear", "warmup": 2},
        "optimizer": {"name": "adam"},
        "seed": 3,
        "threads": 1,
        "out": dir.join(out),
        "install": dir.join("models"),
        "log_every": 2,
        "checkpoint_every": 4,
    }))
    .unwrap()
}

fn weights(path: &Path) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<(String, Vec<f32>)> = tch::Tensor::read_safetensors(path)
        .unwrap()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                Vec::<f32>::try_from(t.flatten(0, -1).to_kind(tch::Kind::Float)).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// libtorch's random generator is process-global and cargo runs tests on parallel threads:
/// training runs in this binary take turns, or their random draws interleave and the resume
/// comparison sees another run's numbers.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_tiny_run_writes_everything_and_learns() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    toy_tracks(&dir.path().join("tracks.bin"), 200);
    let cfg = config(dir.path(), "run", 40);
    let summary = train(&cfg, false).unwrap();
    let out = dir.path().join("run");
    for f in [
        "config.json",
        "log.jsonl",
        "checkpoint.safetensors",
        "checkpoint.json",
        "model.safetensors",
        "tiny.onnx",
        "tiny.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert!(
        dir.path().join("models/tiny.onnx").is_file()
            && dir.path().join("models/tiny.json").is_file()
    );
    let log: Vec<serde_json::Value> = std::fs::read_to_string(out.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let losses: Vec<f64> = log.iter().filter_map(|e| e["loss_avg"].as_f64()).collect();
    assert_eq!(losses.len(), 20);
    // Averages over the first and last few logged steps: training must reduce the loss.
    let first = losses[..3].iter().sum::<f64>() / 3.0;
    let last = losses[losses.len() - 3..].iter().sum::<f64>() / 3.0;
    assert!(last < first, "loss did not decrease: {first} → {last}");
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("models/tiny.json")).unwrap())
            .unwrap();
    for key in [
        "name",
        "file",
        "sha256",
        "architecture",
        "input",
        "output",
        "patch",
        "training",
        "metrics",
    ] {
        assert!(card.get(key).is_some(), "card lacks {key}");
    }
    assert_eq!(card["training"]["iterations"], 40);
    assert_eq!(card["output"]["dim"], 128);
    assert_eq!(card["file"], "tiny.onnx");
    assert!((card["training"]["final_loss"].as_f64().unwrap() - summary.final_loss).abs() < 1e-12);
    let sha = card["sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    // Provenance: the run's own log, and the commit of this checkout when it is one.
    let log_path = card["training"]["log"].as_str().unwrap();
    assert!(
        std::path::Path::new(log_path).ends_with("log.jsonl")
            && std::path::Path::new(log_path).is_file()
    );
    let in_git = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .is_ok_and(|o| o.status.success());
    let commit = &card["training"]["code_commit"];
    if in_git {
        let c = commit.as_str().unwrap();
        assert!(
            c.len() >= 7
                && c.trim_end_matches("-dirty")
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit()),
            "{c}"
        );
    } else {
        assert!(commit.is_null());
    }
}

#[test]
fn resume_after_an_interruption_reproduces_the_uninterrupted_run() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    toy_tracks(&dir.path().join("tracks.bin"), 100);
    let full = config(dir.path(), "full", 10);
    train(&full, false).unwrap();
    let parted = config(dir.path(), "parted", 10);
    assert!(train_until(&parted, false, Some(5)).unwrap().is_none());
    assert!(!dir.path().join("parted/model.safetensors").exists());
    train(&parted, true).unwrap();
    let a = weights(&dir.path().join("full/model.safetensors"));
    let b = weights(&dir.path().join("parted/model.safetensors"));
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        let d = va
            .iter()
            .zip(vb)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-6, "{na}: resumed run differs by {d}");
    }
    // The log continues instead of restarting.
    let steps: Vec<u64> = std::fs::read_to_string(dir.path().join("parted/log.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                .as_f64()
                .map(|_| 0)
        })
        .collect();
    assert_eq!(steps.len(), 5);
}
