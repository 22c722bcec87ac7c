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

use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::{Intrinsics, ModelKind};
use crate::io::plan::MatchPlan;
use crate::io::writer::{ImageRecord, PairRecord, Writer};
use crate::matching::pairs::{make_pairs, PairMode};
use crate::matching::two_view::{match_pair, verify_matches, PairConfig, PairResult, PairSeconds};
use crate::names::{check_unique, SetInput};
use crate::pipeline::{ExtractSeconds, Extractor};
use crate::progress::Progress;
use crate::provenance::{FeaturesId, PairProvenance, Reuse};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
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
    /// None: every image's features stay in memory from loading to the end (for inputs that
    /// are extracted, too costly to repeat). Some(n): inputs are read again where needed and at
    /// most about `n` images' features are held at once (for features files), so memory does
    /// not grow with the set; pairs are then matched in tiles of n/2 × n/2 images.
    pub max_resident_images: Option<usize>,
    /// Finish the writer only when every image and pair succeeded (a COLMAP database of part of
    /// the set is no result: `descl sfm`); otherwise it is dropped unfinished, its temporaries
    /// removed, and the run is an error. False: failures are reported per item and the rest
    /// is written (a folder of matches files, resumable).
    pub all_or_nothing: bool,
    /// How the inputs' features were made, where known, recorded in the match plan
    /// ([`MatchPlan::features`]) so that a later run into the same folder with other features
    /// is refused.
    pub features: Option<crate::provenance::ExtractSettings>,
    /// The intrinsics given for every image (`descl match --intrinsics`, `--intrinsics-file`;
    /// None: each image's EXIF), recorded in the match plan ([`MatchPlan::camera`]).
    pub intrinsics: Option<Intrinsics>,
}

/// [`SetConfig::max_resident_images`] for sets of features files: 128 images, about 140 MB at
/// 2048 keypoints with 128-d float descriptors.
pub const DEFAULT_MAX_RESIDENT_IMAGES: usize = 128;

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
    /// Seconds of this image's own extraction work (the extract path): its decode, detect and
    /// patch sampling plus its share of the network's time ([`Extractor::extract_each`]).
    /// Summed over a run they exceed its wall time, as the stages overlap.
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

/// Images loaded (read or extracted) in parallel by [`run`] before their features are handed to
/// the writer, in input order (bounds the features held; the order makes output-name clashes
/// deterministic). `extract_all` goes through [`Extractor::extract_each`]'s pipeline instead.
pub const IMAGE_BLOCK: usize = 16;

/// Where the features of a set's inputs come from: a closure that reads or extracts one input,
/// or an [`Extractor`], whose [`Load::load_each`] is its pipeline ([`Extractor::extract_each`]).
pub trait Load: Sync {
    /// Features of one input.
    fn load(&self, path: &Path) -> Result<Features>;
    /// The identity of an input's features when it is known without loading them (a features
    /// file records it), so that a resumed run checks stored pairs without loading their
    /// images; None: the features are loaded to know it.
    fn identity(&self, _path: &Path) -> Option<FeaturesId> {
        None
    }
    /// What names an input's content in the run's plan ([`MatchPlan::input_ids`]): by default
    /// its recorded [`Load::identity`], else the identity of its features loaded (files that
    /// record none: an older descl's, hloc's), so that no input goes unidentified (hostile
    /// round of 8827b8d, H-3); None where they cannot be loaded (the run reports that input).
    fn input_id(&self, path: &Path) -> Option<String> {
        features_input_id(self, path)
    }
    /// Features of every input, handed to `each(k, ..)` for `paths[k]` in order. By default
    /// [`load_in_blocks`].
    fn load_each(
        &self,
        paths: &[PathBuf],
        progress: &dyn Progress,
        each: &mut dyn FnMut(usize, Result<Features>),
    ) {
        load_in_blocks(self, paths, progress, each)
    }
    /// The time spent in each stage of extraction so far, for loaders that extract.
    fn extraction_seconds(&self) -> Option<ExtractSeconds> {
        None
    }
}

