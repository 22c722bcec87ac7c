//! Homography sequences: HPatches *sequences* (`1.ppm … 6.ppm`, `H_1_2 … H_1_6`) and Oxford
//! Affine (`img1 … img6` as PPM or PNG, `H1to2p … H1to6p`), evaluated on the pairs 1 → k.
//!
//! Per pair: mean matching accuracy at 1…10 px (D2-Net's protocol: a match is correct when
//! ‖H·x₁ − x₂‖ < t), homography accuracy (mean corner error of the estimated H, SuperPoint's
//! protocol) and the numbers of matches and correct matches.

use crate::error::{Error, Result};
use crate::eval::metrics::{
    accuracy_at, correct_at, homography_corner_error, matching_accuracy, reprojection_errors,
    unrepeated_wrong_matches, HOMOGRAPHY_THRESHOLDS, MMA_THRESHOLDS,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use crate::geometry::Mat3;

/// Images per sequence (1 reference + 5 targets) in both releases.
pub const SEQUENCE_LENGTH: usize = 6;

/// Image-3-pixel threshold index in [`MMA_THRESHOLDS`] (MMA@3 is the headline number).
pub const MMA3_INDEX: usize = 2;

/// One homography sequence: image 1, the targets 2..6 and the ground truth H mapping image 1
/// to each target (x_k ~ H_k x_1), normalised so that H[2][2] = 1.
#[derive(Debug, Clone)]
pub struct HomographySequence {
    pub name: String,
    pub images: Vec<PathBuf>,
    /// `homographies[k - 2]` maps image 1 to image k.
    pub homographies: Vec<Mat3>,
}

/// Reads a homography file: 9 whitespace-separated numbers, normalised by H[2][2] (Oxford's
/// leuven files are not normalised, H[2][2] ≈ 0.58, and H1to5p is negated); one that is not
/// finite after that, or singular, is refused naming the file.
pub fn read_homography(path: &Path) -> Result<Mat3> {
    let text = super::read_dataset_text(path)?;
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|s| {
            s.parse::<f64>()
                .map_err(|_| Error::format(path, format!("`{s}` is not a number")))
        })
        .collect::<Result<_>>()?;
    if v.len() != 9 {
        return Err(Error::format(
            path,
            format!("a homography has 9 numbers, found {}", v.len()),
        ));
    }
    let s = v[8];
    if s.abs() < 1e-12 || !v.iter().all(|x| x.is_finite()) {
        return Err(Error::format(
            path,
            "H[2][2] is zero or a value is not finite: cannot normalise",
        ));
    }
    let h = [
        [v[0] / s, v[1] / s, v[2] / s],
        [v[3] / s, v[4] / s, v[5] / s],
        [v[6] / s, v[7] / s, 1.0],
    ];
    // Values that are finite may overflow when divided by a small H[2][2].
    if !h.iter().flatten().all(|x| x.is_finite()) {
        return Err(Error::format(
            path,
            format!("divided by H[2][2] = {s}, a value is not finite: {h:?}"),
        ));
    }
    // A singular H maps image 1 onto a line or a point: no image pair is related by it, and
    // the protocols map points both ways (the Oxford overlap error through H⁻¹): a ground
    // truth that loads is one `invert_homography` inverts.
    if crate::eval::overlap::invert_homography(&h).is_err() {
        return Err(Error::format(
            path,
            format!("the homography is singular (determinant about 0, not invertible): {h:?}"),
        ));
    }
    Ok(h)
}

fn first_existing(dir: &Path, names: &[String]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Loads a sequence folder in either layout (HPatches sequences or Oxford Affine).
pub fn load_sequence(dir: &Path) -> Result<HomographySequence> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let hpatches = dir.join("H_1_2").is_file();
    let mut images = Vec::with_capacity(SEQUENCE_LENGTH);
    for k in 1..=SEQUENCE_LENGTH {
        let candidates: Vec<String> = if hpatches {
            vec![format!("{k}.ppm"), format!("{k}.png")]
        } else {
            ["ppm", "png", "pgm", "jpg"]
                .iter()
                .map(|e| format!("img{k}.{e}"))
                .collect()
        };
        let p = first_existing(dir, &candidates).ok_or_else(|| {
            Error::format(
                dir,
                format!(
                    "image {k} of the sequence is missing (looked for {})",
                    candidates.join(", ")
                ),
            )
        })?;
        images.push(p);
    }
    let mut homographies = Vec::with_capacity(SEQUENCE_LENGTH - 1);
    for k in 2..=SEQUENCE_LENGTH {
        let file = if hpatches {
            format!("H_1_{k}")
        } else {
            format!("H1to{k}p")
        };
        homographies.push(read_homography(&dir.join(file))?);
    }
    Ok(HomographySequence {
        name,
        images,
        homographies,
    })
}

