//! One image's whole path: load → detect → sample patches → describe. The model is loaded once
//! per [`Extractor`]; its card (or, without one, its file's metadata) sets the patch
//! magnification so frames and training agree.

use crate::describe::Descriptors;
use crate::detect::{detect, DetectorConfig};
use crate::error::Result;
use crate::features::{FeatureMeta, Features};
use crate::image::{load_gray, GrayImage};
use crate::model::engine::MAX_CHUNK;
use crate::model::{resolve, Device, Engine, ResolvedModel};
use crate::patch::{PatchSampler, PATCH_SIZE};
use ndarray::Array3;
use std::path::Path;

/// What an [`Extractor`] runs.
#[derive(Debug, Clone)]
pub struct ExtractorConfig {
    /// Model name (in `models/`) or path to an `.onnx` file.
    pub model: String,
    pub device: Device,
    /// Detector settings; `magnification` is replaced by the model's (card or metadata) when it
    /// says one.
    pub detector: DetectorConfig,
}

/// A loaded model plus detector settings, ready to extract any number of images.
#[derive(Debug)]
pub struct Extractor {
    detector: DetectorConfig,
    engine: Engine,
    model: ResolvedModel,
}

impl Extractor {
    /// Resolves and loads the model (checking its card's SHA-256 and its inputs/outputs).
    pub fn new(cfg: ExtractorConfig) -> Result<Extractor> {
        let model = resolve(&cfg.model)?;
        let engine = Engine::load_resolved(&model, cfg.device)?;
        let mut detector = cfg.detector;
        if let Some(m) = model.magnification(&engine) {
            detector.magnification = m;
        }
        Ok(Extractor {
            detector,
            engine,
            model,
        })
    }

    /// The detector settings in use (magnification from the model's card or metadata).
    pub fn detector(&self) -> &DetectorConfig {
        &self.detector
    }
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    pub fn model(&self) -> &ResolvedModel {
        &self.model
    }

    /// Features of the image file at `path`.
    pub fn extract(&self, path: &Path) -> Result<Features> {
        let img = load_gray(path)?;
        self.extract_image(&img, &path.display().to_string())
    }

    /// Features of an image already in memory; `source` is recorded in the metadata.
    pub fn extract_image(&self, img: &GrayImage, source: &str) -> Result<Features> {
        let detections = detect(img, &self.detector)?;
        let frames: Vec<_> = detections.iter().map(|d| d.frame).collect();
        let scores = detections.iter().map(|d| d.score).collect();
        // Sample and describe chunk by chunk so patch memory stays flat with keypoint count.
        let sampler = PatchSampler::new(img);
        let parts = frames
            .chunks(MAX_CHUNK)
            .map(|chunk| self.engine.describe(sampler.sample(chunk).view()))
            .collect::<Result<Vec<_>>>()?;
        let descriptors = match Descriptors::concat(parts)? {
            Some(d) => d,
            None => self
                .engine
                .describe(Array3::zeros((0, PATCH_SIZE, PATCH_SIZE)).view())?,
        };
        let meta = FeatureMeta {
            model: self.model.display_name(),
            detector: self.detector.kind.to_string(),
            image_width: img.width as u32,
            image_height: img.height as u32,
            image: source.to_string(),
        };
        Ok(Features {
            frames,
            scores,
            descriptors,
            meta,
        })
    }
}
