//! hloc's HDF5 files (Sarlin et al., "From Coarse to Fine", CVPR 2019; cvg/Hierarchical-Localization),
//! written so that hloc's own readers (`hloc.utils.io.get_keypoints`, `get_matches`,
//! `list_h5_names`, `hloc.reconstruction` and `hloc.localize_sfm`) take descl's features and
//! matches as if hloc had made them. The layout is hloc's (`extract_features.py`,
//! `match_features.py`, `utils/parsers.py`):
//!
//! `features.h5`: one group per image name (a `/` in the name nests groups):
//!
//! | dataset | dtype, shape | content |
//! |---|---|---|
//! | `keypoints` | float32 N×2 | x, y; the centre of the top-left pixel at (0, 0) (hloc's and OpenCV's; COLMAP's is +0.5, which hloc adds on import); attribute `uncertainty` ([`KEYPOINT_UNCERTAINTY_PX`]) |
//! | `descriptors` | float32 D×N, or uint8 32×N for binary models | one **column** per keypoint, as hloc's extractors store them |
//! | `scores` | float32 N | detector response |
//! | `image_size` | int64 (2) | W, H |
//!
//! `matches.h5`: one group per pair, [`names_to_pair`]`(a, b)` (= `a/b` with `/` inside names
//! replaced by `-`, so also a nested group):
//!
//! | dataset | dtype, shape | content |
//! |---|---|---|
//! | `matches0` | int16 N_a | index of the match in b, −1 if none (int32 when b has more than 32 767 keypoints, where hloc's int16 would wrap) |
//! | `matching_scores0` | float16 N_a | hloc's nearest-neighbour score: (1 + cos)/2 = 1 − d²/4 for unit float descriptors, 1 − h/256 for 256-bit codes; 0 when unmatched |
//!
//! The matches are the raw ones (hloc verifies them in COLMAP when it imports them). Keypoints
//! and descriptors stay float32: hloc's optional float16 (`as_half`) would round keypoints
//! beyond 2048 px to 2 px.
//!
//! Both files are built in temporaries beside the targets (an existing file is copied first,
//! so a rerun adds to it and skips pairs it has) under a lock, and renamed into place by
//! [`Writer::finish`] and at checkpoints during the run: every
//! [`CHECKPOINT_MIN_INTERVAL`] at least, and never more often than the copy that reopens the
//! file allows ([`CHECKPOINT_COPY_SHARE`] of the time), the temporary is closed, renamed into
//! place and copied again to go on. A killed run leaves the files of its last checkpoint —
//! whole HDF5 files holding whole groups — and the next run (`--resume`, or a rerun of the
//! pairs) reuses what they hold with this run's provenance instead of starting over.

