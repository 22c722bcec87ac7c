//! `descl sfm merge`: the outputs of sharded `descl extract` and `descl match` runs into one
//! COLMAP database, or into hloc's files, refusing stale, foreign, mixed or missing inputs
//! unless `allow_partial`. This file holds the merge's order (images, then pairs, then the
//! completeness check) and its outputs; the checks of the inputs are in `merge_checks`,
//! `intrinsics` and `merge_pairs`.

use super::database::colmap_camera;
use super::intrinsics::verified_intrinsics;
use super::merge_checks::{merge_images, MergeNames, MergeSet};
use super::merge_pairs::store_matches;
use crate::error::Result;
use crate::io::output::{ColmapOptions, ColmapWriter};
use crate::io::plan::{EXTRACT_PLAN_FILE, MATCH_PLAN_FILE};
use crate::io::writer::Writer;
use crate::matching::two_view::COLMAP_MAX_ERROR_PX;
use crate::progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where `descl sfm merge` reads a sharded run's outputs.
#[derive(Debug, Clone)]
pub struct MergeInputs {
    /// Features files (`descl extract --out DIR`, all shards into one folder).
    pub features: PathBuf,
    /// Matches files (`descl match --images FEATURES --out-dir DIR --planar-check`).
    pub matches: PathBuf,
    /// The images, for EXIF focal lengths (default: the image paths the features files record).
    pub images: Option<PathBuf>,
    /// Merge what is there when images or pairs of the runs' plans are missing (or a folder
    /// has no plan, or an image file is not found), reporting them, instead of refusing.
    pub allow_partial: bool,
}

/// What `descl sfm merge` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct MergeSummary {
    /// The COLMAP database, or the folder of hloc's files.
    pub output: PathBuf,
    pub images: usize,
    pub pairs: usize,
    pub verified_pairs: usize,
    /// Matches files made without the planar check: their pairs keep F/E labels (COLMAP would
    /// label a planar one 6).
    pub pairs_without_planar_check: usize,
    /// The RANSAC thresholds (px) the merged pairs were verified at, distinct and ascending:
    /// one for the pairs of one match run, none when no pair was verified. `descl match`
    /// verifies at 1 px unless `--planar-check` or `--threshold`, `descl sfm` and the mapping
    /// policy at COLMAP's [`COLMAP_MAX_ERROR_PX`] ([`MergeSummary::verified_not_as_sfm`]).
    pub verified_at_px: Vec<f64>,
    /// Images of the extract plan without a features file (merged with `allow_partial`).
    pub missing_images: Vec<String>,
    /// Pairs of the match plan without a matches file (merged with `allow_partial`).
    pub missing_pairs: Vec<[String; 2]>,
    /// Images with features that the match plan did not include (matched before their extract
    /// shard ran; merged with `allow_partial`, without pairs).
    pub images_not_matched: Vec<String>,
    /// Folders without a run plan (merged with `allow_partial`).
    pub without_plan: Vec<PathBuf>,
    /// Images whose file was not found (at the path their features record, or under
    /// `--images`): merged with `allow_partial`, without their EXIF focal length and without the
    /// check that they are the images the features were extracted from.
    pub images_not_found: Vec<String>,
    /// How the merged features differ from the ones `descl sfm` extracts
    /// ([`differences_from_sfm`]; empty when they are made as `descl sfm` makes them, or when
    /// the features record no settings): the database is then not the one `descl sfm` writes for
    /// these images, which a user who extracted with `descl extract`'s defaults should be told.
    pub differs_from_sfm: Vec<String>,
}

impl MergeSummary {
    /// The thresholds of [`MergeSummary::verified_at_px`] that are not the
    /// [`COLMAP_MAX_ERROR_PX`] `descl sfm` verifies at: the database then holds fewer inliers
    /// per pair than `descl sfm` would write for these features.
    pub fn verified_not_as_sfm(&self) -> Vec<f64> {
        self.verified_at_px
            .iter()
            .copied()
            .filter(|&px| px != COLMAP_MAX_ERROR_PX)
            .collect()
    }

    /// Whether something was left out or not checked (only with `allow_partial`).
    pub fn is_partial(&self) -> bool {
        !self.missing_images.is_empty()
            || !self.missing_pairs.is_empty()
            || !self.images_not_matched.is_empty()
            || !self.without_plan.is_empty()
            || !self.images_not_found.is_empty()
    }
}

