//! Every model shipped in `models/`: its card carries training provenance and `descl bench`
//! numbers, it loads with its checksum, its output is what the card says (unit float rows or
//! 256 bits), and on a real image pair (graf 1→2, ground-truth homography) it tells a
//! corresponding patch from an unrelated one.

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
        let m = &card.metrics;
        assert!(
            m["dev-homography-sequences"]["mma@3"].is_number(),
            "{}: no dev MMA@3",
            path.display()
        );
        assert!(
            m["strecha-relative-pose"]["auc"]["10deg"].is_number(),
            "{}: no pose AUC@10",
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
