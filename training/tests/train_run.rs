//! A tiny training run end to end: config → log, checkpoint, weights, ONNX, model card; and
//! `--resume` after an interruption reproduces the uninterrupted run exactly.

mod common;

use descl_training::train::{finish_at_checkpoint, train, train_until, RunConfig};
use std::path::Path;

/// Noise of the toy views (small: these runs must learn quickly).
const NOISE: f32 = 0.05;

/// Classes of 3 noisy views of a random smooth patch.
fn toy_tracks(path: &Path, classes: usize) {
    common::toy_tracks(path, classes, NOISE);
}

fn config(dir: &Path, out: &str, iterations: usize) -> RunConfig {
    common::tiny_config(
        dir,
        "tiny",
        out,
        iterations,
        serde_json::json!({
            "data": {"augment": {"flip": true, "rot90": true}, "validation": 16},
            "log_every": 2,
            "checkpoint_every": 4,
        }),
    )
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
    // The weights are installed beside the model, for fine-tuning (`init`).
    assert_eq!(
        std::fs::read(dir.path().join("models/tiny.safetensors")).unwrap(),
        std::fs::read(out.join("model.safetensors")).unwrap()
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

#[test]
fn a_run_cut_short_finishes_at_its_checkpoint_and_can_still_continue() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    toy_tracks(&dir.path().join("tracks.bin"), 100);
    let cut = config(dir.path(), "cut", 10);
    let e = finish_at_checkpoint(&cut).unwrap_err();
    assert!(format!("{e:#}").contains("no checkpoint"), "{e:#}");

    assert!(train_until(&cut, false, Some(5)).unwrap().is_none());
    let summary = finish_at_checkpoint(&cut).unwrap();
    assert_eq!(summary.iterations, 5);
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary.card).unwrap()).unwrap();
    assert_eq!(card["training"]["iterations"], 10);
    assert_eq!(card["training"]["iterations_completed"], 5);
    let device = card["training"]["device"].as_str().unwrap();
    assert!(device.starts_with("cpu ("), "{device}");
    assert!(summary.onnx.exists());
    let finished = weights(&dir.path().join("cut/model.safetensors"));

    // The checkpoint is left as it was: the run continues to the uninterrupted one's weights,
    // which differ from the finished-early ones.
    train(&cut, true).unwrap();
    let full = config(dir.path(), "full", 10);
    let card_full = train(&full, false).unwrap().card;
    let card_full: serde_json::Value =
        serde_json::from_slice(&std::fs::read(card_full).unwrap()).unwrap();
    assert!(card_full["training"].get("iterations_completed").is_none());
    let a = weights(&dir.path().join("full/model.safetensors"));
    let b = weights(&dir.path().join("cut/model.safetensors"));
    let gap = |x: &[(String, Vec<f32>)], y: &[(String, Vec<f32>)]| {
        x.iter()
            .zip(y)
            .flat_map(|((_, u), (_, v))| u.iter().zip(v).map(|(p, q)| (p - q).abs()))
            .fold(0f32, f32::max)
    };
    assert!(
        gap(&a, &b) < 1e-6,
        "continued run differs by {}",
        gap(&a, &b)
    );
    assert!(gap(&a, &finished) > 1e-4, "five more steps changed nothing");
}

#[test]
fn a_checkpoint_without_devices_keeps_its_runs_device_through_finish_and_resume() {
    // A checkpoint written before `devices` was recorded (a GPU run's), finished and then
    // continued on the CPU: both cards name the GPU the first steps ran on.
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    toy_tracks(&dir.path().join("tracks.bin"), 100);
    let run = config(dir.path(), "old", 10);
    assert!(train_until(&run, false, Some(5)).unwrap().is_none());
    let out = dir.path().join("old");
    let edit = |file: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let path = out.join(file);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    };
    edit("checkpoint.json", &|v| {
        v.as_object_mut().unwrap().remove("devices");
    });
    edit("config.json", &|v| v["device"] = "cuda:1".into());
    let device = |card: &std::path::Path| {
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(card).unwrap()).unwrap();
        c["training"]["device"].as_str().unwrap().to_string()
    };
    let finished = finish_at_checkpoint(&run).unwrap();
    assert_eq!(device(&finished.card), "cuda:1");
    let done = train(&run, true).unwrap();
    let d = device(&done.card);
    assert!(d.starts_with("cuda:1, then cpu ("), "{d}");
}