/// Refuses a merge that lacks images or pairs of the runs' plans (or a plan), unless
/// `allow_partial`: the error names what is missing and where.
fn check_complete(inputs: &MergeInputs, s: &MergeSummary) -> Result<()> {
    use crate::io::plan::listing;
    let mut gaps = Vec::new();
    if !s.missing_images.is_empty() {
        gaps.push(format!(
            "{} images of the extract plan have no features file in {} ({})",
            s.missing_images.len(),
            inputs.features.display(),
            listing(&s.missing_images)
        ));
    }
    if !s.missing_pairs.is_empty() {
        gaps.push(format!(
            "{} pairs of the match plan have no matches file in {} ({})",
            s.missing_pairs.len(),
            inputs.matches.display(),
            listing(s.missing_pairs.iter().map(|[a, b]| format!("{a} – {b}")))
        ));
    }
    if !s.images_not_matched.is_empty() {
        gaps.push(format!(
            "{} images of {} are not among the inputs of {} (matched before their extract shard ran: match again) ({})",
            s.images_not_matched.len(),
            inputs.features.display(),
            inputs.matches.join(MATCH_PLAN_FILE).display(),
            listing(&s.images_not_matched)
        ));
    }
    for dir in &s.without_plan {
        gaps.push(format!(
            "{} has no run plan ({} or {}: made by an older descl or by hand), so missing shards cannot be told",
            dir.display(),
            EXTRACT_PLAN_FILE,
            MATCH_PLAN_FILE
        ));
    }
    if gaps.is_empty() || inputs.allow_partial {
        return Ok(());
    }
    Err(crate::Error::InvalidInput(format!(
        "incomplete run: {}; run the missing shards, or pass --allow-partial to merge what is there",
        gaps.join("; ")
    )))
}

/// Builds one COLMAP database from the outputs of sharded `descl extract` and `descl match`
/// runs: the database that `descl sfm` writes for the same images and settings. One process
/// (SQLite has one writer); features are read one at a time and matches files in blocks, so
/// memory stays bounded as the set grows.
pub fn merge_database(
    inputs: &MergeInputs,
    db: &Path,
    overwrite: bool,
    options: ColmapOptions,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    let single_camera = options.single_camera;
    let writer = ColmapWriter::create(db, overwrite, options)?;
    merge_into(inputs, single_camera, Box::new(writer), progress)
}