/// [`Load::load_each`] as blocks of [`IMAGE_BLOCK`] inputs loaded in parallel (for loaders
/// without a pipeline of their own, e.g. features files). Once `progress` says cancelled, the
/// inputs of later blocks get an error instead of being loaded (as in the pipeline).
pub fn load_in_blocks<L: Load + ?Sized>(
    loader: &L,
    paths: &[PathBuf],
    progress: &dyn Progress,
    each: &mut dyn FnMut(usize, Result<Features>),
) {
    for (b, block) in paths.chunks(IMAGE_BLOCK).enumerate() {
        let cancelled = progress.cancelled();
        let loaded: Vec<_> = block
            .par_iter()
            .map(|p| match cancelled {
                true => Err(crate::Error::InvalidInput(format!(
                    "{}: not loaded (cancelled)",
                    p.display()
                ))),
                false => loader.load(p),
            })
            .collect();
        for (k, r) in loaded.into_iter().enumerate() {
            each(b * IMAGE_BLOCK + k, r);
        }
    }
}

impl<F> Load for F
where
    F: Fn(&Path) -> Result<Features> + Sync,
{
    fn load(&self, path: &Path) -> Result<Features> {
        self(path)
    }
}

impl Load for Extractor {
    fn load(&self, path: &Path) -> Result<Features> {
        self.extract(path)
    }
    fn input_id(&self, path: &Path) -> Option<String> {
        image_input_id(path)
    }
    fn load_each(
        &self,
        paths: &[PathBuf],
        progress: &dyn Progress,
        each: &mut dyn FnMut(usize, Result<Features>),
    ) {
        self.extract_each(paths, progress, |k, r, _| each(k, r))
    }
    fn extraction_seconds(&self) -> Option<ExtractSeconds> {
        Some(self.seconds())
    }
}

/// [`MatchPlan::camera`]: the intrinsics an essential matrix is verified with (the ones given,
/// or [`PLAN_CAMERA_EXIF`]), or [`PLAN_CAMERA_UNUSED`] for a geometry that uses none.
fn plan_camera(pair: &PairConfig, given: Option<&Intrinsics>) -> serde_json::Value {
    match (pair.geometry, given) {
        (Some(ModelKind::Essential), Some(k)) => {
            serde_json::json!({ "fx": k.fx, "fy": k.fy, "cx": k.cx, "cy": k.cy })
        }
        (Some(ModelKind::Essential), None) => PLAN_CAMERA_EXIF.into(),
        _ => PLAN_CAMERA_UNUSED.into(),
    }
}

/// [`MatchPlan::camera`] of a run verifying essential matrices with each image's EXIF.
pub const PLAN_CAMERA_EXIF: &str = "exif";
/// [`MatchPlan::camera`] of a run whose geometry uses no intrinsics.
pub const PLAN_CAMERA_UNUSED: &str = "unused";

/// [`Load::input_id`] of a features input: its recorded identity, else that of its features
/// loaded.
pub fn features_input_id<L: Load + ?Sized>(load: &L, path: &Path) -> Option<String> {
    load.identity(path)
        .or_else(|| load.load(path).ok().map(|f| f.id()))
        .map(|id| id.sha256)
}

/// [`Load::input_id`] of an image that the run extracts: `image:` and its SHA-256 (the settings
/// it is extracted with are [`MatchPlan::features`]).
pub fn image_input_id(path: &Path) -> Option<String> {
    crate::provenance::image_sha256(path)
        .ok()
        .map(|sha| format!("{IMAGE_INPUT_ID_PREFIX}{sha}"))
}

/// What [`image_input_id`] puts before an image's SHA-256, so that no image is taken for
/// features of the same hash.
pub const IMAGE_INPUT_ID_PREFIX: &str = "image:";

/// Refuses an `output` file (a COLMAP database) that is one of the images of the folder
/// `images`, by device and inode ([`crate::io::atomic::check_not_an_input`]), or that would be
/// a new image of it (an image extension inside the folder): `descl sfm IMAGES --database
/// IMAGES/0000.jpg --overwrite` replaced that photograph with SQLite, and a database named as
/// an image would be read as one by the next run. A folder that cannot be listed is left to
/// the command's own error.
pub fn check_output_outside_set(output: &Path, images: &Path) -> Result<()> {
    if let Ok(set) = crate::names::folder_inputs(images, &crate::image::has_image_extension) {
        crate::io::atomic::check_not_an_input(output, set.iter().map(|i| &i.path))?;
    }
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let inside = match (parent.canonicalize(), images.canonicalize()) {
        (Ok(p), Ok(dir)) => p.starts_with(dir),
        _ => false,
    };
    if inside && crate::image::has_image_extension(output) {
        return Err(Error::InvalidInput(format!(
            "{}: named as an image inside the image folder {}, so it would be read as one of its images; write the output outside the folder or give it another extension",
            output.display(),
            images.display()
        )));
    }
    Ok(())
}

