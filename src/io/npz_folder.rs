//! A folder of `.npz` files ([`crate::io::output::Format::Npz`]): `<stem>.npz` per image
//! ([`crate::io::features`]; the image `a/0000.jpg` of a nested folder has `a/0000.npz`, the
//! image folder's tree mirrored) and `<stemA>__<stemB>.npz` per pair at the top
//! ([`crate::io::matches`]; `/` and `%` inside a stem written `%2F` and `%25`, so the file name
//! stays one name and two stems never give one), told apart by what they hold, with the run's
//! match plan beside them ([`crate::io::plan`]).

use crate::error::{Error, Result};
use crate::io::atomic::{is_temporary_with_extension, remove_stale_temporaries_below, FolderLock};
use crate::io::features::write_features;
use crate::io::matches::{write_matches, MatchesFile};
use crate::io::plan::{record_match_plan, MatchFolderFormat, MatchPlan};
use crate::io::writer::{ImageRecord, PairRecord, Writer};
use crate::provenance::{compare, FeatureProvenance, PairProvenance, Reuse};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

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
    /// The stems of the whole run's images, all shards ([`Writer::expect_images`]): files of
    /// another model that are all the run's own will be replaced, so the run may proceed.
    run_stems: Option<HashSet<String>>,
    /// A model checked to leave no other model's files behind once the run is complete.
    allowed_model: Option<String>,
    /// Shared with the other runs writing into the folder (shards); the first run alone in it
    /// removes what killed runs left ([`remove_killed_runs_temporaries`]).
    _lock: FolderLock,
    /// The match run's claim on the folder ([`crate::io::plan::claim_folder`]), taken with
    /// its plan: a run of another plan is refused while this one writes.
    _claim: Option<crate::io::atomic::RunClaim>,
    /// Replace a match plan of other settings already in the folder rather than refuse it
    /// ([`Writer::replace_other_plan`]).
    replace_other_plan: bool,
}

/// The longest file name Linux file systems take (ext4, XFS, btrfs: `NAME_MAX`).
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// The stem of an image name, folders kept (`a/0000.jpg` → `a/0000`), checked to stay inside
/// the folder.
fn stem(name: &str) -> Result<&str> {
    crate::names::check_name(name)
        .map_err(|why| Error::InvalidInput(format!("image name {name:?}: {why}")))?;
    Ok(crate::names::name_stem(name))
}

/// A stem as one file name in a pair file's name: `%` → `%25`, `/` → `%2F` (an injective
/// encoding, so two pairs of different images never share a file name through it).
fn pair_part(stem: &str) -> String {
    stem.replace('%', "%25").replace('/', "%2F")
}

/// A features file's stem relative to the folder (`a/0000` for `dir/a/0000.npz`).
fn file_stem_in(dir: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(dir).ok()?.with_extension("");
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

impl NpzFolder {
    /// Creates `dir` if needed, and joins the runs writing into it ([`FolderLock`]).
    pub fn create(dir: &Path) -> Result<NpzFolder> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        if !dir.is_dir() {
            return Err(Error::InvalidInput(format!(
                "{}: not a folder",
                dir.display()
            )));
        }
        let lock = FolderLock::share(dir, || remove_killed_runs_temporaries(dir))?;
        Ok(NpzFolder {
            dir: dir.to_path_buf(),
            model: existing_model(dir),
            claimed: HashMap::new(),
            run_stems: None,
            allowed_model: None,
            _lock: lock,
            _claim: None,
            replace_other_plan: false,
        })
    }

    /// `<dir>/<stem>.npz` of the image `name`.
    pub fn features_path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.dir.join(format!("{}.npz", stem(name)?)))
    }

    /// `<dir>/<stem>.npz`, claimed for the image `name` read from `input` (an error if another
    /// image claimed it: `a.jpg` and `a.png`).
    pub fn claim_features(&mut self, name: &str, input: &Path) -> Result<PathBuf> {
        let target = self.features_path(name)?;
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

    /// A features file in the folder of a model other than `model` whose image is not one of
    /// the run's ([`Writer::expect_images`]; without them, any such file), with its model.
    fn stray_of_other_model(&self, model: &str) -> Result<Option<(PathBuf, String)>> {
        for file in npz_files(&self.dir, false)? {
            let Ok(meta) = crate::io::features::read_features_meta(&file) else {
                continue;
            };
            let own = self
                .run_stems
                .as_ref()
                .is_some_and(|s| file_stem_in(&self.dir, &file).is_some_and(|f| s.contains(&f)));
            if meta.model != model && !own {
                return Ok(Some((file, meta.model)));
            }
        }
        Ok(None)
    }

    /// `<dir>/<stemA>__<stemB>.npz` of the images `a` and `b` (by name; see the module doc).
    pub fn pair_path(&self, a: &str, b: &str) -> Result<PathBuf> {
        Ok(self.dir.join(format!(
            "{}{PAIR_FILE_SEPARATOR}{}.npz",
            pair_part(stem(a)?),
            pair_part(stem(b)?)
        )))
    }

    /// Removes the pair files of the folder that index an image the set no longer has (one of
    /// `plan`'s images neither): an image deleted, or renamed, since an earlier run matched it
    /// (issue 44, the state machine's seed 48453). A from-scratch run over the set writes no
    /// such file, and `descl sfm merge` refuses a folder holding one, as `matches.h5` drops
    /// the pairs of replaced features. Pair files of the set's own images are kept, whatever
    /// pair list wrote them: earlier runs and other pair lists (sequential, retrieval) leave
    /// them legitimately, and shards of this run never write a pair outside the plan, so
    /// removing these while they run loses none of their work. Files that cannot be read are
    /// left to the readers that report them.
    fn remove_pairs_outside(&self, plan: &MatchPlan) -> Result<()> {
        let stems: HashSet<&str> = plan
            .inputs
            .iter()
            .map(|n| crate::names::name_stem(n))
            .collect();
        for file in npz_files(&self.dir, true)? {
            let Ok(meta) = crate::io::matches::read_matches_meta(&file) else {
                continue;
            };
            // Files written before the names were recorded are known by their features
            // files' names alone, which drop the image's folder: kept.
            let Some(sides) = &meta.names else { continue };
            if sides
                .iter()
                .any(|s| !stems.contains(crate::names::name_stem(s)))
            {
                match std::fs::remove_file(&file) {
                    Ok(()) => {}
                    // Another run of the folder removed it first.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&file, e)),
                }
            }
        }
        Ok(())
    }
}

