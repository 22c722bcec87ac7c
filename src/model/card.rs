//! Model cards: `models/NAME.json` beside `models/NAME.onnx`, saying what the model is, how it
//! was trained and how well it does, so that a file of weights is never anonymous.
//!
//! ```json
//! {
//!   "name": "descl-tfeat-hardnet",
//!   "file": "descl-tfeat-hardnet.onnx",
//!   "sha256": "<64 hex digits of the .onnx file>",
//!   "architecture": "tfeat",
//!   "input": { "size": 32, "range": [0.0, 1.0] },
//!   "output": { "dim": 128, "kind": "float" },
//!   "patch": { "size": 32, "magnification": 6.0 },
//!   "training": { "method": "hardnet", "iterations": 20000, "batch": 512, "seed": 1, ... },
//!   "metrics": { "dev-homography": { "command": "descl bench ...", "mma@3": 0.53 } }
//! }
//! ```
//! `training` and `metrics` are free-form JSON objects. By convention `training.method` names the
//! training method, and `metrics` maps a benchmark name to an object holding the `command` that
//! produced it and its numbers; `descl models` shows those numbers.

use crate::error::{Error, Result};
use crate::io::atomic::write_bytes_atomic;
use crate::patch::PATCH_SIZE;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the model's output is: a float descriptor (L2-normalised by the engine) or the
/// pre-binarisation activations of a binary descriptor (bit i = output_i > 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    Float,
    Binary,
}

impl OutputKind {
    /// `"float"` or `"binary"`, as written in cards.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputKind::Float => "float",
            OutputKind::Binary => "binary",
        }
    }
}

/// The model's input: square patches of `size` pixels with values in `range` (before the graph's
/// own per-patch normalisation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputSpec {
    pub size: usize,
    pub range: [f32; 2],
}

/// The model's output: `dim` values per patch, read as `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub dim: usize,
    pub kind: OutputKind,
}

/// How patches are cut for this model: `size` pixels square covering a measurement region of
/// `magnification` × the keypoint scale σ on each side of the centre (DoG frames: A = m·σ·R).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchSpec {
    pub size: usize,
    pub magnification: f32,
}

/// A model card (see the module documentation for the JSON layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The model's name: the card is `models/<name>.json`.
    pub name: String,
    /// The ONNX file, relative to the card's folder.
    pub file: String,
    /// SHA-256 of the ONNX file in lowercase hex; checked whenever the model is loaded.
    pub sha256: String,
    /// Network architecture, e.g. `"tfeat"` or `"l2net"`.
    pub architecture: String,
    pub input: InputSpec,
    pub output: OutputSpec,
    pub patch: PatchSpec,
    /// How the model was trained: method, hyper-parameters, data, iterations, batch, seed,
    /// device, wall time, final loss.
    #[serde(default)]
    pub training: serde_json::Map<String, serde_json::Value>,
    /// Benchmark results, each with the command that produced it.
    #[serde(default)]
    pub metrics: serde_json::Map<String, serde_json::Value>,
}

/// Largest model card read: the shipped cards are 10-15 KB (metadata, training record and the
/// benchmark numbers of several runs); 16 MiB leaves room for any number of recorded metrics
/// while a device or a huge file given as a card fails at once.
pub const MAX_CARD_BYTES: u64 = 16 << 20;

/// Binary descriptors have exactly this many output values (one bit each).
pub const BINARY_OUTPUT_DIM: usize = crate::describe::BINARY_BITS;

impl ModelCard {
    /// Reads and validates a card.
    pub fn load(path: &Path) -> Result<ModelCard> {
        let text = crate::io::bounded::read_text(path, MAX_CARD_BYTES, "model card")?;
        let card: ModelCard = serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not a valid model card: {e}")))?;
        card.validate()
            .map_err(|reason| Error::format(path, reason))?;
        Ok(card)
    }

