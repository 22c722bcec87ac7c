//! Every model shipped in `models/`: its card carries training provenance and `descl bench`
//! numbers, it loads with its checksum, its file's metadata says what its card says, its output
//! is what the card says (unit float rows or 256 bits), and on a real image pair (graf 1→2,
//! ground-truth homography) it tells a corresponding patch from an unrelated one.

mod vision_common;

use descl::describe::Descriptors;
use descl::eval::distance::distance;
use descl::model::engine::{Device, Engine};
use descl::model::{list_cards, OutputKind};

/// Share of correspondences whose descriptor is nearer its partner than an unrelated patch's.
/// Raw normalised pixels already reach 0.957 on this pair (`tests/vision_patch.rs`); a model
/// below this floor is broken, not merely weak.
const MIN_PARTNER_WINS: f64 = 0.9;

#[test]
fn every_shipped_model_has_provenance_numbers_and_works() {
    let cards = list_cards().unwrap();
    assert!(cards.len() >= 2, "models/ holds {} cards", cards.len());
    assert!(
        cards
            .iter()
            .any(|(c, _)| c.name == descl::model::DEFAULT_MODEL),
        "the default model is not shipped"
    );
    for (card, path) in &cards {
        let t = &card.training;
        for key in ["method", "iterations", "batch", "seed", "config", "data"] {
            assert!(
                t.contains_key(key),
                "{}: training.{key} missing",
                path.display()
            );
        }
        // A run stopped at a checkpoint (`descl-train train --resume --finish`) says how far
        // its schedule got.
        if let Some(done) = t.get("iterations_completed") {
            let (done, planned) = (done.as_u64(), t["iterations"].as_u64());
            assert!(
                matches!((done, planned), (Some(d), Some(p)) if 0 < d && d < p),
                "{}: iterations_completed {done:?} of {planned:?}",
                path.display()
            );
        }
        // `.get`: a card without the entry (a model put in models/ before `descl bench
        // --record` measured it) fails with this message, not a missing-key panic.
        let m = &card.metrics;
        assert!(
            m.get("dev-homography-sequences")
                .is_some_and(|e| e["mma@3"].is_number()),
            "{}: no dev MMA@3 (`descl bench --record`)",
            path.display()
        );
        assert!(
            m.get("strecha-relative-pose")
                .is_some_and(|e| e["auc"]["10deg"].is_number()),
            "{}: no pose AUC@10 (`descl bench --record`)",
            path.display()
        );
    }
    if !vision_common::ort_or_skip("shipped_models") {
        return;
    }
    let Some((p1, p2)) = vision_common::graf_correspondence_patches("shipped_models") else {
        return;
    };
    let n = p1.shape()[0];
    for (card, path) in &cards {
        let model = descl::model::resolve(&path.to_string_lossy()).unwrap();
        let engine = Engine::load_resolved(&model, Device::Cpu).unwrap();
        // Self-describing: the file carries the card's preprocessing (compared field by field
        // here, not only by the engine's own check).
        let meta = engine
            .metadata()
            .unwrap_or_else(|| panic!("{}: no metadata in the ONNX file", card.name));
        assert_eq!(meta.patch_size, card.patch.size, "{}", card.name);
        assert_eq!(
            meta.magnification,
            f64::from(card.patch.magnification),
            "{}",
            card.name
        );
        assert_eq!(meta.input_range, "0_1", "{}", card.name);
        assert_eq!(meta.input_norm, "per_patch", "{}", card.name);
        assert_eq!(meta.output_kind, card.output.kind, "{}", card.name);
        assert_eq!(meta.output_dim, card.output.dim, "{}", card.name);
        let (d1, d2) = (
            engine.describe(p1.view()).unwrap(),
            engine.describe(p2.view()).unwrap(),
        );
        match (&d1, card.output.kind) {
            (Descriptors::Float(d), OutputKind::Float) => {
                assert_eq!(d.ncols(), card.output.dim);
                for row in d.rows() {
                    let norm = row.dot(&row).sqrt();
                    assert!((norm - 1.0).abs() < 1e-4, "{}: norm {norm}", card.name);
                }
            }
            (Descriptors::Binary(_), OutputKind::Binary) => {}
            _ => panic!("{}: output is not the card's kind", card.name),
        }
        let wins = (0..n)
            .filter(|&i| {
                let j = vision_common::unrelated_index(i, n);
                distance(&d1, i, &d2, i).unwrap() < distance(&d1, i, &d2, j).unwrap()
            })
            .count() as f64
            / n as f64;
        eprintln!(
            "{}: partner nearer in {:.1} % of {n}",
            card.name,
            100.0 * wins
        );
        assert!(wins > MIN_PARTNER_WINS, "{}: {wins}", card.name);
    }
}

#[test]
fn a_shipped_model_with_a_card_contradicting_its_metadata_is_refused() {
    if !vision_common::ort_or_skip("card_contradicts_metadata") {
        return;
    }
    // A copy of the default model whose card claims magnification 8 (the file says 6): the
    // checksum still matches, so only the metadata can catch it.
    let model = descl::model::resolve(descl::model::DEFAULT_MODEL).unwrap();
    let (card, _) = model.card.clone().unwrap();
    assert_eq!(card.patch.magnification, 6.0);
    let dir = tempfile::tempdir().unwrap();
    let onnx = dir.path().join(&card.file);
    std::fs::copy(&model.onnx, &onnx).unwrap();
    let card_path = dir.path().join(format!("{}.json", card.name));
    let mut wrong = card.clone();
    wrong.patch.magnification = 8.0;
    wrong.save(&card_path).unwrap();
    let resolved = descl::model::resolve(&card_path.to_string_lossy()).unwrap();
    let e = Engine::load_resolved(&resolved, Device::Cpu).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&onnx.display().to_string())
            && msg.contains(&card_path.display().to_string())
            && msg.contains("`patch_mr` 6 vs patch.magnification 8"),
        "{msg}"
    );
    // So is an extractor built on it, before any image is read.
    let e = descl::pipeline::Extractor::new(descl::pipeline::ExtractorConfig {
        model: card_path.to_string_lossy().into_owned(),
        device: Device::Cpu,
        detector: descl::detect::DetectorConfig::default(),
        max_image_size: descl::pipeline::COLMAP_MAX_IMAGE_SIZE,
    })
    .unwrap_err();
    assert!(e.to_string().contains("patch_mr"), "{e}");
}
