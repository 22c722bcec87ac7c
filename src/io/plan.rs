//! Run plans: what a whole run — all its shards — is meant to produce, recorded beside its
//! outputs so that `descl sfm merge` can tell a complete set from an incomplete one (a shard
//! that never ran, or was killed, leaves no trace otherwise).
//!
//! - `descl extract` writes [`EXTRACT_PLAN_FILE`] into `--out`: the names of every image of the
//!   run (the sorted set, before `--shard` takes its share) and the [`ExtractSettings`].
//! - `descl match --images … --out-dir` writes [`MATCH_PLAN_FILE`] into `--out-dir`: the inputs,
//!   every pair of the run (before `--shard`), and the pair settings.
//!
//! Every shard computes the same plan, so shards writing it at once (atomically) agree; a
//! later run into the same folder replaces it with its own.

use crate::error::{Error, Result};
use crate::features::FeatureMeta;
use crate::io::atomic::{write_bytes_atomic, RunClaim};
use crate::matching::two_view::PairConfig;
use crate::names::SetInput;
use crate::provenance::{set_identity, ExtractSettings, SetIdentity};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

// The plans' file names are defined with the writes that must never land on them.
pub use crate::io::atomic::{EXTRACT_PLAN_FILE, MATCH_PLAN_FILE};
/// The largest plan read (a pair list of about 2.5 million pairs).
pub const MAX_PLAN_BYTES: u64 = 256 << 20;

/// What `descl extract` is meant to produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractPlan {
    /// File names of every image of the run, sorted.
    pub images: Vec<String>,
    pub settings: ExtractSettings,
    /// The SHA-256 of each image of `images` (same order; empty for an image that could not be
    /// read): two sets whose files have the same names are told apart by their content, so
    /// features of one never pass for the other's (issue 44). Empty in plans written before it
    /// was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_sha256: Vec<String>,
}

/// What `descl match --images … --out-dir` is meant to produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchPlan {
    /// File names of the inputs (images or features files).
    pub inputs: Vec<String>,
    /// What each input holds (same order as `inputs`): a features file's recorded identity
    /// (`FeaturesId`'s SHA-256) or an extracted image's `image:SHA-256`
    /// (`crate::image_set::image_input_id`); empty where unknown. Two sets whose files have the
    /// same names are told apart by it: a shard over other features into the folder is
    /// refused ([`refuse_other_match_run`]), and two such runs at once do not share the
    /// folder's claim ([`claim_folder`]). Empty in plans written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_ids: Vec<String>,
    /// Every pair of the run, by input name, in the order the shards share them.
    pub pairs: Vec<[String; 2]>,
    pub config: PairConfig,
    /// How the inputs' features were made, where known (the features set's extract plan or
    /// provenance, or the extractor's settings for images): a later run into the folder with
    /// other features is refused ([`refuse_other_match_run`]). Absent in plans written before
    /// it was recorded, and for features that record no settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<ExtractSettings>,
    /// How the pairs were chosen (`crate::matching::pairs::PairMode::selection`: exhaustive,
    /// sequential with its window, retrieval with its K, a pairs file by its SHA-256): a shard
    /// of another selection into the folder is refused ([`refuse_other_match_run`]). Absent in
    /// plans written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<serde_json::Value>,
    /// The camera an essential matrix is verified with: the intrinsics given for every image
    /// (`{fx, fy, cx, cy}`), `"exif"` (each image's EXIF), or `"unused"` (a geometry that uses
    /// none; `crate::image_set::PLAN_CAMERA_EXIF`, `PLAN_CAMERA_UNUSED`). A shard of another is
    /// refused ([`refuse_other_match_run`]), and two runs of two at once do not share the
    /// folder's claim (hostile round of 8827b8d, H-2: their pair files mixed, both exit 0).
    /// Absent in plans written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub camera: Option<serde_json::Value>,
}

/// How many items a message names before `…`.
pub const SHOWN_IN_MESSAGES: usize = 5;