#[test]
fn the_card_and_the_onnx_metadata_take_the_tracks_magnification() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let tracks = dir.path().join("tracks.bin");
    toy_tracks(&tracks, 100);
    // Tracks cut at magnification 8 (not descl's default 6) make a model for magnification 8.
    let mut set = descl_training::data::TrackSet::load(&tracks).unwrap();
    set.header.magnification = 8.0;
    set.save(&tracks).unwrap();
    let summary = train(&config(dir.path(), "m8", 2), false).unwrap();
    let card = descl::model::ModelCard::load(&summary.card).unwrap();
    assert_eq!(card.patch.magnification, 8.0);
    let model = descl_training::onnx::read_model(&summary.onnx).unwrap();
    let props: Vec<(&str, &str)> = model
        .metadata_props
        .iter()
        .map(|p| (p.key.as_str(), p.value.as_str()))
        .collect();
    assert!(props.contains(&("patch_mr", "8")), "{props:?}");
    assert!(props.contains(&("output_kind", "float")), "{props:?}");
    assert!(props.contains(&("output_dim", "128")), "{props:?}");
}

/// A held-out scene (`validation_only`) is never trained on: the run trains on the other
/// source alone, validates on the held-out one (NN accuracy and FPR95 in the log at every
/// checkpoint and at the end), and the card lists the training scenes and the validation
/// scenes apart, with their licences. Photometric augmentation runs in the same run.
#[test]
fn held_out_scenes_validate_and_cards_list_scenes_with_licences() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (train_tracks, held_tracks) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
    common::toy_tracks(&train_tracks, 100, NOISE);
    common::toy_tracks(&held_tracks, 30, NOISE);
    let scene = |name: &str, class: &str| serde_json::json!({"scene": name, "licence": "test licence", "class": class});
    let cfg = common::tiny_config(
        dir.path(),
        "held",
        "run",
        8,
        serde_json::json!({
            "data": {
                "tracks": null,
                "sources": [
                    {"tracks": train_tracks, "scenes": [scene("alpha", "open")]},
                    {"tracks": held_tracks, "validation_only": true,
                     "scenes": [scene("beta", "restricted")]},
                ],
                "augment": {"photometric": {"jpeg_prob": 0.5, "blur_prob": 0.5,
                                            "exposure_prob": 0.5, "noise_prob": 0.5}},
                "validation": 20,
            },
            "log_every": 2,
            "checkpoint_every": 4,
        }),
    );
    let summary = train(&cfg, false).unwrap();
    assert!(summary.validation_nn_accuracy.is_some());
    let log = std::fs::read_to_string(dir.path().join("run/log.jsonl")).unwrap();
    let held: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v.get("validation_fpr95").is_some())
        .collect();
    // Step 4 (a checkpoint) and the end, step 8.
    let steps: Vec<u64> = held.iter().map(|v| v["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![4, 8], "{log}");
    for v in &held {
        let f = v["validation_fpr95"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&f), "{v}");
    }
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary.card).unwrap()).unwrap();
    let data = &card["training"]["data"];
    assert_eq!(
        data["scenes"],
        serde_json::json!([scene("alpha", "open")]),
        "{data}"
    );
    assert_eq!(
        data["validation_scenes"],
        serde_json::json!([scene("beta", "restricted")]),
        "{data}"
    );
    // Only the training source is in the mix: its 100 classes, none split off.
    assert_eq!(data["classes"], 100, "{data}");
    // The card says which patches it trained and validated on: the SHA-256 of each file's
    // patch bytes (hashed here from the raw file, after its header) and the end point's
    // numbers with the held-out set they were measured on.
    let patch_bytes_sha = |path: &Path, classes: Option<usize>| {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(path).unwrap();
        let header_len = u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
        let patches = &bytes[14 + header_len..];
        let views = 3;
        let n = classes.map_or(patches.len(), |c| c * views * 32 * 32);
        let digest = Sha256::digest(&patches[..n]);
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(
        data["sources"][0]["patches_sha256"],
        patch_bytes_sha(&train_tracks, None).as_str()
    );
    let v = &card["training"]["validation"];
    assert_eq!(v["held_out_scenes"], true, "{v}");
    // 30 classes, cut to the config's 20: the hash is of those 20 classes' patches.
    assert_eq!(v["sets"][0]["classes"], 20, "{v}");
    let held_set = descl_training::data::TrackSet::load(&held_tracks).unwrap();
    assert_eq!(held_set.header.views, 3);
    assert_eq!(
        v["sets"][0]["patches_sha256"],
        patch_bytes_sha(&held_tracks, Some(20)).as_str()
    );
    assert_ne!(
        v["sets"][0]["patches_sha256"],
        held_set.patches_sha256().as_str()
    );
    assert_eq!(
        v["nn_accuracy"].as_f64(),
        summary.validation_nn_accuracy,
        "{v}"
    );
    assert!(v["fpr95"].is_number(), "{v}");

    // Every source held out is refused: nothing to train on.
    let mut bad = cfg.clone();
    bad.data.sources[0].validation_only = true;
    let err = train(&bad, false).unwrap_err().to_string();
    assert!(err.contains("validation_only"), "{err}");
}

