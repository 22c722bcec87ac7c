//! The identities that provenance records and consumers compare (issue 24, 44): how one
//! image's features were made ([`ExtractSettings`], [`FeatureProvenance`]), which features a
//! matches file indexes ([`FeaturesId`]) and how a set of features was made ([`SetIdentity`]).
//! A leaf module: the features, matching and provenance modules all take these, so they live
//! where none of them has to import another (matching never reaches the model cards that
//! [`crate::provenance`] hashes).

use crate::describe::Descriptors;
use crate::detect::DetectorConfig;
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::hash::hex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Everything besides the image that decides an image's features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractSettings {
    /// Model name (its card's), `sift`, `rootsift`, or the ONNX file of an uncarded model.
    pub model: String,
    /// SHA-256 of the model's ONNX file: as its card records it, or the file's own for an
    /// uncarded model (None: SIFT).
    pub model_sha256: Option<String>,
    /// Detector kind, keypoint budget, selection, contrast threshold and magnification.
    pub detector: DetectorConfig,
    /// Longer side images are shrunk to before detection (0: never).
    pub max_image_size: usize,
}

/// What made one image's features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureProvenance {
    /// SHA-256 of the image file's bytes (None for an image handed over in memory).
    pub image_sha256: Option<String>,
    pub settings: ExtractSettings,
}

/// The identity of a set of features, as a matches file indexes them: the keypoint count and
/// a SHA-256 over the keypoint positions and the descriptors (what every format stores: the
/// same features read from a `.npz` or a `features.h5` have the same identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FeaturesId {
    pub keypoints: usize,
    pub sha256: String,
}

/// Domain tag of [`FeaturesId`]'s hash (a change of what is hashed changes the tag).
const FEATURES_ID_TAG: &[u8] = b"descl-features-id-v1";

impl FeaturesId {
    /// The identity of features of these frames and descriptors ([`crate::features::Features`]'s
    /// `FeaturesId::of` takes them from a features set).
    pub fn of_parts(frames: &[Frame], descriptors: &Descriptors) -> FeaturesId {
        let mut h = Sha256::new();
        h.update(FEATURES_ID_TAG);
        h.update((frames.len() as u64).to_le_bytes());
        for fr in frames {
            h.update(fr.x.to_le_bytes());
            h.update(fr.y.to_le_bytes());
        }
        match descriptors {
            Descriptors::Float(d) => {
                h.update(b"float");
                h.update((d.ncols() as u64).to_le_bytes());
                for v in d.iter() {
                    h.update(v.to_le_bytes());
                }
            }
            Descriptors::Binary(d) => {
                h.update(b"binary");
                for w in d.iter().flatten() {
                    h.update(w.to_le_bytes());
                }
            }
        }
        FeaturesId {
            keypoints: frames.len(),
            sha256: hex(&h.finalize()),
        }
    }
}

/// The fields where `recorded` and `expected` differ, as `field X, wanted Y` (nested
/// fields dotted, e.g. `settings.detector.max_keypoints`), sorted by field name.
pub fn differences<T: Serialize>(recorded: &T, expected: &T) -> Vec<String> {
    fn walk(path: &str, r: &serde_json::Value, e: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match (r, e) {
            (Value::Object(ro), Value::Object(eo)) => {
                for (k, ev) in eo {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&p, ro.get(k).unwrap_or(&Value::Null), ev, out);
                }
                for (k, rv) in ro.iter().filter(|(k, _)| !eo.contains_key(*k)) {
                    walk(&format!("{path}.{k}"), rv, &Value::Null, out);
                }
            }
            _ if r != e => out.push(format!("{path} {}, wanted {}", show(r), show(e))),
            _ => {}
        }
    }
    /// A value as JSON, with an `f32` setting (stored as the nearest f64) written as the
    /// f32's shortest form: 0.02, not 0.019999999552965164.
    fn show(v: &serde_json::Value) -> String {
        match v.as_f64() {
            Some(x) if !v.is_i64() && !v.is_u64() && f64::from(x as f32) == x => {
                format!("{}", x as f32)
            }
            _ => v.to_string(),
        }
    }
    let (r, e) = (
        serde_json::to_value(recorded).unwrap_or_default(),
        serde_json::to_value(expected).unwrap_or_default(),
    );
    let mut out = Vec::new();
    walk("", &r, &e, &mut out);
    out
}

/// How a set of features was made, as far as its files record it (issue 44): the model, the
/// SHA-256 of its weights and the detector their metadata name, and every extraction setting
/// when they record their provenance (files written before provenance existed do not). The
/// features of one set (matched with each other, retrieved among) must share it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetIdentity {
    pub model: String,
    pub model_sha256: Option<String>,
    pub detector: String,
    pub settings: Option<ExtractSettings>,
}

impl SetIdentity {
    /// The identity of features made with `settings` (an extract plan's).
    pub fn of_settings(settings: &ExtractSettings) -> SetIdentity {
        SetIdentity {
            model: settings.model.clone(),
            model_sha256: settings.model_sha256.clone(),
            detector: settings.detector.kind.to_string(),
            settings: Some(settings.clone()),
        }
    }

    /// Refuses the features of `file`, made as `self`, in a set made as `reference` (as
    /// `reference_file` records it): the model and its weights, then every extraction setting
    /// where both record them, else the detector. The error names both and what differs.
    pub fn check_same(
        &self,
        file: &dyn std::fmt::Display,
        reference: &SetIdentity,
        reference_file: &dyn std::fmt::Display,
    ) -> Result<()> {
        let refuse = |why: String| Err(Error::InvalidInput(why));
        if self.model != reference.model {
            return refuse(format!(
                "{reference_file} was described by `{}` but {file} by `{}`: descriptors of different models cannot be matched (extract both with one model)",
                reference.model, self.model
            ));
        }
        if let (Some(x), Some(y)) = (&reference.model_sha256, &self.model_sha256) {
            if x != y {
                return refuse(format!(
                    "{reference_file} and {file} were described by two different files of `{}` (sha256 {x} vs {y}): extract both with one model",
                    self.model
                ));
            }
        }
        let differ = match (&self.settings, &reference.settings) {
            (Some(s), Some(r)) if s == r => return Ok(()),
            (Some(s), Some(r)) => differences(s, r),
            _ if self.detector == reference.detector => return Ok(()),
            _ => vec![format!(
                "detector {:?}, wanted {:?}",
                self.detector, reference.detector
            )],
        };
        let differ = match differ.is_empty() {
            // Equal as JSON but not as values (a NaN setting): not provably the same.
            true => "settings not comparable".to_string(),
            false => differ.join("; "),
        };
        refuse(format!(
            "{file} was extracted with other settings than {reference_file} ({differ}): the features of one set must come from one extraction (extract the images again in one run, or keep each run's features in its own folder)"
        ))
    }
}

// SHA-256 of bytes (a pairs file in a match plan), defined once in `crate::hash`.
pub use crate::hash::sha256_bytes;