use crate::describe::{Descriptors, BINARY_BITS};
use crate::error::{Error, Result};
use crate::features::Features;
use crate::io::atomic::{
    remove_stale_temporaries, remove_stale_temporaries_below, temp_beside, tmp_tag, FolderLock,
    OutputLock, RunClaim,
};
use crate::io::plan::{
    record_match_plan, write_plan, ExtractPlan, MatchFolderFormat, MatchPlan, EXTRACT_PLAN_FILE,
};
use crate::io::writer::{ImageRecord, PairRecord, StoredPair, Writer};
use crate::provenance::{compare, FeatureProvenance, PairProvenance, Reuse};
use half::f16;
use hdf5_metno as hdf5;
use ndarray::{Array1, Array2};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The features and matches files in an output folder (defined beside the match plan, which
/// an npz run checks for them without this module).
pub use crate::io::plan::{HLOC_FEATURES_FILE as FEATURES_FILE, HLOC_MATCHES_FILE as MATCHES_FILE};
/// The `uncertainty` attribute of `keypoints`: hloc's `detection_noise` (1 px for its
/// detectors at the original resolution) — descl's keypoints are in the original image.
pub const KEYPOINT_UNCERTAINTY_PX: f64 = 1.0;
/// File attribute of `features.h5` naming the model of its features (hloc ignores it; descl
/// refuses to add features of another model).
pub const MODEL_ATTR: &str = "descl_model";
/// Attribute of an image group in `features.h5`: the features' `meta` JSON
/// ([`crate::features::FeatureMeta`], with its provenance and identity), which hloc ignores and
/// descl's resumed runs compare.
pub const FEATURES_META_ATTR: &str = "descl_meta";
/// Attribute of a pair group in `matches.h5`: the pair's
/// [`PairProvenance`] JSON (the identities of the two features, the settings).
pub const PAIR_PROVENANCE_ATTR: &str = "descl_provenance";
/// File attribute of both `features.h5` and `matches.h5` as `descl sfm merge --hloc` writes
/// them: one id per merge (hloc ignores it). The merge replaces the two files one after the
/// other; a file carrying an id belongs only beside a file carrying the same, so a merge
/// killed between the two renames leaves a pair that descl refuses ([`check_pair`]) rather
/// than new features beside old matches. Files of `descl extract` and `descl match` carry no
/// id, except a `matches.h5` started beside a merged `features.h5`, which takes its id.
pub const PAIR_ID_ATTR: &str = "descl_pair_id";
/// `matches0` value of a keypoint without a match.
pub const UNMATCHED: i32 = -1;

/// hloc's pair key: `name0/name1` with every `/` inside a name replaced by `-`
/// (`hloc.utils.parsers.names_to_pair`).
pub fn names_to_pair(name0: &str, name1: &str) -> String {
    format!("{}/{}", name0.replace('/', "-"), name1.replace('/', "-"))
}

/// hloc's matching score of a descriptor distance (see the module table): `binary` for
/// 256-bit codes (Hamming distance), else unit float descriptors (L2 distance).
fn matching_score(binary: bool, distance: f32) -> f32 {
    if binary {
        1.0 - distance / BINARY_BITS as f32
    } else {
        1.0 - distance * distance / 4.0
    }
}

/// The pair groups (`a`, `b`) of a `matches.h5` whose recorded feature identities are not
/// those of `ids` (the features now in `features.h5`), or that record none.
fn stale_pairs(
    file: &hdf5::File,
    ids: &HashMap<String, Option<crate::provenance::FeaturesId>>,
) -> hdf5::Result<Vec<(String, String)>> {
    let id = |part: &str| ids.get(part).cloned().flatten();
    let mut stale = Vec::new();
    for a in file.member_names()? {
        let Ok(ga) = file.group(&a) else { continue };
        for b in ga.member_names()? {
            let recorded = ga
                .group(&b)
                .ok()
                .and_then(|g| read_json_attr::<PairProvenance>(&g, PAIR_PROVENANCE_ATTR));
            let current = recorded.is_some_and(|p| {
                id(&a).is_some_and(|x| x == p.a) && id(&b).is_some_and(|y| y == p.b)
            });
            if !current {
                stale.push((a.clone(), b));
            }
        }
    }
    Ok(stale)
}

fn h5_err(path: &Path, e: hdf5::Error) -> Error {
    Error::format(path, format!("HDF5: {e}"))
}

/// The longest a run writes into its temporaries without putting what it has in place (see
/// the module doc): a killed run loses at most this much work, plus one image or pair.
pub const CHECKPOINT_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// A checkpoint copies the whole file to go on; checkpoints are spaced so that the copies take
/// at most this share of the run's time (a 4 GB features.h5 that copies in 8 s is put in place
/// every 80 s, not every minute).
pub const CHECKPOINT_COPY_SHARE: f64 = 0.1;
/// Environment variable overriding [`CHECKPOINT_MIN_INTERVAL`], in seconds (0: after every
/// image or pair; for tests and for users who prefer safety to speed).
pub const CHECKPOINT_ENV: &str = "DESCL_H5_CHECKPOINT_SECONDS";

/// The interval of [`CHECKPOINT_ENV`], else [`CHECKPOINT_MIN_INTERVAL`].
fn checkpoint_interval() -> std::time::Duration {
    std::env::var(CHECKPOINT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(CHECKPOINT_MIN_INTERVAL, std::time::Duration::from_secs_f64)
}

/// One HDF5 file being written: a temporary beside `target` (a copy of `target` if it exists).
struct H5Out {
    /// None only between closing and reopening at a checkpoint.
    file: Option<hdf5::File>,
    tmp: Option<tempfile::TempPath>,
    target: PathBuf,
    lock: OutputLock,
    /// When the file was last put in place (or opened), and what the copy that reopened it cost.
    last_checkpoint: std::time::Instant,
    copy_cost: std::time::Duration,
    interval: std::time::Duration,
}

/// A temporary beside `target` holding a copy of `target` (or a new file), open for writing;
/// with the time the copy took.
fn open_copy(target: &Path) -> Result<(hdf5::File, tempfile::TempPath, std::time::Duration)> {
    let tmp = temp_beside(target, &tmp_tag(target), ".h5")?.into_temp_path();
    let t = std::time::Instant::now();
    let file = if target.is_file() {
        std::fs::copy(target, &tmp).map_err(|e| Error::io(target, e))?;
        hdf5::File::append(&tmp)
    } else {
        hdf5::File::create(&tmp)
    }
    .map_err(|e| h5_err(target, e))?;
    Ok((file, tmp, t.elapsed()))
}

impl H5Out {
    fn open(target: &Path) -> Result<H5Out> {
        let lock = OutputLock::acquire(target, "write into another folder")?;
        remove_stale_temporaries(target);
        let (file, tmp, copy_cost) = open_copy(target)?;
        Ok(H5Out {
            file: Some(file),
            tmp: Some(tmp),
            target: target.to_path_buf(),
            lock,
            last_checkpoint: std::time::Instant::now(),
            copy_cost,
            interval: checkpoint_interval(),
        })
    }

    /// The open file.
    fn file(&self) -> Result<&hdf5::File> {
        self.file.as_ref().ok_or_else(|| {
            Error::format(
                &self.target,
                "the HDF5 file is not open (a checkpoint failed)",
            )
        })
    }

    /// Closes the temporary and renames it into place.
    fn put_in_place(&mut self) -> Result<()> {
        if let Some(file) = self.file.take() {
            file.flush().map_err(|e| h5_err(&self.target, e))?;
            file.close().map_err(|e| h5_err(&self.target, e))?;
        }
        if let Some(tmp) = self.tmp.take() {
            tmp.persist(&self.target)
                .map_err(|e| Error::io(&self.target, e.error))?;
        }
        Ok(())
    }

    /// After a whole image or pair: puts the file in place when the interval has passed (and the
    /// copy to go on would take at most [`CHECKPOINT_COPY_SHARE`] of the time since the last
    /// one), then reopens a copy.
    fn checkpoint_if_due(&mut self) -> Result<()> {
        let since = self.last_checkpoint.elapsed();
        let spacing = self
            .interval
            .max(self.copy_cost.mul_f64(1.0 / CHECKPOINT_COPY_SHARE));
        if since < spacing {
            return Ok(());
        }
        self.put_in_place()?;
        let (file, tmp, copy_cost) = open_copy(&self.target)?;
        self.file = Some(file);
        self.tmp = Some(tmp);
        self.copy_cost = copy_cost;
        self.last_checkpoint = std::time::Instant::now();
        Ok(())
    }

    fn err(&self, e: hdf5::Error) -> Error {
        h5_err(&self.target, e)
    }

    /// The group at `path` (components separated by `/`), created with its parents; an existing
    /// group of that path is replaced (hloc's `del fd[name]` before writing).
    fn fresh_group(&self, path: &str) -> Result<hdf5::Group> {
        let parts: Vec<&str> = path.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(Error::InvalidInput(format!(
                "{}: {path:?} is not a usable HDF5 group name",
                self.target.display()
            )));
        }
        let mut group = self.file()?.as_group().map_err(|e| self.err(e))?;
        let (last, parents) = parts.split_last().unwrap_or((&"", &[]));
        for part in parents {
            group = if group.link_exists(part) {
                group.group(part)
            } else {
                group.create_group(part)
            }
            .map_err(|e| self.err(e))?;
        }
        if group.link_exists(last) {
            group.unlink(last).map_err(|e| self.err(e))?;
        }
        group.create_group(last).map_err(|e| self.err(e))
    }

    /// Closes the file and renames it into place, then releases the lock.
    fn finish(mut self) -> Result<PathBuf> {
        self.put_in_place()?;
        drop(self.lock);
        Ok(self.target)
    }
}

/// Why hloc could not tell the pair (`a`, `b`) by its key: `names_to_pair` replaces `/` by `-`,
/// so `a/0000.jpg` and `a-0000.jpg` give one key; a pair whose key is the same in both orders
/// (`a-0000.jpg` with `a/0000.jpg`) would be read back the wrong way round by `find_pair`.
fn ambiguous_pair_key(a: &str, b: &str, other: Option<&(String, String)>) -> Option<String> {
    let key = names_to_pair(a, b);
    if let Some((x, y)) = other.filter(|(x, y)| (x.as_str(), y.as_str()) != (a, b)) {
        return Some(format!(
            "the pairs {a} – {b} and {x} – {y} have one key {key:?} in matches.h5 (hloc's names_to_pair writes `/` in a name as `-`)"
        ));
    }
    (a != b && key == names_to_pair(b, a)).then(|| {
        format!(
            "the pair {a} – {b} has the same key {key:?} in both orders in matches.h5 (hloc's names_to_pair writes `/` in a name as `-`), so hloc could not tell its direction"
        )
    })
}

/// hloc's `features.h5` and `matches.h5` in a folder (the latter created with the first pair).
pub struct HlocFolder {
    dir: PathBuf,
    features: H5Out,
    matches: Option<H5Out>,
    /// Pair keys already in an existing `matches.h5` and their recorded provenance (a rerun
    /// skips those whose provenance is this run's).
    existing_pairs: HashMap<String, Option<PairProvenance>>,
    /// hloc's key of each pair of this run → the pair (names in order), so that two pairs
    /// whose names hloc's `names_to_pair` makes one key are refused, not overwritten.
    pair_keys: HashMap<String, (String, String)>,
    /// The model of the features in the file, so one file never mixes models.
    model: Option<String>,
    /// The features file's [`PAIR_ID_ATTR`]: a new `matches.h5` beside it takes it.
    pair_id: Option<String>,
    /// The names of the whole run's images ([`Writer::expect_images`]): a file of another
    /// model holding only these is started again ([`Writer::expect_settings`]).
    run_names: Option<std::collections::HashSet<String>>,
    /// Shared with the other runs writing into the folder (an npz run beside): the first run
    /// alone in it removes the run plans' temporaries that killed runs left; `features.h5`'s
    /// and `matches.h5`'s own are removed under their exclusive locks ([`H5Out::open`]).
    /// Declared last, so released after the files.
    _folder_lock: FolderLock,
    /// The run's claim on the folder, taken with its match plan as an npz run takes it
    /// ([`crate::io::plan::record_match_plan`]): a run of another plan, in either format, is
    /// refused while this one writes.
    claim: Option<RunClaim>,
    /// Replace a match plan of other settings already in the folder rather than refuse it
    /// ([`Writer::replace_other_plan`]).
    replace_other_plan: bool,
    /// Written with the match plan ([`Writer::expect_extract_plan`]).
    extract_plan: Option<ExtractPlan>,
}

impl HlocFolder {
    /// Starts (or continues) the files in `dir`, created if missing.
    pub fn create(dir: &Path) -> Result<HlocFolder> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let folder_lock = FolderLock::share(dir, || {
            remove_stale_temporaries_below(dir, 0, &crate::io::plan::is_plan_temporary)
        })?;
        let features = H5Out::open(&dir.join(FEATURES_FILE))?;
        // Checked under the features file's lock: a merge replacing the pair holds it.
        check_pair(dir)?;
        let pair_id = read_pair_id(features.file()?);
        let model = features
            .file()?
            .attr(MODEL_ATTR)
            .and_then(|a| a.read_scalar::<hdf5::types::VarLenUnicode>())
            .ok()
            .map(|s| s.as_str().to_string());
        // A file of another extractor (hloc's SuperPoint, a 256-d model): descl's features
        // added to it would be matched against features of unknown provenance.
        let holds_features = features.file()?.member_names().is_ok_and(|m| !m.is_empty());
        if model.is_none() && holds_features {
            return Err(Error::InvalidInput(format!(
                "{}: the file holds features descl did not write (no `{MODEL_ATTR}` attribute); write into another folder",
                features.target.display()
            )));
        }
        check_matches_are_descls(&dir.join(MATCHES_FILE))?;
        Ok(HlocFolder {
            dir: dir.to_path_buf(),
            features,
            matches: None,
            existing_pairs: existing_pairs(&dir.join(MATCHES_FILE)),
            pair_keys: HashMap::new(),
            model,
            pair_id,
            run_names: None,
            _folder_lock: folder_lock,
            claim: None,
            replace_other_plan: false,
            extract_plan: None,
        })
    }

    /// The identity of each image's features in `features.h5` by its part of hloc's pair key
    /// (`/` written as `-`; None where two names give one part).
    fn feature_ids(&self) -> Result<HashMap<String, Option<crate::provenance::FeaturesId>>> {
        let file = self.features.file()?;
        let mut ids = HashMap::new();
        for name in list_features_of(&self.features.target, file)? {
            let id = file
                .group(&name)
                .ok()
                .and_then(|g| {
                    read_json_attr::<crate::features::FeatureMeta>(&g, FEATURES_META_ATTR)
                })
                .and_then(|m| m.content);
            let part = name.replace('/', "-");
            let known = !ids.contains_key(&part);
            ids.insert(part, id.filter(|_| known));
        }
        Ok(ids)
    }

    /// Drops the pair groups of `matches.h5` that do not index the features now in
    /// `features.h5` (an earlier run's pairs over features since replaced, or pairs without
    /// descl's provenance): hloc would read them against the wrong keypoints (issue 44). The
    /// file is looked at first and rewritten only when a group has to go, so a run that
    /// changes nothing leaves it as it was.
    fn drop_stale_pairs(&mut self) -> Result<()> {
        let target = self.dir.join(MATCHES_FILE);
        if self.matches.is_none() && !target.exists() {
            return Ok(());
        }
        let ids = self.feature_ids()?;
        let stale = match &self.matches {
            Some(out) => stale_pairs(out.file()?, &ids).map_err(|e| out.err(e))?,
            None => {
                let file = hdf5::File::open(&target).map_err(|e| h5_err(&target, e))?;
                stale_pairs(&file, &ids).map_err(|e| h5_err(&target, e))?
            }
        };
        if stale.is_empty() {
            return Ok(());
        }
        let out = self.matches()?;
        let file = out.file()?;
        for (a, b) in stale {
            let ga = file.group(&a).map_err(|e| out.err(e))?;
            ga.unlink(&b).map_err(|e| out.err(e))?;
            if ga.member_names().map_err(|e| out.err(e))?.is_empty() {
                file.unlink(&a).map_err(|e| out.err(e))?;
            }
        }
        Ok(())
    }

    /// Starts `features.h5` again for features of `model` (every group removed, the model
    /// attribute replaced) when it holds another model's features of this run's images only;
    /// refused, naming the file, both models and an image that would stay, otherwise.
    fn replace_model(&mut self, model: &str) -> Result<()> {
        let target = self.features.target.clone();
        let file = self.features.file()?;
        let names = list_features_of(&target, file)?;
        let own = |n: &String| self.run_names.as_ref().is_some_and(|r| r.contains(n));
        if let Some(stray) = names.iter().find(|n| !own(n)) {
            return Err(Error::InvalidInput(format!(
                "{}: the file holds features of `{}` ({stray}, …) that this run does not replace; features of `{model}` go into another folder",
                target.display(),
                self.model.as_deref().unwrap_or_default()
            )));
        }
        for top in file.member_names().map_err(|e| self.features.err(e))? {
            file.unlink(&top).map_err(|e| self.features.err(e))?;
        }
        let value: hdf5::types::VarLenUnicode = model
            .parse()
            .map_err(|e| Error::InvalidInput(format!("model name {model:?}: {e}")))?;
        file.attr(MODEL_ATTR)
            .and_then(|a| a.write_scalar(&value))
            .map_err(|e| self.features.err(e))?;
        self.model = Some(model.to_string());
        Ok(())
    }

    /// hloc's key of the pair (`a`, `b`), claimed for it in this run; an error naming both
    /// pairs (and what to rename) when hloc could not tell it from another pair.
    fn claim_pair_key(&mut self, a: &str, b: &str) -> Result<String> {
        let key = names_to_pair(a, b);
        if let Some(why) = ambiguous_pair_key(a, b, self.pair_keys.get(&key)) {
            return Err(Error::InvalidInput(format!(
                "{}: {why}; rename one of the images (or use --format npz)",
                self.dir.join(MATCHES_FILE).display()
            )));
        }
        self.pair_keys
            .insert(key.clone(), (a.to_string(), b.to_string()));
        Ok(key)
    }

    fn matches(&mut self) -> Result<&mut H5Out> {
        if self.matches.is_none() {
            let target = self.dir.join(MATCHES_FILE);
            let fresh = !target.exists();
            let out = H5Out::open(&target)?;
            if let Some(id) = self.pair_id.as_ref().filter(|_| fresh) {
                let value: hdf5::types::VarLenUnicode = id
                    .parse()
                    .map_err(|e| Error::InvalidInput(format!("pair id {id:?}: {e}")))?;
                out.file()?
                    .new_attr::<hdf5::types::VarLenUnicode>()
                    .shape(())
                    .create(PAIR_ID_ATTR)
                    .and_then(|a| a.write_scalar(&value))
                    .map_err(|e| out.err(e))?;
            }
            self.matches = Some(out);
        }
        self.matches
            .as_mut()
            .ok_or_else(|| Error::InvalidInput("matches file not open".into()))
    }

    /// Records the features' model in the file (an attribute hloc ignores) and refuses another.
    fn check_model(&mut self, f: &Features) -> Result<()> {
        match &self.model {
            Some(m) if *m != f.meta.model => {
                Err(other_model_error(&self.features.target, m, &f.meta.model))
            }
            Some(_) => Ok(()),
            None => {
                let value: hdf5::types::VarLenUnicode = f.meta.model.parse().map_err(|e| {
                    Error::InvalidInput(format!("model name {:?}: {e}", f.meta.model))
                })?;
                let file = self.features.file()?;
                file.new_attr::<hdf5::types::VarLenUnicode>()
                    .shape(())
                    .create(MODEL_ATTR)
                    .and_then(|a| a.write_scalar(&value))
                    .map_err(|e| self.features.err(e))?;
                self.model = Some(f.meta.model.clone());
                Ok(())
            }
        }
    }
}

