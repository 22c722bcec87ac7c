//! One image's whole path: load → detect → sample patches → describe. The [`Describer`] is
//! loaded once per [`Extractor`]; its magnification (model card or file metadata, SIFT's 6)
//! sets the detector's, so frames and training agree.

use crate::describe::Describer;
use crate::detect::{detect, DetectorConfig};
use crate::error::Result;
use crate::features::{FeatureMeta, Features};
use crate::image::{load_gray, GrayImage};
use crate::model::Device;
use std::path::Path;

/// What an [`Extractor`] runs.
#[derive(Debug, Clone)]
pub struct ExtractorConfig {
    /// Describer: `sift`, `rootsift`, a model name (in `models/`) or a path to an `.onnx` file.
    pub model: String,
    pub device: Device,
    /// Detector settings; `magnification` is replaced by the describer's.
    pub detector: DetectorConfig,
}

/// A loaded describer plus detector settings, ready to extract any number of images.
#[derive(Debug)]
pub struct Extractor {
    detector: DetectorConfig,
    describer: Describer,
}

impl Extractor {
    /// Opens the describer (for models: resolves, checks the card's SHA-256, loads).
    pub fn new(cfg: ExtractorConfig) -> Result<Extractor> {
        let describer = Describer::open(&cfg.model, cfg.device)?;
        Ok(Extractor::with_describer(describer, cfg.detector))
    }

    /// An extractor around an already opened describer.
    pub fn with_describer(describer: Describer, mut detector: DetectorConfig) -> Extractor {
        detector.magnification = describer.magnification();
        Extractor {
            detector,
            describer,
        }
    }

    /// The detector settings in use (magnification from the describer).
    pub fn detector(&self) -> &DetectorConfig {
        &self.detector
    }
    pub fn describer(&self) -> &Describer {
        &self.describer
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
        let descriptors =
            self.describer
                .describe_frames(img, None, &frames, self.detector.magnification)?;
        let meta = FeatureMeta {
            model: self.describer.provenance(),
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