/// The first [`SHOWN_IN_MESSAGES`] of `items`, comma-separated, and `, …` when there are more.
pub fn listing<S: std::fmt::Display>(items: impl IntoIterator<Item = S>) -> String {
    let mut items = items.into_iter();
    let shown: Vec<String> = items
        .by_ref()
        .take(SHOWN_IN_MESSAGES)
        .map(|s| s.to_string())
        .collect();
    let more = if items.next().is_some() { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// One features file of a set held to its extract plan: its image's name, the file (or
/// `FILE.h5/NAME`) and its metadata.
#[derive(Clone, Copy)]
pub struct PlannedFeatures<'a> {
    pub name: &'a str,
    pub file: &'a Path,
    pub meta: &'a FeatureMeta,
}

impl ExtractPlan {
    /// The plan of a run over `images` (the whole run's, all shards) with `settings`; every
    /// image is hashed (in parallel), so that the plan names the set by content.
    pub fn of(images: &[SetInput], settings: ExtractSettings) -> ExtractPlan {
        use rayon::prelude::*;
        let image_sha256 = images
            .par_iter()
            .map(|i| crate::provenance::image_sha256(&i.path).unwrap_or_default())
            .collect();
        ExtractPlan {
            images: images.iter().map(|i| i.name.clone()).collect(),
            settings,
            image_sha256,
        }
    }

    /// Holds the features files present in `dir` to the plan: a file of an image the plan
    /// does not list is another run's, and one whose recorded image hash is not the plan's
    /// for its name is another set's image of the same name; both are refused, naming the
    /// file. Returns the plan's images that have no file (an extract shard not run yet). What
    /// `descl match --images`, `descl pairs` and `descl sfm merge` all check.
    pub fn missing<'a>(
        &self,
        dir: &Path,
        present: impl IntoIterator<Item = PlannedFeatures<'a>>,
    ) -> Result<Vec<String>> {
        let hashes: HashMap<&str, &str> = self
            .images
            .iter()
            .map(String::as_str)
            .zip(self.image_sha256.iter().map(String::as_str))
            .collect();
        let listed: HashSet<&str> = self.images.iter().map(String::as_str).collect();
        let mut have = HashSet::new();
        for f in present {
            if !listed.contains(f.name) {
                return Err(Error::InvalidInput(not_in_plan(f.file, f.name, dir)));
            }
            let recorded = f
                .meta
                .provenance
                .as_ref()
                .and_then(|p| p.image_sha256.as_deref());
            if let (Some(planned), Some(recorded)) = (hashes.get(f.name), recorded) {
                if !planned.is_empty() && !planned.eq_ignore_ascii_case(recorded) {
                    return Err(Error::InvalidInput(other_image(&f, planned, dir)));
                }
            }
            have.insert(f.name);
        }
        Ok(self
            .images
            .iter()
            .filter(|n| !have.contains(n.as_str()))
            .cloned()
            .collect())
    }
}

/// The message refusing the features file `file` of image `name` that the extract plan of
/// `dir` does not list: a file another run left in the folder (the image moved or gone, or a
/// run of other images into the same folder).
fn not_in_plan(file: &Path, name: &str, dir: &Path) -> String {
    // In a features.h5 the features are a group (`FILE.h5/NAME`), which a new extraction of
    // the set does not remove (another run's groups stay, as another run's files do).
    let h5 = file
        .parent()
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("h5")));
    let remedy = match h5 {
        Some(h5) => format!(
            "extract the set into a new folder, or remove the group {name:?} from {} (h5py: \
             `del f[{name:?}]`)",
            h5.display()
        ),
        None => "extract the whole set in one command (--resume reuses the features already \
                 there), or delete the file"
            .to_string(),
    };
    format!(
        "{}: features of {name}, which {} does not list: another run's (a run of other images \
         into this folder replaced the plan, or the image was moved or removed). To use this \
         set, {remedy}",
        file.display(),
        dir.join(EXTRACT_PLAN_FILE).display()
    )
}