/// `features.h5` at `path` holds features of `held`; those of `model` are refused.
fn other_model_error(path: &Path, held: &str, model: &str) -> Error {
    Error::InvalidInput(format!(
        "{}: the file holds features of `{held}`; features of `{model}` go into another folder",
        path.display()
    ))
}

/// The [`PAIR_ID_ATTR`] of an open file, if it has one.
fn read_pair_id(file: &hdf5::File) -> Option<String> {
    file.attr(PAIR_ID_ATTR)
        .and_then(|a| a.read_scalar::<hdf5::types::VarLenUnicode>())
        .ok()
        .map(|s| s.as_str().to_string())
}

/// The [`PAIR_ID_ATTR`] of the file at `path`: None when it has none or does not exist.
pub fn pair_id(path: &Path) -> Result<Option<String>> {
    if !path.exists() {
        return Ok(None);
    }
    let file = hdf5::File::open(path).map_err(|e| h5_err(path, e))?;
    Ok(read_pair_id(&file))
}

/// Writes `id` as the [`PAIR_ID_ATTR`] of the file at `path` (one of a merge's new files,
/// which has none yet).
pub fn set_pair_id(path: &Path, id: &str) -> Result<()> {
    let value: hdf5::types::VarLenUnicode = id
        .parse()
        .map_err(|e| Error::InvalidInput(format!("pair id {id:?}: {e}")))?;
    let file = hdf5::File::append(path).map_err(|e| h5_err(path, e))?;
    file.new_attr::<hdf5::types::VarLenUnicode>()
        .shape(())
        .create(PAIR_ID_ATTR)
        .and_then(|a| a.write_scalar(&value))
        .map_err(|e| h5_err(path, e))?;
    file.close().map_err(|e| h5_err(path, e))
}