/// The sequence folders under `root` (sorted by name): folders that hold `H_1_2` or `H1to2p`.
pub fn list_sequences(root: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(root).map_err(|e| Error::io(root, e))?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("H_1_2").is_file() || p.join("H1to2p").is_file())
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(Error::format(
            root,
            "no homography sequences (folders with H_1_2 or H1to2p) found",
        ));
    }
    Ok(out)
}

/// Result of one pair 1 → k.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairResult {
    pub sequence: String,
    pub target: usize,
    pub keypoints: (usize, usize),
    pub matches: usize,
    /// Matches correct at each of [`MMA_THRESHOLDS`].
    pub correct: Vec<usize>,
    /// Matching accuracy at each of [`MMA_THRESHOLDS`] (0 without matches).
    pub accuracy: Vec<f64>,
    /// Matches of the same descriptors under `descl match`'s matcher (mutual nearest neighbours
    /// and Lowe's ratio 0.8, `MatchConfig::default()`), and how many of them are correct at
    /// 3 px: the precision a user of `descl match` gets (0 in reports written before it existed).
    #[serde(default)]
    pub lowe_matches: usize,
    /// Of [`PairResult::lowe_matches`], those correct at 3 px.
    #[serde(default)]
    pub lowe_correct_3px: usize,
    /// Matches wrong at 3 px between two frames that each have no counterpart within 3 px in
    /// the other image ([`unrepeated_wrong_matches`]): the detector's share of the wrong
    /// matches, which no describer can make correct (0 in reports written before it existed).
    #[serde(default)]
    pub unrepeated_wrong_3px: usize,
    /// Mean corner error (px) of the estimated homography; infinite when none was found (JSON
    /// writes that as `null`, which reads back as infinite).
    #[serde(deserialize_with = "crate::eval::report::infinite_if_null")]
    pub corner_error: f64,
}

/// Positions (x, y) in image 1 and in image k.
pub type PointSets<'a> = (&'a [(f64, f64)], &'a [(f64, f64)]);

/// Evaluates one pair from every frame's position in each image, the matched point coordinates
/// (image 1, image k) of the protocol's matcher and of `descl match`'s (`lowe`), the ground
/// truth and the estimated homography (`None` when estimation failed), image 1's size.
// The arguments are the protocol's inputs for one pair; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_pair(
    sequence: &str,
    target: usize,
    frames: PointSets<'_>,
    pts1: &[(f64, f64)],
    pts2: &[(f64, f64)],
    lowe: PointSets<'_>,
    h_gt: &Mat3,
    h_est: Option<&Mat3>,
    size1: (u32, u32),
) -> PairResult {
    let t3 = MMA_THRESHOLDS[MMA3_INDEX];
    let errors = reprojection_errors(h_gt, pts1, pts2);
    let correct = MMA_THRESHOLDS
        .iter()
        .map(|&t| correct_at(&errors, t))
        .collect();
    PairResult {
        sequence: sequence.to_string(),
        target,
        keypoints: (frames.0.len(), frames.1.len()),
        matches: pts1.len(),
        correct,
        accuracy: matching_accuracy(&errors, &MMA_THRESHOLDS),
        lowe_matches: lowe.0.len(),
        lowe_correct_3px: correct_at(&reprojection_errors(h_gt, lowe.0, lowe.1), t3),
        unrepeated_wrong_3px: unrepeated_wrong_matches(h_gt, frames.0, frames.1, pts1, pts2, t3),
        corner_error: h_est.map_or(f64::INFINITY, |h| {
            homography_corner_error(h_gt, h, size1.0, size1.1)
        }),
    }
}

/// Summary over pairs: means in %, as the tables report them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SequenceSummary {
    pub pairs: usize,
    /// (threshold px, MMA %) for 1…10 px.
    pub mma: Vec<(f64, f64)>,
    /// (threshold px, homography accuracy %) for 1/3/5 px.
    pub homography_accuracy: Vec<(f64, f64)>,
    pub mean_keypoints: f64,
    pub mean_matches: f64,
    /// Mean correct matches at 3 px.
    pub mean_correct_3px: f64,
    /// Mean wrong matches at 3 px between unrepeated frames ([`PairResult::unrepeated_wrong_3px`]).
    #[serde(default)]
    pub mean_unrepeated_wrong_3px: f64,
    /// MMA@3 (%) under `descl match`'s matcher ([`PairResult::lowe_matches`]), averaged over
    /// pairs as `mma` (a pair without matches counts 0).
    #[serde(default)]
    pub lowe_mma3: f64,
    /// Mean matches under `descl match`'s matcher.
    #[serde(default)]
    pub mean_lowe_matches: f64,
}