/// Writes hloc's `features.h5` and `matches.h5` into `dir` from the outputs of sharded `descl
/// extract` and `descl match` runs (`--format h5` is one file per folder, written by one
/// process, so the shards run in the npz format and are merged here, without extracting or
/// matching again): the files `descl extract --format h5` and `descl match --format h5` write
/// for the same images, pairs and settings. Existing files in `dir` are refused unless
/// `overwrite`. The merge is built in a staging folder inside `dir` (under the files' locks) and
/// the two files are renamed into place only once it is complete: a failed, refused or killed
/// merge leaves `dir` as it was (a killed one's staging folder is removed by the next merge).
/// Needs the cargo feature `h5`.
pub fn merge_hloc(
    inputs: &MergeInputs,
    dir: &Path,
    overwrite: bool,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    use crate::io::output::{open, Format, HLOC_FILES};
    if dir.exists() && !dir.is_dir() {
        return Err(crate::Error::InvalidInput(format!(
            "{}: not a folder (--hloc names the folder of features.h5 and matches.h5)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
    let targets: Vec<PathBuf> = HLOC_FILES.iter().map(|f| dir.join(f)).collect();
    if let Some(first) = targets.iter().find(|p| p.exists()).filter(|_| !overwrite) {
        return Err(crate::Error::InvalidInput(format!(
            "{}: exists; pass --overwrite to replace hloc's files in {}",
            first.display(),
            dir.display()
        )));
    }
    // The staging folder inside `dir`: hidden, as descl's other temporaries, from the folder
    // listings of every command.
    let staging_prefix = format!("{}hloc-merge-", crate::io::atomic::TMP_PREFIX);
    let _locks = targets
        .iter()
        .map(|t| crate::io::atomic::OutputLock::acquire(t, "merge into another folder"))
        .collect::<Result<Vec<_>>>()?;
    // A killed merge's staging folder (no merge holds these locks now).
    crate::io::atomic::remove_stale_staging(dir, &staging_prefix)?;
    let staging = crate::io::atomic::staging_dir(dir, &staging_prefix)?;
    let summary =
        open(Format::H5, staging.path()).and_then(|w| merge_into(inputs, false, w, progress))?;
    // Both new files carry this merge's id: a kill between the renames below leaves a pair
    // whose ids differ, which descl refuses when it opens the folder to write into it
    // (`hloc::check_pair` in `HlocFolder::create`; readers of features.h5 alone do not check).
    stamp_merge(staging.path())?;
    for (file, target) in HLOC_FILES.iter().zip(&targets) {
        let made = staging.path().join(file);
        if made.exists() {
            std::fs::rename(&made, target).map_err(|e| crate::Error::io(target, e))?;
        } else if target.exists() {
            // A merge without pairs writes no matches.h5: an older one must not stay beside
            // the new features.h5.
            std::fs::remove_file(target).map_err(|e| crate::Error::io(target, e))?;
        }
    }
    Ok(MergeSummary {
        output: dir.to_path_buf(),
        ..summary
    })
}

/// Marks the files of one `descl sfm merge --hloc` in `dir` (its staging folder) with a new id
/// ([`crate::io::hloc::PAIR_ID_ATTR`]: the time in nanoseconds and the process id).
#[cfg(feature = "h5")]
fn stamp_merge(dir: &Path) -> Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let id = format!("merge-{nanos:x}-{:x}", std::process::id());
    for file in crate::io::output::HLOC_FILES {
        let made = dir.join(file);
        if made.exists() {
            crate::io::hloc::set_pair_id(&made, &id)?;
        }
    }
    Ok(())
}

/// Without hloc's files there is nothing to mark.
#[cfg(not(feature = "h5"))]
fn stamp_merge(_: &Path) -> Result<()> {
    Ok(())
}

/// The merge of [`merge_database`] and [`merge_hloc`] into `writer`: images, then pairs
/// ([`Writer::add_stored_pair`]), checked against the plans before the output is finished (an
/// incomplete run leaves none).
fn merge_into(
    inputs: &MergeInputs,
    single_camera: bool,
    mut writer: Box<dyn Writer>,
    progress: &dyn Progress,
) -> Result<MergeSummary> {
    let mut summary = MergeSummary {
        output: PathBuf::new(),
        images: 0,
        pairs: 0,
        verified_pairs: 0,
        pairs_without_planar_check: 0,
        verified_at_px: Vec::new(),
        missing_images: Vec::new(),
        missing_pairs: Vec::new(),
        images_not_matched: Vec::new(),
        without_plan: Vec::new(),
        images_not_found: Vec::new(),
        differs_from_sfm: Vec::new(),
    };
    let (images, model) = merge_images(inputs, &mut summary, progress)?;
    summary.images = images.len();
    let names = MergeNames::of(&images);
    let verified = verified_intrinsics(inputs, &images, &names, single_camera, progress)?;
    progress.start("store features", images.len() as u64);
    let mut ids = Vec::with_capacity(images.len());
    let mut binary = false;
    for (image, verified) in images.iter().zip(&verified) {
        let f = crate::io::features::read_features(&image.file)?;
        ids.push(f.id());
        binary = matches!(f.descriptors, crate::describe::Descriptors::Binary(_));
        // The camera holds the intrinsics its pairs were verified with, as known (issue 44);
        // an image whose pairs did not use them keeps its EXIF focal length or COLMAP's guess.
        let (k, known) = match verified {
            Some(k) => (Some(*k), true),
            None => colmap_camera(&image.image, &f)?,
        };
        writer.add_image(&crate::io::writer::ImageRecord {
            name: &image.name,
            path: &image.image,
            features: &f,
            intrinsics: k.as_ref(),
            focal_known: known,
        })?;
        progress.inc(1);
    }
    progress.finish();

    let set = MergeSet {
        inputs,
        images: &images,
        names: &names,
        ids: &ids,
        model: &model,
        binary,
    };
    store_matches(&set, &mut *writer, &mut summary, progress)?;
    // Checked before the output is put in place: an incomplete run leaves none.
    check_complete(inputs, &summary)?;
    summary.output = writer.finish()?;
    Ok(summary)
}
