//! The one writer interface: every command that produces features or matches hands them to a
//! [`Writer`], whatever the format. Adding a format (an hloc HDF5 file, say) is one module
//! implementing [`Writer`] plus one [`Format`] variant in [`open`].
//!
//! - [`Format::Npz`]: a folder of numpy-readable files, `<stem>.npz` per image
//!   ([`crate::io::features`]) and `<stemA>__<stemB>.npz` per pair ([`crate::io::matches`]).
//! - [`Format::H5`]: hloc's `features.h5` + `matches.h5` (`crate::io::hloc`, cargo feature
//!   `h5`: a build without it names the feature in the error instead of linking libhdf5).
//! - [`ColmapWriter`]: a COLMAP database (cameras, images, keypoints, descriptors, matches,
//!   two-view geometries) for `colmap mapper`; it is opened by `descl sfm` with its camera
//!   settings rather than through [`open`].

use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::{Intrinsics, ModelKind};
use crate::io::colmap::{CameraModel, Database, TwoViewConfig, TwoViewModels};
use crate::io::features::write_features;
use crate::io::matches::{write_matches, MatchesFile};
use crate::io::plan::{write_plan, MatchPlan, MATCH_PLAN_FILE};
use crate::matching::two_view::{PairConfig, PairResult};
use crate::provenance::{compare, FeatureProvenance, PairProvenance, Reuse};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// File formats of features and matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One `.npz` per image and per pair in a folder.
    #[default]
    Npz,
    /// hloc's `features.h5` and `matches.h5` in a folder (`crate::io::hloc`; cargo feature `h5`).
    H5,
}

impl Format {
    /// Every format, in the order the command line lists them.
    pub const ALL: &'static [Format] = &[Format::Npz, Format::H5];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Npz => "npz",
            Format::H5 => "h5",
        }
    }
}

/// One image of a set, as handed to a writer.
#[derive(Debug, Clone, Copy)]
pub struct ImageRecord<'a> {
    /// The image's name in the set (its file name; COLMAP's `images.name`).
    pub name: &'a str,
    /// The image (or features) file it came from.
    pub path: &'a Path,
    pub features: &'a Features,
    /// Camera intrinsics when known (flag, file, EXIF or a prior).
    pub intrinsics: Option<&'a Intrinsics>,
    /// Whether the focal length was measured (EXIF, flag) rather than a prior.
    pub focal_known: bool,
}

/// One matched pair, as handed to a writer.
#[derive(Debug, Clone, Copy)]
pub struct PairRecord<'a> {
    pub a: ImageRecord<'a>,
    pub b: ImageRecord<'a>,
    pub result: &'a PairResult,
    pub config: &'a PairConfig,
}

/// A destination for features and matches. Writes are atomic per item (a killed run leaves
/// whole files or none); `finish` completes the output.
pub trait Writer: Send {
    /// Stores one image's features; returns the file written, if the format has one per image.
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>>;
    /// Whether the features of `input` are already stored, whole, with the provenance this run
    /// would give them (`descl extract --resume` skips them when [`Reuse::Same`], redoes them
    /// when stale).
    fn has_image(&self, _input: &Path, _expected: &FeatureProvenance) -> Reuse {
        Reuse::Missing
    }
    /// Whether the pair of the inputs `a` and `b` is already stored, made from the features and
    /// with the settings of `expected` (a resumed run skips it when [`Reuse::Same`]).
    fn has_pair(&self, _a: &Path, _b: &Path, _expected: &PairProvenance) -> Reuse {
        Reuse::Missing
    }
    /// Records what the whole run (all its shards) is meant to produce, for `descl sfm merge`
    /// ([`crate::io::plan`]); formats without a folder of their own ignore it.
    fn record_plan(&mut self, _plan: &MatchPlan) -> Result<()> {
        Ok(())
    }
    /// Stores one pair's matches and verification; returns the file written, if any.
    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>>;
    /// Completes the output (e.g. renames a database into place); returns its path.
    fn finish(self: Box<Self>) -> Result<PathBuf>;
    /// Whether every image's features must be stored even when only pairs were asked for
    /// (pair files that index keypoints stored elsewhere in the same output, like hloc's).
    fn needs_images(&self) -> bool {
        false
    }
}

