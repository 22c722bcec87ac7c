//! One image's whole path: load → detect → sample patches → describe. The [`Describer`] is
//! loaded once per [`Extractor`]; its magnification (model card or file metadata, SIFT's 6)
//! sets the detector's, so frames and training agree.

use crate::describe::{Describer, Pending};
use crate::detect::{detect, DetectorConfig};
use crate::error::{Error, Result};
use crate::features::{FeatureMeta, Features};
use crate::frame::{Detection, Frame};
use crate::image::{load_gray_hashed, GrayImage, MIN_IMAGE_SIDE};
use crate::model::Device;
use crate::patch::PatchSampler;
use crate::progress::Progress;
use crate::provenance::{ExtractSettings, FeatureProvenance, FeaturesId};
use rayon::prelude::*;
use serde::Serialize;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// COLMAP's `SiftExtraction.max_image_size`: larger images are shrunk to this longer side
/// before detection (a 48 MP photo otherwise takes ~11 GB in OpenCV's DoG), and the keypoints
/// are mapped back to the original pixels.
pub const COLMAP_MAX_IMAGE_SIZE: usize = 3200;

/// Checks a `max_image_size` (the longer side images are shrunk to; 0: never): a size below
/// [`MIN_IMAGE_SIDE`] would shrink every image below the smallest image the pipeline reads,
/// where no detector finds anything stable, so it is refused rather than giving features of a
/// thumbnail (the command line refuses it when it parses `--max-image-size`).
pub fn check_max_image_size(pixels: usize) -> Result<()> {
    if pixels != 0 && pixels < MIN_IMAGE_SIDE {
        return Err(Error::InvalidInput(format!(
            "max image size must be 0 (never shrink) or at least {MIN_IMAGE_SIDE} pixels, the smallest image side descl reads, got {pixels}"
        )));
    }
    Ok(())
}

/// `e`, told of the image `source` unless it names it already.
fn naming(e: Error, source: &str) -> Error {
    if source.is_empty() || e.to_string().contains(source) {
        e
    } else {
        e.for_image(source)
    }
}

/// Images prepared together by [`Extractor::extract_each`] and described in one network
/// batch (runs of up to `MAX_CHUNK` patches spanning the images).
pub const PIPELINE_BLOCK: usize = 2;

/// The detector features described by [`Extractor::describe_given`] record: no detector of
/// descl's made their frames.
pub const GIVEN_FRAMES_DETECTOR: &str = "given";

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
    /// Nanoseconds spent preparing images and describing them ([`Extractor::seconds`]).
    prepare_ns: AtomicU64,
    describe_ns: AtomicU64,
    /// What the images prepared at once may take together ([`crate::memory`]).
    memory: crate::memory::MemoryBudget,
}

/// Seconds an [`Extractor`] has spent in each stage since it was made (`descl sfm --json`'s
/// stage split, so a user sees whether the detector or the network takes the time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ExtractSeconds {
    /// Decoding, shrinking, detecting and sampling patches (SIFT and RootSIFT describe here
    /// too), summed over images: thread-seconds, since images are prepared in parallel while
    /// the network runs.
    pub decode_detect: f64,
    /// The network on the sampled patches.
    pub describe: f64,
}

/// The size of the work image of a `width` × `height` image: shrunk to `max_image_size` on its
/// longer side when larger (0: never), each side rounded.
fn work_size(width: usize, height: usize, max_image_size: usize) -> (usize, usize) {
    let longer = width.max(height);
    if max_image_size == 0 || longer <= max_image_size {
        return (width, height);
    }
    let s = max_image_size as f32 / longer as f32;
    (
        ((width as f32 * s).round() as usize).max(1),
        ((height as f32 * s).round() as usize).max(1),
    )
}

