//! The ONNX Runtime engine on small real models built by hand (tests/common/onnx.rs), checked
//! against an independent computation of the same linear map.

mod common;

use common::onnx::{identity, linear, with_metadata, Dim};
use descl::describe::Descriptors;
use descl::model::{Device, Engine, OutputKind};
use descl::Error;
use ndarray::{Array2, Array3};
use std::path::PathBuf;

fn write_model(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// x_flat · W in f64, one row per patch.
fn reference(patches: &Array3<f32>, w: &[f32], dim: usize) -> Array2<f64> {
    let n = patches.dim().0;
    let flat = patches.as_slice().unwrap();
    Array2::from_shape_fn((n, dim), |(i, j)| {
        (0..1024)
            .map(|k| flat[i * 1024 + k] as f64 * w[k * dim + j] as f64)
            .sum()
    })
}

#[test]
fn float_outputs_match_an_independent_matmul_across_chunks() {
    if !common::ort_or_skip("float_outputs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<f32> = common::lcg_values(1024 * 128, 1)
        .iter()
        .map(|v| v - 0.5)
        .collect();
    let engine = Engine::load(
        &write_model(&dir, "lin.onnx", &linear(&w, 128)),
        Device::Cpu,
    )
    .unwrap();
    assert_eq!(
        (engine.kind(), engine.dim(), engine.device()),
        (OutputKind::Float, 128, Device::Cpu)
    );
    // 2·MAX_CHUNK + 50 patches: three chunks, the last one partial.
    let n = 2 * descl::model::engine::MAX_CHUNK + 50;
    let patches = Array3::from_shape_vec((n, 32, 32), common::lcg_values(n * 1024, 2)).unwrap();
    let Descriptors::Float(d) = engine.describe(patches.view()).unwrap() else {
        panic!("not float")
    };
    assert_eq!(d.dim(), (n, 128));
    let r = reference(&patches, &w, 128);
    for i in 0..n {
        let norm = r.row(i).iter().map(|v| v * v).sum::<f64>().sqrt();
        for j in 0..128 {
            let want = r[[i, j]] / norm;
            assert!(
                (d[[i, j]] as f64 - want).abs() < 1e-4,
                "patch {i} value {j}: {} vs {want}",
                d[[i, j]]
            );
        }
    }
    let empty = engine
        .describe(Array3::<f32>::zeros((0, 32, 32)).view())
        .unwrap();
    assert_eq!(empty, Descriptors::Float(Array2::zeros((0, 128))));
    assert!(engine
        .describe(Array3::<f32>::zeros((2, 16, 16)).view())
        .is_err());
}

#[test]
fn binary_outputs_are_the_signs_of_the_outputs() {
    if !common::ort_or_skip("binary_outputs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<f32> = common::lcg_values(1024 * 256, 3)
        .iter()
        .map(|v| v - 0.5)
        .collect();
    let engine = Engine::load(
        &write_model(&dir, "bin.onnx", &linear(&w, 256)),
        Device::Cpu,
    )
    .unwrap();
    assert_eq!(engine.kind(), OutputKind::Binary);
    let n = 40;
    let patches = Array3::from_shape_vec((n, 32, 32), common::lcg_values(n * 1024, 4)).unwrap();
    let Descriptors::Binary(d) = engine.describe(patches.view()).unwrap() else {
        panic!("not binary")
    };
    let r = reference(&patches, &w, 256);
    for i in 0..n {
        for bit in 0..256 {
            let v = r[[i, bit]];
            if v.abs() > 1e-3 {
                assert_eq!(
                    (d[i][bit / 64] >> (bit % 64)) & 1 == 1,
                    v > 0.0,
                    "patch {i} bit {bit}"
                );
            }
        }
    }
}

#[test]
fn wrong_interfaces_are_model_errors_naming_the_file() {
    if !common::ort_or_skip("wrong_interfaces") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let n = Dim::Sym("N");
    let f = Dim::Fixed;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "rank4_out.onnx",
            identity(&[n, f(1), f(32), f(32)], &[n, f(1), f(32), f(32)]),
            "expected [N, D]",
        ),
        (
            "rgb_in.onnx",
            identity(&[n, f(3), f(32), f(32)], &[n, f(3), f(32), f(32)]),
            "expected [N, 1, 32, 32]",
        ),
        (
            "fixed_batch.onnx",
            identity(&[f(1), f(1), f(32), f(32)], &[f(1), f(1024)]),
            "dynamic batch",
        ),
        (
            "dim64.onnx",
            linear(&common::lcg_values(1024 * 64, 5), 64),
            "128 (float) or 256 (binary)",
        ),
        (
            "garbage.onnx",
            b"this is not a protobuf".to_vec(),
            "not a loadable ONNX model",
        ),
        ("empty.onnx", Vec::new(), "empty file"),
    ];
    for (name, bytes, expect) in cases {
        let p = write_model(&dir, name, &bytes);
        let e = Engine::load(&p, Device::Cpu).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Model { .. }), "{name}: {msg}");
        assert!(msg.contains(name) && msg.contains(expect), "{name}: {msg}");
    }
    let e = Engine::load(&dir.path().join("missing.onnx"), Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("missing.onnx"), "{e}");
}