/// The message refusing features `f` whose image is not the one of that name the extract plan
/// of `dir` lists (sha256 `planned`): another set's image of the same name (a shard run on
/// another folder, or features copied in).
fn other_image(f: &PlannedFeatures<'_>, planned: &str, dir: &Path) -> String {
    let recorded = f
        .meta
        .provenance
        .as_ref()
        .and_then(|p| p.image_sha256.as_deref())
        .unwrap_or_default();
    format!(
        "{}: features of an image {} (sha256 {recorded}, {}) that is not the {} of {} (sha256 {planned}): the image was replaced after the plan was written, or this is another set's image of the same name (a shard run on other images, or features copied in). Extract the set again in one folder",
        f.file.display(),
        f.name,
        f.meta.image,
        f.name,
        dir.join(EXTRACT_PLAN_FILE).display()
    )
}

/// A set of features files held to its extract plan ([`check_features_set`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedSet {
    /// How the set was made (None for no files).
    pub made: Option<SetIdentity>,
    /// Said when the folder has no plan and the set's settings were derived from the files'
    /// provenance: which images the extraction did not reach cannot be told.
    pub derived: Option<String>,
}

/// The one check of features files read as a set from `dir` (a features folder, or the
/// folder of a `features.h5`) against its extract plan (issue 44), for `descl match --images`
/// and `descl pairs`: every image that is there now the one its features were extracted from
/// ([`check_recorded_images`]); one set identity, the plan's ([`set_identity`]); no file the plan does
/// not list or of another image ([`ExtractPlan::missing`]); and every image of the plan
/// present unless `allow_partial`. Without a plan (features from elsewhere, or an older
/// descl's extraction killed before it wrote one) the settings are derived from the files'
/// provenance when every file records it, and the set is refused otherwise unless
/// `allow_partial`; the result or the error says which.
pub fn check_features_set(
    dir: &Path,
    files: &[PlannedFeatures<'_>],
    allow_partial: bool,
) -> Result<CheckedSet> {
    check_recorded_images(files)?;
    let plan: Option<ExtractPlan> = read_plan(dir, EXTRACT_PLAN_FILE)?;
    let plan_file = dir.join(EXTRACT_PLAN_FILE);
    let Some(plan) = plan else {
        return derived_set(dir, files, allow_partial);
    };
    let entries = files.iter().map(|f| (f.file, f.meta));
    let made = set_identity(entries, Some((plan_file.as_path(), &plan.settings)))?;
    let missing = plan.missing(dir, files.iter().copied())?;
    if !missing.is_empty() && !allow_partial {
        return Err(Error::InvalidInput(format!(
            "{}: {} images of the extract plan {} have no features file yet ({}): the extraction did not finish (run it again with --resume) or an extract shard has not run yet; or pass --allow-partial to take the images there are",
            dir.display(),
            missing.len(),
            plan_file.display(),
            listing(&missing)
        )));
    }
    Ok(CheckedSet {
        made,
        derived: None,
    })
}

/// Every features file's image, where it records one that is there now, must be the image it
/// was extracted from ([`crate::provenance::check_image`]; one that is not there is no error:
/// features travel without their images). Checked for the whole set before any work, so that a
/// consumer that reuses earlier outputs (a `descl match` whose pairs are already done) refuses a
/// replaced image as a fresh run does (it found the replacement only when it read the image for
/// a pair it had to match: exit 0 over stale features otherwise; the state machine's seed 5112).
fn check_recorded_images(files: &[PlannedFeatures<'_>]) -> Result<()> {
    use rayon::prelude::*;
    files.par_iter().try_for_each(|f| {
        crate::provenance::check_image(Path::new(&f.meta.image), f.file, f.meta).map(|_| ())
    })
}

/// [`check_features_set`] without a plan: the settings derived from the files' provenance
/// when every file records it (said in [`CheckedSet::derived`]); refused, naming a file that
/// does not, unless `allow_partial` (the set then made as its first file).
fn derived_set(
    dir: &Path,
    files: &[PlannedFeatures<'_>],
    allow_partial: bool,
) -> Result<CheckedSet> {
    let plan_file = dir.join(EXTRACT_PLAN_FILE);
    let unrecorded = files.iter().find(|f| f.meta.provenance.is_none());
    if let (Some(f), false) = (unrecorded, allow_partial) {
        return Err(Error::InvalidInput(format!(
            "{}: no extract plan ({}), and {} records no provenance (features from elsewhere, or an older descl), so none can be derived: an extraction that did not finish cannot be told from a whole one. Extract the images with descl into this folder (--resume reuses what is there), or pass --allow-partial to take the files there are",
            dir.display(),
            plan_file.display(),
            f.file.display()
        )));
    }
    let made = set_identity(files.iter().map(|f| (f.file, f.meta)), None)?;
    let derived = unrecorded.is_none().then(|| {
        format!(
            "{}: no extract plan ({}); the set's settings are derived from its files' provenance, and images an unfinished extraction did not reach cannot be told",
            dir.display(),
            plan_file.display()
        )
    });
    Ok(CheckedSet { made, derived })
}

/// The plan file `dir/file` as it was before a run replaced it (None: there was none), to be
/// put back when the run stores nothing ([`PreviousPlan::restore`]), so that a run that failed
/// on every image leaves its folder as it was.
pub struct PreviousPlan {
    path: std::path::PathBuf,
    bytes: Option<Vec<u8>>,
    /// The run's claim on the folder, held as long as this value ([`claim_folder`]).
    _claim: RunClaim,
}

impl PreviousPlan {
    /// Claims `dir` for `plan`'s run ([`claim_folder`]: refused while a run of another plan
    /// writes there), then writes `plan` as `dir/file` (before any work, so that a killed run
    /// leaves its plan and the images it did not reach are known to be missing); returns what
    /// was there, holding the claim.
    pub fn replace<T: Serialize>(dir: &Path, file: &str, plan: &T) -> Result<PreviousPlan> {
        let claim = claim_folder(dir, file, plan)?;
        let path = dir.join(file);
        let bytes = match std::fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&path, e)),
        };
        write_plan(dir, file, plan)?;
        Ok(PreviousPlan {
            path,
            bytes,
            _claim: claim,
        })
    }

    /// Puts the earlier plan back (or removes the new one when there was none).
    pub fn restore(self) -> Result<()> {
        match &self.bytes {
            Some(b) => write_bytes_atomic(&self.path, b),
            None => std::fs::remove_file(&self.path).map_err(|e| Error::io(&self.path, e)),
        }
    }
}