/// Refuses, before any work, a `path` (the `what`: database, image folder) inside one of the
/// earlier models in `sparse` that `--overwrite` would remove before mapping (`descl sfm
/// --reconstruct --overwrite` found it only after extraction and matching). A path that does
/// not exist yet is placed by its folder.
pub fn check_not_inside_old_models(path: &Path, what: &str, sparse: &Path) -> Result<()> {
    if !sparse.is_dir() {
        return Ok(());
    }
    let real = crate::io::atomic::resolved_path(path);
    for old in crate::io::colmap_model::model_folders(sparse)? {
        if old.canonicalize().is_ok_and(|o| real.starts_with(&o)) {
            return Err(Error::InvalidInput(format!(
                "{}: the {what} {} is inside this earlier model, which --overwrite would remove; move it or map into another folder",
                old.display(),
                path.display()
            )));
        }
    }
    Ok(())
}

/// The inputs a resumed extraction (`descl extract --resume`) still has to do: those whose
/// features `writer` does not hold, or holds made from other image bytes or settings (stale:
/// each one's reason is returned, in input order). An input that cannot be hashed is kept, so
/// that extracting it reports its error.
pub fn still_to_extract(
    inputs: Vec<SetInput>,
    extractor: &Extractor,
    writer: &dyn Writer,
) -> (Vec<SetInput>, Vec<String>) {
    let mut stale = Vec::new();
    let todo = inputs
        .into_iter()
        .filter(|i| {
            let Ok(expected) = extractor.provenance_of(&i.path) else {
                return true;
            };
            match writer.has_image(&i.name, &expected) {
                Reuse::Same => false,
                Reuse::Missing => true,
                Reuse::Stale(why) => {
                    stale.push(why);
                    true
                }
            }
        })
        .collect();
    (todo, stale)
}

/// Extracts every input with `extractor`'s pipeline ([`Extractor::extract_each`]: decode and
/// detection of the next images overlap the network on the current ones) and stores each, in
/// input order, with `writer` (which is finished at the end): the extract path. A failing
/// image is reported in its entry and the others go on; once `progress` says cancelled, the
/// images not started yet are reported as not extracted.
pub fn extract_all(
    inputs: &[SetInput],
    extractor: &Extractor,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<(PathBuf, Vec<SetImage>)> {
    check_unique(inputs)?;
    let paths: Vec<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    progress.start("extract", inputs.len() as u64);
    let mut images = Vec::with_capacity(inputs.len());
    extractor.extract_each(&paths, progress, |i, r, seconds| {
        let (path, name) = (&inputs[i].path, &inputs[i].name);
        let mut image = SetImage::new(name, path);
        let stored = r.and_then(|mut f| {
            f.meta.name = Some(name.clone());
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
                image.seconds = Some(seconds);
            }
            Err(e) => {
                progress.note(&format!("error: {e}"));
                image.error = Some(e.to_string());
            }
        }
        progress.inc(1);
        images.push(image);
    });
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
    /// Why a stored result of the pair was not reused (made from other features or with other
    /// settings) and the pair was matched again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The pair's matching and verification time ([`SetSummary::seconds`] sums them).
    #[serde(skip)]
    pub seconds: PairSeconds,
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
            redone: None,
            error: None,
            seconds: PairSeconds::default(),
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
            seconds: r.seconds,
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
    /// Wall time of each stage of the run.
    pub seconds: StageSeconds,
}

/// Wall time of a set run's stages, seconds (`descl sfm --json`'s `seconds`, so a user sees
/// where the time goes), and how each splits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StageSeconds {
    /// The images' features: decode, detect and describe when extracting (pipelined: split in
    /// `extraction`; [`SetImage::seconds`] has each image's own), or reading features files.
    pub features: f64,
    /// Choosing the pairs (retrieval's included), matching, verifying and writing them.
    pub pairs: f64,
    /// When the features were extracted: the extractor's time in each of its stages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extraction: Option<ExtractSeconds>,
    /// Matching and verification summed over the pairs matched in this run: thread-seconds
    /// (pairs run in parallel, so these can exceed `pairs`).
    pub matching: f64,
    pub verification: f64,
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
    /// Pairs whose stored result was stale and that were matched again.
    pub fn redone_pairs(&self) -> usize {
        self.pairs.iter().filter(|p| p.redone.is_some()).count()
    }
}

