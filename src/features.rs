//! The result of extracting one image: frames, detector scores, descriptors and provenance.

use crate::describe::Descriptors;
use crate::frame::Frame;
use crate::identity::{FeatureProvenance, FeaturesId, SetIdentity};
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
    /// The image's name in the set it was extracted with (its path under the image folder,
    /// `a/0000.jpg`, [`crate::names`]); absent in files written before it was recorded, whose
    /// name is the file name of `image` ([`FeatureMeta::set_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What made them (image content hash and every extraction setting); None in files written
    /// before it was recorded, which resumed runs redo and `descl sfm merge` refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<FeatureProvenance>,
    /// The identity matches files record of these features ([`FeaturesId::of`]); features files
    /// always store it, so that it can be read without the arrays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<FeaturesId>,
}

impl FeatureMeta {
    /// The image's name in its set: the recorded one, else the file name of `image`.
    pub fn set_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            std::path::Path::new(&self.image)
                .file_name()
                .map_or_else(|| self.image.clone(), |n| n.to_string_lossy().into_owned())
        })
    }
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

/// How far a keypoint's centre may lie outside the image, in pixels: keypoints are pixel
/// centres in [0, W − 1] × [0, H − 1] (ARCHITECTURE.md "Conventions"); DoG's sub-pixel
/// refinement and the rescaling of a shrunk image move them by less than a pixel, so 2 px
/// holds every detector's output while absurd values (a file with keypoints ×1e30) are refused
/// before they reach matching, RANSAC or a picture.
pub const KEYPOINT_MARGIN_PX: f32 = 2.0;

/// Checks stored features against their image: its size positive, every frame finite and its
/// centre within the image up to [`KEYPOINT_MARGIN_PX`]. The message says what is wrong (the
/// caller names the file).
pub fn check_frames(frames: &[Frame], width: u32, height: u32) -> Result<(), String> {
    if width == 0 || height == 0 {
        return Err(format!(
            "image size {width}×{height}: an image has at least one pixel"
        ));
    }
    let (xmax, ymax) = (
        width as f32 - 1.0 + KEYPOINT_MARGIN_PX,
        height as f32 - 1.0 + KEYPOINT_MARGIN_PX,
    );
    for (k, f) in frames.iter().enumerate() {
        let row = f.to_row();
        if !row.iter().all(|v| v.is_finite()) {
            return Err(format!("keypoint {k} is not finite: {row:?}"));
        }
        let inside = |v: f32, max: f32| (-KEYPOINT_MARGIN_PX..=max).contains(&v);
        if !inside(f.x, xmax) || !inside(f.y, ymax) {
            return Err(format!(
                "keypoint {k} at ({}, {}) lies outside the {width}×{height} image",
                f.x, f.y
            ));
        }
    }
    Ok(())
}

impl FeaturesId {
    /// The identity of `f` ([`FeaturesId::of_parts`] of its frames and descriptors).
    pub fn of(f: &Features) -> FeaturesId {
        FeaturesId::of_parts(&f.frames, &f.descriptors)
    }
}

impl SetIdentity {
    /// What `meta` records of how its features were made.
    pub fn of(meta: &FeatureMeta) -> SetIdentity {
        SetIdentity {
            model: meta.model.clone(),
            model_sha256: meta.model_sha256.clone(),
            detector: meta.detector.clone(),
            settings: meta.provenance.as_ref().map(|p| p.settings.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_within_the_image_only() {
        let at = |x: f32, y: f32| Frame::from_row([x, y, 1.0, 0.0, 0.0, 1.0]);
        let ok = [at(0.0, 0.0), at(639.0, 479.0), at(-1.5, 480.5)];
        assert!(check_frames(&ok, 640, 480).is_ok());
        let e = check_frames(&[at(0.0, 0.0), at(6.4e32, 1.0)], 640, 480).unwrap_err();
        assert!(
            e.contains("keypoint 1") && e.contains("outside the 640×480"),
            "{e}"
        );
        assert!(check_frames(&[at(-2.5, 0.0)], 640, 480).is_err());
        assert!(check_frames(&[at(f32::NAN, 0.0)], 640, 480)
            .unwrap_err()
            .contains("not finite"));
        let mut inf = at(1.0, 1.0);
        inf.a[0][0] = f32::INFINITY;
        assert!(check_frames(&[inf], 640, 480).is_err());
        assert!(check_frames(&[], 0, 0).unwrap_err().contains("0×0"));
    }
}