/// A writer of `format` into the folder `dir` (created if missing).
pub fn open(format: Format, dir: &Path) -> Result<Box<dyn Writer>> {
    match format {
        Format::Npz => Ok(Box::new(NpzFolder::create(dir)?)),
        #[cfg(feature = "h5")]
        Format::H5 => Ok(Box::new(crate::io::hloc::HlocFolder::create(dir)?)),
        #[cfg(not(feature = "h5"))]
        Format::H5 => Err(Error::InvalidInput(format!(
            "{}: --format h5 (hloc's HDF5 files) needs descl built with the cargo feature `h5` \
             (`cargo install descl --features h5`, or `cargo build --features h5`); this build \
             leaves libhdf5 out (Cargo.toml [features]). --format npz works here",
            dir.display()
        ))),
    }
}

/// A folder of `.npz` files.
#[derive(Debug)]
pub struct NpzFolder {
    dir: PathBuf,
    /// The model of the features files already in the folder (the first one found), so one
    /// folder never mixes models.
    model: Option<(String, PathBuf)>,
    /// Output file → the input that claimed it, so two images with one stem are an error
    /// rather than a silent overwrite.
    claimed: HashMap<PathBuf, PathBuf>,
}

fn stem(path: &Path) -> Result<String> {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidInput(format!("{}: not a file name", path.display())))
}

impl NpzFolder {
    /// Creates `dir` if needed.
    pub fn create(dir: &Path) -> Result<NpzFolder> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        if !dir.is_dir() {
            return Err(Error::InvalidInput(format!(
                "{}: not a folder",
                dir.display()
            )));
        }
        Ok(NpzFolder {
            dir: dir.to_path_buf(),
            model: existing_model(dir),
            claimed: HashMap::new(),
        })
    }

    /// `<dir>/<stem>.npz`, claimed for `input` (an error if another input claimed it).
    pub fn claim_features(&mut self, input: &Path) -> Result<PathBuf> {
        let target = self.dir.join(format!("{}.npz", stem(input)?));
        if let Some(first) = self.claimed.get(&target) {
            if first != input {
                return Err(Error::InvalidInput(format!(
                    "{}: its output {} is already written for {}; extract images with the same name into different folders",
                    input.display(),
                    target.display(),
                    first.display()
                )));
            }
        }
        self.claimed.insert(target.clone(), input.to_path_buf());
        Ok(target)
    }

    /// `<dir>/<stemA>__<stemB>.npz`.
    pub fn pair_path(&self, a: &Path, b: &Path) -> Result<PathBuf> {
        Ok(self
            .dir
            .join(format!("{}{PAIR_FILE_SEPARATOR}{}.npz", stem(a)?, stem(b)?)))
    }
}

