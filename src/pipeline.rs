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

/// COLMAP's `SiftExtraction.max_image_size`: larger images are shrunk to this longer side
/// before detection (a 48 MP photo otherwise takes ~11 GB in OpenCV's DoG), and the keypoints
/// are mapped back to the original pixels.
pub const COLMAP_MAX_IMAGE_SIZE: usize = 3200;

/// What an [`Extractor`] runs.
#[derive(Debug, Clone)]
pub struct ExtractorConfig {
    /// Describer: `sift`, `rootsift`, a model name (in `models/`) or a path to an `.onnx` file.
    pub model: String,
    pub device: Device,
    /// Detector settings; `magnification` is replaced by the describer's.
    pub detector: DetectorConfig,
    /// Longer side images are shrunk to before detection (0: never).
    pub max_image_size: usize,
}

/// A loaded describer plus detector settings, ready to extract any number of images.
#[derive(Debug)]
pub struct Extractor {
    detector: DetectorConfig,
    describer: Describer,
    max_image_size: usize,
}

impl Extractor {
    /// Opens the describer (for models: resolves, checks the card's SHA-256, loads).
    pub fn new(cfg: ExtractorConfig) -> Result<Extractor> {
        let describer = Describer::open(&cfg.model, cfg.device)?;
        Ok(Extractor::with_describer(describer, cfg.detector).max_image_size(cfg.max_image_size))
    }

    /// An extractor around an already opened describer.
    pub fn with_describer(describer: Describer, mut detector: DetectorConfig) -> Extractor {
        detector.magnification = describer.magnification();
        Extractor {
            detector,
            describer,
            max_image_size: COLMAP_MAX_IMAGE_SIZE,
        }
    }

    /// Shrinks images whose longer side exceeds `pixels` before detection (0: never).
    pub fn max_image_size(mut self, pixels: usize) -> Extractor {
        self.max_image_size = pixels;
        self
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
        let longer = img.width.max(img.height);
        let shrunk;
        let (work, scale) = if self.max_image_size > 0 && longer > self.max_image_size {
            let s = self.max_image_size as f32 / longer as f32;
            let (w, h) = (
                ((img.width as f32 * s).round() as usize).max(1),
                ((img.height as f32 * s).round() as usize).max(1),
            );
            shrunk = img.resize_area(w, h)?;
            // Per axis: the rounded size sets the exact factor.
            (
                &shrunk,
                [w as f32 / img.width as f32, h as f32 / img.height as f32],
            )
        } else {
            (img, [1.0, 1.0])
        };
        let detections = detect(work, &self.detector)?;
        let frames: Vec<_> = detections.iter().map(|d| d.frame).collect();
        let scores = detections.iter().map(|d| d.score).collect();
        let descriptors =
            self.describer
                .describe_frames(work, None, &frames, self.detector.magnification)?;
        let frames = if scale == [1.0, 1.0] {
            frames
        } else {
            frames.iter().map(|f| to_original(f, scale)).collect()
        };
        let meta = FeatureMeta {
            model: self.describer.provenance(),
            model_sha256: self.describer.model_sha256(),
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

/// A frame of an image shrunk by `scale` (x, y factors) in the original image's pixels: pixel
/// centres map as (x + ½)/s − ½ (ARCHITECTURE.md "Conventions": the top-left pixel centre is
/// (0, 0)), the shape's rows scale by 1/s.
fn to_original(f: &crate::frame::Frame, scale: [f32; 2]) -> crate::frame::Frame {
    crate::frame::Frame {
        x: (f.x + 0.5) / scale[0] - 0.5,
        y: (f.y + 0.5) / scale[1] - 0.5,
        a: [
            [f.a[0][0] / scale[0], f.a[0][1] / scale[0]],
            [f.a[1][0] / scale[1], f.a[1][1] / scale[1]],
        ],
    }
}