/// The intrinsics of a camera that a pair may be verified with: measured ones only (as
/// [`ImageRecord::known_intrinsics`]).
fn known_intrinsics((k, known): &CameraInfo) -> Option<Intrinsics> {
    k.filter(|_| *known)
}

/// Features of an image that loaded, with its camera knowledge.
type Loaded = Option<(Features, CameraInfo)>;
/// Pairs of indices into the set.
type Pairs = Vec<(usize, usize)>;

/// Loads the `wanted` inputs ([`Load::load_each`]: in parallel, extraction pipelined) and, with
/// `store`, hands each to the writer in input order. Returns the loaded features (indexed like
/// `paths`; only with `keep`) and one entry per wanted image.
fn load_images<L, C>(
    paths: &[PathBuf],
    names: &[String],
    wanted: &[usize],
    (load, camera): (&L, &C),
    mut store: Option<&mut dyn Writer>,
    keep: bool,
    progress: &dyn Progress,
) -> Result<(Vec<Loaded>, Vec<SetImage>)>
where
    L: Load + ?Sized,
    C: Fn(&Path, &Features) -> Result<CameraInfo> + Sync,
{
    progress.start("extract", wanted.len() as u64);
    let mut features: Vec<Loaded> = vec![None; paths.len()];
    let mut images = Vec::with_capacity(wanted.len());
    let wanted_paths: Vec<PathBuf> = wanted.iter().map(|&i| paths[i].clone()).collect();
    // The first writer error stops storing and, through `Progress::cancelled`, the loading of
    // inputs not started yet; it is returned once the loads in flight are done.
    let mut failure = None;
    let stop = StopOnFailure {
        inner: progress,
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    load.load_each(&wanted_paths, &stop, &mut |k, r| {
        let i = wanted[k];
        progress.inc(1);
        let r = r
            .and_then(|mut f| {
                // Features carry their name in this set (a features input's recorded one is
                // the same name, or none in an older file).
                f.meta.name = Some(names[i].clone());
                camera(&paths[i], &f).map(|c| (f, c))
            })
            .map_err(|e| e.to_string());
        let mut image = SetImage::new(&names[i], &paths[i]);
        match r {
            Ok((f, (k, known))) => {
                image.keypoints = Some(f.frames.len());
                image.focal_prior = k.map(|k| k.fx);
                image.focal_known = known;
                if let (Some(writer), None) = (store.as_deref_mut(), &failure) {
                    let record = ImageRecord {
                        name: &names[i],
                        path: &paths[i],
                        features: &f,
                        intrinsics: k.as_ref(),
                        focal_known: known,
                    };
                    match writer.add_image(&record) {
                        Ok(out) => image.output = out,
                        Err(e) => {
                            stop.failed
                                .store(true, std::sync::atomic::Ordering::Relaxed);
                            failure = Some(e);
                        }
                    }
                }
                if keep {
                    features[i] = Some((f, (k, known)));
                }
            }
            Err(e) => {
                // Errors about a file name it already: the path once.
                let path = paths[i].display().to_string();
                if e.contains(&path) {
                    progress.note(&format!("error: {e}"));
                } else {
                    progress.note(&format!("error: {path}: {e}"));
                }
                image.error = Some(e);
            }
        }
        images.push(image);
    });
    progress.finish();
    if let Some(e) = failure {
        return Err(e);
    }
    Ok((features, images))
}

/// `inner`, reporting cancelled also once `failed` is set (a writer error in [`load_images`]).
struct StopOnFailure<'a> {
    inner: &'a dyn Progress,
    failed: std::sync::atomic::AtomicBool,
}

impl Progress for StopOnFailure<'_> {
    fn start(&self, stage: &str, len: u64) {
        self.inner.start(stage, len)
    }
    fn set_length(&self, len: u64) {
        self.inner.set_length(len)
    }
    fn message(&self, msg: &str) {
        self.inner.message(msg)
    }
    fn inc(&self, n: u64) {
        self.inner.inc(n)
    }
    fn note(&self, line: &str) {
        self.inner.note(line)
    }
    fn finish(&self) {
        self.inner.finish()
    }
    fn cancelled(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Relaxed) || self.inner.cancelled()
    }
}