/// `metadata_props` as (key, value) pairs.
type Props = Vec<(&'static str, &'static str)>;

/// descl's metadata for a float or binary model of `dim` outputs cut at magnification 6.
fn metadata(kind: &'static str, dim: &'static str) -> Props {
    vec![
        ("patch_size", "32"),
        ("patch_mr", "6"),
        ("input_range", "0_1"),
        ("input_norm", "per_patch"),
        ("output_kind", kind),
        ("output_dim", dim),
    ]
}

#[test]
fn metadata_decides_an_uncarded_models_kind_and_is_checked() {
    if !common::ort_or_skip("metadata") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let w256: Vec<f32> = common::lcg_values(1024 * 256, 9)
        .iter()
        .map(|v| v - 0.5)
        .collect();
    // 256 outputs would be read as binary without metadata; the metadata says float.
    let p = write_model(
        &dir,
        "float256.onnx",
        &with_metadata(&linear(&w256, 256), &metadata("float", "256")),
    );
    let engine = Engine::load(&p, Device::Cpu).unwrap();
    assert_eq!((engine.kind(), engine.dim()), (OutputKind::Float, 256));
    let m = engine.metadata().unwrap();
    assert_eq!((m.patch_size, m.magnification), (32, 6.0));
    // Any size is understood when the metadata says it.
    let p = write_model(
        &dir,
        "float64.onnx",
        &with_metadata(
            &linear(&common::lcg_values(1024 * 64, 10), 64),
            &metadata("float", "64"),
        ),
    );
    assert_eq!(Engine::load(&p, Device::Cpu).unwrap().dim(), 64);
    // A model without the keys has no metadata, and other keys are not descl's.
    let p = write_model(
        &dir,
        "other.onnx",
        &with_metadata(&linear(&w256, 256), &[("author", "someone")]),
    );
    let engine = Engine::load(&p, Device::Cpu).unwrap();
    assert!(engine.metadata().is_none());
    assert_eq!(engine.kind(), OutputKind::Binary);

    let mut wrong_range = metadata("float", "256");
    wrong_range[2].1 = "0_255";
    let cases: Vec<(&str, Props, &str)> = vec![
        (
            "wrong_dim.onnx",
            metadata("float", "128"),
            "metadata says 128",
        ),
        (
            "partial.onnx",
            metadata("float", "256")[..2].to_vec(),
            "incomplete",
        ),
        ("range.onnx", wrong_range, "input_range"),
    ];
    for (name, props, expect) in cases {
        let p = write_model(&dir, name, &with_metadata(&linear(&w256, 256), &props));
        let e = Engine::load(&p, Device::Cpu).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Model { .. }), "{name}: {msg}");
        assert!(msg.contains(name) && msg.contains(expect), "{name}: {msg}");
    }
}

#[test]
fn a_card_that_contradicts_the_metadata_is_an_error_naming_both_files() {
    if !common::ort_or_skip("card_vs_metadata") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let onnx = write_model(
        &dir,
        "m.onnx",
        &with_metadata(
            &linear(&common::lcg_values(1024 * 128, 11), 128),
            &metadata("float", "128"),
        ),
    );
    let card_path = dir.path().join("m.json");
    let card = |magnification: f32| descl::model::ModelCard {
        name: "m".into(),
        file: "m.onnx".into(),
        sha256: descl::model::card::sha256_file(&onnx).unwrap(),
        architecture: "linear".into(),
        input: descl::model::card::InputSpec {
            size: 32,
            range: [0.0, 1.0],
        },
        output: descl::model::card::OutputSpec {
            dim: 128,
            kind: OutputKind::Float,
        },
        patch: descl::model::card::PatchSpec {
            size: 32,
            magnification,
        },
        training: serde_json::Map::new(),
        metrics: serde_json::Map::new(),
    };
    let resolved = |magnification| descl::model::ResolvedModel {
        onnx: onnx.clone(),
        card: Some((card(magnification), card_path.clone())),
        sha256: descl::model::card::sha256_file(&onnx).unwrap(),
    };
    let ok = Engine::load_resolved(&resolved(6.0), Device::Cpu).unwrap();
    assert_eq!(resolved(6.0).magnification(&ok), Some(6.0));
    let e = Engine::load_resolved(&resolved(8.0), Device::Cpu).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Model { .. }), "{msg}");
    assert!(
        msg.contains("m.onnx")
            && msg.contains("m.json")
            && msg.contains("`patch_mr` 6 vs patch.magnification 8"),
        "{msg}"
    );
    // Without a card, the metadata's magnification is the model's.
    let uncarded = descl::model::ResolvedModel {
        onnx: onnx.clone(),
        card: None,
        sha256: descl::model::card::sha256_file(&onnx).unwrap(),
    };
    let engine = Engine::load_resolved(&uncarded, Device::Cpu).unwrap();
    assert_eq!(uncarded.magnification(&engine), Some(6.0));
}

