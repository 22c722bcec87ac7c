//! `descl-train soup` and `descl-train validate` on real runs: two runs fine-tuned from one
//! model average into a model whose weights are their mean and whose card names them; a run
//! from random weights is refused as an ingredient; `validate` reproduces a run's own
//! end-point validation number, records it in cards with `--record`, and refuses a model that
//! trained on a held-out scene or does not say which scenes it saw.

mod common;

use descl_training::net::{Arch, Net};
use descl_training::train::{train, RunConfig};
use std::path::Path;
use std::process::Command;

/// Noise of the toy views (as in `fine_tune.rs`: a run is far from perfect on them).
const NOISE: f32 = 0.5;

const TRAIN_SCENE: &str = "alpha";
const HELD_SCENE: &str = "beta";

/// A tiny run on toy tracks (scene alpha) holding out other toy tracks (scene beta).
fn config(dir: &Path, name: &str, seed: u64, init: Option<&Path>) -> RunConfig {
    let scene = |s: &str| serde_json::json!([{"scene": s, "licence": "test", "class": "open"}]);
    common::tiny_config(
        dir,
        name,
        name,
        6,
        serde_json::json!({
            "data": {
                "tracks": null,
                "sources": [
                    {"tracks": dir.join("tracks.bin"), "scenes": scene(TRAIN_SCENE)},
                    {"tracks": dir.join("held.bin"), "validation_only": true,
                     "scenes": scene(HELD_SCENE)},
                ],
                "validation": 20,
            },
            "seed": seed, "init": init, "log_every": 3, "checkpoint_every": 3,
        }),
    )
}

/// Toy tracks whose record places them in `scene`, as a synthetic cut of that scene's photos
/// records them (`validate` reads which scenes a model saw from the records, not only from
/// what its config declares).
fn toy_tracks_of(path: &Path, classes: usize, scene: &str) {
    common::toy_tracks(path, classes, NOISE);
    let mut set = descl_training::data::TrackSet::load(path).unwrap();
    set.header.source = serde_json::json!({"generator": "synthetic",
        "photos": [format!("train/{scene}/toy.jpg")],
        "frames": descl_training::data::TRACK_FRAMES});
    set.save(path).unwrap();
}

fn descl_train(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .args(args)
        .output()
        .unwrap()
}

fn values(net: &Net) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<(String, Vec<f32>)> = net
        .vs
        .variables()
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

