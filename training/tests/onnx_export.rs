//! The exported ONNX file, run by ONNX Runtime, matches the tch forward pass (≤ 1e-4), carries
//! its preprocessing in its metadata, and imports back to the same weights.

mod common;

use descl_training::net::{Arch, Net};
use ort::session::Session;
use tch::{Device, Kind, Tensor};

/// ONNX Runtime allows one environment per process: the tests share descl's, which its
/// engine also uses.
fn environment() -> &'static ort::environment::Environment {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| descl::model::engine::ort_environment().unwrap())
}

fn ort_forward(path: &std::path::Path, patches: &[f32], n: usize) -> (Vec<i64>, Vec<f32>) {
    let mut session = Session::builder(environment())
        .unwrap()
        .commit_from_file(path)
        .unwrap();
    let input =
        ort::value::Tensor::from_array((vec![n as i64, 1, 32, 32], patches.to_vec())).unwrap();
    let outputs = session.run(ort::inputs!["patches" => input]).unwrap();
    let (shape, data) = outputs["descriptors"].try_extract_tensor::<f32>().unwrap();
    (shape.to_vec(), data.to_vec())
}

fn check(net: &Net, label: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{label}.onnx"));
    descl_training::onnx::export(net, &path, label, 6.0).unwrap();
    for n in [1usize, 5] {
        let patches = common::test_patches(n);
        let x = Tensor::from_slice(&patches).reshape([n as i64, 1, 32, 32]);
        let want = Vec::<f32>::try_from(net.forward_t(&x, false).unwrap().flatten(0, -1)).unwrap();
        let (shape, got) = ort_forward(&path, &patches, n);
        assert_eq!(shape, vec![n as i64, net.output_dim()], "{label}");
        let max_diff = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            max_diff <= 1e-4,
            "{label}, N={n}: max |ort − tch| = {max_diff}"
        );
    }
}

#[test]
fn official_tfeat_onnx_matches_tch() {
    let Some(root) = common::data_root_or_skip("official_tfeat_onnx_matches_tch") else {
        return;
    };
    let net = Net::load(
        Arch::Tfeat,
        1.0,
        &root.join("weights/tfeat-liberty.safetensors"),
        Device::Cpu,
    )
    .unwrap();
    check(&net, "tfeat-liberty");
}

#[test]
fn l2net_onnx_matches_tch_with_nontrivial_batch_norm_statistics() {
    tch::manual_seed(7);
    let net = Net::new(Arch::L2net, 1.0, Device::Cpu).unwrap();
    // Fresh running statistics are 0/1; give them real values so the export is really tested.
    tch::no_grad(|| {
        for (name, mut t) in net.vs.variables() {
            if name.ends_with("running_mean") {
                t.copy_(&(Tensor::randn(t.size(), (Kind::Float, Device::Cpu)) * 0.3));
            } else if name.ends_with("running_var") {
                t.copy_(&(Tensor::rand(t.size(), (Kind::Float, Device::Cpu)) + 0.5));
            }
        }
    });
    check(&net, "l2net");
}

