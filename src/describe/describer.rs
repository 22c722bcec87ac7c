//! The one describe path: a [`Describer`] turns frames of an image (or ready-made 32×32
//! patches) into descriptors, whatever the method — OpenCV SIFT or RootSIFT computed on the
//! frames, or any ONNX model (shipped name or `.onnx` file) run on the frames' patches.
//!
//! Why one type: `descl extract`, `descl match`, `descl sfm` and `descl bench` all describe
//! through it, so a benchmark measures exactly the code users run and `descl extract -m
//! rootsift` is the same call as `-m descl-tfeat-sdgm`.

use crate::describe::Descriptors;
use crate::detect::dog::{sift_descriptors, SIFT_DIM};
use crate::detect::DEFAULT_MAGNIFICATION;
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::image::GrayImage;
use crate::model::engine::{Device, Engine};
use crate::model::ResolvedModel;
use crate::patch::{PatchSampler, PATCH_SIZE};
use ndarray::Array3;
use rayon::prelude::*;
use std::path::Path;

/// Method name of OpenCV SIFT descriptors on the frames (Lowe 2004).
pub const SIFT: &str = "sift";
/// Method name of RootSIFT (Arandjelović & Zisserman 2012: L1 normalise, square root).
pub const ROOTSIFT: &str = "rootsift";

enum Kind {
    Sift { root: bool },
    Model(Box<(Engine, ResolvedModel)>),
}

/// One image between [`Describer::prepare_frames`] and [`Describer::finish`].
#[derive(Debug)]
pub enum Pending {
    /// Described already (SIFT, RootSIFT).
    Done(Descriptors),
    /// N×32×32 patches waiting for the model.
    Patches(Array3<f32>),
}

/// A descriptor method, loaded and ready for any number of images.
pub struct Describer {
    name: String,
    magnification: f32,
    kind: Kind,
}

impl std::fmt::Debug for Describer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Describer")
            .field("name", &self.name)
            .field("magnification", &self.magnification)
            .finish_non_exhaustive()
    }
}

impl Describer {
    /// `sift`, `rootsift` (any case), a model name from `models/`, or a path to an `.onnx` file
    /// or a model card. Models are resolved and loaded here (card SHA-256 and I/O checked).
    pub fn open(spec: &str, device: Device) -> Result<Describer> {
        let sift = |name: &str, root| Describer {
            name: name.into(),
            magnification: DEFAULT_MAGNIFICATION,
            kind: Kind::Sift { root },
        };
        match spec.to_ascii_lowercase().as_str() {
            SIFT => return Ok(sift(SIFT, false)),
            ROOTSIFT => return Ok(sift(ROOTSIFT, true)),
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
        Ok(Describer {
            name,
            magnification,
            kind: Kind::Model(Box::new((engine, resolved))),
        })
    }

    /// The same method opened again (a model gets its own ONNX Runtime session on the same
    /// device): for owners that need a `Describer` of their own, e.g. an
    /// [`crate::pipeline::Extractor`] built for one benchmark suite.
    pub fn try_clone(&self) -> Result<Describer> {
        let kind = match &self.kind {
            Kind::Sift { root } => Kind::Sift { root: *root },
            Kind::Model(m) => {
                let engine = Engine::load_resolved(&m.1, m.0.device())?;
                Kind::Model(Box::new((engine, m.1.clone())))
            }
        };
        Ok(Describer {
            name: self.name.clone(),
            magnification: self.magnification,
            kind,
        })
    }

    /// Short name: `sift`, `rootsift`, the card's name, or the ONNX file's stem.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name written into features files: as [`Describer::name`], except that an uncarded
    /// model is recorded by its ONNX file's path.
    pub fn provenance(&self) -> String {
        match &self.kind {
            Kind::Sift { .. } => self.name.clone(),
            Kind::Model(m) => m.1.display_name(),
        }
    }

    /// The SHA-256 of the model's ONNX file (its card's, or the file's own for a model without
    /// a card; None for SIFT).
    pub fn model_sha256(&self) -> Option<String> {
        match &self.kind {
            Kind::Model(m) => Some(m.1.sha256.clone()),
            Kind::Sift { .. } => None,
        }
    }

    /// The measurement-region magnification the method expects (model card or metadata, else
    /// [`DEFAULT_MAGNIFICATION`]; SIFT's own 6).
    pub fn magnification(&self) -> f32 {
        self.magnification
    }

    /// The model card's file, for models that have one (`descl bench --record` writes to it).
    pub fn card_path(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Model(m) => m.1.card.as_ref().map(|(_, p)| p.as_path()),
            Kind::Sift { .. } => None,
        }
    }

    /// Where the method runs: the model's execution provider, or the CPU for SIFT.
    pub fn device(&self) -> Device {
        match &self.kind {
            Kind::Model(m) => m.0.device(),
            Kind::Sift { .. } => Device::Cpu,
        }
    }

    /// The loaded ONNX model, for model methods.
    pub fn engine(&self) -> Option<&Engine> {
        match &self.kind {
            Kind::Model(m) => Some(&m.0),
            Kind::Sift { .. } => None,
        }
    }

    /// Whether the method runs a model on patches (SIFT works on the image).
    pub fn uses_patches(&self) -> bool {
        matches!(self.kind, Kind::Model(_))
    }

