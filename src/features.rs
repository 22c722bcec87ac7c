//! The result of extracting one image: frames, detector scores, descriptors and provenance.

use crate::describe::Descriptors;
use crate::frame::Frame;
use crate::provenance::{FeatureProvenance, FeaturesId};
use serde::{Deserialize, Serialize};

/// Where a set of features came from; stored as `meta` in features files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureMeta {
    /// Model name (from its card) or the ONNX file for an uncarded model.
    pub model: String,
    /// SHA-256 of the model's ONNX file as its card records it (absent for SIFT/RootSIFT,
    /// uncarded models and files written before it was recorded): two files of one model name
    /// but different weights are not matched together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
    /// Detector name, e.g. `"dog"` or `"harris-affine"`.
    pub detector: String,
    /// Image width and height in pixels.
    pub image_width: u32,
    pub image_height: u32,
    /// The image file the features were extracted from.
    pub image: String,
    /// What made them (image content hash and every extraction setting); None in files written
    /// before it was recorded, which resumed runs redo and `descl sfm merge` refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<FeatureProvenance>,
    /// The identity matches files record of these features ([`FeaturesId::of`]); features files
    /// always store it, so that it can be read without the arrays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<FeaturesId>,
}

/// Features of one image. `frames`, `scores` and `descriptors` have the same length.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub frames: Vec<Frame>,
    pub scores: Vec<f32>,
    pub descriptors: Descriptors,
    pub meta: FeatureMeta,
}

impl Features {
    /// Their identity: the recorded one if any, else computed ([`FeaturesId::of`]).
    pub fn id(&self) -> FeaturesId {
        self.meta
            .content
            .clone()
            .unwrap_or_else(|| FeaturesId::of(self))
    }
}