impl Writer for NpzFolder {
    /// Features of another model than the folder's are refused for a new image; an image's
    /// existing file may be replaced (a resumed run redoing stale features; `descl sfm merge`
    /// refuses a folder whose files disagree).
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
        let model = &image.features.meta.model;
        let target = self.claim_features(image.name, image.path)?;
        // A file of that name that is not a features file (a user's numpy archive, any other
        // file) is not replaced; a matches file is named as such below.
        if !is_pair_file(&target) {
            crate::io::atomic::check_not_another_kind(
                &target,
                crate::io::atomic::OutputKind::Features,
            )?;
        }
        if target.is_file() && is_pair_file(&target) {
            return Err(Error::InvalidInput(format!(
                "{}: its features file {} would replace the matches file of that name \
                 (image names containing `{PAIR_FILE_SEPARATOR}`); extract into another folder",
                image.path.display(),
                target.display()
            )));
        }
        match &self.model {
            Some((m, _))
                if m != model
                    && !target.is_file()
                    && self.allowed_model.as_deref() != Some(model.as_str()) =>
            {
                // Refused when a file of another model would remain after the whole run (an
                // image that is not the run's); files of the run's own images are replaced
                // by it (their shard), and `descl sfm merge` refuses the folder until then.
                if let Some((stray, other)) = self.stray_of_other_model(model)? {
                    return Err(Error::InvalidInput(format!(
                        "{}: the folder holds features of `{other}` ({}) that this run does not replace; features of `{model}` go into another folder",
                        self.dir.display(),
                        stray.display()
                    )));
                }
                self.allowed_model = Some(model.clone());
            }
            Some(_) => {}
            None => self.model = Some((model.clone(), image.path.to_path_buf())),
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        write_features(&target, image.features)?;
        Ok(Some(target))
    }

    /// Refuses, before any work and in every shard, two images of the run that would share a
    /// features file (`0000.jpg` and `0000.JPG`): in different shards each would overwrite the
    /// other's file without either process seeing both.
    fn expect_images(&mut self, names: &[String]) -> Result<()> {
        let mut files: HashMap<PathBuf, &str> = HashMap::new();
        for name in names {
            let target = self.features_path(name)?;
            // Before any work, what `add_image` would refuse to replace (a user's numpy
            // archive or another file of that name, issue 55), so a run does not stop halfway.
            if !is_pair_file(&target) {
                crate::io::atomic::check_not_another_kind(
                    &target,
                    crate::io::atomic::OutputKind::Features,
                )?;
            }
            if let Some(first) = files.insert(target, name) {
                return Err(Error::InvalidInput(format!(
                    "{}: the features file of both {first} and {name}; rename one of the images or extract them into different folders",
                    self.features_path(name)?.display()
                )));
            }
        }
        self.run_stems = Some(
            names
                .iter()
                .map(|n| stem(n).map(str::to_string))
                .collect::<Result<_>>()?,
        );
        Ok(())
    }