fn add_elapsed(counter: &AtomicU64, since: Instant) {
    let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counter.fetch_add(ns, Ordering::Relaxed);
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
            prepare_ns: AtomicU64::new(0),
            describe_ns: AtomicU64::new(0),
            memory: crate::memory::MemoryBudget::of_machine(),
        }
    }

    /// The time spent in each stage so far.
    pub fn seconds(&self) -> ExtractSeconds {
        let s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 * 1e-9;
        ExtractSeconds {
            decode_detect: s(&self.prepare_ns),
            describe: s(&self.describe_ns),
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

    /// Features of the image file at `path`: [`Extractor::prepare`] and [`Extractor::finish`]
    /// on this one image.
    pub fn extract(&self, path: &Path) -> Result<Features> {
        let prepared = self.prepare(path);
        self.finish_one(prepared)
    }

    /// Features of an image already in memory; `source` is recorded in the metadata.
    pub fn extract_image(&self, img: &GrayImage, source: &str) -> Result<Features> {
        let prepared = self.prepare_image(img, source);
        self.finish_one(prepared)
    }

    /// Extracts `paths` as a two-stage pipeline: a scoped thread prepares the next block of
    /// [`PIPELINE_BLOCK`] images (in parallel on rayon's pool) while this thread runs the
    /// network on the current block, so decoding and detection overlap the network and no
    /// stage waits for a whole folder. At most three blocks are held (being prepared, queued,
    /// being described). `each(i, result, seconds)` receives image i's features in input
    /// order, and the seconds of its own work: its preparation (decode, detect, sample) plus
    /// its share, by patch count, of the network's time on its block. Summed over images they
    /// give the work done, not the wall time (preparation runs in parallel and overlaps the
    /// network). Once `progress` says
    /// cancelled, images not started yet get an error instead of being extracted. The
    /// features are those of [`Extractor::extract`] on each image alone (each descriptor
    /// depends on its own patch only).
    pub fn extract_each<F>(&self, paths: &[PathBuf], progress: &dyn Progress, mut each: F)
    where
        F: FnMut(usize, Result<Features>, f64),
    {
        type Block = Vec<(Result<Prepared>, f64)>;
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Block>(1);
            scope.spawn(move || {
                for block in paths.chunks(PIPELINE_BLOCK) {
                    let prepared: Block = block
                        .par_iter()
                        .map(|p| {
                            let start = Instant::now();
                            let r = if progress.cancelled() {
                                Err(crate::Error::InvalidInput(format!(
                                    "{}: not extracted (cancelled)",
                                    p.display()
                                )))
                            } else {
                                self.prepare(p)
                            };
                            (r, start.elapsed().as_secs_f64())
                        })
                        .collect();
                    if tx.send(prepared).is_err() {
                        break;
                    }
                }
            });
            let mut i = 0;
            for block in rx {
                let (prepared, prepare_seconds): (Vec<_>, Vec<_>) = block.into_iter().unzip();
                let patches: Vec<usize> = prepared
                    .iter()
                    .map(|p| p.as_ref().map_or(0, |p| p.frames.len()))
                    .collect();
                let total = patches.iter().sum::<usize>().max(1) as f64;
                let started = Instant::now();
                let finished = self.finish(prepared);
                let describe = started.elapsed().as_secs_f64();
                for ((r, prep), n) in finished.into_iter().zip(prepare_seconds).zip(patches) {
                    each(i, r, prep + describe * n as f64 / total);
                    i += 1;
                }
            }
        });
    }

    fn finish_one(&self, prepared: Result<Prepared>) -> Result<Features> {
        self.finish(vec![prepared])
            .pop()
            .unwrap_or_else(|| Err(crate::Error::InvalidInput("no image to finish".into())))
    }

    /// The per-image stages of extraction — decode, shrink, detect, sample patches (or SIFT
    /// descriptors) — which run in parallel over images; the network waits for
    /// [`Extractor::finish`].
    pub fn prepare(&self, path: &Path) -> Result<Prepared> {
        let started = Instant::now();
        let prepared = self.prepare_file(path);
        add_elapsed(&self.prepare_ns, started);
        prepared
    }

    fn prepare_file(&self, path: &Path) -> Result<Prepared> {
        // Until the image is prepared (dropped at the end): waits while the images in flight
        // hold the memory this one needs.
        let _memory = self.memory.take(self.estimated_bytes(path));
        // The hash of the bytes decoded, not of a second read: a picture put in the file's
        // place meanwhile must not be recorded beside the features of the one decoded.
        let (img, image_sha256) = load_gray_hashed(path)?;
        let mut prepared = self.prepare_image(&img, &path.display().to_string())?;
        if let Some(p) = prepared.meta.provenance.as_mut() {
            p.image_sha256 = Some(image_sha256);
        }
        Ok(prepared)
    }

    /// The settings that decide an image's features besides the image (recorded in every
    /// features file).
    pub fn settings(&self) -> ExtractSettings {
        ExtractSettings {
            model: self.describer.provenance(),
            model_sha256: self.describer.model_sha256(),
            detector: self.detector,
            max_image_size: self.max_image_size,
        }
    }

    /// The provenance this extractor gives the features of the image file at `path` (its
    /// content hashed): what `descl extract --resume` compares a stored file with.
    pub fn provenance_of(&self, path: &Path) -> Result<FeatureProvenance> {
        Ok(FeatureProvenance {
            image_sha256: Some(crate::provenance::image_sha256(path)?),
            settings: self.settings(),
        })
    }

    /// [`Extractor::prepare`] for an image already in memory: [`Extractor::detect`] then
    /// [`Extractor::prepare_detected`].
    /// An error names `source` (OpenCV's out-of-memory error on a huge image names nothing).
    pub fn prepare_image(&self, img: &GrayImage, source: &str) -> Result<Prepared> {
        self.detect(img)
            .and_then(|d| self.prepare_detected(&d, source))
            .map_err(|e| naming(e, source))
    }

    /// The detection stage alone: `img` shrunk to `max_image_size` when larger, and this
    /// extractor's detector on it. Any extractor with the same detector settings can describe
    /// the result ([`Extractor::describe_detected`]): the benchmarks detect each image once and
    /// describe the same frames with every method.
    pub fn detect<'a>(&self, img: &'a GrayImage) -> Result<Detected<'a>> {
        let (work, scale) = self.work_image(img)?;
        let detections = detect(&work, &self.detector)?;
        Ok(Detected {
            original_size: (img.width, img.height),
            work,
            scale,
            detections,
            magnification: self.detector.magnification,
            sampler: std::sync::OnceLock::new(),
        })
    }

    /// The memory that preparing the image at `path` will take ([`crate::memory`]), from its
    /// header; 0 when that cannot be read ([`load_gray_hashed`] then says why).
    fn estimated_bytes(&self, path: &Path) -> u64 {
        // A FIFO would block the open: only regular files are looked at.
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return 0;
        }
        let size = ::image::ImageReader::open(path)
            .ok()
            .and_then(|r| r.with_guessed_format().ok())
            .and_then(|r| r.into_dimensions().ok());
        size.map_or(0, |(w, h)| {
            let (ww, wh) = work_size(w as usize, h as usize, self.max_image_size);
            crate::memory::extraction_bytes(w, h, ww as u32, wh as u32)
        })
    }

    /// The image the detector and the patch sampler work on: `img`, or its copy shrunk to
    /// `max_image_size` (area resampling), with the per-axis factor work size / original size.
    fn work_image<'a>(&self, img: &'a GrayImage) -> Result<(Cow<'a, GrayImage>, [f32; 2])> {
        check_max_image_size(self.max_image_size)?;
        let (w, h) = work_size(img.width, img.height, self.max_image_size);
        if (w, h) != (img.width, img.height) {
            // Per axis: the rounded size sets the exact factor.
            Ok((
                Cow::Owned(img.resize_area(w, h)?),
                [w as f32 / img.width as f32, h as f32 / img.height as f32],
            ))
        } else {
            Ok((Cow::Borrowed(img), [1.0, 1.0]))
        }
    }

    /// Descriptors of frames the caller detected (another detector's keypoints, COLMAP's SIFT
    /// frames read from a database): the describe half of [`Extractor::extract_image`] on
    /// `frames`, in `img`'s pixels and made at magnification `frames_m` (`a = m·σ·R`,
    /// ARCHITECTURE.md "Conventions"; 1 for COLMAP's `σ·R` shapes, this extractor's
    /// magnification for frames it returned itself). The image is shrunk as for detection, so
    /// the frames an extraction returns, described again, get the descriptors it gave them.
    /// The features keep the frames in the given order, with score 0 and
    /// [`GIVEN_FRAMES_DETECTOR`] as their detector; they record no extract settings (no
    /// detector made them). Frames that are not finite or lie outside the image are refused.
    pub fn describe_given(
        &self,
        img: &GrayImage,
        frames: &[Frame],
        frames_m: f32,
        source: &str,
    ) -> Result<Features> {
        let invalid = |m: String| Error::InvalidInput(format!("{source}: {m}"));
        if !(frames_m.is_finite() && frames_m > 0.0) {
            return Err(invalid(format!(
                "the frames' magnification must be a positive number, got {frames_m}"
            )));
        }
        crate::features::check_frames(frames, img.width as u32, img.height as u32)
            .map_err(invalid)?;
        let (work, scale) = self.work_image(img).map_err(|e| naming(e, source))?;
        let detections = frames
            .iter()
            .map(|f| Detection {
                frame: to_work(f, scale),
                score: 0.0,
            })
            .collect();
        let detected = Detected {
            original_size: (img.width, img.height),
            work,
            scale,
            detections,
            magnification: frames_m,
            sampler: std::sync::OnceLock::new(),
        };
        let mut features = self.describe_detected(&detected, source)?;
        // Exactly as given (the round trip through the work image's pixels is not).
        features.frames = frames.to_vec();
        features.meta.detector = GIVEN_FRAMES_DETECTOR.to_string();
        features.meta.provenance = None;
        features.meta.content = Some(FeaturesId::of(&features));
        Ok(features)
    }

    /// The per-image describe stage on detected frames: SIFT descriptors, or a model's patches
    /// (from `detected`'s pyramid, built once however many extractors describe it) waiting for
    /// [`Extractor::finish`]. Frames detected at another magnification are rescaled to this
    /// describer's ([`Describer::prepare_frames`]).
    pub fn prepare_detected(&self, detected: &Detected, source: &str) -> Result<Prepared> {
        let frames: Vec<_> = detected.detections.iter().map(|d| d.frame).collect();
        let scores = detected.detections.iter().map(|d| d.score).collect();
        let sampler =
            (self.describer.uses_patches() && !detected.is_empty()).then(|| detected.sampler());
        let pending = self.describer.prepare_frames(
            &detected.work,
            sampler,
            &frames,
            detected.magnification,
        )?;
        let meta = FeatureMeta {
            model: self.describer.provenance(),
            model_sha256: self.describer.model_sha256(),
            detector: self.detector.kind.to_string(),
            image_width: detected.original_size.0 as u32,
            image_height: detected.original_size.1 as u32,
            image: source.to_string(),
            name: None,
            provenance: Some(FeatureProvenance {
                image_sha256: None,
                settings: self.settings(),
            }),
            content: None,
        };
        Ok(Prepared {
            frames: detected.frames(),
            scores,
            pending,
            meta,
        })
    }

    /// Features of detected frames: [`Extractor::prepare_detected`] and [`Extractor::finish`]
    /// on this one image.
    pub fn describe_detected(&self, detected: &Detected, source: &str) -> Result<Features> {
        let prepared = self.prepare_detected(detected, source);
        self.finish_one(prepared)
    }

    /// The batched stage: the network on the patches of all `prepared` images at once (runs
    /// span image boundaries, [`Describer::finish`]). One result per input, in order; an input
    /// that failed to prepare keeps its error, and a failing network run fails the images of
    /// the batch.
    pub fn finish(&self, prepared: Vec<Result<Prepared>>) -> Vec<Result<Features>> {
        let mut ok = Vec::new();
        let mut pending = Vec::new();
        let mut results: Vec<Option<Result<Features>>> = Vec::with_capacity(prepared.len());
        for p in prepared {
            match p {
                Ok(p) => {
                    pending.push(p.pending);
                    ok.push((p.frames, p.scores, p.meta));
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let started = Instant::now();
        let described = self.describer.finish(pending);
        add_elapsed(&self.describe_ns, started);
        let mut features = match described {
            Ok(d) => ok
                .into_iter()
                .zip(d)
                .map(|((frames, scores, meta), descriptors)| {
                    let mut f = Features {
                        frames,
                        scores,
                        descriptors,
                        meta,
                    };
                    f.meta.content = Some(FeaturesId::of(&f));
                    Ok(f)
                })
                .collect::<Vec<_>>(),
            Err(e) => ok
                .into_iter()
                .map(|(_, _, meta)| Err(e.for_image(&meta.image)))
                .collect(),
        }
        .into_iter();
        results
            .into_iter()
            .map(|r| match r {
                Some(err) => err,
                None => features.next().unwrap_or_else(|| {
                    Err(crate::Error::InvalidInput("descriptors missing".into()))
                }),
            })
            .collect()
    }
}

/// One image after [`Extractor::detect`]: the image the detector ran on (the input, or its
/// shrunk copy), its detections there, the detector's magnification, and the image's pyramid
/// for patch sampling, built on first use and shared by every describer of the image.
#[derive(Debug)]
pub struct Detected<'a> {
    original_size: (usize, usize),
    work: Cow<'a, GrayImage>,
    /// Work image size / original size, per axis ([1, 1]: not shrunk).
    scale: [f32; 2],
    detections: Vec<Detection>,
    magnification: f32,
    sampler: std::sync::OnceLock<PatchSampler>,
}

impl Detected<'_> {
    /// The frames in the original image's pixels, at [`Detected::magnification`].
    pub fn frames(&self) -> Vec<Frame> {
        self.detections
            .iter()
            .map(|d| {
                if self.scale == [1.0, 1.0] {
                    d.frame
                } else {
                    to_original(&d.frame, self.scale)
                }
            })
            .collect()
    }

    /// Number of detections.
    pub fn len(&self) -> usize {
        self.detections.len()
    }

    /// Whether nothing was detected.
    pub fn is_empty(&self) -> bool {
        self.detections.is_empty()
    }

    /// The measurement-region magnification the frames carry (the detecting extractor's).
    pub fn magnification(&self) -> f32 {
        self.magnification
    }

    /// The work image's pyramid (built on the first call).
    pub fn sampler(&self) -> &PatchSampler {
        self.sampler.get_or_init(|| PatchSampler::new(&self.work))
    }
}

