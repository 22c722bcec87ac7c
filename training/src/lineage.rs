//! Which photo sets a model has seen, through its whole lineage: its own training sources,
//! those of every model it was fine-tuned from (`training.init`, followed card to card) and
//! those of its teacher (`training.distill`, [`crate::distill`]).
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
use std::path::{Path, PathBuf};

/// The folder whose children are the photo sets (`../shared/data/train/<scene>/…`).
const TRAIN_FOLDER: &str = "train";
/// Longest `init` chain followed (a loop of cards would otherwise never end).
const MAX_LINEAGE: usize = 16;

/// The scene a recorded photo path or folder names: the component after the last `train`
/// component that has one.
fn scene_of_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split(['/', '\\']).collect();
    parts
        .iter()
        .rposition(|p| *p == TRAIN_FOLDER)
        .and_then(|i| parts.get(i + 1))
        .filter(|s| !s.is_empty() && **s != "." && **s != "..")
        .map(|s| s.to_string())
}

/// The scenes of `photos` (paths under `base`, each resolved through links and placed by the
/// folder after its last `train` component); None when one cannot be placed or there are none.
pub fn photo_scenes<P: AsRef<Path>>(photos: &[P], base: &Path) -> Option<BTreeSet<String>> {
    let scenes: Option<BTreeSet<String>> = photos
        .iter()
        .map(|p| {
            let resolved = base.join(p).canonicalize().ok()?;
            scene_of_path(&resolved.to_string_lossy())
        })
        .collect();
    scenes.filter(|s| !s.is_empty())
}

/// The scenes a track file's header record shows: a COLMAP cut's image folder (a folder
/// outside `train/`, such as a folder of links joining two scenes, by each recorded image's
/// resolved path under `base`), a synthetic cut's photos, a subset's original. None when the
/// record has photos that cannot all be placed in a scene, or no photos at all: what such a
/// source saw cannot be told from its record.
pub fn recorded_scenes(record: &Value, base: &Path) -> Option<BTreeSet<String>> {
    let all = |paths: Vec<Option<String>>| -> Option<BTreeSet<String>> {
        let scenes: Option<BTreeSet<String>> = paths.into_iter().collect();
        scenes.filter(|s| !s.is_empty())
    };
    match record["generator"].as_str() {
        Some("colmap") => {
            let folder = record["config"]["images"].as_str()?;
            if let Some(scene) = scene_of_path(folder) {
                return Some(BTreeSet::from([scene]));
            }
            let images: Option<Vec<PathBuf>> = record["images"]
                .as_array()?
                .iter()
                .map(|i| Some(Path::new(folder).join(i.as_str()?)))
                .collect();
            photo_scenes(&images?, base)
        }
        Some("synthetic") => all(record["photos"]
            .as_array()?
            .iter()
            .map(|p| p.as_str().and_then(scene_of_path))
            .collect()),
        Some("subset") => recorded_scenes(&record["of"], base),
        _ => None,
    }
}

