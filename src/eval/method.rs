//! A descriptor method under benchmark: a model (shipped name or any `.onnx` file, run by the
//! ONNX engine on 32×32 patches) or OpenCV SIFT / RootSIFT computed on the same frames.

use crate::describe::Descriptors;
use crate::detect::dog::sift_descriptors;
use crate::detect::DEFAULT_MAGNIFICATION;
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::image::GrayImage;
use crate::model::engine::{Device, Engine};
use crate::patch::{PatchSampler, PATCH_SIZE};
use ndarray::Array3;
use rayon::prelude::*;

/// Method names that select the OpenCV baselines.
pub const SIFT: &str = "sift";
pub const ROOTSIFT: &str = "rootsift";

enum Kind {
    Sift { root: bool },
    Model(Box<Engine>),
}

/// One method: its display name and how it describes frames or patches.
pub struct Method {
    pub name: String,
    /// The measurement-region magnification the method expects (model card or metadata, else 6;
    /// 6 for SIFT frames).
    pub magnification: f32,
    /// The model card's file, for models that have one (`descl bench --record` writes to it).
    pub card_path: Option<std::path::PathBuf>,
    kind: Kind,
}

impl Method {
    /// `sift`, `rootsift`, a model name from `models/` or a path to an `.onnx` file.
    pub fn open(spec: &str, device: Device) -> Result<Method> {
        match spec.to_ascii_lowercase().as_str() {
            SIFT => {
                return Ok(Method {
                    name: SIFT.into(),
                    magnification: DEFAULT_MAGNIFICATION,
                    card_path: None,
                    kind: Kind::Sift { root: false },
                })
            }
            ROOTSIFT => {
                return Ok(Method {
                    name: ROOTSIFT.into(),
                    magnification: DEFAULT_MAGNIFICATION,
                    card_path: None,
                    kind: Kind::Sift { root: true },
                })
            }
            _ => {}
        }
        let resolved = crate::model::resolve(spec)?;
        let name = match &resolved.card {
            Some((c, _)) => c.name.clone(),
            None => resolved
                .onnx
                .file_stem()
                .map_or(spec.to_string(), |s| s.to_string_lossy().to_string()),
        };
        let engine = Engine::load_resolved(&resolved, device)?;
        let magnification = resolved
            .magnification(&engine)
            .unwrap_or(DEFAULT_MAGNIFICATION);
        Ok(Method {
            name,
            magnification,
            card_path: resolved.card.as_ref().map(|(_, p)| p.clone()),
            kind: Kind::Model(Box::new(engine)),
        })
    }

    /// Whether the method runs a model on patches (SIFT works on the image).
    pub fn uses_patches(&self) -> bool {
        matches!(self.kind, Kind::Model(_))
    }

    /// Descriptors of `frames` (detected with magnification `detector_m`) in `img`; models
    /// sample their patches from `sampler` (built once per image and shared by all methods).
    pub fn describe_frames(
        &self,
        img: &GrayImage,
        sampler: &PatchSampler,
        frames: &[Frame],
        detector_m: f32,
    ) -> Result<Descriptors> {
        // Frames scale with the magnification: a = m·σ·R.
        let s = self.magnification / detector_m;
        let scaled: Vec<Frame> = if (s - 1.0).abs() < f32::EPSILON {
            frames.to_vec()
        } else {
            frames
                .iter()
                .map(|f| Frame {
                    x: f.x,
                    y: f.y,
                    a: f.a.map(|r| r.map(|v| v * s)),
                })
                .collect()
        };
        match &self.kind {
            Kind::Sift { root } => Ok(Descriptors::Float(sift_descriptors(
                img,
                &scaled,
                self.magnification,
                *root,
            )?)),
            Kind::Model(engine) => engine.describe(sampler.sample(&scaled).view()),
        }
    }

    /// Descriptors of ready-made 32×32 patches (HPatches, UBC PhotoTour). SIFT describes each
    /// patch as an image with one frame covering it (centre, a = 16·I: the patch is the
    /// measurement region, as for the models).
    pub fn describe_patches(&self, patches: &Array3<f32>) -> Result<Descriptors> {
        match &self.kind {
            Kind::Model(engine) => engine.describe(patches.view()),
            Kind::Sift { root } => {
                let half = PATCH_SIZE as f32 / 2.0;
                let frame = Frame {
                    x: half - 0.5,
                    y: half - 0.5,
                    a: [[half, 0.0], [0.0, half]],
                };
                let rows: Vec<Vec<f32>> = (0..patches.shape()[0])
                    .into_par_iter()
                    .map(|i| {
                        let p = patches.index_axis(ndarray::Axis(0), i);
                        let img = GrayImage::from_vec(
                            PATCH_SIZE,
                            PATCH_SIZE,
                            p.iter().copied().collect(),
                        )?;
                        let d = sift_descriptors(&img, &[frame], self.magnification, *root)?;
                        Ok(d.row(0).to_vec())
                    })
                    .collect::<Result<_>>()?;
                let dim = rows.first().map_or(crate::detect::dog::SIFT_DIM, Vec::len);
                let flat: Vec<f32> = rows.into_iter().flatten().collect();
                let arr = ndarray::Array2::from_shape_vec((flat.len() / dim.max(1), dim), flat)
                    .map_err(|e| Error::InvalidInput(format!("SIFT patch descriptors: {e}")))?;
                Ok(Descriptors::Float(arr))
            }
        }
    }
}