/// One image after [`Extractor::prepare`]: frames in the original image's pixels, scores,
/// metadata, and what the describer still has to do.
#[derive(Debug)]
pub struct Prepared {
    frames: Vec<Frame>,
    scores: Vec<f32>,
    pending: Pending,
    meta: FeatureMeta,
}

/// Inverse of [`to_original`]: a frame in the original image's pixels in the work image's.
fn to_work(f: &Frame, scale: [f32; 2]) -> Frame {
    Frame {
        x: (f.x + 0.5) * scale[0] - 0.5,
        y: (f.y + 0.5) * scale[1] - 0.5,
        a: [
            [f.a[0][0] * scale[0], f.a[0][1] * scale[0]],
            [f.a[1][0] * scale[1], f.a[1][1] * scale[1]],
        ],
    }
}

/// A frame of an image shrunk by `scale` (x, y factors) in the original image's pixels: pixel
/// centres map as (x + ½)/s − ½ (ARCHITECTURE.md "Conventions": the top-left pixel centre is
/// (0, 0)), the shape's rows scale by 1/s.
fn to_original(f: &Frame, scale: [f32; 2]) -> Frame {
    Frame {
        x: (f.x + 0.5) / scale[0] - 0.5,
        y: (f.y + 0.5) / scale[1] - 0.5,
        a: [
            [f.a[0][0] / scale[0], f.a[0][1] / scale[0]],
            [f.a[1][0] / scale[1], f.a[1][1] / scale[1]],
        ],
    }
}