/// Averages pair results (each pair weighs the same).
pub fn summarise(pairs: &[PairResult]) -> SequenceSummary {
    let n = pairs.len().max(1) as f64;
    let mma = MMA_THRESHOLDS
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            (
                t,
                100.0 * pairs.iter().map(|p| p.accuracy[i]).sum::<f64>() / n,
            )
        })
        .collect();
    let errors: Vec<f64> = pairs.iter().map(|p| p.corner_error).collect();
    let homography_accuracy = HOMOGRAPHY_THRESHOLDS
        .iter()
        .zip(accuracy_at(&errors, &HOMOGRAPHY_THRESHOLDS))
        .map(|(&t, a)| (t, 100.0 * a))
        .collect();
    SequenceSummary {
        pairs: pairs.len(),
        mma,
        homography_accuracy,
        mean_keypoints: pairs
            .iter()
            .map(|p| (p.keypoints.0 + p.keypoints.1) as f64 / 2.0)
            .sum::<f64>()
            / n,
        mean_matches: pairs.iter().map(|p| p.matches as f64).sum::<f64>() / n,
        mean_correct_3px: pairs
            .iter()
            .map(|p| p.correct[MMA3_INDEX] as f64)
            .sum::<f64>()
            / n,
        mean_unrepeated_wrong_3px: pairs
            .iter()
            .map(|p| p.unrepeated_wrong_3px as f64)
            .sum::<f64>()
            / n,
        lowe_mma3: 100.0
            * pairs
                .iter()
                .map(|p| match p.lowe_matches {
                    0 => 0.0,
                    m => p.lowe_correct_3px as f64 / m as f64,
                })
                .sum::<f64>()
            / n,
        mean_lowe_matches: pairs.iter().map(|p| p.lowe_matches as f64).sum::<f64>() / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_and_summary_by_hand() {
        let id = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        // Errors 0.5, 2.5, 20 → correct at 1 px: 1, at 3 px: 2, at 10 px: 2.
        let (m1, m2) = (
            [(0.0, 0.0), (5.0, 5.0), (9.0, 9.0)],
            [(0.5, 0.0), (5.0, 7.5), (29.0, 9.0)],
        );
        // 10 and 12 frames: the matched ones and others far from all of them, so that the
        // wrong match (9,9)–(29,9) joins two frames without a counterpart.
        let far = |n: usize| (0..n).map(|i| (60.0 + 3.5 * i as f64, 90.0));
        let f1: Vec<(f64, f64)> = m1.iter().copied().chain(far(7)).collect();
        let f2: Vec<(f64, f64)> = m2
            .iter()
            .copied()
            .chain(far(9).map(|p| (p.0, p.1 - 40.0)))
            .collect();
        // descl match's matcher kept two of them, one correct.
        let lowe = ([m1[0], m1[2]], [m2[0], m2[2]]);
        let p = evaluate_pair(
            "s",
            2,
            (&f1, &f2),
            &m1,
            &m2,
            (&lowe.0, &lowe.1),
            &id,
            Some(&id),
            (100, 100),
        );
        assert_eq!(p.keypoints, (10, 12));
        assert_eq!(p.unrepeated_wrong_3px, 1);
        assert_eq!((p.lowe_matches, p.lowe_correct_3px), (2, 1));
        assert_eq!(p.correct[0], 1);
        assert_eq!(p.correct[2], 2);
        assert_eq!(p.correct[9], 2);
        assert!((p.accuracy[2] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(p.corner_error, 0.0);
        let none: &[(f64, f64)] = &[];
        let empty = evaluate_pair(
            "s",
            3,
            (none, none),
            none,
            none,
            (none, none),
            &id,
            None,
            (100, 100),
        );
        let s = summarise(&[p, empty]);
        assert!((s.mma[2].1 - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.homography_accuracy[0].1, 50.0);
        assert_eq!(s.mean_matches, 1.5);
        assert_eq!(s.mean_correct_3px, 1.0);
        assert_eq!(s.mean_unrepeated_wrong_3px, 0.5);
        // (1/2 + 0) / 2 pairs: the empty pair counts 0, as in the MMA.
        assert!((s.lowe_mma3 - 25.0).abs() < 1e-9);
        assert_eq!(s.mean_lowe_matches, 1.0);
    }
}
