//! The exported ONNX file, run by ONNX Runtime, matches the tch forward pass (≤ 1e-4).

mod common;

use descl_training::net::{Arch, Net};
use ort::session::Session;
use tch::{Device, Kind, Tensor};

/// ONNX Runtime allows one environment per process; the tests share it.
fn environment() -> &'static ort::environment::Environment {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        ort::init()
            .with_name("descl-training-tests")
            .build()
            .unwrap()
    })
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
    descl_training::onnx::export(net, &path, label).unwrap();
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
}

#[test]
fn binary_l2net_onnx_matches_tch() {
    tch::manual_seed(5);
    let net = Net::new_binary(Arch::L2net, 0.5, 256, Device::Cpu).unwrap();
    assert!(net.is_binary());
    check(&net, "l2net-binary");
}