#[test]
fn export_command_writes_a_runnable_model() {
    let Some(root) = common::data_root_or_skip("export_command_writes_a_runnable_model") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tfeat.onnx");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .args(["export", "--arch", "tfeat", "--weights"])
        .arg(root.join("weights/tfeat-liberty.safetensors"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let (shape, data) = ort_forward(&out, &common::test_patches(2), 2);
    assert_eq!(shape, vec![2, 128]);
    let norm: f32 = data[..128].iter().map(|v| v * v).sum();
    assert!((norm - 1.0).abs() < 1e-4);
    // A missing weights file is a clear error naming it, not a panic.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .args([
            "export",
            "--arch",
            "tfeat",
            "--weights",
            "/nonexistent/w.safetensors",
            "--out",
        ])
        .arg(dir.path().join("x.onnx"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/w.safetensors"));
}

#[test]
fn hynet_onnx_matches_tch_with_nontrivial_frn_tlu_and_batch_norm() {
    tch::manual_seed(9);
    let net = Net::new(Arch::Hynet, 1.0, Device::Cpu).unwrap();
    // Fresh FRN/TLU parameters are 1/0/−1 and BN statistics 0/1; randomise them all so the FRN
    // scale and shift, the TLU threshold and the batch norm are each really exercised.
    tch::no_grad(|| {
        for (name, mut t) in net.vs.variables() {
            let r = |s: f64, o: f64| Tensor::randn(t.size(), (Kind::Float, Device::Cpu)) * s + o;
            if name.ends_with("running_mean") {
                t.copy_(&r(0.3, 0.0));
            } else if name.ends_with("running_var") {
                t.copy_(&(Tensor::rand(t.size(), (Kind::Float, Device::Cpu)) + 0.5));
            } else if name.ends_with(".tau") {
                t.copy_(&r(0.3, -0.2));
            } else if name.ends_with(".bias") && t.dim() == 4 {
                t.copy_(&r(0.2, 0.0));
            } else if name.ends_with(".weight") && t.dim() == 4 && t.size()[0] == 1 {
                t.copy_(&r(0.2, 1.0));
            }
        }
    });
    check(&net, "hynet");
    // With an output offset (`descl-train offset`): Add then a second L2 normalisation, whose ε
    // initializer the graph shares with the first.
    let offset: Vec<f32> = (0..128)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.4)
        .collect();
    let with = net.with_offset(&offset).unwrap();
    check(&with, "hynet-offset");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("offset.onnx");
    descl_training::onnx::export(&with, &path, "offset", 6.0).unwrap();
    let graph = descl_training::onnx::read_model(&path)
        .unwrap()
        .graph
        .unwrap();
    let eps = graph
        .initializer
        .iter()
        .filter(|t| t.name == "l2norm.eps")
        .count();
    assert_eq!(eps, 1, "one ε initializer");
    assert_eq!(
        graph
            .node
            .iter()
            .filter(|n| n.op_type == "ReduceSumSquare")
            .count(),
        2
    );
}

#[test]
fn binary_l2net_onnx_matches_tch() {
    tch::manual_seed(5);
    let net = Net::new_binary(Arch::L2net, 0.5, 256, Device::Cpu).unwrap();
    assert!(net.is_binary());
    check(&net, "l2net-binary");
}

/// The `metadata_props` of an exported file as ONNX Runtime reads them.
fn ort_metadata(path: &std::path::Path) -> std::collections::HashMap<String, String> {
    let session = Session::builder(environment())
        .unwrap()
        .commit_from_file(path)
        .unwrap();
    let meta = session.metadata().unwrap();
    meta.custom_keys()
        .unwrap()
        .into_iter()
        .map(|k| {
            let v = meta.custom(&k).unwrap();
            (k, v)
        })
        .collect()
}

#[test]
fn exported_models_carry_their_preprocessing_in_the_metadata() {
    tch::manual_seed(3);
    let dir = tempfile::tempdir().unwrap();
    let float = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
    let binary = Net::new_binary(Arch::Tfeat, 0.25, 256, Device::Cpu).unwrap();
    // The expected strings are the documented formats, written out here, not derived from the
    // writer's constants.
    for (net, magnification, kind, dim, mr) in [
        (&float, 6.0, "float", "128", "6"),
        (&binary, 7.5, "binary", "256", "7.5"),
    ] {
        let path = dir.path().join(format!("{kind}.onnx"));
        descl_training::onnx::export(net, &path, kind, magnification).unwrap();
        let got = ort_metadata(&path);
        let want: std::collections::HashMap<String, String> = [
            ("patch_size", "32"),
            ("patch_mr", mr),
            ("input_range", "0_1"),
            ("input_norm", "per_patch"),
            ("output_kind", kind),
            ("output_dim", dim),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want, "{kind}");
        // The library's engine reads the same values.
        let engine = descl::model::Engine::load(&path, descl::model::Device::Cpu).unwrap();
        let m = engine.metadata().unwrap();
        assert_eq!(m.magnification, magnification);
        assert_eq!(m.output_dim, dim.parse::<usize>().unwrap());
        assert_eq!(m.output_kind.as_str(), kind);
        assert_eq!(engine.kind().as_str(), kind);
    }
    // A bad magnification is refused before anything is written.
    let bad = dir.path().join("bad.onnx");
    assert!(descl_training::onnx::export(&float, &bad, "bad", 0.0).is_err());
    assert!(!bad.exists());
}

/// Every variable of a net as (name, values), sorted by name.
fn variables(net: &Net) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<(String, Vec<f32>)> = net
        .vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Gives every parameter and running statistic a non-default value, so that a tensor the
/// import failed to recover (left at its fresh initialisation) cannot go unnoticed.
fn randomise(net: &Net) {
    tch::no_grad(|| {
        for (name, mut t) in net.vs.variables() {
            if name.ends_with("num_batches_tracked") {
                continue;
            }
            let r = Tensor::randn(t.size(), (Kind::Float, Device::Cpu)) * 0.3;
            if name.ends_with("running_var") {
                t.copy_(&(r.abs() + 0.5));
            } else {
                t.copy_(&r);
            }
        }
    });
}

#[test]
fn import_inverts_export_exactly_for_every_architecture() {
    tch::manual_seed(11);
    let dir = tempfile::tempdir().unwrap();
    let nets = [
        ("tfeat", Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap()),
        (
            "tfeat-binary",
            Net::new_binary(Arch::Tfeat, 0.25, 256, Device::Cpu).unwrap(),
        ),
        ("l2net", Net::new(Arch::L2net, 0.25, Device::Cpu).unwrap()),
        ("hynet", Net::new(Arch::Hynet, 0.25, Device::Cpu).unwrap()),
        (
            "l2net-offset",
            Net::new(Arch::L2net, 0.25, Device::Cpu)
                .unwrap()
                .with_offset(&[0.25; 128])
                .unwrap(),
        ),
    ];
    for (label, net) in &nets {
        randomise(net);
        let path = dir.path().join(format!("{label}.onnx"));
        descl_training::onnx::export(net, &path, label, 6.0).unwrap();
        let back = descl_training::onnx::import(&path, net.arch, 0.25).unwrap();
        assert_eq!(back.is_binary(), net.is_binary(), "{label}");
        assert_eq!(back.has_offset(), net.has_offset(), "{label}");
        let (a, b) = (variables(net), variables(&back));
        assert_eq!(a.len(), b.len(), "{label}");
        for ((na, va), (nb, vb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            if na.ends_with("num_batches_tracked") {
                continue; // not in ONNX (see onnx::import)
            }
            // Bit-exact: the weights travel as raw little-endian float32.
            assert!(
                va.iter().zip(vb).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{label}: {na} differs after import"
            );
        }
        // The re-exported file is byte-identical and runs identically.
        let again = dir.path().join(format!("{label}-again.onnx"));
        descl_training::onnx::export(&back, &again, label, 6.0).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&again).unwrap()
        );
        let patches = common::test_patches(3);
        let (_, y1) = ort_forward(&path, &patches, 3);
        let (_, y2) = ort_forward(&again, &patches, 3);
        assert_eq!(y1, y2, "{label}");
    }
    // The wrong architecture or width is an error naming the file, never a silent partial load.
    let tfeat = dir.path().join("tfeat.onnx");
    let e = descl_training::onnx::import(&tfeat, Arch::L2net, 0.25)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tfeat.onnx"), "{e}");
    let e = descl_training::onnx::import(&tfeat, Arch::Tfeat, 0.5)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tfeat.onnx") && e.contains("shape"), "{e}");
}