/// The images of the set and how to get their features: those kept in memory, else loaded.
struct Sources<'a, L: ?Sized, C> {
    paths: &'a [PathBuf],
    names: &'a [String],
    kept: &'a [Loaded],
    load: &'a L,
    camera: &'a C,
}

/// Matches and verifies `todo` tile by tile (pairs whose images fall in one `tile` × `tile`
/// block of the image list; the images a tile needs and memory lacks are loaded for it and
/// dropped after it), each tile in parallel blocks of [`PAIR_BLOCK`] handed to the writer in
/// order. One outcome per pair, in `todo`'s order.
fn match_pairs<L, C>(
    todo: &[(usize, usize)],
    src: &Sources<'_, L, C>,
    tile: usize,
    pair_cfg: &PairConfig,
    writer: &mut dyn Writer,
    progress: &dyn Progress,
) -> Vec<PairOutcome>
where
    L: Load + ?Sized,
    C: Fn(&Path, &Features) -> Result<CameraInfo> + Sync,
{
    let tile_of = |k: usize| (todo[k].0 / tile, todo[k].1 / tile);
    let mut order: Vec<usize> = (0..todo.len()).collect();
    order.sort_by_key(|&k| (tile_of(k), k));
    let mut outcomes: Vec<Option<PairOutcome>> = vec![None; todo.len()];
    progress.start("match", todo.len() as u64);
    for group in order.chunk_by(|&a, &b| tile_of(a) == tile_of(b)) {
        let mut need: Vec<usize> = group
            .iter()
            .flat_map(|&k| [todo[k].0, todo[k].1])
            .filter(|&i| src.kept[i].is_none())
            .collect();
        need.sort_unstable();
        need.dedup();
        let loaded: HashMap<usize, (Features, CameraInfo)> = need
            .par_iter()
            .filter_map(|&i| {
                let p = &src.paths[i];
                let r = src
                    .load
                    .load(p)
                    .and_then(|f| (src.camera)(p, &f).map(|c| (f, c)));
                r.ok().map(|x| (i, x))
            })
            .collect();
        let record = |i: usize| {
            src.kept[i]
                .as_ref()
                .or_else(|| loaded.get(&i))
                .map(|(f, (k, known))| ImageRecord {
                    name: &src.names[i],
                    path: &src.paths[i],
                    features: f,
                    intrinsics: k.as_ref(),
                    focal_known: *known,
                })
        };
        for block in group.chunks(PAIR_BLOCK) {
            let results: Vec<std::result::Result<PairResult, String>> = block
                .par_iter()
                .map(|&k| {
                    let (i, j) = todo[k];
                    let r = match (record(i), record(j)) {
                        (Some(a), Some(b)) => {
                            // Only known intrinsics verify. A camera whose focal length is
                            // guessed (`descl sfm`'s COLMAP prior) makes its pairs F
                            // (`for_intrinsics`); intrinsics missing altogether stay an error
                            // of the essential matrix, as for a single pair.
                            let kk = a.known_intrinsics().zip(b.known_intrinsics());
                            let guessed = |r: &ImageRecord<'_>| {
                                r.intrinsics.is_some() && r.known_intrinsics().is_none()
                            };
                            let pair_cfg = &*pair_cfg.for_intrinsics(!(guessed(&a) || guessed(&b)));
                            if a.features.frames.len() < MIN_KEYPOINTS_TO_MATCH
                                || b.features.frames.len() < MIN_KEYPOINTS_TO_MATCH
                            {
                                // An image without keypoints, or with one (a flat or dark
                                // frame), is part of the set; its pairs simply have no matches,
                                // like a pair without overlap (a single pair refuses it:
                                // nothing to match, or too little for the ratio test).
                                verify_matches(
                                    a.features,
                                    b.features,
                                    crate::matching::Matches::default(),
                                    pair_cfg,
                                    kk,
                                )
                            } else {
                                match_pair(a.features, b.features, pair_cfg, kk)
                            }
                            .map_err(|e| e.to_string())
                        }
                        // The pair's line names both paths: the image by its name here.
                        (a, _) => Err(format!(
                            "no features for {} (its error is above)",
                            src.names[if a.is_none() { i } else { j }]
                        )),
                    };
                    progress.inc(1);
                    r
                })
                .collect();
            for (&k, r) in block.iter().zip(results) {
                let (i, j) = todo[k];
                let outcome = store_pair(
                    r,
                    (record(i), record(j)),
                    (&src.paths[i], &src.paths[j]),
                    pair_cfg,
                    writer,
                );
                if let Some(e) = &outcome.error {
                    progress.note(&format!("error: {} – {}: {e}", outcome.a, outcome.b));
                }
                outcomes[k] = Some(outcome);
            }
        }
    }
    progress.finish();
    outcomes.into_iter().flatten().collect()
}