/// The plan already in `dir/file` (None when there is none) and `plan`, both as JSON values
/// for [`differing_fields`], with the file's path. The new plan goes through text, as the old
/// one was read, so that an f32 setting compares equal to itself.
fn old_and_new_plan<T: Serialize>(
    dir: &Path,
    file: &str,
    plan: &T,
) -> Result<Option<(PathBuf, serde_json::Value, serde_json::Value)>> {
    let path = dir.join(file);
    let Some(old) = read_plan::<serde_json::Value>(dir, file)? else {
        return Ok(None);
    };
    let new: serde_json::Value = serde_json::to_vec(plan)
        .and_then(|json| serde_json::from_slice(&json))
        .map_err(|e| Error::format(&path, format!("cannot serialise the plan: {e}")))?;
    Ok(Some((path, old, new)))
}

/// Refuses, before a shard writes its plan, a plan of another run already in `dir/file`
/// (other settings or images, named): the shard would replace it, and the mix of the two runs'
/// files would be found only at match or merge time, blaming the first run's files. Shards of
/// one run compute the same plan, so they pass; a new run over an old one's folder removes the
/// old plan first (or writes elsewhere).
pub fn refuse_other_plan<T: Serialize>(dir: &Path, file: &str, plan: &T) -> Result<()> {
    let Some((path, old, new)) = old_and_new_plan(dir, file, plan)? else {
        return Ok(());
    };
    let mut differ = Vec::new();
    differing_fields("", &old, &new, &mut differ);
    if differ.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidInput(format!(
        "{}: the plan of another run ({} differ from this shard's): a shard writing here would mix its files with that run's. Run every shard with the same images and settings, or write into another folder (or remove that run's outputs and plan first)",
        path.display(),
        listing(&differ)
    )))
}

