//! The pairs of a merge: every matches file checked against the features and the match plan
//! (its pair planned, its sides known, its indices within their keypoints, its provenance the
//! features') before it is stored, and the plan's pairs without a file listed.

use super::merge::MergeSummary;
use super::merge_checks::MergeSet;
use crate::error::Result;
use crate::image_set;
use crate::io::matches::MatchesFile;
use crate::io::plan::{read_plan, MatchPlan, MATCH_PLAN_FILE};
use crate::io::writer::Writer;
use crate::progress::Progress;
use crate::provenance::PairProvenance;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Stores every matches file of `set.inputs.matches` (read in parallel blocks): a pair matched
/// twice, a side without features, another model, a match index beyond a side's keypoints, or
/// matches made from other features than the folder's (or under other settings than the match
/// plan's) is an error naming the file. Pairs of the plan without a file go into
/// `summary.missing_pairs`.
pub(super) fn store_matches(
    set: &MergeSet<'_>,
    writer: &mut dyn Writer,
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<()> {
    use rayon::prelude::*;
    let files = crate::io::npz_folder::npz_files(&set.inputs.matches, true)?;
    let plan: Option<MatchPlan> = read_plan(&set.inputs.matches, MATCH_PLAN_FILE)?;
    let pairs = PlannedPairs::of(set, plan.as_ref());
    // Images of the features folder that the match plan did not cover (matched before their
    // extract shard ran): their pairs were never planned.
    if let Some(p) = &plan {
        let covered: HashSet<usize> = p.inputs.iter().filter_map(|n| set.find(n)).collect();
        summary.images_not_matched = (0..set.images.len())
            .filter(|k| !covered.contains(k))
            .map(|k| set.images[k].name.clone())
            .collect();
    }
    let mut seen: HashMap<(usize, usize), PathBuf> = Default::default();
    progress.start("store matches", files.len() as u64);
    for block in files.chunks(image_set::PAIR_BLOCK) {
        let read: Vec<_> = block
            .par_iter()
            .map(|p| crate::io::matches::read_matches(p))
            .collect::<Result<_>>()?;
        for (file, m) in block.iter().zip(read) {
            let (a, b, expected) = pairs.check(file, &m)?;
            if let Some(first) = seen.insert((a.min(b), a.max(b)), file.clone()) {
                return Err(crate::Error::format(
                    file,
                    format!("the pair is matched twice (also {})", first.display()),
                ));
            }
            store(set, writer, summary, (a, b), &m, &expected)?;
            progress.inc(1);
        }
    }
    progress.finish();
    match plan {
        Some(plan) => {
            let index = |n: &str| set.find(n);
            summary.missing_pairs = plan
                .pairs
                .into_iter()
                .filter(|[x, y]| match (index(x), index(y)) {
                    (Some(a), Some(b)) => !seen.contains_key(&(a.min(b), a.max(b))),
                    _ => true,
                })
                .collect();
        }
        None => summary.without_plan.push(set.inputs.matches.clone()),
    }
    Ok(())
}

/// One checked matches file into `writer`, counted in `summary`.
fn store(
    set: &MergeSet<'_>,
    writer: &mut dyn Writer,
    summary: &mut MergeSummary,
    (a, b): (usize, usize),
    m: &MatchesFile,
    expected: &PairProvenance,
) -> Result<()> {
    let r = m.to_result();
    writer.add_stored_pair(&crate::io::writer::StoredPair {
        a: &set.images[a].name,
        b: &set.images[b].name,
        ids: [&set.ids[a], &set.ids[b]],
        binary: set.binary,
        result: &r,
        config: &expected.config,
        intrinsics: expected.intrinsics,
    })?;
    summary.pairs += 1;
    summary.verified_pairs += r.verification.as_ref().is_some_and(|v| v.model.is_some()) as usize;
    summary.pairs_without_planar_check += !m.meta.config.planar_check as usize;
    let px = expected.config.ransac.threshold_px;
    if expected.config.geometry.is_some() && !summary.verified_at_px.contains(&px) {
        summary.verified_at_px.push(px);
        summary.verified_at_px.sort_by(f64::total_cmp);
    }
    Ok(())
}

/// The set of a merge and its match plan, against which each matches file is checked.
struct PlannedPairs<'a> {
    set: &'a MergeSet<'a>,
    plan: Option<&'a MatchPlan>,
    /// The plan's pairs by image index: a matches file of another pair is another run's (a
    /// leftover, or a shard run with other pair settings) and is refused.
    planned: Option<HashSet<(usize, usize)>>,
}