impl Writer for NpzFolder {
    /// Features of another model than the folder's are refused for a new image; an image's
    /// existing file may be replaced (a resumed run redoing stale features; `descl sfm merge`
    /// refuses a folder whose files disagree).
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
        let model = &image.features.meta.model;
        let target = self.claim_features(image.path)?;
        if target.is_file() && is_pair_file(&target) {
            return Err(Error::InvalidInput(format!(
                "{}: its features file {} would replace the matches file of that name \
                 (image names containing `{PAIR_FILE_SEPARATOR}`); extract into another folder",
                image.path.display(),
                target.display()
            )));
        }
        match &self.model {
            Some((m, example)) if m != model && !target.is_file() => {
                return Err(Error::InvalidInput(format!(
                    "{}: the folder already holds features of `{m}` ({}); features of `{model}` go into another folder",
                    self.dir.display(),
                    example.display()
                )))
            }
            Some(_) => {}
            None => self.model = Some((model.clone(), image.path.to_path_buf())),
        }
        write_features(&target, image.features)?;
        Ok(Some(target))
    }

    /// Done when `<stem>.npz` reads back whole and records the provenance this run would
    /// give it.
    fn has_image(&self, input: &Path, expected: &FeatureProvenance) -> Reuse {
        let Ok(stem) = stem(input) else {
            return Reuse::Missing;
        };
        let file = self.dir.join(format!("{stem}.npz"));
        match crate::io::features::read_features(&file) {
            Ok(f) => compare(&file, f.meta.provenance.as_ref(), expected),
            Err(_) => Reuse::Missing,
        }
    }

    /// A pair counts as done only when its file reads back whole (a truncated or foreign file
    /// is matched again and replaced) and records the features and settings of this run.
    fn has_pair(&self, a: &Path, b: &Path, expected: &PairProvenance) -> Reuse {
        let Ok(file) = self.pair_path(a, b) else {
            return Reuse::Missing;
        };
        if !file.is_file() {
            return Reuse::Missing;
        }
        match crate::io::matches::read_matches(&file) {
            Ok(m) => compare(&file, m.meta.provenance().as_ref(), expected),
            Err(_) => Reuse::Missing,
        }
    }

    /// Refuses, before any work, names that would give one file two meanings: a pair file
    /// that is also an input's features file (`a__b.jpg` beside `a.jpg` and `b.jpg`), or one
    /// file for two pairs (`a__b` + `c` and `a` + `b__c`).
    fn record_plan(&mut self, plan: &MatchPlan) -> Result<()> {
        let mut meaning: HashMap<PathBuf, String> = HashMap::new();
        for name in &plan.inputs {
            let file = self.dir.join(format!("{}.npz", stem(Path::new(name))?));
            meaning.insert(file, format!("the features of {name}"));
        }
        for [a, b] in &plan.pairs {
            let file = self.pair_path(Path::new(a), Path::new(b))?;
            let this = format!("the matches of {a} and {b}");
            if let Some(other) = meaning.insert(file.clone(), this.clone()) {
                return Err(Error::InvalidInput(format!(
                    "{}: this file would hold both {other} and {this} (image names containing \
                     `{PAIR_FILE_SEPARATOR}`); rename those images or use --format h5",
                    file.display()
                )));
            }
        }
        write_plan(&self.dir, MATCH_PLAN_FILE, plan)
    }

    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
        let target = self.pair_path(pair.a.path, pair.b.path)?;
        write_matches(&target, &MatchesFile::from_pair(pair))?;
        Ok(Some(target))
    }

    fn finish(self: Box<Self>) -> Result<PathBuf> {
        Ok(self.dir)
    }
}

/// The model of the first features file (`*.npz` that is not a `A__B.npz` pair file) in `dir`.
fn existing_model(dir: &Path) -> Option<(String, PathBuf)> {
    npz_files(dir, false).ok()?.iter().find_map(|p| {
        crate::io::features::read_features(p)
            .ok()
            .map(|f| (f.meta.model, p.clone()))
    })
}

/// Separates a pair file's stems (`<stemA>__<stemB>.npz`, [`NpzFolder::pair_path`]).
///
/// The name is for people; what a file holds is read from the file ([`is_pair_file`]), so an
/// image called `a__b.jpg` keeps its features file `a__b.npz`, and names that would give one
/// file two meanings are refused ([`NpzFolder::record_plan`]).
pub const PAIR_FILE_SEPARATOR: &str = "__";

/// The array a matches (pair) file holds and a features file does not
/// ([`crate::io::matches::write_matches`]).
const PAIR_FILE_MEMBER: &str = "matches";

/// Whether the `.npz` file at `path` is a pair (matches) file: it holds a `matches` array. A file
/// whose zip directory cannot be read is classified by its name (a damaged file is then
/// reported by the reader of its kind).
pub fn is_pair_file(path: &Path) -> bool {
    match crate::io::npz::npz_member_names(path) {
        Ok(names) => names.iter().any(|n| n == PAIR_FILE_MEMBER),
        Err(_) => path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(PAIR_FILE_SEPARATOR)),
    }
}