#[test]
fn cuda_fails_clearly_without_cuda_and_auto_falls_back() {
    if !common::ort_or_skip("cuda") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write_model(
        &dir,
        "lin.onnx",
        &linear(&common::lcg_values(1024 * 128, 6), 128),
    );
    match Engine::load(&p, Device::Cuda) {
        // A CUDA build of ONNX Runtime on a GPU machine: it must really be on CUDA.
        Ok(e) => assert_eq!(e.device(), Device::Cuda),
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, Error::Device(_)), "{msg}");
            assert!(
                msg.contains("CUDA") && msg.contains("--device cpu"),
                "{msg}"
            );
        }
    }
    let auto = Engine::load(&p, Device::Auto).unwrap();
    let patches = Array3::from_shape_vec((3, 32, 32), common::lcg_values(3 * 1024, 7)).unwrap();
    assert_eq!(auto.describe(patches.view()).unwrap().len(), 3);
}

#[test]
fn default_model_gives_unit_rows() {
    if !common::ort_or_skip("default_model") {
        return;
    }
    let Some(model) = common::default_model_or_skip("default_model_gives_unit_rows") else {
        return;
    };
    let engine = Engine::load_resolved(&model, Device::Cpu).unwrap();
    let n = 64;
    let patches = Array3::from_shape_vec((n, 32, 32), common::lcg_values(n * 1024, 8)).unwrap();
    match engine.describe(patches.view()).unwrap() {
        Descriptors::Float(d) => {
            for row in d.rows() {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "row norm {norm}");
            }
        }
        Descriptors::Binary(d) => assert_eq!(d.len(), n),
    }
}

/// Cancels after the first `left` images have asked.
struct CancelAfter(std::sync::atomic::AtomicUsize);

impl descl::progress::Progress for CancelAfter {
    fn cancelled(&self) -> bool {
        self.0
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .is_err()
    }
}

#[test]
fn pipelined_folder_extraction_equals_one_image_at_a_time() {
    let test = "pipelined_folder_extraction_equals_one_image_at_a_time";
    let Some(root) = common::data_root_or_skip(test) else {
        return;
    };
    if !common::ort_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A flat image (no keypoints: an empty batch member) and a missing file among real ones,
    // so that blocks mix full, empty and failed images and the network's runs span images.
    let flat = dir.path().join("flat.png");
    common::gray_image(64, 48, true).save(&flat).unwrap();
    let fountain = root.join("strecha/fountain-P11/images");
    let paths = vec![
        fountain.join("0000.jpg"),
        flat,
        dir.path().join("missing.jpg"),
        fountain.join("0001.jpg"),
        root.join("oxford/graf/img1.ppm"),
    ];
    for model in [descl::model::DEFAULT_MODEL, "rootsift"] {
        let x = descl::pipeline::Extractor::new(descl::pipeline::ExtractorConfig {
            model: model.into(),
            device: Device::Cpu,
            detector: descl::detect::DetectorConfig {
                max_keypoints: 700,
                ..Default::default()
            },
            max_image_size: descl::pipeline::COLMAP_MAX_IMAGE_SIZE,
        })
        .unwrap();
        let mut got = Vec::new();
        x.extract_each(&paths, &descl::progress::Silent, |i, r, s| {
            assert!(s >= 0.0);
            got.push((i, r));
        });
        assert_eq!(got.len(), paths.len(), "{model}");
        for ((i, r), p) in got.into_iter().zip(&paths) {
            assert_eq!(paths[i], *p, "{model}: out of order");
            match (r, x.extract(p)) {
                // Bit-identical: same frames, scores and descriptors.
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{model}: {}", p.display()),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("{model}: {}: {a:?} vs {b:?}", p.display()),
            }
        }
        let n = |i: usize| match x.extract(&paths[i]) {
            Ok(f) => f.frames.len(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!((n(0), n(1), n(3)), (700, 0, 700), "{model}");
        // Cancelled after two images: those two are extracted, the rest are not started.
        let mut outcomes = Vec::new();
        let progress = CancelAfter(std::sync::atomic::AtomicUsize::new(2));
        x.extract_each(&paths, &progress, |_, r, _| outcomes.push(r));
        let cancelled: Vec<bool> = outcomes
            .iter()
            .map(|r| matches!(r, Err(e) if e.to_string().contains("cancelled")))
            .collect();
        assert_eq!(cancelled, [false, false, true, true, true], "{model}");
    }
}