/// The scenes of one run: `config` is its run config, `data` its card's `training.data`.
/// Each training source's scenes are those its config declares and those its record shows;
/// a source is refused when its record cannot tell (a declaration alone is not evidence).
fn run_scenes(name: &str, config: &Value, data: &Value, base: &Path) -> Result<BTreeSet<String>> {
    let sources: Vec<&Value> = match config["data"]["sources"].as_array() {
        Some(s) if !s.is_empty() => s.iter().collect(),
        _ => vec![&config["data"]],
    };
    let training: Vec<&Value> = sources
        .into_iter()
        .filter(|s| s["validation_only"] != Value::Bool(true))
        .collect();
    // Records: one per training source (`{"weight", …, "source": record}`), or the single-file
    // form's one record (`data.tracks`).
    let records: Vec<&Value> = match (data["sources"].as_array(), data.get("tracks")) {
        (Some(s), _) => s.iter().map(|r| &r["source"]).collect(),
        (None, Some(record)) => vec![record],
        (None, None) => bail!("{name}: the card records no training data"),
    };
    if records.len() != training.len() {
        bail!(
            "{name}: {} training sources in its config, {} in its data record",
            training.len(),
            records.len()
        );
    }
    let mut out = BTreeSet::new();
    for (source, record) in training.iter().zip(records) {
        let recorded = recorded_scenes(record, base).with_context(|| {
            format!(
                "{name}: the record of training source {} does not show which scenes its \
                 photos are",
                source["tracks"]
            )
        })?;
        out.extend(recorded);
        out.extend(
            source["scenes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["scene"].as_str().map(str::to_string)),
        );
    }
    Ok(out)
}

/// Every scene `card` (read from `card_path`) and the models it descends from trained on.
/// Recorded relative paths (`init` files, image folders) are taken under `base`, the folder
/// the runs ran in (the repository root); an `init` file must still have the recorded
/// SHA-256, and its card (the `.json` beside it) must describe the `.onnx` beside it.
pub fn trained_scenes(card: &ModelCard, card_path: &Path, base: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut current = (card.clone(), card_path.to_path_buf());
    for _ in 0..MAX_LINEAGE {
        let (card, path) = &current;
        let t = &card.training;
        let name = format!("{} ({})", card.name, path.display());
        if let Some(offset) = t.get("offset") {
            // An output offset (`descl-train offset`): the network is the init's; the offset
            // was fitted on the photos it lists, each placed in its scene.
            let photos: Option<Vec<&str>> = offset["photos"]
                .as_array()
                .and_then(|p| p.iter().map(Value::as_str).collect());
            let photos = photos.with_context(|| format!("{name}: offset without its photos"))?;
            out.extend(photo_scenes(&photos, base).with_context(|| {
                format!("{name}: the offset's photos cannot all be placed in a scene")
            })?);
        } else {
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
                        out.extend(run_scenes(&name, c, &d["data"], base)?);
                    }
                }
                (Some(config), _) => out.extend(run_scenes(
                    &name,
                    config,
                    t.get("data").unwrap_or(&Value::Null),
                    base,
                )?),
                (None, _) => bail!("{name}: the card has no training.config"),
            }
        }
        if let Some(teacher) = t.get("distill").map(|d| &d["teacher"]) {
            // A distilled student learnt what its teacher computes on the student's patches:
            // it saw every scene the teacher saw.
            let file = base.join(
                teacher["file"]
                    .as_str()
                    .with_context(|| format!("{name}: training.distill without a teacher file"))?,
            );
            let (teacher_card, _) = crate::distill::teacher_card(&file)
                .with_context(|| format!("{name}: its teacher"))?;
            if Some(teacher_card.sha256.as_str()) != teacher["sha256"].as_str() {
                bail!(
                    "{name}: teacher {} changed since it was trained",
                    file.display()
                );
            }
            out.extend(trained_scenes(
                &teacher_card,
                &file.with_extension("json"),
                base,
            )?);
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
        parent_card
            .verify_sha256(&parent_card.onnx_path(&parent))
            .with_context(|| format!("{name}: the card beside its init weights"))?;
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
        assert_eq!(
            scene_of_path("/srv/train/x/../data/train/sceaux_castle/1.jpg").as_deref(),
            Some("sceaux_castle")
        );
        let base = Path::new(".");
        let subset = serde_json::json!({"generator": "subset", "of": {"generator": "synthetic",
            "photos": ["train/a/1.jpg", "train/b/2.jpg", "train/a/3.jpg"]}});
        assert_eq!(
            recorded_scenes(&subset, base)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        // One photo that cannot be placed makes the whole record silent.
        let stray = serde_json::json!({"generator": "synthetic",
            "photos": ["train/a/1.jpg", "elsewhere/2.jpg"]});
        assert_eq!(recorded_scenes(&stray, base), None);
    }

    /// A folder of links (castle-P30 with castle_p19_extra, as `reconstruct-train-sets`
    /// makes it) is placed by where each recorded image resolves, not by its own name.
    #[test]
    fn a_folder_of_links_is_placed_by_its_targets() {
        let dir = tempfile::tempdir().unwrap();
        let (kitchen, joined) = (
            dir.path().join("data/train/mipnerf360_kitchen"),
            dir.path().join("cache/images/castle"),
        );
        std::fs::create_dir_all(&kitchen).unwrap();
        std::fs::create_dir_all(&joined).unwrap();
        std::fs::write(kitchen.join("1.jpg"), b"x").unwrap();
        std::os::unix::fs::symlink(kitchen.join("1.jpg"), joined.join("1.jpg")).unwrap();
        let record = |images: &[&str]| {
            serde_json::json!({"generator": "colmap",
                "config": {"images": "cache/images/castle"}, "images": images})
        };
        assert_eq!(
            recorded_scenes(&record(&["1.jpg"]), dir.path()),
            Some(BTreeSet::from(["mipnerf360_kitchen".to_string()]))
        );
        assert_eq!(
            recorded_scenes(&record(&["1.jpg", "gone.jpg"]), dir.path()),
            None
        );
    }

    fn shipped(name: &str) -> (ModelCard, PathBuf) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let path = root.join("models").join(format!("{name}.json"));
        (ModelCard::load(&path).unwrap(), path)
    }

    /// An output offset (`descl-train offset`) saw its network's scenes (its `init`) and the
    /// photos its mean was taken on; a photo that no scene folder holds is refused.
    #[test]
    fn an_offset_model_has_seen_its_photos_and_its_networks_scenes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = tempfile::tempdir().unwrap();
        let photo = dir.path().join("data/train/skull01/a.jpg");
        std::fs::create_dir_all(photo.parent().unwrap()).unwrap();
        std::fs::write(&photo, b"jpeg").unwrap();
        let stray = dir.path().join("a.jpg");
        std::fs::write(&stray, b"jpeg").unwrap();
        let (net, net_path) = shipped("descl-l2net-w0.5-cdf-binary256-mix-4k");
        let weights = net_path.with_extension("safetensors");
        let mut card = net.clone();
        card.name = "offset".into();
        let serde_json::Value::Object(training) = serde_json::json!({
            "offset": {"photos": [photo]},
            "init": {"file": weights,
                     "sha256": descl::model::card::sha256_file(&weights).unwrap()},
        }) else {
            unreachable!()
        };
        card.training = training;
        let path = dir.path().join("offset.json");
        let scenes = trained_scenes(&card, &path, &root).unwrap();
        assert_eq!(
            scenes.iter().map(String::as_str).collect::<Vec<_>>(),
            ["castle-P30", "lightglue", "sacre_coeur", "skull01"]
        );
        card.training["offset"]["photos"] = serde_json::json!([photo, stray]);
        let e = trained_scenes(&card, &path, &root).unwrap_err().to_string();
        assert!(e.contains("cannot all be placed"), "{e}");
    }

    #[test]
    fn a_fine_tuned_model_has_seen_its_init_models_scenes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // descl-l2net-w0.5-cdf-binary256-mix-4k continued descl-l2net-w0.5-cdf-binary256-mix,
        // which started from descl-l2net-w0.5-hardnet-mix-8k: none of their sources declares a
        // scene; their records show castle-P30 and sacre_coeur (COLMAP cuts) and the
        // synthetic views' lightglue photos. (Chosen because its whole lineage reads from the
        // repository and ../shared/data alone; the 25-scene models' castle source is a folder
        // of links that `reconstruct-train-sets` makes under training/cache.)
        let (card, path) = shipped("descl-l2net-w0.5-cdf-binary256-mix-4k");
        let scenes = trained_scenes(&card, &path, &root).unwrap();
        assert_eq!(
            scenes.iter().map(String::as_str).collect::<Vec<_>>(),
            ["castle-P30", "lightglue", "sacre_coeur"]
        );
        for held in ["mipnerf360_kitchen", "sceaux_castle", "vggsfm_statue"] {
            assert!(!scenes.contains(held), "{held}");
        }
        // A source whose record cannot show its scenes is refused, whatever its config
        // declares.
        let mut blind = card.clone();
        blind.training["data"]["sources"][0]["source"] = serde_json::json!({"generator": "x"});
        let e = format!("{:#}", trained_scenes(&blind, &path, &root).unwrap_err());
        assert!(e.contains("does not show which scenes"), "{e}");
        // The single-file form of the older cards: the record is `data.tracks`.
        let (tfeat, tfeat_path) = shipped("descl-tfeat-hardnet");
        let scenes = trained_scenes(&tfeat, &tfeat_path, &root).unwrap();
        assert!(scenes.contains("castle-P30"), "{scenes:?}");
        // Init weights that changed since are refused.
        let mut moved = card;
        moved.training["init"]["sha256"] = "0".repeat(64).into();
        let e = trained_scenes(&moved, &path, &root)
            .unwrap_err()
            .to_string();
        assert!(e.contains("changed since"), "{e}");
    }
}