/// Checks that `features.h5` and `matches.h5` in `dir` belong together: when `matches.h5`
/// exists, its [`PAIR_ID_ATTR`] must be that of `features.h5` (None for both, or one merge's
/// id). A `descl sfm merge --hloc` killed between replacing the two files leaves them
/// different, and the matches would index other features: refused, naming both files and
/// what to do.
pub fn check_pair(dir: &Path) -> Result<()> {
    let (features, matches) = (dir.join(FEATURES_FILE), dir.join(MATCHES_FILE));
    if !matches.exists() {
        return Ok(());
    }
    let (f, m) = (pair_id(&features)?, pair_id(&matches)?);
    if f == m {
        return Ok(());
    }
    let text = |id: &Option<String>| {
        id.as_ref()
            .map_or_else(|| "none".to_string(), |id| format!("{id:?}"))
    };
    Err(Error::InvalidInput(format!(
        "{} and {} are not one pair: merge ids ({PAIR_ID_ATTR}) {} and {} (a `descl sfm merge --hloc` interrupted between replacing them, or files from different runs): run the merge again with --overwrite, or remove both files",
        features.display(),
        matches.display(),
        text(&f),
        text(&m)
    )))
}

/// Refuses an existing `matches.h5` that descl did not write: one of hloc's own matchers (pair
/// groups without [`PAIR_PROVENANCE_ATTR`]), or any other HDF5 file of that name. descl's run
/// replaced the user's pair groups as "stale results", or added its groups beside the user's
/// datasets (hostile round of c29952d, H3), where a `features.h5` of another tool's is refused.
fn check_matches_are_descls(path: &Path) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let file = hdf5::File::open(path).map_err(|e| h5_err(path, e))?;
    let refuse = |what: String| {
        Err(Error::InvalidInput(format!(
            "{}: {what}, so the file holds matches descl did not write (hloc's, or another file of that name); write into another folder, or remove the file",
            path.display()
        )))
    };
    for a in file.member_names().map_err(|e| h5_err(path, e))? {
        let Ok(ga) = file.group(&a) else {
            return refuse(format!("{a:?} is not a group of pairs"));
        };
        for b in ga.member_names().map_err(|e| h5_err(path, e))? {
            let descls = ga
                .group(&b)
                .ok()
                .and_then(|g| read_json_attr::<PairProvenance>(&g, PAIR_PROVENANCE_ATTR))
                .is_some();
            if !descls {
                return refuse(format!(
                    "the pair {a}/{b} has no `{PAIR_PROVENANCE_ATTR}` attribute"
                ));
            }
        }
    }
    Ok(())
}