impl<'a> PlannedPairs<'a> {
    fn of(set: &'a MergeSet<'a>, plan: Option<&'a MatchPlan>) -> PlannedPairs<'a> {
        let planned = plan.map(|p| {
            p.pairs
                .iter()
                .filter_map(|[x, y]| Some((set.find(x)?, set.find(y)?)))
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        });
        PlannedPairs { set, plan, planned }
    }

    /// The image of side `p` of `file`, or an error naming the file.
    fn side(&self, file: &Path, p: &str) -> Result<usize> {
        self.set.find(p).ok_or_else(|| {
            let why = match p.is_empty() {
                // `descl match A B --out` records paths, not the set's image names.
                true => "names no image: a single pair's matches (`descl match A B --out`); merge the matches of a set run (`descl match --images FEATURES --out-dir DIR`)".to_string(),
                false => format!("{p} has no features file in {}", self.set.inputs.features.display()),
            };
            crate::Error::format(file, why)
        })
    }

    /// The images of the matches `m` of `file` and the provenance they must record, checked:
    /// a planned pair, the features' model, indices within their keypoints, the provenance.
    fn check(&self, file: &Path, m: &MatchesFile) -> Result<(usize, usize, PairProvenance)> {
        let set = self.set;
        let names = m.meta.side_names();
        let (a, b) = (self.side(file, &names[0])?, self.side(file, &names[1])?);
        if self
            .planned
            .as_ref()
            .is_some_and(|p| !p.contains(&(a.min(b), a.max(b))))
        {
            return Err(crate::Error::format(
                file,
                format!(
                    "the pair {} – {} is not in {} (left by another run into this folder, or a shard run with other pair settings): delete the file, or match again",
                    names[0],
                    names[1],
                    set.inputs.matches.join(MATCH_PLAN_FILE).display()
                ),
            ));
        }
        if m.meta.model != set.model {
            return Err(crate::Error::format(
                file,
                format!("matches of `{}`, features of `{}`", m.meta.model, set.model),
            ));
        }
        self.check_indices(file, m, a, b)?;
        let expected = self.expected(file, m, a, b)?;
        crate::provenance::check(file, m.meta.provenance().as_ref(), &expected).map_err(|e| {
            crate::Error::InvalidInput(format!(
                "{e}; the features are {} and {}: match again",
                set.images[a].file.display(),
                set.images[b].file.display()
            ))
        })?;
        Ok((a, b, expected))
    }

    /// Refuses a match index beyond a side's keypoints (matches made from other features).
    fn check_indices(&self, file: &Path, m: &MatchesFile, a: usize, b: usize) -> Result<()> {
        let set = self.set;
        let (ka, kb) = (set.ids[a].keypoints, set.ids[b].keypoints);
        match m
            .pairs
            .iter()
            .find(|p| p[0] as usize >= ka || p[1] as usize >= kb)
        {
            Some(p) => Err(crate::Error::format(
                file,
                format!(
                    "match {p:?} beyond the keypoints of the features ({ka} in {}, {kb} in {}): the matches were made from other features; match again",
                    set.images[a].file.display(),
                    set.images[b].file.display()
                ),
            )),
            None => Ok(()),
        }
    }

    /// The provenance the matches of images `a` and `b` must record: the plan's settings (or
    /// the file's own without a plan) and, where verification used them (an essential
    /// matrix), the intrinsics the file records (each image's are the same in all its pairs:
    /// `verified_intrinsics`).
    fn expected(&self, file: &Path, m: &MatchesFile, a: usize, b: usize) -> Result<PairProvenance> {
        let config = self
            .plan
            .map_or_else(|| m.meta.config.clone(), |p| p.config.clone());
        let intrinsics = if config.geometry == Some(crate::geometry::ModelKind::Essential) {
            let Some(k) = m.meta.intrinsics else {
                return Err(crate::Error::format(
                    file,
                    "verified by an essential matrix but records no intrinsics (written by an older descl): match again",
                ));
            };
            Some(k)
        } else {
            None
        };
        Ok(PairProvenance {
            a: self.set.ids[a].clone(),
            b: self.set.ids[b].clone(),
            config,
            intrinsics,
        })
    }
}
