//! Fine-tuning: a run started from another run's installed weights (`init`, or `--init`)
//! starts where that run ended, records what it started from, refuses weights of another
//! network, and lets a checkpoint win over `init` on resume.

mod common;

use descl_training::net::{Arch, Net};
use descl_training::train::{train, train_until, RunConfig};
use std::path::Path;

/// Noise of the toy views: high enough that a random network is far from perfect on the
/// validation classes, so "starts at the source's accuracy" is not trivially true.
const NOISE: f32 = 0.5;
/// Classes of the toy track file (10 % of them at most are held out for validation).
const CLASSES: usize = 600;
/// Held-out validation classes.
const VALIDATION: usize = 60;

fn config(dir: &Path, name: &str, iterations: usize) -> RunConfig {
    common::tiny_config(
        dir,
        name,
        name,
        iterations,
        serde_json::json!({"data": {"validation": VALIDATION}, "log_every": 5, "checkpoint_every": 5}),
    )
}

/// A temporary folder with toy tracks and the weights of a fresh TFeat ×0.25 saved as `file`.
fn random_start(file: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    common::toy_tracks(&dir.path().join("tracks.bin"), 200, NOISE);
    let weights = dir.path().join(file);
    Net::new(Arch::Tfeat, 0.25, tch::Device::Cpu)
        .unwrap()
        .save(&weights)
        .unwrap();
    (dir, weights)
}

/// The `validation_nn_accuracy_start` entry of a run's log.
fn start_accuracy(out: &Path) -> f64 {
    let entries: Vec<f64> = std::fs::read_to_string(out.join("log.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["validation_nn_accuracy_start"]
                .as_f64()
        })
        .collect();
    assert_eq!(entries.len(), 1, "{}: one start entry", out.display());
    entries[0]
}

fn card(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// libtorch's random generator is process-global and cargo runs tests on parallel threads:
/// training runs in this binary take turns.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn init_starts_at_the_source_runs_final_validation_accuracy() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    common::toy_tracks(&dir.path().join("tracks.bin"), CLASSES, NOISE);
    let source = config(dir.path(), "source", 60);
    let summary = train(&source, false).unwrap();
    let source_final = summary.validation_nn_accuracy.unwrap();
    let source_start = start_accuracy(&dir.path().join("source"));
    eprintln!("source run: validation NN accuracy {source_start} → {source_final}");
    // Training changed the accuracy, so equality below is evidence of the weights, not chance.
    assert!(
        source_final > source_start,
        "the source run did not learn: {source_start} → {source_final}"
    );

    // The installed weights are the run's final weights.
    let installed = dir.path().join("models/source.safetensors");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(dir.path().join("source/model.safetensors")).unwrap()
    );

    let mut tuned = config(dir.path(), "tuned", 5);
    tuned.init = Some(installed.clone());
    train(&tuned, false).unwrap();
    let tuned_start = start_accuracy(&dir.path().join("tuned"));
    assert!(
        (tuned_start - source_final).abs() < 1e-12,
        "fine-tuning starts at {tuned_start}, the source ended at {source_final}"
    );
    let init = &card(&dir.path().join("models/tuned.json"))["training"]["init"];
    assert_eq!(init["file"].as_str().unwrap(), installed.to_str().unwrap());
    assert_eq!(
        init["sha256"].as_str().unwrap(),
        descl::model::card::sha256_file(&installed).unwrap()
    );
    // Without init the card says so.
    assert!(card(&dir.path().join("models/source.json"))["training"]["init"].is_null());
}

#[test]
fn init_weights_of_another_network_are_refused_naming_the_file() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, weights) = random_start("float-w0.25.safetensors");

    let mut wider: RunConfig = config(dir.path(), "wider", 2);
    wider.net.width = 0.5;
    wider.init = Some(weights.clone());
    let e = format!("{:#}", train(&wider, false).unwrap_err());
    assert!(
        e.contains("float-w0.25.safetensors")
            && e.contains("width 0.25")
            && e.contains("width 0.5"),
        "{e}"
    );

    let mut binary = config(dir.path(), "binary", 2);
    binary.net.bits = Some(256);
    binary.init = Some(weights.clone());
    let e = format!("{:#}", train(&binary, false).unwrap_err());
    assert!(
        e.contains("float-w0.25.safetensors") && e.contains("binary 256"),
        "{e}"
    );

    let mut l2net = config(dir.path(), "l2net", 2);
    l2net.net.arch = Arch::L2net;
    l2net.init = Some(weights.clone());
    let e = format!("{:#}", train(&l2net, false).unwrap_err());
    assert!(
        e.contains("float-w0.25.safetensors") && e.contains("l2net"),
        "{e}"
    );

    let mut missing = config(dir.path(), "missing", 2);
    missing.init = Some(dir.path().join("nowhere.safetensors"));
    let e = format!("{:#}", train(&missing, false).unwrap_err());
    assert!(e.contains("nowhere.safetensors"), "{e}");
}

#[test]
fn a_checkpoint_wins_over_init_on_resume_and_the_card_keeps_the_first_init() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, weights) = random_start("start.safetensors");
    let sha = descl::model::card::sha256_file(&weights).unwrap();

    let mut run = config(dir.path(), "run", 10);
    run.init = Some(weights.clone());
    assert!(train_until(&run, false, Some(5)).unwrap().is_none());
    // On resume the checkpoint is loaded, not `init`: a missing init file no longer matters.
    run.init = Some(dir.path().join("gone.safetensors"));
    train(&run, true).unwrap();
    let init = &card(&dir.path().join("models/run.json"))["training"]["init"];
    assert_eq!(init["file"].as_str().unwrap(), weights.to_str().unwrap());
    assert_eq!(init["sha256"].as_str().unwrap(), sha);
}

#[test]
fn the_init_flag_overrides_the_configs_init() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, weights) = random_start("start.safetensors");
    let mut cfg = config(dir.path(), "flagged", 2);
    cfg.init = Some(dir.path().join("not-this.safetensors"));
    let cfg_path = dir.path().join("flagged.json");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .args(["train", "--config"])
        .arg(&cfg_path)
        .arg("--init")
        .arg(&weights)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let saved = RunConfig::load(&dir.path().join("flagged/config.json")).unwrap();
    assert_eq!(saved.init.as_deref(), Some(weights.as_path()));
}
