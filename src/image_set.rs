//! The one pair path for a set of images: features of every image (extracted or read), the
//! chosen pairs matched with any [`Matcher`](crate::matching::two_view::Matcher) and verified
//! ([`match_pair`]), everything handed to a [`Writer`]. `descl match --images` (a folder of
//! `.npz` matches) and `descl sfm` (a COLMAP database) are this function with different
//! writers.
//!
//! Failures are per item: an image that cannot be read is reported and its pairs fail, the
//! others go on; the caller decides the exit status from the summary. Pairs are matched in
//! parallel blocks and written as each block ends, so an interrupted run keeps what it wrote
//! and a writer that knows its pairs ([`Writer::has_pair`]) resumes.

use crate::error::Result;
use crate::features::Features;
use crate::geometry::{Intrinsics, ModelKind};
use crate::io::output::{ImageRecord, PairRecord, Writer};
use crate::matching::pairs::{file_names, make_pairs, PairMode};
use crate::matching::two_view::{match_pair, PairConfig, PairResult};
use crate::progress::Progress;
use rayon::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Pairs matched in parallel before their results are written (bounds the results held).
pub const PAIR_BLOCK: usize = 64;

/// What to do with a set.
#[derive(Debug, Clone)]
pub struct SetConfig {
    pub pairs: PairMode,
    pub pair: PairConfig,
    /// Hand every image's features to the writer (a database needs them; a folder of matches
    /// files does not).
    pub store_images: bool,
    /// This process's share of the pairs (all by default; see [`crate::shard`]).
    pub shard: crate::shard::Shard,
}

/// Camera knowledge of one image: intrinsics if any, and whether the focal length was
/// measured (EXIF, flag, file) rather than a prior.
pub type CameraInfo = (Option<Intrinsics>, bool);

/// One image of the set after loading.
#[derive(Debug, Clone, Serialize)]
pub struct SetImage {
    pub name: String,
    pub path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keypoints: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focal_prior: Option<f64>,
    pub focal_known: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// Seconds to extract and write (the extract path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SetImage {
    fn new(name: &str, path: &Path) -> SetImage {
        SetImage {
            name: name.to_string(),
            path: path.to_path_buf(),
            keypoints: None,
            focal_prior: None,
            focal_known: false,
            output: None,
            seconds: None,
            error: None,
        }
    }
}

/// Images extracted in parallel before their features are written, in input order (bounds the
/// features held; the order makes output-name clashes deterministic).
pub const IMAGE_BLOCK: usize = 16;