/// The fields of a match plan that say how its pair files are made (the pair settings and the
/// features'), as opposed to which pairs it holds (`inputs`, `pairs`): what
/// [`refuse_other_match_run`] compares.
const MATCH_RUN_FIELDS: [&str; 4] = ["config", "features", "selection", "camera"];

/// Refuses a match shard (a whole run replaces the plan instead, `descl match`'s caller
/// decides: [`crate::io::writer::Writer::replace_other_plan`]) into `dir` whose `plan` differs from
/// the match plan already there in how its pairs are made ([`MATCH_RUN_FIELDS`]: the pair
/// settings, how the pairs were chosen, and the features' settings, each where both plans
/// record it), before it replaces
/// the plan or matches anything: the folder would hold the two runs' pair files side by side,
/// found only by `descl sfm merge`, which blamed the first run's files (issue 55). Which pairs
/// the plan holds is not compared: the other shards of one run, a resume, and a run over a set
/// grown since an `--allow-partial` run (more inputs, more pairs, the same settings) write
/// into the folder as before.
pub fn refuse_other_match_run(dir: &Path, plan: &MatchPlan) -> Result<()> {
    let Some((path, old, new)) = old_and_new_plan(dir, MATCH_PLAN_FILE, plan)? else {
        return Ok(());
    };
    let mut differ = Vec::new();
    for field in MATCH_RUN_FIELDS {
        match (old.get(field), new.get(field)) {
            (Some(o), Some(n)) if !o.is_null() && !n.is_null() => {
                differing_fields(field, o, n, &mut differ)
            }
            // A plan that does not record the field (an older descl's; features without
            // settings) is not compared on it.
            _ => {}
        }
    }
    let other_content = inputs_of_other_content(&old, plan);
    if !other_content.is_empty() {
        differ.push(format!("the content of {}", listing(&other_content)));
    }
    if differ.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidInput(format!(
        "{}: the match plan of another descl run with other settings or inputs ({} {} from this run's): matching here would mix this run's pair files with that run's, and `descl sfm merge` would then refuse the folder, blaming that run's files. Run every shard (and a resume) with the same settings, features and pair selection; or pass --overwrite to replace that run's plan (its pairs are matched again with this run's settings), or write into another --out-dir",
        path.display(),
        listing(&differ),
        if differ.len() == 1 { "differs" } else { "differ" }
    )))
}