/// The pair keys (`a/b`) of an existing matches file — its groups two levels down that hold
/// `matches0` — with their recorded provenance. Unreadable or absent: none.
fn existing_pairs(path: &Path) -> HashMap<String, Option<PairProvenance>> {
    let mut pairs = HashMap::new();
    let Ok(file) = hdf5::File::open(path) else {
        return pairs;
    };
    for a in file.member_names().unwrap_or_default() {
        let Ok(ga) = file.group(&a) else { continue };
        for b in ga.member_names().unwrap_or_default() {
            if ga.link_exists(&format!("{b}/matches0")) {
                let provenance = ga
                    .group(&b)
                    .ok()
                    .and_then(|g| read_json_attr(&g, PAIR_PROVENANCE_ATTR));
                pairs.insert(format!("{a}/{b}"), provenance);
            }
        }
    }
    pairs
}

/// The datasets of an image's group in `features.h5` besides `keypoints` (hloc's layout).
const IMAGE_DATASETS: [&str; 3] = ["descriptors", "scores", "image_size"];

/// The image names of a `features.h5` whose groups descl wrote (they record
/// [`FEATURES_META_ATTR`]), sorted; nested names (`a/0000.jpg`) as paths. A file of another
/// extractor (no group with descl's metadata) is refused: its features' provenance is unknown.
pub fn list_features(path: &Path) -> Result<Vec<String>> {
    let file = hdf5::File::open(path).map_err(|e| h5_err(path, e))?;
    list_features_of(path, &file)
}

/// [`list_features`] of an open file (`path` names it in errors).
fn list_features_of(path: &Path, file: &hdf5::File) -> Result<Vec<String>> {
    /// Where `g` is in the file (its object's address): groups reached under two names are
    /// hard links to one object.
    fn address(path: &Path, g: &hdf5::Group) -> Result<String> {
        let info = g.loc_info().map_err(|e| h5_err(path, e))?;
        Ok(format!("{}:{:?}", info.fileno, info.token))
    }
    fn walk(
        path: &Path,
        g: &hdf5::Group,
        prefix: &str,
        out: &mut Vec<String>,
        foreign: &mut usize,
        seen: &mut HashMap<String, String>,
    ) -> Result<()> {
        for name in g.member_names().unwrap_or_default() {
            let Ok(child) = g.group(&name) else { continue };
            let full = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            // Each group once: a hard link back up the tree (`L/self` → `L`) would make the
            // walk endless, and one group under two names two images of one set of features.
            if let Some(first) = seen.insert(address(path, &child)?, full.clone()) {
                return Err(Error::format(
                    path,
                    format!(
                        "group `{full}` is a hard link to `{first}` (a link cycle, or one group under two names), which descl never writes"
                    ),
                ));
            }
            // An image's group holds a `keypoints` dataset; a folder called `keypoints` is a
            // group on the way to images (`a/keypoints/1.jpg`).
            if child.dataset("keypoints").is_ok() {
                if child.attr(FEATURES_META_ATTR).is_ok() {
                    out.push(full);
                } else {
                    *foreign += 1;
                }
            } else if child.attr(FEATURES_META_ATTR).is_ok()
                || IMAGE_DATASETS.iter().any(|d| child.dataset(d).is_ok())
            {
                // An image's group (descl's metadata, or its other datasets) that lost its
                // keypoints: an error, not a folder to walk past.
                return Err(Error::format(
                    path.join(&full),
                    "an image's group without its `keypoints` dataset",
                ));
            } else {
                walk(path, &child, &full, out, foreign, seen)?;
            }
        }
        Ok(())
    }
    let root = file.as_group().map_err(|e| h5_err(path, e))?;
    let (mut names, mut foreign) = (Vec::new(), 0);
    let mut seen = HashMap::from([(address(path, &root)?, "/".to_string())]);
    walk(path, &root, "", &mut names, &mut foreign, &mut seen)?;
    if foreign > 0 {
        return Err(Error::format(
            path,
            format!("{foreign} images' features were not written by descl (no `{FEATURES_META_ATTR}` attribute): their provenance is unknown"),
        ));
    }
    names.sort();
    Ok(names)
}

/// The features of image `name` in a `features.h5` descl wrote: keypoints, descriptors (columns
/// back to rows), scores and the recorded metadata, checked against each other. Frames carry the
/// positions only (hloc's files hold no shape): `a` is the identity.
pub fn read_features(path: &Path, name: &str) -> Result<Features> {
    let at = path.join(name);
    let bad = |why: String| Error::format(&at, why);
    let file = hdf5::File::open(path).map_err(|e| h5_err(path, e))?;
    let group = file
        .group(name)
        .map_err(|_| bad("no such image in the file".into()))?;
    let meta: crate::features::FeatureMeta = read_json_attr(&group, FEATURES_META_ATTR)
        .ok_or_else(|| bad(format!("no descl `{FEATURES_META_ATTR}` attribute")))?;
    let h = |e: hdf5::Error| bad(format!("HDF5: {e}"));
    // A dataset is read only when its declared size is one descl would read from a `.npz`
    // member: a few-KB file may declare 10⁹ gzip-chunked keypoints, which reading would
    // allocate (8 GB) before any check.
    let dataset = |name: &str| -> Result<hdf5::Dataset> {
        let d = group.dataset(name).map_err(h)?;
        let bytes = (d.size() as u64).saturating_mul(d.dtype().map_err(h)?.size() as u64);
        if bytes > crate::io::npz::MAX_MEMBER_BYTES {
            return Err(bad(format!(
                "`{name}` declares {:?} elements ({bytes} bytes), more than the {} bytes descl reads of one array (io::npz::MAX_MEMBER_BYTES)",
                d.shape(),
                crate::io::npz::MAX_MEMBER_BYTES
            )));
        }
        Ok(d)
    };
    let kp: Array2<f32> = dataset("keypoints")?.read_2d().map_err(h)?;
    if kp.ncols() != 2 {
        return Err(bad(format!("`keypoints` must be N×2, is {:?}", kp.shape())));
    }
    let n = kp.nrows();
    let scores: Array1<f32> = dataset("scores")?.read_1d().map_err(h)?;
    let d = dataset("descriptors")?;
    let descriptors = match d.dtype().map_err(h)?.size() {
        1 => {
            let cols: Array2<u8> = d.read_2d().map_err(h)?;
            if cols.shape() != [BINARY_BITS / 8, n] {
                return Err(bad(format!(
                    "binary `descriptors` must be 32×{n}, are {:?}",
                    cols.shape()
                )));
            }
            Descriptors::Binary(
                (0..n)
                    .map(|k| {
                        let mut w = [0u64; 4];
                        for (byte, v) in cols.column(k).iter().enumerate() {
                            w[byte / 8] |= u64::from(*v) << (8 * (byte % 8));
                        }
                        w
                    })
                    .collect(),
            )
        }
        _ => {
            let cols: Array2<f32> = d.read_2d().map_err(h)?;
            if cols.ncols() != n || cols.nrows() == 0 {
                return Err(bad(format!(
                    "`descriptors` must be D×{n}, are {:?}",
                    cols.shape()
                )));
            }
            Descriptors::Float(cols.t().as_standard_layout().into_owned())
        }
    };
    if scores.len() != n {
        return Err(bad(format!("{} scores for {n} keypoints", scores.len())));
    }
    let scores = scores.to_vec();
    crate::io::features::check_finite(&scores, &descriptors).map_err(bad)?;
    let frames = kp
        .rows()
        .into_iter()
        .map(|r| crate::frame::Frame {
            x: r[0],
            y: r[1],
            a: [[1.0, 0.0], [0.0, 1.0]],
        })
        .collect();
    let mut f = Features {
        frames,
        scores,
        descriptors,
        meta,
    };
    let id = crate::provenance::FeaturesId::of(&f);
    if f.meta.content.as_ref().is_some_and(|c| *c != id) {
        return Err(bad("the datasets are not the features the group's metadata records (content identity differs)".into()));
    }
    f.meta.content = Some(id);
    Ok(f)
}