/// Extracts every input with `extract` and stores it with `writer` (which is finished at the
/// end): the extract path. A failing image is reported in its entry and the others go on.
pub fn extract_all<E>(
    inputs: &[PathBuf],
    extract: E,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<(PathBuf, Vec<SetImage>)>
where
    E: Fn(&Path) -> Result<Features> + Sync,
{
    let names = file_names(inputs);
    progress.start("extract", inputs.len() as u64);
    let mut images = Vec::with_capacity(inputs.len());
    for (block, block_names) in inputs.chunks(IMAGE_BLOCK).zip(names.chunks(IMAGE_BLOCK)) {
        let extracted: Vec<_> = block
            .par_iter()
            .map(|p| {
                let t = std::time::Instant::now();
                (extract(p), t)
            })
            .collect();
        for ((path, name), (r, t)) in block.iter().zip(block_names).zip(extracted) {
            let mut image = SetImage::new(name, path);
            let stored = r.and_then(|f| {
                let record = ImageRecord {
                    name,
                    path,
                    features: &f,
                    intrinsics: None,
                    focal_known: false,
                };
                writer.add_image(&record).map(|out| (f.frames.len(), out))
            });
            match stored {
                Ok((n, out)) => {
                    image.keypoints = Some(n);
                    image.output = out;
                    image.seconds = Some(t.elapsed().as_secs_f64());
                }
                Err(e) => {
                    progress.note(&format!("error: {e}"));
                    image.error = Some(e.to_string());
                }
            }
            progress.inc(1);
            images.push(image);
        }
    }
    progress.finish();
    Ok((writer.finish()?, images))
}

/// One pair's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct PairOutcome {
    pub a: String,
    pub b: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matches: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inliers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geometry: Option<ModelKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<[[f64; 3]; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped_existing: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl PairOutcome {
    fn new(a: &Path, b: &Path) -> PairOutcome {
        PairOutcome {
            a: a.display().to_string(),
            b: b.display().to_string(),
            matches: None,
            inliers: None,
            geometry: None,
            model: None,
            reason: None,
            output: None,
            skipped_existing: false,
            error: None,
        }
    }

    /// The outcome of a matched pair.
    pub fn of(a: &Path, b: &Path, r: &PairResult, output: Option<PathBuf>) -> PairOutcome {
        let v = r.verification.as_ref();
        PairOutcome {
            matches: Some(r.matches.len()),
            inliers: v.map(|v| v.num_inliers),
            geometry: v.map(|v| v.kind),
            model: v.and_then(|v| v.model),
            reason: v.and_then(|v| v.reason.clone()),
            output,
            ..PairOutcome::new(a, b)
        }
    }
}

/// What a set run did.
#[derive(Debug, Clone, Serialize)]
pub struct SetSummary {
    /// The writer's output (folder or database).
    pub output: PathBuf,
    pub images: Vec<SetImage>,
    pub pairs: Vec<PairOutcome>,
}

impl SetSummary {
    /// Images that could not be read.
    pub fn failed_images(&self) -> usize {
        self.images.iter().filter(|i| i.error.is_some()).count()
    }
    /// Pairs that failed (including those of unreadable images).
    pub fn failed_pairs(&self) -> usize {
        self.pairs.iter().filter(|p| p.error.is_some()).count()
    }
    /// Pairs found already written.
    pub fn skipped_pairs(&self) -> usize {
        self.pairs.iter().filter(|p| p.skipped_existing).count()
    }
}

/// Features of an image that loaded, with its camera knowledge.
type Loaded = Option<(Features, CameraInfo)>;
/// An input's features and camera knowledge, or why not.
type LoadResult = std::result::Result<(Features, CameraInfo), String>;
/// Pairs of indices into the set.
type Pairs = Vec<(usize, usize)>;

/// Loads the `wanted` inputs in parallel and, with `store`, hands each to the writer in input
/// order. Returns the loaded features (indexed like `paths`) and one entry per wanted image.
fn load_images<L, C>(
    paths: &[PathBuf],
    names: &[String],
    wanted: &[usize],
    (load, camera): (&L, &C),
    mut store: Option<&mut dyn Writer>,
    progress: &dyn Progress,
) -> Result<(Vec<Loaded>, Vec<SetImage>)>
where
    L: Fn(&Path) -> Result<Features> + Sync,
    C: Fn(&Path, &Features) -> Result<CameraInfo> + Sync,
{
    progress.start("extract", wanted.len() as u64);
    let loaded: Vec<(usize, LoadResult)> = wanted
        .par_iter()
        .map(|&i| {
            let r = load(&paths[i])
                .and_then(|f| camera(&paths[i], &f).map(|c| (f, c)))
                .map_err(|e| e.to_string());
            progress.inc(1);
            (i, r)
        })
        .collect();
    progress.finish();
    let mut features: Vec<Loaded> = vec![None; paths.len()];
    let mut images = Vec::with_capacity(loaded.len());
    for (i, r) in loaded {
        let mut image = SetImage::new(&names[i], &paths[i]);
        match r {
            Ok((f, (k, known))) => {
                image.keypoints = Some(f.frames.len());
                image.focal_prior = k.map(|k| k.fx);
                image.focal_known = known;
                if let Some(writer) = store.as_deref_mut() {
                    let record = ImageRecord {
                        name: &names[i],
                        path: &paths[i],
                        features: &f,
                        intrinsics: k.as_ref(),
                        focal_known: known,
                    };
                    image.output = writer.add_image(&record)?;
                }
                features[i] = Some((f, (k, known)));
            }
            Err(e) => {
                progress.note(&format!("error: {}: {e}", paths[i].display()));
                image.error = Some(e);
            }
        }
        images.push(image);
    }
    Ok((features, images))
}

/// Matches and verifies `todo` in parallel blocks of [`PAIR_BLOCK`], handing each block's
/// results to the writer in order; one outcome per pair.
fn match_pairs(
    todo: &[(usize, usize)],
    (paths, names): (&[PathBuf], &[String]),
    features: &[Loaded],
    pair_cfg: &PairConfig,
    writer: &mut dyn Writer,
    progress: &dyn Progress,
) -> Vec<PairOutcome> {
    let mut outcomes = Vec::with_capacity(todo.len());
    progress.start("match", todo.len() as u64);
    let record = |i: usize| {
        features[i].as_ref().map(|(f, (k, known))| ImageRecord {
            name: &names[i],
            path: &paths[i],
            features: f,
            intrinsics: k.as_ref(),
            focal_known: *known,
        })
    };
    for block in todo.chunks(PAIR_BLOCK) {
        let results: Vec<std::result::Result<PairResult, String>> = block
            .par_iter()
            .map(|&(i, j)| {
                let r = match (record(i), record(j)) {
                    (Some(a), Some(b)) => {
                        let k = a.intrinsics.zip(b.intrinsics);
                        match_pair(a.features, b.features, pair_cfg, k).map_err(|e| e.to_string())
                    }
                    (a, _) => Err(format!(
                        "no features for {}",
                        paths[if a.is_none() { i } else { j }].display()
                    )),
                };
                progress.inc(1);
                r
            })
            .collect();
        for (&(i, j), r) in block.iter().zip(results) {
            let (a, b) = (&paths[i], &paths[j]);
            let outcome = match (r, record(i), record(j)) {
                (Ok(r), Some(ra), Some(rb)) => {
                    let pair = PairRecord {
                        a: ra,
                        b: rb,
                        result: &r,
                        config: pair_cfg,
                    };
                    match writer.add_pair(&pair) {
                        Ok(out) => PairOutcome::of(a, b, &r, out),
                        Err(e) => PairOutcome {
                            error: Some(e.to_string()),
                            ..PairOutcome::new(a, b)
                        },
                    }
                }
                (Err(e), _, _) => PairOutcome {
                    error: Some(e),
                    ..PairOutcome::new(a, b)
                },
                _ => PairOutcome {
                    error: Some("features missing".into()),
                    ..PairOutcome::new(a, b)
                },
            };
            if let Some(e) = &outcome.error {
                progress.note(&format!("error: {} – {}: {e}", outcome.a, outcome.b));
            }
            outcomes.push(outcome);
        }
    }
    progress.finish();
    outcomes
}

/// Runs the set `paths` (images or features files): `load` gives an input's features and
/// `camera` its camera knowledge; pairs per `cfg`, results into `writer`, which is finished
/// at the end.
pub fn run<L, C>(
    paths: &[PathBuf],
    cfg: &SetConfig,
    load: L,
    camera: C,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<SetSummary>
where
    L: Fn(&Path) -> Result<Features> + Sync,
    C: Fn(&Path, &Features) -> Result<CameraInfo> + Sync,
{
    cfg.pair.check()?;
    let names = file_names(paths);
    // Pairs known from the names are chosen first, so that only their images are loaded;
    // retrieval pairs need every image's features.
    let by_name = if cfg.pairs.needs_features() {
        None
    } else {
        Some(cfg.shard.select(&make_pairs(&cfg.pairs, &names, None)?))
    };
    let store_images = cfg.store_images || writer.needs_images();
    let mut needed = vec![store_images || by_name.is_none(); paths.len()];
    for &(i, j) in by_name.iter().flatten() {
        if !writer.has_pair(&paths[i], &paths[j]) {
            needed[i] = true;
            needed[j] = true;
        }
    }
    let wanted: Vec<usize> = (0..paths.len()).filter(|&i| needed[i]).collect();
    let (features, images) = load_images(
        paths,
        &names,
        &wanted,
        (&load, &camera),
        store_images.then_some(&mut *writer),
        progress,
    )?;
    let pairs = match by_name {
        Some(p) => p,
        None => {
            // An image that failed to load has no descriptors: a zero vector, whose pairs
            // fail one by one like any pair of that image.
            let descriptors = |i: usize| -> Result<crate::describe::Descriptors> {
                Ok(features[i].as_ref().map_or_else(
                    || crate::describe::Descriptors::Float(ndarray::Array2::zeros((0, 0))),
                    |(f, _)| f.descriptors.clone(),
                ))
            };
            cfg.shard
                .select(&make_pairs(&cfg.pairs, &names, Some(&descriptors))?)
        }
    };
    let (done, todo): (Pairs, Pairs) = pairs
        .into_iter()
        .partition(|&(i, j)| writer.has_pair(&paths[i], &paths[j]));

    let mut outcomes: Vec<PairOutcome> = done
        .iter()
        .map(|&(i, j)| PairOutcome {
            skipped_existing: true,
            ..PairOutcome::new(&paths[i], &paths[j])
        })
        .collect();
    outcomes.extend(match_pairs(
        &todo,
        (paths, &names),
        &features,
        &cfg.pair,
        &mut *writer,
        progress,
    ));
    progress.finish();
    let output = writer.finish()?;
    Ok(SetSummary {
        output,
        images,
        pairs: outcomes,
    })
}
