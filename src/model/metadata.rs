//! Self-describing models: the preprocessing a descl model expects, written into the ONNX file's
//! `metadata_props` (ModelProto field 14, string key/value pairs), so that the file alone says
//! how its patches must be cut and fed, even when its card is lost or it is renamed.
//!
//! The key names and value formats are defined here once: `descl-training` writes them when it
//! exports a model and [`crate::model::engine`] reads them when it loads one.
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `patch_size` | `"32"` | patch side in pixels |
//! | `patch_mr` | `"6"` (shortest decimal, `"6.5"`) | measurement-region magnification m of the frame a = m·σ·R |
//! | `input_range` | `"0_1"` | pixel values fed to the graph lie in [0, 1] |
//! | `input_norm` | `"per_patch"` | the graph's first op normalises each patch (mean 0, variance 1) |
//! | `output_kind` | `"float"` or `"binary"` | as the card's `output.kind` |
//! | `output_dim` | `"128"`, `"256"` | values per patch; for binary models the number of bits, as the card's `output.dim` |
//!
//! A model with none of these keys (older files, other producers) has no metadata; one with only
//! some of them is malformed.

use crate::model::card::{ModelCard, OutputKind};
use crate::patch::PATCH_SIZE;

/// Key of the patch side in pixels.
pub const PATCH_SIZE_KEY: &str = "patch_size";
/// Key of the measurement-region magnification m (frame a = m·σ·R).
pub const PATCH_MR_KEY: &str = "patch_mr";
/// Key of the range of the pixel values the graph is fed.
pub const INPUT_RANGE_KEY: &str = "input_range";
/// Key of the normalisation the graph applies to its input.
pub const INPUT_NORM_KEY: &str = "input_norm";
/// Key of the output kind (`"float"` or `"binary"`, [`OutputKind::as_str`]).
pub const OUTPUT_KIND_KEY: &str = "output_kind";
/// Key of the number of output values per patch (bits for binary models).
pub const OUTPUT_DIM_KEY: &str = "output_dim";
/// Every key, in the order they are written.
pub const KEYS: [&str; 6] = [
    PATCH_SIZE_KEY,
    PATCH_MR_KEY,
    INPUT_RANGE_KEY,
    INPUT_NORM_KEY,
    OUTPUT_KIND_KEY,
    OUTPUT_DIM_KEY,
];

/// `input_range` of descl models: patches are fed with values in [0, 1]
/// ([`crate::patch::PatchSampler`] samples the [0, 1] gray image).
pub const INPUT_RANGE_UNIT: &str = "0_1";
/// `input_norm` of descl models: the graph's first op is per-patch normalisation.
pub const INPUT_NORM_PER_PATCH: &str = "per_patch";

/// Largest relative difference between the metadata's magnification (a decimal string) and a
/// card's (an f32) that still counts as agreement: f32 holds about 7 significant digits.
const MAGNIFICATION_RTOL: f64 = 1e-6;

/// What a model's metadata says (see the module documentation for the keys).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMetadata {
    pub patch_size: usize,
    /// Measurement-region magnification m of the frame a = m·σ·R.
    pub magnification: f64,
    pub input_range: String,
    pub input_norm: String,
    pub output_kind: OutputKind,
    /// Output values per patch (bits for binary models).
    pub output_dim: usize,
}

impl ModelMetadata {
    /// The metadata of a descl model: 32-pixel patches in [0, 1], per-patch normalised in the
    /// graph, cut at `magnification`, giving `output_dim` values of `output_kind`.
    pub fn descl(magnification: f64, output_kind: OutputKind, output_dim: usize) -> ModelMetadata {
        ModelMetadata {
            patch_size: PATCH_SIZE,
            magnification,
            input_range: INPUT_RANGE_UNIT.into(),
            input_norm: INPUT_NORM_PER_PATCH.into(),
            output_kind,
            output_dim,
        }
    }

