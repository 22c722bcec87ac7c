//! Which photo sets a model has seen, through its whole lineage: its own training sources and
//! those of every model it was fine-tuned from (`training.init`, followed card to card).
//!
//! Why: a held-out score means something only for a model that never saw the held-out scenes,
//! and a card's `training.data.scenes` lists only what its own sources declared. A source that
//! declares no scene, or weights started from another model, would otherwise pass unseen. Each
//! training source's scenes are what its config declares together with what its track file's
//! record shows (the photo folders a COLMAP cut read, the photos a synthetic cut used, through
//! `descl-train subset` records); a source with neither is refused, and so is an `init` whose
//! weights changed since or whose card cannot be found.

use anyhow::{bail, Context, Result};
use descl::model::ModelCard;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The folder whose children are the photo sets (`../shared/data/train/<scene>/…`).
const TRAIN_FOLDER: &str = "train";
/// Longest `init` chain followed (a loop of cards would otherwise never end).
const MAX_LINEAGE: usize = 16;

/// The scene a recorded photo path or folder names: the component after a `train` component.
fn scene_of_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split(['/', '\\']).collect();
    parts
        .iter()
        .position(|p| *p == TRAIN_FOLDER)
        .and_then(|i| parts.get(i + 1))
        .filter(|s| !s.is_empty())
        .map(|s| s.to_string())
}

/// The scenes a track file's header record shows: a COLMAP cut's image folder, a synthetic
/// cut's photos, a subset's original.
pub fn recorded_scenes(record: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    match record["generator"].as_str() {
        Some("colmap") => out.extend(record["config"]["images"].as_str().and_then(scene_of_path)),
        Some("synthetic") => out.extend(
            record["photos"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().and_then(scene_of_path)),
        ),
        Some("subset") => out.extend(recorded_scenes(&record["of"])),
        _ => {}
    }
    out
}

/// The scenes of one run: `config` is its run config, `data` its card's `training.data`.
fn run_scenes(name: &str, config: &Value, data: &Value) -> Result<BTreeSet<String>> {
    let sources: Vec<&Value> = match config["data"]["sources"].as_array() {
        Some(s) if !s.is_empty() => s.iter().collect(),
        _ => vec![&config["data"]],
    };
    let training: Vec<&Value> = sources
        .into_iter()
        .filter(|s| s["validation_only"] != Value::Bool(true))
        .collect();
    let records = data["sources"]
        .as_array()
        .with_context(|| format!("{name}: the card has no training.data.sources"))?;
    if records.len() != training.len() {
        bail!(
            "{name}: {} training sources in its config, {} in its data record",
            training.len(),
            records.len()
        );
    }
    let mut out = BTreeSet::new();
    for (source, record) in training.iter().zip(records) {
        let mut scenes: BTreeSet<String> = source["scenes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["scene"].as_str().map(str::to_string))
            .collect();
        scenes.extend(recorded_scenes(&record["source"]));
        if scenes.is_empty() {
            bail!(
                "{name}: training source {} names no scene and its record shows none",
                source["tracks"]
            );
        }
        out.extend(scenes);
    }
    Ok(out)
}

/// Every scene `card` (read from `card_path`) and the models it descends from trained on.
/// `init` files are found as recorded, a relative path under `base` (the folder the runs ran
/// in: the repository root), and must still have the recorded SHA-256; their card is the
/// `.json` beside them.
pub fn trained_scenes(card: &ModelCard, card_path: &Path, base: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut current = (card.clone(), card_path.to_path_buf());
    for _ in 0..MAX_LINEAGE {
        let (card, path) = &current;
        let t = &card.training;
        let name = format!("{} ({})", card.name, path.display());
        match (&t.get("config"), t.get("soup")) {
            // A soup: each ingredient's config with its own data record.
            (Some(Value::Array(configs)), Some(_)) => {
                let data = t["data"]["ingredients"]
                    .as_array()
                    .with_context(|| format!("{name}: soup without data.ingredients"))?;
                if data.len() != configs.len() {
                    bail!(
                        "{name}: {} configs, {} data records",
                        configs.len(),
                        data.len()
                    );
                }
                for (c, d) in configs.iter().zip(data) {
                    out.extend(run_scenes(&name, c, &d["data"])?);
                }
            }
            (Some(config), _) => out.extend(run_scenes(
                &name,
                config,
                t.get("data").unwrap_or(&Value::Null),
            )?),
            (None, _) => bail!("{name}: the card has no training.config"),
        }
        let Some(init) = t.get("init").filter(|i| !i.is_null()) else {
            return Ok(out);
        };
        let file = base.join(
            init["file"]
                .as_str()
                .with_context(|| format!("{name}: training.init without a file"))?,
        );
        let sha = descl::model::card::sha256_file(&file)
            .with_context(|| format!("{name}: its init weights"))?;
        if Some(sha.as_str()) != init["sha256"].as_str() {
            bail!(
                "{name}: init weights {} changed since it was trained",
                file.display()
            );
        }
        let parent = file.with_extension("json");
        let parent_card = ModelCard::load(&parent)
            .with_context(|| format!("{name}: the card of its init weights"))?;
        current = (parent_card, parent);
    }
    bail!(
        "{}: more than {MAX_LINEAGE} models in its lineage",
        card.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn recorded_paths_name_their_scene() {
        assert_eq!(
            scene_of_path("../shared/data/train/castle-P30/images").as_deref(),
            Some("castle-P30")
        );
        assert_eq!(
            scene_of_path("train/sacre_coeur/0001.jpg").as_deref(),
            Some("sacre_coeur")
        );
        assert_eq!(scene_of_path("training/cache/images/castle"), None);
        let subset = serde_json::json!({"generator": "subset", "of": {"generator": "synthetic",
            "photos": ["train/a/1.jpg", "train/b/2.jpg", "train/a/3.jpg"]}});
        assert_eq!(
            recorded_scenes(&subset).into_iter().collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    fn shipped(name: &str) -> (ModelCard, PathBuf) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let path = root.join("models").join(format!("{name}.json"));
        (ModelCard::load(&path).unwrap(), path)
    }

    #[test]
    fn a_fine_tuned_model_has_seen_its_init_models_scenes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // descl-l2net-real25-b1024 started from descl-l2net-hardnet-mix-b1024, whose sources
        // declare no scene: its record shows castle-P30, sacre_coeur and lightglue photos.
        let (card, path) = shipped("descl-l2net-real25-b1024");
        let scenes = trained_scenes(&card, &path, &root).unwrap();
        for s in ["lightglue", "castle-P30", "castle_p19_extra", "skull01"] {
            assert!(scenes.contains(s), "{s}: {scenes:?}");
        }
        for held in ["mipnerf360_kitchen", "sceaux_castle", "vggsfm_statue"] {
            assert!(!scenes.contains(held), "{held}");
        }
        // A source that declares no scene and whose record shows none is refused.
        let mut blind = card.clone();
        blind.training["data"]["sources"][0]["source"] = serde_json::json!({"generator": "x"});
        if let Some(s) = blind.training["config"]["data"]["sources"][0].as_object_mut() {
            s.remove("scenes");
        }
        let e = trained_scenes(&blind, &path, &root)
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no scene"), "{e}");
        // Init weights that changed since are refused.
        let mut moved = card;
        moved.training["init"]["sha256"] = "0".repeat(64).into();
        let e = trained_scenes(&moved, &path, &root)
            .unwrap_err()
            .to_string();
        assert!(e.contains("changed since"), "{e}");
    }
}