/// The recorded metadata of images `names` of a `features.h5` (their groups' attributes alone,
/// the file opened once): what [`crate::provenance::set_identity`] holds them to.
pub fn read_features_metas(
    path: &Path,
    names: &[String],
) -> Result<Vec<crate::features::FeatureMeta>> {
    let file = hdf5::File::open(path).map_err(|e| h5_err(path, e))?;
    names
        .iter()
        .map(|name| {
            let at = path.join(name);
            let group = file
                .group(name)
                .map_err(|_| Error::format(&at, "no such image in the file"))?;
            read_json_attr(&group, FEATURES_META_ATTR).ok_or_else(|| {
                Error::format(&at, format!("no descl `{FEATURES_META_ATTR}` attribute"))
            })
        })
        .collect()
}

/// The recorded identity of image `name`'s features in a `features.h5` (its metadata alone).
pub fn features_identity(path: &Path, name: &str) -> Option<crate::provenance::FeaturesId> {
    let file = hdf5::File::open(path).ok()?;
    let group = file.group(name).ok()?;
    read_json_attr::<crate::features::FeatureMeta>(&group, FEATURES_META_ATTR)?.content
}

/// Writes `value` as JSON into the string attribute `name` of `location`.
fn write_json_attr<T: serde::Serialize>(
    out: &H5Out,
    location: &hdf5::Location,
    name: &str,
    value: &T,
) -> Result<()> {
    let json = serde_json::to_string(value)
        .map_err(|e| Error::format(&out.target, format!("{name}: {e}")))?;
    let value: hdf5::types::VarLenUnicode = json
        .parse()
        .map_err(|e| Error::format(&out.target, format!("{name}: {e}")))?;
    location
        .new_attr::<hdf5::types::VarLenUnicode>()
        .shape(())
        .create(name)
        .and_then(|a| a.write_scalar(&value))
        .map_err(|e| out.err(e))
}

/// The JSON string attribute `name` of `location`, parsed; None if absent or unreadable.
fn read_json_attr<T: serde::de::DeserializeOwned>(
    location: &hdf5::Location,
    name: &str,
) -> Option<T> {
    let text = location
        .attr(name)
        .and_then(|a| a.read_scalar::<hdf5::types::VarLenUnicode>())
        .ok()?;
    serde_json::from_str(text.as_str()).ok()
}

fn write<T: hdf5::H5Type, D: ndarray::Dimension>(
    out: &H5Out,
    group: &hdf5::Group,
    name: &str,
    data: &ndarray::Array<T, D>,
) -> Result<hdf5::Dataset> {
    group
        .new_dataset_builder()
        .with_data(data)
        .create(name)
        .map_err(|e| out.err(e))
}

/// One image's datasets into its (new) group.
fn write_image(out: &H5Out, group: &hdf5::Group, f: &Features) -> Result<()> {
    let n = f.frames.len();
    let kp = Array2::from_shape_fn((n, 2), |(k, c)| {
        let fr = &f.frames[k];
        if c == 0 {
            fr.x
        } else {
            fr.y
        }
    });
    let ds = write(out, group, "keypoints", &kp)?;
    ds.new_attr::<f64>()
        .shape(())
        .create("uncertainty")
        .and_then(|a| a.write_scalar(&KEYPOINT_UNCERTAINTY_PX))
        .map_err(|e| out.err(e))?;
    write_descriptors(out, group, &f.descriptors)?;
    write(out, group, "scores", &Array1::from(f.scores.clone()))?;
    let size = Array1::from(vec![
        i64::from(f.meta.image_width),
        i64::from(f.meta.image_height),
    ]);
    write(out, group, "image_size", &size)?;
    let mut meta = f.meta.clone();
    meta.content = Some(f.id());
    write_json_attr(out, group, FEATURES_META_ATTR, &meta)
}

/// Descriptors as hloc stores them: one column per keypoint.
fn write_descriptors(out: &H5Out, group: &hdf5::Group, d: &Descriptors) -> Result<()> {
    match d {
        Descriptors::Float(m) => {
            let columns = m.t().as_standard_layout().into_owned();
            write(out, group, "descriptors", &columns).map(drop)
        }
        Descriptors::Binary(codes) => {
            let bytes = BINARY_BITS / 8;
            let t = Array2::from_shape_fn((bytes, codes.len()), |(byte, k)| {
                codes[k][byte / 8].to_le_bytes()[byte % 8]
            });
            write(out, group, "descriptors", &t).map(drop)
        }
    }
}

impl Writer for HlocFolder {
    fn expect_images(&mut self, names: &[String]) -> Result<()> {
        self.run_names = Some(names.iter().cloned().collect());
        Ok(())
    }