/// Hands one matched pair to the writer; its outcome.
fn store_pair(
    r: std::result::Result<PairResult, String>,
    records: (Option<ImageRecord<'_>>, Option<ImageRecord<'_>>),
    (a, b): (&Path, &Path),
    pair_cfg: &PairConfig,
    writer: &mut dyn Writer,
) -> PairOutcome {
    match (r, records) {
        (Ok(r), (Some(ra), Some(rb))) => {
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
        (Err(e), _) => PairOutcome {
            error: Some(e),
            ..PairOutcome::new(a, b)
        },
        _ => PairOutcome {
            error: Some("features missing".into()),
            ..PairOutcome::new(a, b)
        },
    }
}

/// The fewest keypoints an image of a set needs for its pairs to be matched: the ratio test
/// compares each descriptor's two nearest neighbours in the other image. With fewer, the pair
/// has no matches (no model needs fewer than 4), rather than failing the set (issue 55: one
/// flat picture with a single keypoint failed a whole `descl sfm`).
pub const MIN_KEYPOINTS_TO_MATCH: usize = 2;

/// Runs the set `inputs` (images or features files, by name): `load` gives an input's
/// features and `camera` its camera knowledge; pairs per `cfg`, results into `writer`, which
/// is finished at the end.
pub fn run<L, C>(
    inputs: &[SetInput],
    cfg: &SetConfig,
    load: &L,
    camera: C,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<SetSummary>
where
    L: Load + ?Sized,
    C: Fn(&Path, &Features) -> Result<CameraInfo> + Sync,
{
    cfg.pair.check()?;
    check_unique(inputs)?;
    let paths: Vec<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    let paths = &paths[..];
    let names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    let selection = cfg.pairs.selection()?;
    // Two sets whose files have the same names are told apart by their content (hostile round
    // of 83bb825, H-1: shards over two features folders, or two runs at once, mixed their pair
    // files in one folder, both exit 0).
    let input_ids: Vec<String> = if writer.records_plan() {
        paths
            .par_iter()
            .map(|p| load.input_id(p).unwrap_or_default())
            .collect()
    } else {
        Vec::new()
    };
    let plan = |pairs: &[(usize, usize)]| MatchPlan {
        inputs: names.clone(),
        input_ids: input_ids.clone(),
        pairs: pairs
            .iter()
            .map(|&(i, j)| [names[i].clone(), names[j].clone()])
            .collect(),
        config: cfg.pair.clone(),
        features: cfg.features.clone(),
        selection: Some(selection.clone()),
        camera: Some(plan_camera(&cfg.pair, cfg.intrinsics.as_ref())),
    };
    // Pairs known from the names are chosen first, so that only their images are loaded;
    // retrieval pairs need every image's features.
    let by_name = if cfg.pairs.needs_features() {
        None
    } else {
        let all = make_pairs(&cfg.pairs, &names, None)?;
        writer.record_plan(&plan(&all))?;
        Some(cfg.shard.select(&all))
    };
    // The identities known without loading (features files): a stored pair is reused only when
    // it was made from these features with these settings.
    let mut ids: Vec<Option<FeaturesId>> = vec![None; paths.len()];
    if let Some(pairs) = &by_name {
        let mut used = vec![false; paths.len()];
        for &(i, j) in pairs {
            used[i] = true;
            used[j] = true;
        }
        ids = paths
            .par_iter()
            .zip(used)
            .map(|(p, u)| if u { load.identity(p) } else { None })
            .collect();
    }
    // An essential matrix depends on the images' intrinsics, which the pair records: they are
    // known once the images are loaded (`cams`, None before).
    let essential = cfg.pair.geometry == Some(ModelKind::Essential);
    let reuse = |writer: &dyn Writer,
                 (i, j): (usize, usize),
                 ids: &[Option<FeaturesId>],
                 cams: Option<&[Option<Intrinsics>]>| {
        let intrinsics = match cams {
            Some(c) => PairProvenance::intrinsics_used(&cfg.pair, c[i].as_ref(), c[j].as_ref()),
            None if essential => return Reuse::Missing,
            None => None,
        };
        match (&ids[i], &ids[j]) {
            (Some(a), Some(b)) => writer.has_pair(
                &names[i],
                &names[j],
                &PairProvenance {
                    a: a.clone(),
                    b: b.clone(),
                    config: cfg.pair.clone(),
                    intrinsics,
                },
            ),
            // Not known before loading: the images are loaded, then the pair is checked.
            _ => Reuse::Missing,
        }
    };
    let store_images = cfg.store_images || writer.needs_images();
    let mut needed = vec![store_images || by_name.is_none(); paths.len()];
    for &(i, j) in by_name.iter().flatten() {
        if reuse(&*writer, (i, j), &ids, None) != Reuse::Same {
            needed[i] = true;
            needed[j] = true;
        }
    }
    let wanted: Vec<usize> = (0..paths.len()).filter(|&i| needed[i]).collect();
    let started = std::time::Instant::now();
    let (features, images) = load_images(
        paths,
        &names,
        &wanted,
        (load, &camera),
        store_images.then_some(&mut *writer),
        // Kept when the bound allows (a small set is read once).
        cfg.max_resident_images.is_none_or(|b| wanted.len() <= b),
        progress,
    )?;
    for (id, f) in ids.iter_mut().zip(&features) {
        if let (None, Some((f, _))) = (&id, f) {
            *id = Some(f.id());
        }
    }
    let features_seconds = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let pairs = match by_name {
        Some(p) => p,
        None => {
            // An image that failed to load has no descriptors: a zero vector, whose pairs
            // fail one by one like any pair of that image.
            let descriptors = |i: usize| -> Result<crate::describe::Descriptors> {
                let none = || crate::describe::Descriptors::Float(ndarray::Array2::zeros((0, 0)));
                Ok(match &features[i] {
                    Some((f, _)) => f.descriptors.clone(),
                    None if cfg.max_resident_images.is_some() => load
                        .load(&paths[i])
                        .map_or_else(|_| none(), |f| f.descriptors),
                    None => none(),
                })
            };
            let all = make_pairs(&cfg.pairs, &names, Some(&descriptors))?;
            writer.record_plan(&plan(&all))?;
            cfg.shard.select(&all)
        }
    };
    if cfg.max_resident_images.is_some() {
        // Features files not kept in memory: their recorded identities.
        for (k, id) in ids.iter_mut().enumerate() {
            if id.is_none() {
                *id = load.identity(&paths[k]);
            }
        }
    }
    // The intrinsics each image's pairs are verified with (only an essential matrix uses
    // them); features not kept in memory are read again for theirs.
    let mut cams: Vec<Option<Intrinsics>> = vec![None; paths.len()];
    if essential {
        let mut used = vec![false; paths.len()];
        for &(i, j) in &pairs {
            used[i] = true;
            used[j] = true;
        }
        cams = (0..paths.len())
            .into_par_iter()
            .map(|i| match &features[i] {
                // Known intrinsics only, as the pairs are verified (`match_pairs`).
                Some((_, info)) => known_intrinsics(info),
                None if used[i] && cfg.max_resident_images.is_some() => load
                    .load(&paths[i])
                    .and_then(|f| camera(&paths[i], &f))
                    .ok()
                    .and_then(|info| known_intrinsics(&info)),
                None => None,
            })
            .collect();
    }
    let mut stale: HashMap<(usize, usize), String> = HashMap::new();
    let (done, todo): (Pairs, Pairs) =
        pairs
            .into_iter()
            .partition(|&p| match reuse(&*writer, p, &ids, Some(&cams)) {
                Reuse::Same => true,
                Reuse::Stale(why) => {
                    stale.insert(p, why);
                    false
                }
                Reuse::Missing => false,
            });
    for why in stale.values() {
        progress.note(&format!("redone: {why}"));
    }

    let mut outcomes: Vec<PairOutcome> = done
        .iter()
        .map(|&(i, j)| PairOutcome {
            skipped_existing: true,
            ..PairOutcome::new(&paths[i], &paths[j])
        })
        .collect();
    let sources = Sources {
        paths,
        names: &names,
        kept: &features,
        load,
        camera: &camera,
    };
    let tile = cfg
        .max_resident_images
        .map_or(usize::MAX, |n| (n / 2).max(1));
    let matched = match_pairs(&todo, &sources, tile, &cfg.pair, &mut *writer, progress);
    outcomes.extend(todo.iter().zip(matched).map(|(p, o)| PairOutcome {
        redone: stale.remove(p),
        ..o
    }));
    progress.finish();
    if cfg.all_or_nothing {
        let failed_images = images.iter().filter(|i| i.error.is_some()).count();
        let failed_pairs = outcomes.iter().filter(|p| p.error.is_some()).count();
        if failed_images + failed_pairs > 0 {
            // Dropped unfinished: the output is not put in place.
            drop(writer);
            return Err(Error::InvalidInput(format!(
                "{failed_images} of {} images and {failed_pairs} of {} pairs failed (see the errors above); nothing was written",
                images.len(),
                outcomes.len()
            )));
        }
    }
    let output = writer.finish()?;
    let seconds = StageSeconds {
        features: features_seconds,
        pairs: started.elapsed().as_secs_f64(),
        extraction: load.extraction_seconds(),
        matching: outcomes.iter().map(|o| o.seconds.matching).sum(),
        verification: outcomes.iter().map(|o| o.seconds.verification).sum(),
    };
    Ok(SetSummary {
        output,
        images,
        pairs: outcomes,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::features::tests::features;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// Records the pairs handed to it, in order.
    struct Recorder(Arc<Mutex<Vec<(String, String, usize)>>>);

    impl Writer for Recorder {
        fn add_image(&mut self, _: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
            Ok(None)
        }
        fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
            let r = (
                pair.a.name.into(),
                pair.b.name.into(),
                pair.result.matches.len(),
            );
            self.0.lock().unwrap().push(r);
            Ok(None)
        }
        fn finish(self: Box<Self>) -> Result<PathBuf> {
            Ok(PathBuf::new())
        }
    }

    #[test]
    fn bounded_memory_reloads_per_tile_and_gives_the_same_pairs() {
        let paths: Vec<PathBuf> = (0..6).map(|i| PathBuf::from(format!("{i}.npz"))).collect();
        let paths = SetInput::files(&paths).unwrap();
        let run_with = |bound: Option<usize>| {
            let loads = AtomicUsize::new(0);
            let load = |p: &Path| -> Result<Features> {
                loads.fetch_add(1, Ordering::Relaxed);
                // Image k has 10 + k features, so that every pair differs.
                let k: usize = p.to_string_lossy()[..1].parse().unwrap_or(0);
                Ok(features(false, 10 + k))
            };
            let cfg = SetConfig {
                pairs: PairMode::Exhaustive,
                pair: PairConfig {
                    geometry: None,
                    ..PairConfig::default()
                },
                store_images: false,
                shard: Default::default(),
                max_resident_images: bound,
                all_or_nothing: false,
                features: None,
                intrinsics: None,
            };
            let written = Arc::new(Mutex::new(Vec::new()));
            let camera = |_: &Path, _: &Features| Ok((None, false));
            let writer = Box::new(Recorder(written.clone()));
            let summary = run(
                &paths,
                &cfg,
                &load,
                camera,
                writer,
                &crate::progress::Silent,
            )
            .unwrap();
            let outcomes: Vec<_> = summary
                .pairs
                .iter()
                .map(|p| (p.a.clone(), p.matches))
                .collect();
            let mut pairs = written.lock().unwrap().clone();
            pairs.sort();
            (outcomes, pairs, loads.into_inner())
        };
        let (all_o, all_p, all_loads) = run_with(None);
        // Tiles of 1 × 1 image: each of the 15 pairs loads its two images again.
        let (few_o, few_p, few_loads) = run_with(Some(2));
        assert_eq!((all_o.len(), all_p.len()), (15, 15));
        assert_eq!(all_o, few_o);
        assert_eq!(all_p, few_p);
        assert_eq!((all_loads, few_loads), (6, 6 + 2 * 15));
        // A bound above the set: everything kept, nothing read twice.
        assert_eq!(run_with(Some(64)).2, 6);
    }
}