    /// The (key, value) pairs to write, in [`KEYS`] order. Numbers are written in Rust's
    /// shortest round-trip decimal form (`6.0` → `"6"`, `6.5` → `"6.5"`).
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        vec![
            (PATCH_SIZE_KEY, self.patch_size.to_string()),
            (PATCH_MR_KEY, self.magnification.to_string()),
            (INPUT_RANGE_KEY, self.input_range.clone()),
            (INPUT_NORM_KEY, self.input_norm.clone()),
            (OUTPUT_KIND_KEY, self.output_kind.as_str().to_string()),
            (OUTPUT_DIM_KEY, self.output_dim.to_string()),
        ]
    }

    /// Reads the metadata through `lookup` (key → value, None when absent): None when the model
    /// has none of the keys, an error saying what is wrong when it has only some or a value does
    /// not parse.
    pub fn from_lookup<F>(mut lookup: F) -> Result<Option<ModelMetadata>, String>
    where
        F: FnMut(&str) -> Option<String>,
    {
        let values: Vec<Option<String>> = KEYS.iter().map(|k| lookup(k)).collect();
        if values.iter().all(Option::is_none) {
            return Ok(None);
        }
        let missing: Vec<&str> = KEYS
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "incomplete descl metadata: `{}` missing",
                missing.join("`, `")
            ));
        }
        let get = |key: &str| -> &str {
            KEYS.iter()
                .position(|k| *k == key)
                .and_then(|i| values[i].as_deref())
                .unwrap_or_default()
        };
        let bad =
            |key: &str, want: &str| format!("metadata `{key}` = {:?} is not {want}", get(key));
        let patch_size = get(PATCH_SIZE_KEY)
            .parse::<usize>()
            .map_err(|_| bad(PATCH_SIZE_KEY, "a whole number"))?;
        let magnification = get(PATCH_MR_KEY)
            .parse::<f64>()
            .ok()
            .filter(|m| m.is_finite() && *m > 0.0)
            .ok_or_else(|| bad(PATCH_MR_KEY, "a positive number"))?;
        let output_kind = match get(OUTPUT_KIND_KEY) {
            s if s == OutputKind::Float.as_str() => OutputKind::Float,
            s if s == OutputKind::Binary.as_str() => OutputKind::Binary,
            _ => return Err(bad(OUTPUT_KIND_KEY, "\"float\" or \"binary\"")),
        };
        let output_dim = get(OUTPUT_DIM_KEY)
            .parse::<usize>()
            .ok()
            .filter(|d| *d > 0)
            .ok_or_else(|| bad(OUTPUT_DIM_KEY, "a positive whole number"))?;
        Ok(Some(ModelMetadata {
            patch_size,
            magnification,
            input_range: get(INPUT_RANGE_KEY).to_string(),
            input_norm: get(INPUT_NORM_KEY).to_string(),
            output_kind,
            output_dim,
        }))
    }

    /// Checks that descl can feed this model: its patches ([`PATCH_SIZE`] pixels, values in
    /// [0, 1]) and no normalisation outside the graph.
    pub fn check_descl_input(&self) -> Result<(), String> {
        if self.patch_size != PATCH_SIZE {
            return Err(format!(
                "metadata `{PATCH_SIZE_KEY}` is {}; descl cuts {PATCH_SIZE}-pixel patches",
                self.patch_size
            ));
        }
        if self.input_range != INPUT_RANGE_UNIT {
            return Err(format!(
                "metadata `{INPUT_RANGE_KEY}` is {:?}; descl feeds patches in [0, 1] ({INPUT_RANGE_UNIT:?})",
                self.input_range
            ));
        }
        if self.input_norm != INPUT_NORM_PER_PATCH {
            return Err(format!(
                "metadata `{INPUT_NORM_KEY}` is {:?}; descl models normalise each patch in the graph ({INPUT_NORM_PER_PATCH:?})",
                self.input_norm
            ));
        }
        Ok(())
    }

    /// Checks that `card` says what the metadata says (magnification, patch size, output kind
    /// and size); the message lists every disagreement as `key value` vs `card field value`.
    pub fn check_card(&self, card: &ModelCard) -> Result<(), String> {
        let mut diffs = Vec::new();
        let card_m = f64::from(card.patch.magnification);
        if (self.magnification - card_m).abs() > MAGNIFICATION_RTOL * self.magnification.max(1.0) {
            diffs.push(format!(
                "`{PATCH_MR_KEY}` {} vs patch.magnification {}",
                self.magnification, card.patch.magnification
            ));
        }
        if self.patch_size != card.patch.size {
            diffs.push(format!(
                "`{PATCH_SIZE_KEY}` {} vs patch.size {}",
                self.patch_size, card.patch.size
            ));
        }
        if self.output_kind != card.output.kind {
            diffs.push(format!(
                "`{OUTPUT_KIND_KEY}` {} vs output.kind {}",
                self.output_kind.as_str(),
                card.output.kind.as_str()
            ));
        }
        if self.output_dim != card.output.dim {
            diffs.push(format!(
                "`{OUTPUT_DIM_KEY}` {} vs output.dim {}",
                self.output_dim, card.output.dim
            ));
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(diffs.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn card(magnification: f32, kind: OutputKind, dim: usize) -> ModelCard {
        crate::model::card::test_card(magnification, kind, dim)
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn entries_have_the_documented_keys_and_formats() {
        let m = ModelMetadata::descl(6.0, OutputKind::Binary, 256);
        let want = [
            ("patch_size", "32"),
            ("patch_mr", "6"),
            ("input_range", "0_1"),
            ("input_norm", "per_patch"),
            ("output_kind", "binary"),
            ("output_dim", "256"),
        ];
        let got = m.entries();
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((*k, v.as_str()), (wk, wv));
        }
        let half = ModelMetadata::descl(6.5, OutputKind::Float, 128).entries();
        assert_eq!(half[1].1, "6.5");
    }

    #[test]
    fn round_trip_through_a_lookup() {
        let m = ModelMetadata::descl(7.25, OutputKind::Float, 128);
        let pairs: Vec<(&str, String)> = m.entries();
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let back = ModelMetadata::from_lookup(lookup(&refs)).unwrap().unwrap();
        assert_eq!(back, m);
        back.check_descl_input().unwrap();
    }

    #[test]
    fn absent_partial_and_malformed_metadata() {
        assert_eq!(
            ModelMetadata::from_lookup(lookup(&[("other", "x")])).unwrap(),
            None
        );
        let e = ModelMetadata::from_lookup(lookup(&[("patch_mr", "6")])).unwrap_err();
        assert!(e.contains("patch_size") && e.contains("output_dim"), "{e}");
        assert!(!e.contains("patch_mr"), "{e}");
        let mut full = vec![
            ("patch_size", "32"),
            ("patch_mr", "6"),
            ("input_range", "0_1"),
            ("input_norm", "per_patch"),
            ("output_kind", "float"),
            ("output_dim", "128"),
        ];
        full[1].1 = "-2";
        let e = ModelMetadata::from_lookup(lookup(&full)).unwrap_err();
        assert!(e.contains("patch_mr") && e.contains("-2"), "{e}");
        full[1].1 = "6";
        full[4].1 = "int8";
        let e = ModelMetadata::from_lookup(lookup(&full)).unwrap_err();
        assert!(e.contains("output_kind"), "{e}");
        full[4].1 = "float";
        full[2].1 = "0_255";
        let m = ModelMetadata::from_lookup(lookup(&full)).unwrap().unwrap();
        let e = m.check_descl_input().unwrap_err();
        assert!(e.contains("input_range") && e.contains("0_255"), "{e}");
    }

    #[test]
    fn card_disagreements_are_each_named() {
        let m = ModelMetadata::descl(6.0, OutputKind::Float, 128);
        m.check_card(&card(6.0, OutputKind::Float, 128)).unwrap();
        let e = m
            .check_card(&card(8.0, OutputKind::Float, 128))
            .unwrap_err();
        assert!(
            e.contains("patch_mr") && e.contains('6') && e.contains("magnification 8"),
            "{e}"
        );
        let e = m
            .check_card(&card(6.0, OutputKind::Binary, 256))
            .unwrap_err();
        assert!(
            e.contains("`output_kind` float vs output.kind binary")
                && e.contains("output_dim` 128 vs output.dim 256"),
            "{e}"
        );
        // A card's f32 magnification agrees with the decimal it was written from.
        let m = ModelMetadata::descl(6.1, OutputKind::Float, 128);
        m.check_card(&card(6.1, OutputKind::Float, 128)).unwrap();
    }
}