    /// Refuses, before any work, features of another model than the folder's when a file of
    /// that model would remain after the run (the check [`Writer::add_image`] makes).
    fn expect_settings(&mut self, settings: &crate::provenance::ExtractSettings) -> Result<()> {
        let model = &settings.model;
        match &self.model {
            Some((m, _)) if m != model => {
                if let Some((stray, other)) = self.stray_of_other_model(model)? {
                    return Err(Error::InvalidInput(format!(
                        "{}: the folder holds features of `{other}` ({}) that this run does not replace; features of `{model}` go into another folder",
                        self.dir.display(),
                        stray.display()
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Done when `<stem>.npz` reads back whole and records the provenance this run would
    /// give it.
    fn has_image(&self, name: &str, expected: &FeatureProvenance) -> Reuse {
        let Ok(file) = self.features_path(name) else {
            return Reuse::Missing;
        };
        match crate::io::features::read_features(&file) {
            Ok(f) => compare(&file, f.meta.provenance.as_ref(), expected),
            Err(_) => Reuse::Missing,
        }
    }

    /// A pair counts as done only when its file reads back whole (a truncated or foreign file
    /// is matched again and replaced) and records the features and settings of this run.
    fn has_pair(&self, a: &str, b: &str, expected: &PairProvenance) -> Reuse {
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

    fn records_plan(&self) -> bool {
        true
    }
    /// Refuses, before any work, names that would give one file two meanings: a pair file
    /// that is also an input's features file (`a__b.jpg` beside `a.jpg` and `b.jpg`), or one
    /// file for two pairs (`a__b` + `c` and `a` + `b__c`); and, with the folder claimed (so no
    /// run of another plan writes between the check and the write), a plan of another run's
    /// settings already there ([`crate::io::plan::refuse_other_match_run`]) unless
    /// [`Writer::replace_other_plan`].
    fn record_plan(&mut self, plan: &MatchPlan) -> Result<()> {
        let mut meaning: HashMap<PathBuf, String> = HashMap::new();
        for name in &plan.inputs {
            let file = self.features_path(name)?;
            let this = format!("the features of {name}");
            if let Some(other) = meaning.insert(file.clone(), this.clone()) {
                return Err(Error::InvalidInput(format!(
                    "{}: this file would hold both {other} and {this} (two images of one name but for the extension); rename one of them or use --format h5",
                    file.display()
                )));
            }
        }
        for [a, b] in &plan.pairs {
            let file = self.pair_path(a, b)?;
            check_name_length(&file, a, b)?;
            let this = format!("the matches of {a} and {b}");
            if let Some(other) = meaning.insert(file.clone(), this.clone()) {
                return Err(Error::InvalidInput(format!(
                    "{}: this file would hold both {other} and {this} (image names containing \
                     `{PAIR_FILE_SEPARATOR}`); rename those images or use --format h5",
                    file.display()
                )));
            }
        }
        let claim = record_match_plan(
            &self.dir,
            plan,
            self.replace_other_plan,
            MatchFolderFormat::Npz,
        )?;
        self._claim = Some(claim);
        self.remove_pairs_outside(plan)
    }

    fn replace_other_plan(&mut self) {
        self.replace_other_plan = true;
    }

    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
        let target = self.pair_path(pair.a.name, pair.b.name)?;
        // An archive of another tool's under the pair file's name stays (hostile round of
        // c29952d, H2: any `<A>__<B>.npz` was replaced).
        crate::io::atomic::check_not_another_kind(&target, crate::io::atomic::OutputKind::Matches)?;
        write_matches(&target, &MatchesFile::from_pair(pair))?;
        Ok(Some(target))
    }

    fn finish(self: Box<Self>) -> Result<PathBuf> {
        Ok(self.dir)
    }
}

/// Refuses, before any matching, a pair file whose name the file system cannot hold (longer
/// than [`MAX_FILE_NAME_BYTES`]: two long image names), naming the pair and the way out;
/// otherwise each such pair failed after its matching work was done.
fn check_name_length(file: &Path, a: &str, b: &str) -> Result<()> {
    let len = file.file_name().map_or(0, |n| n.len());
    if len > MAX_FILE_NAME_BYTES {
        return Err(Error::InvalidInput(format!(
            "{}: the pair file of {a} and {b} would have a name of {len} bytes, more than the {MAX_FILE_NAME_BYTES} a file name may have; shorten those image names or use --format h5",
            file.parent().unwrap_or(file).display()
        )));
    }
    Ok(())
}

/// Removes the temporaries that killed runs left in the folder `dir` and below it: those of
/// features and pair files (`.descl-tmp-….npz-…`, in the image tree's folders too) and of the
/// run plans. Other temporaries (a COLMAP database's, `features.h5`'s) belong to writers of
/// their own lock, and are left alone.
pub(crate) fn remove_killed_runs_temporaries(dir: &Path) -> Result<()> {
    // As deep as the image tree a folder of features mirrors may be.
    remove_stale_temporaries_below(dir, crate::names::MAX_FOLDER_DEPTH, &|name| {
        is_temporary_with_extension(name, "npz") || crate::io::plan::is_plan_temporary(name)
    })
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

/// The `.npz` files of `dir`, sorted by their names under `dir`: the pair (matches) files with
/// `pairs`, else the others (features files), told apart by what they hold ([`is_pair_file`]);
/// features files of nested image folders are found in the folders below (`a/0000.npz`),
/// hidden entries skipped as [`crate::names::folder_inputs`] skips them.
pub fn npz_files(dir: &Path, pairs: bool) -> Result<Vec<PathBuf>> {
    let is_npz = |p: &Path| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"));
    Ok(crate::names::folder_inputs(dir, &is_npz)?
        .into_iter()
        .map(|i| i.path)
        // Pair files are written at the top only.
        .filter(|p| !pairs || p.parent() == Some(dir))
        .filter(|p| is_pair_file(p) == pairs)
        .collect())
}