#[test]
fn two_fine_tuned_runs_make_a_soup_and_a_run_from_scratch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    toy_tracks_of(&dir.path().join("tracks.bin"), 200, TRAIN_SCENE);
    toy_tracks_of(&dir.path().join("held.bin"), 30, HELD_SCENE);
    // The runs share the process's libtorch generator; they run one after the other here.
    // a and b are fine-tuned from one installed model, c starts from random weights.
    train(&config(dir.path(), "start", 7, None), false).unwrap();
    let init = dir.path().join("models/start.safetensors");
    let a = config(dir.path(), "a", 1, Some(&init));
    let summary_a = train(&a, false).unwrap();
    train(&config(dir.path(), "b", 2, Some(&init)), false).unwrap();
    train(&config(dir.path(), "c", 3, None), false).unwrap();
    let cfg_path = dir.path().join("a-config.json");
    std::fs::write(&cfg_path, serde_json::to_vec(&a).unwrap()).unwrap();
    let models = dir.path().join("models");
    let card = |n: &str| models.join(format!("{n}.json")).display().to_string();
    let cfg = cfg_path.display().to_string();

    // `validate` scores a finished model on the run config's held-out scene exactly as the
    // run scored itself at its end.
    let out = descl_train(&["validate", "--config", &cfg, "--model", &card("a")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let own = summary_a.validation_nn_accuracy.unwrap();
    let scored = line["validation"]["nn_accuracy"].as_f64().unwrap();
    assert!((scored - own).abs() < 1e-9, "validate {scored}, run {own}");
    assert_eq!(line["validation"]["sets"][0]["classes"], 20);
    assert_eq!(line["validation"]["held_out_scenes"], true);

    let install = models.display().to_string();
    let soup_ab = [
        "soup",
        "--name",
        "ab",
        "--ingredient",
        &card("a"),
        "--ingredient",
        &card("b"),
        "--install",
        &install,
        "--config",
        &cfg,
    ];
    let out = descl_train(&soup_ab);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let soup_card = descl::model::ModelCard::load(&models.join("ab.json")).unwrap();
    soup_card.verify_sha256(&models.join("ab.onnx")).unwrap();
    assert_eq!(soup_card.training_method(), Some("hardnet soup"));
    assert_eq!(soup_card.training["seed"], serde_json::json!([1, 2]));
    let v = &soup_card.training["validation"];
    assert!(v["nn_accuracy"].is_number(), "{v}");
    // The ingredients are scored on the soup's sets, not quoted from their cards.
    assert!(
        (v["ingredients"][0]["nn_accuracy"].as_f64().unwrap() - own).abs() < 1e-9,
        "{v}"
    );
    // The exported soup holds the mean of the two runs' installed weights.
    let load = |n: &str| {
        Net::load(
            Arch::Tfeat,
            0.25,
            &models.join(format!("{n}.safetensors")),
            tch::Device::Cpu,
        )
        .unwrap()
    };
    let soup = descl_training::onnx::import(&models.join("ab.onnx"), Arch::Tfeat, 0.25).unwrap();
    let (va, vb, vs) = (values(&load("a")), values(&load("b")), values(&soup));
    let mut differing = 0;
    for (((name, x), (_, y)), (_, z)) in va.iter().zip(&vb).zip(&vs) {
        for ((p, q), r) in x.iter().zip(y).zip(z) {
            assert!((0.5 * (p + q) - r).abs() < 1e-5, "{name}: {p} {q} → {r}");
            differing += usize::from((p - q).abs() > 1e-6);
        }
    }
    assert!(
        differing > 100,
        "the two seeds barely differ ({differing} values)"
    );

    // A soup never replaces a model: the same name again is refused and the files stay.
    let before = std::fs::read(models.join("ab.onnx")).unwrap();
    let out = descl_train(&soup_ab);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("already there"),
        "{err}"
    );
    assert_eq!(std::fs::read(models.join("ab.onnx")).unwrap(), before);
    for bad in ["", "../escaped", ".hidden"] {
        let out = descl_train(&[
            "soup",
            "--name",
            bad,
            "--ingredient",
            &card("a"),
            "--ingredient",
            &card("b"),
            "--install",
            &install,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("plain file stem"),
            "{bad}: {err}"
        );
    }

    // A run from random weights is not an ingredient: refused, nothing written.
    let out = descl_train(&[
        "soup",
        "--name",
        "ac",
        "--ingredient",
        &card("a"),
        "--ingredient",
        &card("c"),
        "--install",
        &install,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("c: not an ingredient") && err.contains("random initialisation"),
        "{err}"
    );
    assert!(!models.join("ac.json").exists() && !models.join("ac.onnx").exists());

    // `validate --record` files each model's number, its sets and the same run's peers in
    // its card, leaving the model file as it was.
    let onnx_before = std::fs::read(models.join("a.onnx")).unwrap();
    let out = descl_train(&[
        "validate",
        "--config",
        &cfg,
        "--model",
        &card("a"),
        "--model",
        &card("ab"),
        "--record",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let recorded = descl::model::ModelCard::load(&models.join("a.json")).unwrap();
    let entry = &recorded.metrics["held-out-validation"];
    assert_eq!(
        entry["nn_accuracy"],
        printed[0]["validation"]["nn_accuracy"]
    );
    assert_eq!(
        entry["same_run_nn_accuracy"]["ab"],
        printed[1]["validation"]["nn_accuracy"]
    );
    assert!(entry["command"].as_str().unwrap().contains("--record"));
    assert_eq!(std::fs::read(models.join("a.onnx")).unwrap(), onnx_before);
    recorded.verify_sha256(&models.join("a.onnx")).unwrap();
    // One model given twice (by card and by ONNX file) is refused before anything is written.
    let out = descl_train(&[
        "validate",
        "--config",
        &cfg,
        "--model",
        &card("a"),
        "--model",
        &models.join("a.onnx").display().to_string(),
        "--record",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("given twice"),
        "{err}"
    );

    // Refused: a model whose config says it trained on the held-out scene, one trained on a
    // source whose record cannot show its scenes, one fine-tuned from a model that saw the
    // held-out scene, a config that holds out no scene, and a held-out source naming none.
    let refused = |args: &[&str], what: &str| {
        let out = descl_train(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(what), "{what}: {err}");
    };
    let mut saw_beta = descl::model::ModelCard::load(&models.join("b.json")).unwrap();
    saw_beta.training["config"]["data"]["sources"][0]["scenes"] =
        serde_json::json!([{"scene": HELD_SCENE, "licence": "x", "class": "open"}]);
    saw_beta.save(&models.join("b.json")).unwrap();
    refused(
        &["validate", "--config", &cfg, "--model", &card("b")],
        "b: trained on beta, which",
    );
    saw_beta.training["config"]["data"]["sources"][0]["scenes"] = serde_json::json!([]);
    saw_beta.training["data"]["sources"][0]["source"] = serde_json::json!({"generator": "test"});
    saw_beta.save(&models.join("b.json")).unwrap();
    refused(
        &["validate", "--config", &cfg, "--model", &card("b")],
        "does not show which scenes its photos are",
    );
    // The same through `init`: a model fine-tuned from one that saw the held-out scene.
    let mut start = descl::model::ModelCard::load(&models.join("start.json")).unwrap();
    start.training["config"]["data"]["sources"][0]["scenes"] =
        serde_json::json!([{"scene": HELD_SCENE, "licence": "x", "class": "open"}]);
    start.save(&models.join("start.json")).unwrap();
    refused(
        &["validate", "--config", &cfg, "--model", &card("a")],
        "a: trained on beta, which",
    );
    // Configs written beside the run's, each with one change, and refused for it.
    let variant = |file: &str, change: &dyn Fn(&mut RunConfig)| {
        let mut c = a.clone();
        change(&mut c);
        let path = dir.path().join(file);
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        path.display().to_string()
    };
    for (file, change, what) in [
        (
            "no-held.json",
            &(|c: &mut RunConfig| c.data.sources.truncate(1)) as &dyn Fn(&mut RunConfig),
            "holds out no scene",
        ),
        (
            "unnamed.json",
            &|c: &mut RunConfig| c.data.sources[1].scenes.clear(),
            "names no scene",
        ),
    ] {
        let cfg = variant(file, change);
        refused(&["validate", "--config", &cfg, "--model", &card("a")], what);
    }
}