    /// Writes the card as pretty JSON, atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.validate()
            .map_err(|reason| Error::format(path, reason))?;
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::format(path, format!("cannot serialise model card: {e}")))?;
        text.push('\n');
        write_bytes_atomic(path, text.as_bytes())
    }

    /// Checks what every consumer relies on; the message says which field is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.name.is_empty() {
            return Err("model card: empty `name`".into());
        }
        if self.file.is_empty() {
            return Err("model card: empty `file`".into());
        }
        if self.sha256.len() != 64 || !self.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "model card: `sha256` must be 64 hex digits, got {:?}",
                self.sha256
            ));
        }
        if self.input.size != PATCH_SIZE || self.patch.size != PATCH_SIZE {
            return Err(format!(
                "model card: input.size and patch.size must be {PATCH_SIZE}, got {} and {}",
                self.input.size, self.patch.size
            ));
        }
        let [lo, hi] = self.input.range;
        if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
            return Err(format!(
                "model card: input.range {:?} is empty",
                self.input.range
            ));
        }
        if self.output.dim == 0 {
            return Err("model card: output.dim must be positive".into());
        }
        if self.output.kind == OutputKind::Binary && self.output.dim != BINARY_OUTPUT_DIM {
            return Err(format!(
                "model card: binary models have output.dim {BINARY_OUTPUT_DIM}, got {}",
                self.output.dim
            ));
        }
        if !(self.patch.magnification.is_finite() && self.patch.magnification > 0.0) {
            return Err(format!(
                "model card: patch.magnification must be positive, got {}",
                self.patch.magnification
            ));
        }
        Ok(())
    }

    /// The ONNX file of a card read from `card_path`.
    pub fn onnx_path(&self, card_path: &Path) -> PathBuf {
        card_path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&self.file)
    }

    /// Fails with [`Error::Model`] naming `onnx` unless its SHA-256 is the card's.
    pub fn verify_sha256(&self, onnx: &Path) -> Result<()> {
        let actual = sha256_file(onnx)?;
        if !actual.eq_ignore_ascii_case(&self.sha256) {
            return Err(Error::Model {
                path: onnx.to_path_buf(),
                reason: format!(
                    "SHA-256 {actual} differs from {} in the model card of `{}`: the file was changed or replaced",
                    self.sha256, self.name
                ),
            });
        }
        Ok(())
    }

    /// `training.method` if the card says it.
    pub fn training_method(&self) -> Option<&str> {
        self.training.get("method").and_then(|v| v.as_str())
    }

    /// The numeric results in `metrics`, flattened to `("benchmark.metric", value)`.
    pub fn key_metrics(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (bench, v) in &self.metrics {
            match v {
                serde_json::Value::Number(n) => out.extend(n.as_f64().map(|x| (bench.clone(), x))),
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        if let Some(x) = v.as_f64() {
                            out.push((format!("{bench}.{k}"), x));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The card as one entry of `descl models --json` and Python's `descl.models()` (the one
    /// definition of that listing): name, whether it is the default, architecture, output kind
    /// and dimension, magnification, training method, key metrics, and the card's and ONNX
    /// file's paths (`card_path` is where this card was read from).
    pub fn listing(&self, card_path: &Path) -> serde_json::Value {
        let metrics: serde_json::Map<String, serde_json::Value> = self
            .key_metrics()
            .into_iter()
            .map(|(k, v)| (k, serde_json::json!(v)))
            .collect();
        serde_json::json!({
            "name": self.name,
            "default": self.name == crate::model::DEFAULT_MODEL,
            "architecture": self.architecture,
            "kind": self.output.kind.as_str(),
            "dim": self.output.dim,
            "magnification": self.patch.magnification,
            "training_method": self.training_method(),
            "metrics": metrics,
            "card": card_path.display().to_string(),
            "file": self.onnx_path(card_path).display().to_string(),
        })
    }
}

// The hashes cards store, defined once (`crate::hash`).
pub use crate::hash::{sha256_bytes, sha256_file};

/// A card for unit tests of the modules that read cards (TFeat-like, 32-px patches).
#[cfg(test)]
pub(crate) fn test_card(magnification: f32, kind: OutputKind, dim: usize) -> ModelCard {
    ModelCard {
        name: "m".into(),
        file: "m.onnx".into(),
        sha256: "0".repeat(64),
        architecture: "tfeat".into(),
        input: InputSpec {
            size: PATCH_SIZE,
            range: [0.0, 1.0],
        },
        output: OutputSpec { dim, kind },
        patch: PatchSpec {
            size: PATCH_SIZE,
            magnification,
        },
        training: serde_json::Map::new(),
        metrics: serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> ModelCard {
        test_card(6.0, OutputKind::Float, 128)
    }

    #[test]
    fn sha256_matches_the_fips_test_vector() {
        // FIPS 180-2 example: SHA-256("abc").
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn round_trip_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        let mut c = card();
        c.training.insert("method".into(), "hardnet".into());
        c.metrics.insert(
            "dev".into(),
            serde_json::json!({"command": "descl bench", "mma@3": 0.5}),
        );
        c.save(&p).unwrap();
        let back = ModelCard::load(&p).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.training_method(), Some("hardnet"));
        assert_eq!(back.key_metrics(), vec![("dev.mma@3".to_string(), 0.5)]);

        let mut bad = card();
        bad.output = OutputSpec {
            dim: 128,
            kind: OutputKind::Binary,
        };
        assert!(bad.validate().unwrap_err().contains("256"));
        let mut bad = card();
        bad.sha256 = "xyz".into();
        assert!(bad.validate().is_err());
        std::fs::write(&p, "{\"name\": 1}").unwrap();
        let e = ModelCard::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.json"), "{e}");
    }

    #[test]
    fn sha_mismatch_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let onnx = dir.path().join("m.onnx");
        std::fs::write(&onnx, b"not the card's bytes").unwrap();
        let e = card().verify_sha256(&onnx).unwrap_err().to_string();
        assert!(e.contains("m.onnx") && e.contains("SHA-256"), "{e}");
    }
}
