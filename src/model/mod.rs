//! Models: where they live, how a name or path becomes an ONNX file (and its card), the
//! preprocessing a model carries in its own file, and the ONNX Runtime engine that runs them.

pub mod card;
pub mod engine;
pub mod metadata;

pub use card::{ModelCard, OutputKind};
pub use engine::{Device, Engine};
pub use metadata::ModelMetadata;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The model every command uses when none is named: `descl extract`, `descl match`, `descl sfm`
/// and `--preset sfm`, `descl bench` and Python's `descl.Extractor`, so that features extracted
/// once serve matching and reconstruction alike (issue 45). Named here and nowhere else.
///
/// L2-Net at half width distilled from the HyNet network (`descl-hynet-sdgm-real25all-b1024`,
/// training/src/distill.rs), with an output offset (training/src/offset.rs): 4.7× HyNet's CPU
/// speed (4 208 against 902 patches/s, 2 cores), and, on the dev data (`descl bench`, 2048 DoG
/// frames), MMA@3 59.2 under mutual NN (HyNet with the offset: 59.6), 80.8 under `descl
/// match`'s ratio test (82.8), pose AUC@10 97.9 (97.1). Chosen among the students on held-out
/// validation patches and checked in reconstruction on the SfM validation scenes
/// (models/README.md, docs/BENCHMARKS.md "One default").
pub const DEFAULT_MODEL: &str = "descl-l2net-w0.5-distill-dist-offset";

/// Environment variable that overrides [`models_dir`].
pub const MODELS_ENV: &str = "DESCL_MODELS";

/// Where an installed `descl` keeps the shipped models, relative to the folder of its
/// executable: `<prefix>/bin/descl` finds `<prefix>/share/descl/models`. The relocatable bundle
/// (`scripts/bundle`) is laid out so; the folder of the source tree's models is compiled in and
/// does not exist on the machine a bundle runs on.
pub const MODELS_BESIDE_EXE: &str = "../share/descl/models";

/// The folder of shipped models: `$DESCL_MODELS`, else [`MODELS_BESIDE_EXE`] from the running
/// executable (symlinks resolved) when that folder exists, else `<repo>/models`.
pub fn models_dir() -> PathBuf {
    if let Some(p) = std::env::var_os(MODELS_ENV) {
        return PathBuf::from(p);
    }
    beside_exe(MODELS_BESIDE_EXE)
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// `rel` from the folder of the running executable, without `..` where the path exists; None
/// when the executable's path is unknown.
pub(crate) fn beside_exe(rel: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(rel);
    Some(p.canonicalize().unwrap_or(p))
}

/// A model ready to load: its ONNX file and, when there is one, its card.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedModel {
    /// The ONNX file.
    pub onnx: PathBuf,
    /// The card and the path it was read from.
    pub card: Option<(ModelCard, PathBuf)>,
    /// The SHA-256 of the ONNX file: the card's (checked against the file), or, for a model
    /// without a card, computed from the file when it was resolved. Features files record it,
    /// so a model replaced at the same path is another model to `--resume`, `match` and
    /// `sfm merge`.
    pub sha256: String,
}

impl ResolvedModel {
    /// The name written into features files: the card's name, else the ONNX file's path.
    pub fn display_name(&self) -> String {
        match &self.card {
            Some((c, _)) => c.name.clone(),
            None => self.onnx.display().to_string(),
        }
    }

    /// The magnification the model was trained for: its card's, else its file's metadata's
    /// (`engine` is this model loaded, which checked that the two agree when both exist); None
    /// when neither says one.
    pub fn magnification(&self, engine: &Engine) -> Option<f32> {
        match &self.card {
            Some((card, _)) => Some(card.patch.magnification),
            None => engine.metadata().map(|m| m.magnification as f32),
        }
    }
}

/// Turns `--model NAME|PATH` into a model: an existing path to an `.onnx` file (its card, if
/// any, is the same-stem `.json` beside it) or to a card `.json`, else a model name looked up as
/// `models_dir()/NAME.json`. A card's SHA-256 is checked here, before anything runs the model.
pub fn resolve(name_or_path: &str) -> Result<ResolvedModel> {
    let p = Path::new(name_or_path);
    let is_pathlike = p.components().count() > 1
        || matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("onnx" | "json")
        );
    if is_pathlike {
        if !p.is_file() {
            return Err(Error::Model {
                path: p.to_path_buf(),
                reason: "no such model file".into(),
            });
        }
        if p.extension().and_then(|e| e.to_str()) == Some("json") {
            return from_card(p);
        }
        let card_path = p.with_extension("json");
        if card_path.is_file() {
            let r = from_card(&card_path)?;
            if !same_file(&r.onnx, p) {
                return Err(Error::Model {
                    path: card_path,
                    reason: format!(
                        "this card describes `{}`, not `{}`",
                        r.onnx.display(),
                        p.display()
                    ),
                });
            }
            return Ok(r);
        }
        return Ok(ResolvedModel {
            onnx: p.to_path_buf(),
            card: None,
            sha256: card::sha256_file(p)?,
        });
    }
    let dir = models_dir();
    let card_path = dir.join(format!("{name_or_path}.json"));
    if !card_path.is_file() {
        let known: Vec<String> = list_cards()
            .map(|v| v.into_iter().map(|(c, _)| c.name).collect())
            .unwrap_or_default();
        return Err(Error::Model {
            path: card_path,
            reason: format!(
                "no model named `{name_or_path}` in {} (known: {}); give a path to an .onnx file or a model name",
                dir.display(),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
        });
    }
    from_card(&card_path)
}

fn from_card(card_path: &Path) -> Result<ResolvedModel> {
    let card = ModelCard::load(card_path)?;
    let onnx = card.onnx_path(card_path);
    if !onnx.is_file() {
        return Err(Error::Model {
            path: onnx,
            reason: format!(
                "model file named by card {} is missing",
                card_path.display()
            ),
        });
    }
    card.verify_sha256(&onnx)?;
    Ok(ResolvedModel {
        onnx,
        sha256: card.sha256.to_ascii_lowercase(),
        card: Some((card, card_path.to_path_buf())),
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A card and the file it was read from.
pub type CardEntry = (ModelCard, PathBuf);

/// Every card in [`models_dir`] (sorted by name), with its path. A folder that does not exist
/// has no cards; a card that does not parse is an error naming it.
pub fn list_cards() -> Result<Vec<CardEntry>> {
    let (cards, mut bad) = list_cards_lenient()?;
    match bad.pop() {
        Some(e) => Err(e),
        None => Ok(cards),
    }
}

/// [`list_cards`] that goes on past unreadable cards: the readable ones, and one error (naming
/// the file) per card that could not be read.
pub fn list_cards_lenient() -> Result<(Vec<CardEntry>, Vec<Error>)> {
    let dir = models_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let (mut cards, mut bad) = (Vec::new(), Vec::new());
    for entry in entries {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("json") && looks_like_card(&path) {
            match ModelCard::load(&path) {
                Ok(card) => cards.push((card, path)),
                Err(e) => bad.push(e),
            }
        }
    }
    cards.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok((cards, bad))
}

/// Other JSON files may sit in `models/` (training configs saved beside their model); a card is
/// a JSON object with `sha256` and `architecture` keys. Anything else is not listed.
fn looks_like_card(path: &Path) -> bool {
    let Ok(text) = crate::io::bounded::read_text(path, card::MAX_CARD_BYTES, "model card") else {
        return true;
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(m)) => {
            m.contains_key("sha256") && m.contains_key("architecture")
        }
        _ => true, // unreadable or malformed: let ModelCard::load report it
    }
}
