//! Oxford matching score and repeatability (Mikolajczyk et al., "A comparison of affine region
//! detectors", IJCV 2005, §4.1; Mikolajczyk & Schmid, PAMI 2005): regions correspond when their
//! ellipse overlap error (after normalising the first to a 30-px radius, [`overlap`]) is below
//! 40 %; only regions whose centres fall in the part of the scene both images see count.
//! Repeatability = one-to-one correspondences / min(n1, n2); matching score = descriptor matches
//! whose regions correspond / min(n1, n2).

use crate::error::Result;
use crate::eval::overlap::{self, Ellipse, DEFAULT_OVERLAP_THRESHOLD};
use crate::eval::sequences::Mat3;
use crate::frame::Frame;
use serde::{Deserialize, Serialize};

/// Repeatability and matching score of one image pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScorePair {
    pub sequence: String,
    pub target: usize,
    /// Regions in the common part of image 1 and of image 2.
    pub n1: usize,
    pub n2: usize,
    pub correspondences: usize,
    /// Repeatability in %.
    pub repeatability: f64,
    pub matches: usize,
    pub correct_matches: usize,
    /// Matching score in %.
    pub matching_score: f64,
}

/// Scores descriptor `matches` (index pairs into `frames1`, `frames2`) under the ground truth `h`.
// The arguments are the protocol's inputs for one pair; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn score_pair(
    sequence: &str,
    target: usize,
    frames1: &[Frame],
    frames2: &[Frame],
    matches: &[[u32; 2]],
    h: &Mat3,
    size1: (usize, usize),
    size2: (usize, usize),
) -> Result<ScorePair> {
    let rep = overlap::repeatability(frames1, frames2, h, size1, size2, DEFAULT_OVERLAP_THRESHOLD)?;
    let hinv = overlap::invert_homography(h)?;
    let inside = |x: f64, y: f64, (w, hh): (usize, usize)| {
        x >= 0.0 && y >= 0.0 && x <= (w - 1) as f64 && y <= (hh - 1) as f64
    };
    let mut correct = 0;
    for &[i, j] in matches {
        let e1 = Ellipse::from_frame(&frames1[i as usize]);
        let Some(e1_in_2) = e1.map(h) else { continue };
        let Some(e2) = Ellipse::from_frame(&frames2[j as usize]).map(&hinv) else {
            continue;
        };
        if !inside(e1_in_2.cx, e1_in_2.cy, size2) || !inside(e2.cx, e2.cy, size1) {
            continue;
        }
        if overlap::overlap_error(&e1, &e2) < DEFAULT_OVERLAP_THRESHOLD {
            correct += 1;
        }
    }
    let denom = rep.n1.min(rep.n2);
    let pct = |k: usize| {
        if denom == 0 {
            0.0
        } else {
            100.0 * k as f64 / denom as f64
        }
    };
    Ok(ScorePair {
        sequence: sequence.to_string(),
        target,
        n1: rep.n1,
        n2: rep.n2,
        correspondences: rep.correspondences,
        repeatability: pct(rep.correspondences),
        matches: matches.len(),
        correct_matches: correct,
        matching_score: pct(correct),
    })
}

/// Means over pairs (%), with the detector's cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScoreSummary {
    pub pairs: usize,
    pub repeatability: f64,
    pub matching_score: f64,
    /// Mean one-to-one correspondences per pair (reports before 2026-11-25 lack it: 0).
    #[serde(default)]
    pub correspondences: f64,
    /// Mean detection time per image in milliseconds, the detector alone (0 in older reports).
    #[serde(default)]
    pub detect_ms_per_image: f64,
    pub details: Vec<ScorePair>,
}

/// Averages pair scores; `detect_ms_per_image` is the detector's mean time per image.
pub fn summarise(pairs: Vec<ScorePair>, detect_ms_per_image: f64) -> ScoreSummary {
    let (repeatability, matching_score, correspondences) = means(&pairs);
    ScoreSummary {
        pairs: pairs.len(),
        repeatability,
        matching_score,
        correspondences,
        detect_ms_per_image,
        details: pairs,
    }
}

/// Mean repeatability (%), matching score (%) and correspondences over `pairs` (0 for none).
pub fn means<'a>(pairs: impl IntoIterator<Item = &'a ScorePair>) -> (f64, f64, f64) {
    let (mut n, mut r, mut m, mut c) = (0usize, 0.0, 0.0, 0.0);
    for p in pairs {
        n += 1;
        r += p.repeatability;
        m += p.matching_score;
        c += p.correspondences as f64;
    }
    let n = n.max(1) as f64;
    (r / n, m / n, c / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn circle(x: f32, y: f32, r: f32) -> Frame {
        Frame {
            x,
            y,
            a: [[r, 0.0], [0.0, r]],
        }
    }

    #[test]
    fn scores_by_hand() {
        // Translation by (10, 0): frames1 at x = 20, 50, 80; frames2 = the same regions shifted,
        // plus one unrelated region. Matches: 0↔0 (correct), 1↔2 (wrong place), 2↔3 (correct).
        let h = [[1.0, 0.0, 10.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let f1 = [
            circle(20.0, 50.0, 5.0),
            circle(50.0, 50.0, 5.0),
            circle(80.0, 50.0, 5.0),
        ];
        let f2 = [
            circle(30.0, 50.0, 5.0),
            circle(60.0, 50.0, 5.0),
            circle(30.0, 20.0, 5.0),
            circle(90.0, 50.0, 5.0),
        ];
        let s = score_pair(
            "s",
            2,
            &f1,
            &f2,
            &[[0, 0], [1, 2], [2, 3]],
            &h,
            (200, 100),
            (200, 100),
        )
        .unwrap();
        assert_eq!((s.n1, s.n2), (3, 4));
        assert_eq!(s.correspondences, 3);
        assert!((s.repeatability - 100.0).abs() < 1e-9);
        assert_eq!(s.correct_matches, 2);
        assert!((s.matching_score - 200.0 / 3.0).abs() < 1e-9);
        // A region of image 1 that leaves image 2 does not count.
        let f1b = [circle(195.0, 50.0, 5.0)];
        let s = score_pair("s", 2, &f1b, &f2, &[[0, 0]], &h, (200, 100), (200, 100)).unwrap();
        assert_eq!((s.n1, s.correct_matches, s.matching_score), (0, 0, 0.0));
    }
}