    /// Before any work: features of another model than the file's start the file again when
    /// they replace all of it, and are refused otherwise (never after extracting them).
    fn expect_settings(&mut self, settings: &crate::provenance::ExtractSettings) -> Result<()> {
        match &self.model {
            Some(m) if *m != settings.model => self.replace_model(&settings.model),
            _ => Ok(()),
        }
    }

    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
        self.check_model(image.features)?;
        let out = &self.features;
        let group = out.fresh_group(image.name)?;
        // A group is whole or absent: what failed half-way is removed.
        if let Err(e) = write_image(out, &group, image.features) {
            if let Ok(file) = out.file() {
                let _ = file.unlink(image.name);
            }
            return Err(e);
        }
        drop(group);
        self.features.checkpoint_if_due()?;
        Ok(Some(self.features.target.clone()))
    }

    /// Done when the image's group exists and records the provenance this run would give it.
    fn has_image(&self, name: &str, expected: &FeatureProvenance) -> Reuse {
        if crate::names::check_name(name).is_err() {
            return Reuse::Missing;
        }
        let Some(group) = self.features.file().ok().and_then(|f| f.group(name).ok()) else {
            return Reuse::Missing;
        };
        let meta: Option<crate::features::FeatureMeta> = read_json_attr(&group, FEATURES_META_ATTR);
        let at = self.features.target.join(name);
        compare(&at, meta.and_then(|m| m.provenance).as_ref(), expected)
    }

    /// Done when `matches.h5` holds the pair (either order, as hloc's `find_pair`) recording
    /// this run's features and settings.
    fn has_pair(&self, a: &str, b: &str, expected: &PairProvenance) -> Reuse {
        let (key, swapped) = (names_to_pair(a, b), names_to_pair(b, a));
        let at = |k: &str| self.dir.join(MATCHES_FILE).join(k);
        if let Some(recorded) = self.existing_pairs.get(&key) {
            return compare(&at(&key), recorded.as_ref(), expected);
        }
        match self.existing_pairs.get(&swapped) {
            Some(recorded) => compare(&at(&swapped), recorded.as_ref(), &expected.swapped()),
            None => Reuse::Missing,
        }
    }

    fn records_plan(&self) -> bool {
        true
    }
    /// Refuses, before any work, pairs that hloc's keys cannot tell apart (`claim_pair_key`);
    /// then records the plan as an npz folder does ([`crate::io::plan::record_match_plan`]:
    /// the folder claimed, another run's plan of other settings refused unless
    /// [`Writer::replace_other_plan`]), and the extract plan of the features stored from
    /// images beside it.
    fn record_plan(&mut self, plan: &MatchPlan) -> Result<()> {
        for [a, b] in &plan.pairs {
            self.claim_pair_key(a, b)?;
        }
        // Features of another model in `features.h5` refuse this run's (`check_model`): said
        // before either plan is written, so that a refused run leaves the folder as it was.
        if let (Some(extract), Some(m)) = (&self.extract_plan, &self.model) {
            if *m != extract.settings.model {
                return Err(other_model_error(
                    &self.features.target,
                    m,
                    &extract.settings.model,
                ));
            }
        }
        let claim = record_match_plan(
            &self.dir,
            plan,
            self.replace_other_plan,
            MatchFolderFormat::Hloc,
        )?;
        self.claim = Some(claim);
        match &self.extract_plan {
            Some(extract) => write_plan(&self.dir, EXTRACT_PLAN_FILE, extract),
            None => Ok(()),
        }
    }

    fn expect_extract_plan(&mut self, plan: ExtractPlan) {
        self.extract_plan = Some(plan);
    }

    fn replace_other_plan(&mut self) {
        self.replace_other_plan = true;
    }

    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
        let (fa, fb) = (pair.a.features, pair.b.features);
        self.add_stored_pair(&StoredPair {
            a: pair.a.name,
            b: pair.b.name,
            ids: [&fa.id(), &fb.id()],
            binary: matches!(fa.descriptors, Descriptors::Binary(_)),
            result: pair.result,
            config: pair.config,
            intrinsics: PairProvenance::intrinsics_used(
                pair.config,
                pair.a.known_intrinsics(),
                pair.b.known_intrinsics(),
            ),
        })?;
        Ok(Some(self.dir.join(MATCHES_FILE)))
    }

    /// hloc's pair group from the matches and the two features' identities (their keypoint
    /// counts size `matches0`); `descl sfm merge --hloc` stores the pairs of sharded runs
    /// through it.
    fn add_stored_pair(&mut self, pair: &StoredPair<'_>) -> Result<()> {
        let (na, nb) = (pair.ids[0].keypoints, pair.ids[1].keypoints);
        let m = &pair.result.matches;
        let key = self.claim_pair_key(pair.a, pair.b)?;
        let mut matches0 = vec![UNMATCHED; na];
        let mut scores = vec![0.0f32; na];
        for (p, &d) in m.pairs.iter().zip(&m.distances) {
            let i = p[0] as usize;
            if i >= matches0.len() || p[1] as usize >= nb {
                return Err(Error::InvalidInput(format!(
                    "{key}: match {p:?} beyond the keypoints ({na} and {nb})"
                )));
            }
            matches0[i] = p[1] as i32;
            scores[i] = matching_score(pair.binary, d);
        }
        let out = self.matches()?;
        let group = out.fresh_group(&key)?;
        let written = if nb <= i16::MAX as usize {
            let m16 = Array1::from_iter(matches0.iter().map(|&j| j as i16));
            write(out, &group, "matches0", &m16)
        } else {
            write(out, &group, "matches0", &Array1::from(matches0))
        }
        .and_then(|_| {
            let s16 = Array1::from_iter(scores.into_iter().map(f16::from_f32));
            write(out, &group, "matching_scores0", &s16)
        })
        .and_then(|_| {
            let provenance = PairProvenance {
                a: pair.ids[0].clone(),
                b: pair.ids[1].clone(),
                config: pair.config.clone(),
                intrinsics: pair.intrinsics,
            };
            write_json_attr(out, &group, PAIR_PROVENANCE_ATTR, &provenance)
        });
        if let Err(e) = written {
            if let Ok(file) = out.file() {
                let _ = file.unlink(&key);
            }
            return Err(e);
        }
        drop(group);
        out.checkpoint_if_due()
    }

    fn finish(mut self: Box<Self>) -> Result<PathBuf> {
        self.drop_stale_pairs()?;
        let HlocFolder {
            dir,
            features,
            matches,
            claim,
            ..
        } = *self;
        features.finish()?;
        if let Some(m) = matches {
            m.finish()?;
        }
        // Released once both files are in place.
        drop(claim);
        Ok(dir)
    }

    fn needs_images(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::features::tests::features;
    use crate::matching::two_view::{PairConfig, PairResult};
    use crate::matching::Matches;

    fn record<'a>(name: &'a str, f: &'a Features) -> ImageRecord<'a> {
        ImageRecord {
            name,
            path: Path::new(name),
            features: f,
            intrinsics: None,
            focal_known: false,
        }
    }

    #[test]
    fn files_hold_hlocs_layout_and_a_rerun_continues_them() {
        let dir = tempfile::tempdir().unwrap();
        let (fa, fb) = (features(false, 5), features(false, 4));
        let result = PairResult {
            matches: Matches {
                pairs: vec![[0, 3], [2, 1]],
                distances: vec![0.0, 1.0],
            },
            verification: None,
            seconds: Default::default(),
        };
        let cfg = PairConfig::default();
        let mut w = Box::new(HlocFolder::create(dir.path()).unwrap());
        w.add_image(&record("a.jpg", &fa)).unwrap();
        w.add_image(&record("sub/b.jpg", &fb)).unwrap();
        // One run at a time per folder.
        let e = HlocFolder::create(dir.path()).err().unwrap().to_string();
        assert!(e.contains("another descl run"), "{e}");
        let pair = PairRecord {
            a: record("a.jpg", &fa),
            b: record("sub/b.jpg", &fb),
            result: &result,
            config: &cfg,
        };
        w.add_pair(&pair).unwrap();
        w.finish().unwrap();

        let f = hdf5::File::open(dir.path().join(FEATURES_FILE)).unwrap();
        let d = f.dataset("sub/b.jpg/descriptors").unwrap();
        assert_eq!(d.shape(), vec![128, 4]);
        let cols: Array2<f32> = d.read_2d().unwrap();
        let Descriptors::Float(rows) = &fb.descriptors else {
            unreachable!()
        };
        assert_eq!(cols, rows.t());
        assert_eq!(f.dataset("a.jpg/keypoints").unwrap().shape(), vec![5, 2]);
        let size: Array1<i64> = f.dataset("a.jpg/image_size").unwrap().read_1d().unwrap();
        assert_eq!(size.to_vec(), vec![640, 480]);
        let m = hdf5::File::open(dir.path().join(MATCHES_FILE)).unwrap();
        let m0 = m.dataset("a.jpg/sub-b.jpg/matches0").unwrap();
        assert_eq!(m0.dtype().unwrap().size(), 2, "int16");
        let m0: Array1<i16> = m0.read_1d().unwrap();
        assert_eq!(m0.to_vec(), vec![3, -1, 1, -1, -1]);
        let s: Array1<f16> = m
            .dataset("a.jpg/sub-b.jpg/matching_scores0")
            .unwrap()
            .read_1d()
            .unwrap();
        assert_eq!(s.to_vec()[..3], [1.0, 0.0, 0.75].map(f16::from_f32));
        drop((f, m));

        // A rerun sees the pair (either order) made from these features with these settings,
        // not one of other features or settings; it refuses features of another model.
        let mut again = HlocFolder::create(dir.path()).unwrap();
        let made = PairProvenance {
            a: fa.id(),
            b: fb.id(),
            config: cfg.clone(),
            intrinsics: None,
        };
        let (x, y) = ("a.jpg", "sub/b.jpg");
        assert_eq!(again.has_pair(x, y, &made), Reuse::Same);
        // Names, not file names: `b.jpg` of another folder is another image.
        assert_eq!(again.has_pair(x, "b.jpg", &made), Reuse::Missing);
        let swapped = PairProvenance {
            a: fb.id(),
            b: fa.id(),
            config: cfg.clone(),
            intrinsics: None,
        };
        assert_eq!(again.has_pair(y, x, &swapped), Reuse::Same);
        let fewer = PairProvenance {
            b: features(false, 3).id(),
            ..made.clone()
        };
        let Reuse::Stale(why) = again.has_pair(x, y, &fewer) else {
            panic!("features of 3 keypoints taken for 4")
        };
        assert!(
            why.contains("matches.h5") && why.contains("b.keypoints"),
            "{why}"
        );
        let mut other = features(false, 2);
        other.meta.model = "another-model".into();
        let e = again.add_image(&record("c.jpg", &other)).unwrap_err();
        assert!(e.to_string().contains("another-model"), "{e}");
        // Dropped without finish (a failed run): the finished files stay as they were.
        drop(again);
        let f = hdf5::File::open(dir.path().join(FEATURES_FILE)).unwrap();
        assert!(!f.link_exists("c.jpg") && f.link_exists("a.jpg"));
    }

    #[test]
    fn features_read_back_with_their_identity() {
        let dir = tempfile::tempdir().unwrap();
        let (fa, fb) = (features(false, 5), features(true, 3));
        let mut w = Box::new(HlocFolder::create(dir.path()).unwrap());
        w.add_image(&record("a.jpg", &fa)).unwrap();
        w.add_image(&record("sub/b.jpg", &fb)).unwrap();
        w.finish().unwrap();
        let file = dir.path().join(FEATURES_FILE);
        assert_eq!(list_features(&file).unwrap(), ["a.jpg", "sub/b.jpg"]);
        for (name, f) in [("a.jpg", &fa), ("sub/b.jpg", &fb)] {
            let back = read_features(&file, name).unwrap();
            assert_eq!(back.id(), f.id());
            assert_eq!(features_identity(&file, name), Some(f.id()));
            assert_eq!(
                (&back.descriptors, &back.scores),
                (&f.descriptors, &f.scores)
            );
        }
        let e = read_features(&file, "c.jpg").unwrap_err().to_string();
        assert!(e.contains("c.jpg"), "{e}");
    }

    #[test]
    fn binary_codes_are_stored_as_byte_columns() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = features(true, 2);
        f.descriptors = Descriptors::Binary(vec![[1 << 9, 0, 0, 1 << 63], [0xff, 0, 0, 0]]);
        let mut w = Box::new(HlocFolder::create(dir.path()).unwrap());
        w.add_image(&record("a.png", &f)).unwrap();
        w.finish().unwrap();
        let file = hdf5::File::open(dir.path().join(FEATURES_FILE)).unwrap();
        let d: Array2<u8> = file
            .dataset("a.png/descriptors")
            .unwrap()
            .read_2d()
            .unwrap();
        assert_eq!(d.shape(), &[32, 2]);
        // Bit i is bit i % 8 of byte i / 8, as in the .npz files.
        assert_eq!((d[[1, 0]], d[[31, 0]], d[[0, 1]]), (2, 0x80, 0xff));
    }

    #[test]
    fn pair_names_follow_hloc() {
        assert_eq!(names_to_pair("a.jpg", "b.jpg"), "a.jpg/b.jpg");
        assert_eq!(
            names_to_pair("db/1.jpg", "query/night/2.jpg"),
            "db-1.jpg/query-night-2.jpg"
        );
    }

    #[test]
    fn scores_follow_hlocs_nearest_neighbour() {
        // Unit vectors at distance d have cos = 1 − d²/2, hloc's score (1 + cos)/2.
        for d in [0.0f32, 0.5, 1.0, std::f32::consts::SQRT_2, 2.0] {
            let cos = 1.0 - d * d / 2.0;
            assert!((matching_score(false, d) - (1.0 + cos) / 2.0).abs() < 1e-6);
        }
        // 64 of 256 bits differ.
        assert_eq!(matching_score(true, 64.0), 0.75);
    }
}