/// The inputs that the old plan (as JSON) and `plan` both name, recorded by both with another
/// content ([`MatchPlan::input_ids`]): another features set, or other pictures, of the same
/// file names. An input either plan does not identify is not compared.
fn inputs_of_other_content(old: &serde_json::Value, plan: &MatchPlan) -> Vec<String> {
    let strings = |field: &str| -> Vec<&str> {
        old.get(field)
            .and_then(serde_json::Value::as_array)
            .map(|a| a.iter().map(|v| v.as_str().unwrap_or_default()).collect())
            .unwrap_or_default()
    };
    let old_ids: HashMap<&str, &str> = strings("inputs")
        .into_iter()
        .zip(strings("input_ids"))
        .filter(|(_, id)| !id.is_empty())
        .collect();
    plan.inputs
        .iter()
        .zip(&plan.input_ids)
        .filter(|(name, id)| {
            !id.is_empty() && old_ids.get(name.as_str()).is_some_and(|old| old != id)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The one way a match run records its plan in its output folder, whatever the format (npz
/// pair files or hloc's `matches.h5`): claims the folder for the plan ([`claim_folder`]: a run
/// of another plan writing there, in either format, is refused while this one lives), refuses
/// a plan of other settings already there ([`refuse_other_match_run`]) unless
/// `replace_other` (a whole run, or `--overwrite`), then writes `plan`. Returns the claim,
/// to be held for the run's whole life.
pub fn record_match_plan(
    dir: &Path,
    plan: &MatchPlan,
    replace_other: bool,
    format: MatchFolderFormat,
) -> Result<RunClaim> {
    let claim = claim_folder(dir, MATCH_PLAN_FILE, plan)?;
    refuse_other_format_run(dir, format)?;
    if !replace_other {
        refuse_other_match_run(dir, plan)?;
    }
    write_plan(dir, MATCH_PLAN_FILE, plan)?;
    Ok(claim)
}

/// The two ways a match run stores its pairs in its `--out-dir`, each with the files it
/// writes there: the plan ([`MATCH_PLAN_FILE`]) is one per folder, so a run of one format
/// beside the other's files would describe them wrongly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchFolderFormat {
    /// One npz file per image and per pair (`crate::io::npz_folder`).
    Npz,
    /// hloc's `features.h5` and `matches.h5` (`crate::io::hloc`).
    Hloc,
}

/// hloc's features file in an output folder (hloc names it after its extractor's `output`).
/// Defined here rather than in `crate::io::hloc`, which exists only with the `h5` feature: an
/// npz run must see hloc's files either way.
pub const HLOC_FEATURES_FILE: &str = "features.h5";
/// hloc's matches file in an output folder.
pub const HLOC_MATCHES_FILE: &str = "matches.h5";

impl MatchFolderFormat {
    fn name(self) -> &'static str {
        match self {
            MatchFolderFormat::Npz => "npz",
            MatchFolderFormat::Hloc => "h5",
        }
    }

    /// Whether the folder's file `name` is one the other format writes.
    fn is_other_formats(self, name: &str) -> bool {
        match self {
            MatchFolderFormat::Npz => name == HLOC_FEATURES_FILE || name == HLOC_MATCHES_FILE,
            MatchFolderFormat::Hloc => name.ends_with(".npz"),
        }
    }
}

/// Refuses a match run of `format` into a folder holding the other format's files: the run
/// would replace the folder's one plan with its own, and the other run's files would be left
/// beside it described by a plan that is not theirs (`descl sfm merge` then blamed them, issue
/// 55). `--overwrite` does not help: this run cannot match the other format's pairs again.
fn refuse_other_format_run(dir: &Path, format: MatchFolderFormat) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut found: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if format.is_other_formats(&name) {
            found.push(name);
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    let other = match format {
        MatchFolderFormat::Npz => MatchFolderFormat::Hloc,
        MatchFolderFormat::Hloc => MatchFolderFormat::Npz,
    };
    Err(Error::InvalidInput(format!(
        "{}: holds the {} files of another descl run ({}): a --format {} match here would replace that run's plan and leave its files beside this run's, described by a plan that is not theirs. Write into another --out-dir, or remove that run's files first",
        dir.display(),
        other.name(),
        listing(&found),
        format.name()
    )))
}

/// The dotted paths of the object fields where `old` and `new` differ (a list or a value
/// that differs is named as a whole).
fn differing_fields(
    at: &str,
    old: &serde_json::Value,
    new: &serde_json::Value,
    out: &mut Vec<String>,
) {
    if old == new {
        return;
    }
    match (old.as_object(), new.as_object()) {
        (Some(o), Some(n)) => {
            for (k, v) in n {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                // A setting the old plan does not record (an older descl's) is not compared.
                if let Some(ov) = o.get(k) {
                    differing_fields(&path, ov, v, out);
                }
            }
        }
        _ => out.push(at.to_string()),
    }
}

/// Hex digits of a plan's SHA-256 that name its claim file: 64 bits, so that two different
/// plans in one folder do not share a claim by chance.
const CLAIM_KEY_HEX_DIGITS: usize = 16;

/// Claims the output folder `dir` for the run of `plan` (the plan it writes as `file`):
/// every shard of one run computes the same plan, so they share the claim, while a run of
/// another plan (other settings or images) is refused as long as one of them writes there
/// ([`RunClaim::join`]), naming the plan's settings. Held for the run's whole life.
pub fn claim_folder<T: Serialize>(dir: &Path, file: &str, plan: &T) -> Result<RunClaim> {
    use sha2::{Digest, Sha256};
    let path = dir.join(file);
    let json = serde_json::to_vec(plan)
        .map_err(|e| Error::format(&path, format!("cannot serialise the plan: {e}")))?;
    let digest = Sha256::digest(&json);
    let key: String = digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(CLAIM_KEY_HEX_DIGITS)
        .collect();
    RunClaim::join(dir, &key, &describe_plan(file, &json))
}

/// How a run is described to another run refused in its folder: its plan file and settings
/// (the plan without its image or pair lists).
fn describe_plan(file: &str, json: &[u8]) -> String {
    let mut value: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    let mut sizes = Vec::new();
    if let Some(map) = value.as_object_mut() {
        for list in ["images", "inputs", "pairs"] {
            if let Some(n) = map.get(list).and_then(|v| v.as_array()).map(Vec::len) {
                sizes.push(format!("{n} {list}"));
            }
        }
        map.retain(|k, _| k == "settings" || k == "config");
    }
    let settings = value
        .as_object()
        .and_then(|m| m.values().next())
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("its {file}: {}, settings {settings}", sizes.join(", "))
}

/// Whether `name` is the temporary of a run plan ([`write_plan`]) that a killed run may have
/// left beside its outputs.
pub(crate) fn is_plan_temporary(name: &str) -> bool {
    [EXTRACT_PLAN_FILE, MATCH_PLAN_FILE]
        .iter()
        .any(|plan| crate::io::atomic::is_temporary_of(name, plan))
}

/// Writes `plan` as `dir/file` atomically.
pub fn write_plan<T: Serialize>(dir: &Path, file: &str, plan: &T) -> Result<()> {
    let path = dir.join(file);
    let json = serde_json::to_vec(plan)
        .map_err(|e| Error::format(&path, format!("cannot serialise the plan: {e}")))?;
    write_bytes_atomic(&path, &json)
}

/// The plan `dir/file`, or None when there is none.
pub fn read_plan<T: DeserializeOwned>(dir: &Path, file: &str) -> Result<Option<T>> {
    let path = dir.join(file);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    if !meta.is_file() {
        return Err(Error::format(&path, "a run plan must be a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_PLAN_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::io(&path, e))?;
    if bytes.len() as u64 > MAX_PLAN_BYTES {
        return Err(Error::format(
            &path,
            format!("larger than {MAX_PLAN_BYTES} bytes"),
        ));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::format(&path, format!("not a descl run plan: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_bad_ones_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_plan::<MatchPlan>(dir.path(), MATCH_PLAN_FILE).unwrap(),
            None
        );
        let plan = MatchPlan {
            inputs: vec!["a.npz".into(), "b.npz".into()],
            input_ids: vec!["1f".into(), String::new()],
            pairs: vec![["a.npz".into(), "b.npz".into()]],
            config: PairConfig::default(),
            features: None,
            selection: Some(serde_json::json!({ "sequential": 2 })),
            camera: Some("unused".into()),
        };
        write_plan(dir.path(), MATCH_PLAN_FILE, &plan).unwrap();
        assert_eq!(
            read_plan::<MatchPlan>(dir.path(), MATCH_PLAN_FILE).unwrap(),
            Some(plan)
        );
        std::fs::write(dir.path().join(EXTRACT_PLAN_FILE), b"{").unwrap();
        let e = read_plan::<ExtractPlan>(dir.path(), EXTRACT_PLAN_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains(EXTRACT_PLAN_FILE), "{e}");
    }
}