/// A card for `onnx` as training writes it (magnification 6).
fn card_for(net: &Net, onnx: &std::path::Path, name: &str) -> descl::model::ModelCard {
    use descl::model::card::{InputSpec, OutputSpec, PatchSpec};
    let mut training = serde_json::Map::new();
    training.insert("method".into(), "hardnet".into());
    descl::model::ModelCard {
        name: name.into(),
        file: format!("{name}.onnx"),
        sha256: descl::model::card::sha256_file(onnx).unwrap(),
        architecture: "tfeat-w0.25".into(),
        input: InputSpec {
            size: 32,
            range: [0.0, 1.0],
        },
        output: OutputSpec {
            dim: net.output_dim() as usize,
            kind: if net.is_binary() {
                descl::model::OutputKind::Binary
            } else {
                descl::model::OutputKind::Float
            },
        },
        patch: PatchSpec {
            size: 32,
            magnification: 6.0,
        },
        training,
        metrics: serde_json::Map::new(),
    }
}

fn descl_train(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn import_onnx_then_export_with_the_card_reexports_a_shipped_style_model() {
    tch::manual_seed(13);
    let dir = tempfile::tempdir().unwrap();
    let net = Net::new_binary(Arch::Tfeat, 0.25, 256, Device::Cpu).unwrap();
    randomise(&net);
    // An "old" model: the same graph without metadata, as the shipped files were written.
    let onnx = dir.path().join("m.onnx");
    let mut old =
        descl_training::onnx::model(&net, "descl model m (tfeat trained by descl-train)", 6.0)
            .unwrap();
    old.metadata_props.clear();
    std::fs::write(&onnx, prost::Message::encode_to_vec(&old)).unwrap();
    let card_path = dir.path().join("m.json");
    let card = card_for(&net, &onnx, "m");
    card.save(&card_path).unwrap();
    let patches = common::test_patches(4);
    let (_, before) = ort_forward(&onnx, &patches, 4);

    let weights = dir.path().join("m.safetensors");
    let out = descl_train(&[
        "import-onnx".as_ref(),
        "--arch".as_ref(),
        "tfeat".as_ref(),
        "--width".as_ref(),
        "0.25".as_ref(),
        "--onnx".as_ref(),
        onnx.as_os_str(),
        "--out".as_ref(),
        weights.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The saved weights name their network: loading them as a float net is refused by name.
    let e = Net::load(Arch::Tfeat, 0.25, &weights, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("m.safetensors") && e.contains("binary"), "{e}");

    let export = |extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "export".as_ref(),
            "--arch".as_ref(),
            "tfeat".as_ref(),
            "--width".as_ref(),
            "0.25".as_ref(),
            "--weights".as_ref(),
            weights.as_os_str(),
            "--card".as_ref(),
            card_path.as_os_str(),
            "--out".as_ref(),
            onnx.as_os_str(),
        ];
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        descl_train(&args)
    };
    // A float export, or a magnification other than the card's, is refused; nothing changes.
    let refused = export(&[]);
    assert!(!refused.status.success());
    let refused = export(&["--bits", "256", "--magnification", "8"]);
    assert!(!refused.status.success());
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(e.contains("magnification"), "{e}");
    assert_eq!(descl::model::ModelCard::load(&card_path).unwrap(), card);

    let done = export(&["--bits", "256"]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let new_card = descl::model::ModelCard::load(&card_path).unwrap();
    assert_eq!(
        new_card.sha256,
        descl::model::card::sha256_file(&onnx).unwrap()
    );
    assert_ne!(new_card.sha256, card.sha256, "the file gained its metadata");
    assert_eq!(
        descl::model::ModelCard {
            sha256: card.sha256.clone(),
            ..new_card
        },
        card,
        "only the sha256 of the card changes"
    );
    let (_, after) = ort_forward(&onnx, &patches, 4);
    assert_eq!(before, after);
    let meta = ort_metadata(&onnx);
    assert_eq!(meta["patch_mr"], "6");
    assert_eq!(meta["output_kind"], "binary");
    // The re-exported graph is the old one: only the metadata was added.
    let new = descl_training::onnx::read_model(&onnx).unwrap();
    assert_eq!(new.graph, old.graph);
    assert_eq!(new.doc_string, old.doc_string);
}

#[test]
fn shipped_weights_reexport_to_the_shipped_models_byte_for_byte() {
    // Every shipped ONNX file, its card and its `models/NAME.safetensors` describe one network:
    // the weights are the file's, and exporting them with the card's name and magnification
    // gives the shipped file back exactly (metadata included).
    let cards = descl::model::list_cards().unwrap();
    assert!(!cards.is_empty());
    let dir = tempfile::tempdir().unwrap();
    for (card, card_path) in &cards {
        let onnx = card.onnx_path(card_path);
        let weights = onnx.with_extension("safetensors");
        assert!(weights.is_file(), "{} missing", weights.display());
        let (arch, width) = match card.architecture.split_once("-w") {
            Some((a, w)) => (Arch::parse(a).unwrap(), w.parse::<f64>().unwrap()),
            None => (Arch::parse(&card.architecture).unwrap(), 1.0),
        };
        let imported = descl_training::onnx::import(&onnx, arch, width).unwrap();
        let bits = imported.is_binary().then(|| imported.output_dim());
        let loaded = Net::load_as(arch, width, bits, &weights, Device::Cpu).unwrap();
        assert_eq!(
            variables(&imported),
            variables(&loaded),
            "{}: weights differ from the ONNX file's",
            weights.display()
        );
        let again = dir.path().join(&card.file);
        descl_training::onnx::export(
            &loaded,
            &again,
            &descl_training::onnx::model_doc(&card.name, arch),
            f64::from(card.patch.magnification),
        )
        .unwrap();
        assert!(
            std::fs::read(&again).unwrap() == std::fs::read(&onnx).unwrap(),
            "{}: re-export differs",
            onnx.display()
        );
    }
}