/// A resume continues the run its checkpoint started, or refuses: another learning rate, or a
/// track file cut again (same header, other patches, as when a scene is reconstructed again)
/// would leave weights trained under two plans with a card describing one. Before plans were
/// recorded, both resumed silently. Changing how the run is operated (log and checkpoint
/// intervals, another spelling of a track file's path) resumes.
#[test]
fn a_resume_with_another_config_or_other_patches_is_refused() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let tracks = dir.path().join("tracks.bin");
    toy_tracks(&tracks, 100);
    let run = config(dir.path(), "run", 10);
    assert!(train_until(&run, false, Some(5)).unwrap().is_none());
    let saved = |f: &str| std::fs::read(dir.path().join("run").join(f)).unwrap();
    let (meta, cfg, log) = (
        saved("checkpoint.json"),
        saved("config.json"),
        saved("log.jsonl"),
    );

    let mut faster = run.clone();
    faster.lr = 0.02;
    let e = format!("{:#}", train(&faster, true).unwrap_err());
    assert!(
        e.contains("another plan") && e.contains("config.lr: 0.01 → 0.02"),
        "{e}"
    );

    let mut set = descl_training::data::TrackSet::load(&tracks).unwrap();
    set.pixels[7] ^= 1;
    set.save(&tracks).unwrap();
    let e = format!("{:#}", train(&run, true).unwrap_err());
    assert!(e.contains("training[0].patches_sha256"), "{e}");
    // A refused resume leaves the run folder as it was.
    assert_eq!(saved("checkpoint.json"), meta);
    assert_eq!(saved("config.json"), cfg);
    assert_eq!(saved("log.jsonl"), log);

    set.pixels[7] ^= 1;
    set.save(&tracks).unwrap();
    // How the run is operated, and where its patches are found, may change: the same patches
    // reached through another spelling of the path, other log and checkpoint intervals.
    let mut operated = run.clone();
    operated.log_every = 1;
    operated.checkpoint_every = 2;
    operated.data.tracks = Some(dir.path().join(".").join("tracks.bin"));
    let summary = train(&operated, true).unwrap();
    assert_eq!(summary.iterations, 10);
}