/// The `.npz` files of `dir`, sorted: the pair (matches) files with `pairs`, else the others
/// (features files), told apart by what they hold ([`is_pair_file`]).
pub fn npz_files(dir: &Path, pairs: bool) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"))
                && is_pair_file(p) == pairs
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Camera settings of a COLMAP database.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColmapOptions {
    pub camera_model: CameraModel,
    /// One camera shared by all images (same camera, same size) instead of one per image.
    pub single_camera: bool,
}

/// A COLMAP database being written (in a temporary file until [`Writer::finish`]).
pub struct ColmapWriter {
    database: Database,
    options: ColmapOptions,
    shared_camera: Option<i64>,
    image_ids: HashMap<String, i64>,
}

impl ColmapWriter {
    /// Starts the database at `path` (which must not exist unless `overwrite`).
    pub fn create(path: &Path, overwrite: bool, options: ColmapOptions) -> Result<ColmapWriter> {
        Ok(ColmapWriter {
            database: Database::create(path, overwrite)?,
            options,
            shared_camera: None,
            image_ids: HashMap::new(),
        })
    }

    /// The database id of an image added before.
    pub fn image_id(&self, name: &str) -> Option<i64> {
        self.image_ids.get(name).copied()
    }

    fn id(&self, name: &str) -> Result<i64> {
        self.image_id(name).ok_or_else(|| {
            Error::InvalidInput(format!("{name}: pair of an image not in the database"))
        })
    }

    /// Stores the matches of images `a` and `b` (added before) and, when verified with a model,
    /// their two-view geometry labelled as COLMAP labels it.
    pub fn add_result(&mut self, a: &str, b: &str, r: &PairResult) -> Result<()> {
        let (id1, id2) = (self.id(a)?, self.id(b)?);
        self.database.add_matches(id1, id2, &r.matches.pairs)?;
        let inliers = r.inlier_pairs();
        let Some(v) = &r.verification else {
            return Ok(());
        };
        // A model exists only with at least `PairConfig::min_inliers` inliers: the pair is
        // then a verified two-view geometry.
        let Some(model) = &v.model else {
            return Ok(());
        };
        let h = v.homography.as_ref();
        let config = TwoViewConfig::of(v.kind, h);
        let models = TwoViewModels {
            f: (v.kind == ModelKind::Fundamental).then_some(model),
            e: (v.kind == ModelKind::Essential).then_some(model),
            h: match v.kind {
                ModelKind::Homography => Some(model),
                _ => h.map(|h| &h.model),
            },
            pose: v.pose.as_ref(),
        };
        self.database
            .add_two_view_geometry(id1, id2, &inliers, config, &models)?;
        Ok(())
    }
}

impl Writer for ColmapWriter {
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
        let f = image.features;
        let (w, h) = (f.meta.image_width, f.meta.image_height);
        let k = image
            .intrinsics
            .copied()
            .unwrap_or_else(|| Intrinsics::default_prior(w, h));
        let model = self.options.camera_model;
        let camera_id = match self.shared_camera {
            Some(id) if self.options.single_camera => id,
            _ => {
                let id = self.database.add_camera(
                    model,
                    w,
                    h,
                    &model.params(k.fx, w, h),
                    image.focal_known,
                )?;
                self.shared_camera = Some(id);
                id
            }
        };
        let image_id = self.database.add_image(image.name, camera_id)?;
        self.database.add_keypoints(image_id, &f.frames)?;
        self.database.add_descriptors(image_id, &f.descriptors)?;
        self.image_ids.insert(image.name.to_string(), image_id);
        Ok(None)
    }

    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
        self.add_result(pair.a.name, pair.b.name, pair.result)?;
        Ok(None)
    }

    fn finish(self: Box<Self>) -> Result<PathBuf> {
        self.database.finish()
    }
}
