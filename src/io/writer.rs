//! The writer interface every output format implements: the records a command hands over
//! ([`ImageRecord`], [`PairRecord`]) and [`Writer`]. It imports no format, so that formats
//! (`io::npz_folder`, `io::hloc`, the COLMAP writer in `io::output`) and the file layouts they
//! use (`io::matches`) depend on it and never on each other or on the registry
//! ([`crate::io::output::open`]).

use crate::error::Result;
use crate::features::Features;
use crate::geometry::Intrinsics;
use crate::io::plan::MatchPlan;
use crate::matching::two_view::{PairConfig, PairResult};
use crate::provenance::{FeatureProvenance, FeaturesId, PairProvenance, Reuse};
use std::path::{Path, PathBuf};

/// One image of a set, as handed to a writer.
#[derive(Debug, Clone, Copy)]
pub struct ImageRecord<'a> {
    /// The image's name in the set (its path under the image folder, `a/0000.jpg`, or the
    /// file name of an image given as a file: [`crate::names`]; COLMAP's `images.name`).
    pub name: &'a str,
    /// The image (or features) file it came from.
    pub path: &'a Path,
    pub features: &'a Features,
    /// Camera intrinsics when known (flag, file, EXIF or a prior).
    pub intrinsics: Option<&'a Intrinsics>,
    /// Whether the focal length was measured (EXIF, flag) rather than a prior.
    pub focal_known: bool,
}

impl<'a> ImageRecord<'a> {
    /// The intrinsics a pair of this image may be verified with: measured ones (EXIF, a flag
    /// or a file), never a prior guessed from the image size (`descl sfm`'s COLMAP prior,
    /// which only starts its camera).
    pub fn known_intrinsics(&self) -> Option<&'a Intrinsics> {
        self.intrinsics.filter(|_| self.focal_known)
    }
}

/// One matched pair, as handed to a writer.
#[derive(Debug, Clone, Copy)]
pub struct PairRecord<'a> {
    pub a: ImageRecord<'a>,
    pub b: ImageRecord<'a>,
    pub result: &'a PairResult,
    pub config: &'a PairConfig,
}

/// One pair of a merge of sharded runs (`descl sfm merge`): both images' features are stored
/// already, so the pair comes by name, with what a format needs of its features.
#[derive(Debug, Clone, Copy)]
pub struct StoredPair<'a> {
    pub a: &'a str,
    pub b: &'a str,
    /// The identities of the two features the matches index (their keypoint counts included).
    pub ids: [&'a FeaturesId; 2],
    /// Whether the descriptors are 256-bit codes (the matching score's scale).
    pub binary: bool,
    pub result: &'a PairResult,
    pub config: &'a PairConfig,
    /// The intrinsics of A and B the pair was verified with, where it used them
    /// ([`crate::provenance::PairProvenance::intrinsics_used`]).
    pub intrinsics: Option<[crate::geometry::Intrinsics; 2]>,
}

/// A destination for features and matches. Writes are atomic per item (a killed run leaves
/// whole files or none); `finish` completes the output.
pub trait Writer: Send {
    /// Stores one image's features; returns the file written, if the format has one per image.
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>>;
    /// Whether the features of the image `name` are already stored, whole, with the
    /// provenance this run would give them (`descl extract --resume` skips them when
    /// [`Reuse::Same`], redoes them when stale).
    fn has_image(&self, _name: &str, _expected: &FeatureProvenance) -> Reuse {
        Reuse::Missing
    }
    /// Whether the pair of the images `a` and `b` (by name) is already stored, made from the
    /// features and with the settings of `expected` (a resumed run skips it when
    /// [`Reuse::Same`]).
    fn has_pair(&self, _a: &str, _b: &str, _expected: &PairProvenance) -> Reuse {
        Reuse::Missing
    }
    /// The names of the whole run's images (all its shards), before any is stored: a format
    /// that keeps one model per folder lets the run replace files of another model that are
    /// all the run's own images.
    fn expect_images(&mut self, _names: &[String]) -> Result<()> {
        Ok(())
    }
    /// The settings of the features the run will store, before any is extracted: a format that
    /// keeps one model per file or folder refuses another model here (or starts again, when
    /// the run replaces everything), not after the work.
    fn expect_settings(&mut self, _settings: &crate::provenance::ExtractSettings) -> Result<()> {
        Ok(())
    }
    /// Records what the whole run (all its shards) is meant to produce, for `descl sfm merge`
    /// ([`crate::io::plan`]); formats without a folder of their own ignore it.
    fn record_plan(&mut self, _plan: &MatchPlan) -> Result<()> {
        Ok(())
    }
    /// Whether [`Writer::record_plan`] keeps the plan (a format with a folder of its own): the
    /// run then names each input's content in it ([`MatchPlan::input_ids`]), which costs a
    /// read of every image it extracts.
    fn records_plan(&self) -> bool {
        false
    }
    /// The extract plan of the features the run stores from images (`descl match --images
    /// IMAGES --format h5`'s `features.h5`), written by [`Writer::record_plan`] beside the
    /// match plan, under the run's claim on the folder; formats that store no features set of
    /// their own ignore it.
    fn expect_extract_plan(&mut self, _plan: crate::io::plan::ExtractPlan) {}
    /// Lets [`Writer::record_plan`] replace a plan of another run's settings already in the
    /// output (`descl match --overwrite`) where it would refuse it; formats that refuse none
    /// ignore it.
    fn replace_other_plan(&mut self) {}
    /// Stores one pair's matches and verification; returns the file written, if any.
    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>>;
    /// Stores one pair of a merge whose images were stored by [`Writer::add_image`]; formats
    /// that cannot be merged into say so.
    fn add_stored_pair(&mut self, pair: &StoredPair<'_>) -> Result<()> {
        Err(crate::error::Error::InvalidInput(format!(
            "{} – {}: this output format is not a merge target",
            pair.a, pair.b
        )))
    }
    /// Completes the output (e.g. renames a database into place); returns its path.
    fn finish(self: Box<Self>) -> Result<PathBuf>;
    /// Whether every image's features must be stored even when only pairs were asked for
    /// (pair files that index keypoints stored elsewhere in the same output, like hloc's).
    fn needs_images(&self) -> bool {
        false
    }
}