    /// Descriptors of `frames` of `img`, frames detected with magnification `detector_m` (they
    /// are rescaled to the method's own: `a = m·σ·R`): [`Describer::prepare_frames`] then
    /// [`Describer::finish`] on this one image.
    pub fn describe_frames(
        &self,
        img: &GrayImage,
        sampler: Option<&PatchSampler>,
        frames: &[Frame],
        detector_m: f32,
    ) -> Result<Descriptors> {
        let pending = self.prepare_frames(img, sampler, frames, detector_m)?;
        self.finish(vec![pending])?.pop().ok_or_else(|| {
            Error::InvalidInput(format!(
                "{}: no descriptors for {} frames",
                self.name,
                frames.len()
            ))
        })
    }

    /// The per-image half of describing: SIFT describes the frames on the image; a model's
    /// patches are sampled from `sampler` (the image's pyramid, shareable by several methods;
    /// built here when None) and wait for the network in [`Describer::finish`].
    pub fn prepare_frames(
        &self,
        img: &GrayImage,
        sampler: Option<&PatchSampler>,
        frames: &[Frame],
        detector_m: f32,
    ) -> Result<Pending> {
        let s = self.magnification / detector_m;
        let scaled: std::borrow::Cow<[Frame]> = if (s - 1.0).abs() < f32::EPSILON {
            std::borrow::Cow::Borrowed(frames)
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
            Kind::Sift { root } => Ok(Pending::Done(Descriptors::Float(sift_descriptors(
                img,
                &scaled,
                self.magnification,
                *root,
            )?))),
            Kind::Model(_) if scaled.is_empty() => {
                Ok(Pending::Patches(Array3::zeros((0, PATCH_SIZE, PATCH_SIZE))))
            }
            Kind::Model(_) => {
                let own;
                let sampler = match sampler {
                    Some(s) => s,
                    None => {
                        own = PatchSampler::new(img);
                        &own
                    }
                };
                Ok(Pending::Patches(sampler.sample(&scaled)))
            }
        }
    }

    /// The batched half of describing: the patches of all `pending` images go through the
    /// network together, in runs of [`MAX_CHUNK`](crate::model::engine::MAX_CHUNK) that span image boundaries (so that images
    /// with few keypoints do not leave the network with small batches), and come back split
    /// per image, in order. Each patch's descriptor depends on that patch alone.
    pub fn finish(&self, pending: Vec<Pending>) -> Result<Vec<Descriptors>> {
        let Kind::Model(m) = &self.kind else {
            return pending
                .into_iter()
                .map(|p| match p {
                    Pending::Done(d) => Ok(d),
                    Pending::Patches(_) => Err(self.not_a_model()),
                })
                .collect();
        };
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let mut counts = Vec::with_capacity(pending.len());
        let mut patches = Vec::with_capacity(pending.len());
        for p in pending {
            match p {
                Pending::Patches(a) => {
                    counts.push(a.shape()[0]);
                    patches.push(a);
                }
                Pending::Done(_) => return Err(self.not_a_model()),
            }
        }
        let all = match patches.len() {
            1 => patches.pop().unwrap_or_default(),
            _ => {
                let views: Vec<_> = patches.iter().map(|a| a.view()).collect();
                ndarray::concatenate(ndarray::Axis(0), &views).map_err(|e| {
                    Error::InvalidInput(format!("{}: joining patches: {e}", self.name))
                })?
            }
        };
        m.0.describe(all.view())?.split(&counts)
    }

    fn not_a_model(&self) -> Error {
        Error::InvalidInput(format!(
            "{}: describe stages of different methods mixed",
            self.name
        ))
    }

    /// Descriptors of ready-made N×32×32 patches (HPatches, UBC PhotoTour). SIFT describes each
    /// patch as an image with one frame covering it (centre, a = 16·I: the patch is the
    /// measurement region, as for the models).
    pub fn describe_patches(&self, patches: &Array3<f32>) -> Result<Descriptors> {
        match &self.kind {
            Kind::Model(m) => m.0.describe(patches.view()),
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
                let flat: Vec<f32> = rows.into_iter().flatten().collect();
                let arr = ndarray::Array2::from_shape_vec((flat.len() / SIFT_DIM, SIFT_DIM), flat)
                    .map_err(|e| Error::InvalidInput(format!("SIFT patch descriptors: {e}")))?;
                Ok(Descriptors::Float(arr))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sift_names_are_case_insensitive_and_need_no_model() {
        let d = Describer::open("RootSIFT", Device::Cpu).unwrap();
        assert_eq!(d.name(), ROOTSIFT);
        assert_eq!(d.provenance(), ROOTSIFT);
        assert!(!d.uses_patches());
        assert!(d.card_path().is_none());
        assert_eq!(d.magnification(), DEFAULT_MAGNIFICATION);
    }

    #[test]
    fn no_frames_give_no_descriptors_of_the_method_kind() {
        let img = GrayImage::from_vec(64, 64, vec![0.5; 64 * 64]).unwrap();
        let d = Describer::open(SIFT, Device::Cpu).unwrap();
        let out = d.describe_frames(&img, None, &[], 6.0).unwrap();
        assert_eq!(out.len(), 0);
        assert_eq!(out.kind(), "float");
    }
}
