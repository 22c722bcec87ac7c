//! Scalar metrics of the benchmarks, each written to reproduce one published definition exactly
//! (the source is named on each function): precision/recall AP and ROC AUC as hpatches-benchmark
//! computes them, FPR at 95 % recall (UBC PhotoTour), mean matching accuracy, homography corner
//! error, and the cumulative pose-error AUC / mAA.
//!
//! Retrieval-style metrics take *distances* (smaller = more similar); hpatches-benchmark's
//! `scores` are the negated distances, so its "descending score" order is our ascending distance.

use crate::error::{Error, Result};

/// hpatches-benchmark's `small` (`utils/metrics.py`): guards the divisions of precision and recall.
const HPATCHES_SMALL: f64 = 1e-10;

/// Recall at which UBC PhotoTour reports the false positive rate (Brown et al. 2011, "FPR95").
pub const UBC_RECALL: f64 = 0.95;

/// Trapezoidal integral of `y` over `x` (numpy `trapz`), in the order given.
fn trapz(y: &[f64], x: &[f64]) -> f64 {
    x.windows(2)
        .zip(y.windows(2))
        .map(|(xw, yw)| (xw[1] - xw[0]) * (yw[0] + yw[1]) / 2.0)
        .sum()
}

/// Scored pairs must come with one label each and no NaN distance.
fn check_scored(distances: &[f64], labels: &[bool]) -> Result<()> {
    if distances.len() != labels.len() {
        return Err(Error::InvalidInput(format!(
            "{} distances but {} labels",
            distances.len(),
            labels.len()
        )));
    }
    if distances.iter().any(|d| d.is_nan()) {
        return Err(Error::InvalidInput("NaN distance".into()));
    }
    Ok(())
}

/// Cumulative true/false positives in rank order, as `tpfp` of hpatches-benchmark
/// (`python/utils/metrics.py`): entries sorted by ascending distance with a *stable* sort
/// (numpy mergesort, so ties keep input order), leading 0, infinite distances never retrieved;
/// `numpos` (≥ the positives in `labels`) counts positives that were never retrieved.
/// Returns (tp, fp, number of positives, number of negatives).
fn tpfp(
    distances: &[f64],
    labels: &[bool],
    numpos: Option<usize>,
) -> Result<(Vec<f64>, Vec<f64>, f64, f64)> {
    check_scored(distances, labels)?;
    let positives = labels.iter().filter(|&&l| l).count();
    let negatives = labels.len() - positives;
    let p = match numpos {
        Some(n) if n < positives => {
            return Err(Error::InvalidInput(format!(
                "numpos {n} smaller than the {positives} labelled positives"
            )))
        }
        Some(n) => n,
        None => positives,
    };
    let mut order: Vec<usize> = (0..distances.len())
        .filter(|&i| distances[i].is_finite())
        .collect();
    // `sort_by` is stable, like numpy's mergesort.
    order.sort_by(|&a, &b| distances[a].total_cmp(&distances[b]));
    let mut tp = Vec::with_capacity(order.len() + 1);
    let mut fp = Vec::with_capacity(order.len() + 1);
    let (mut t, mut f) = (0.0, 0.0);
    tp.push(t);
    fp.push(f);
    for &i in &order {
        if labels[i] {
            t += 1.0;
        } else {
            f += 1.0;
        }
        tp.push(t);
        fp.push(f);
    }
    Ok((tp, fp, p as f64, negatives as f64))
}

/// Average precision exactly as hpatches-benchmark's `metrics.pr`: precision
/// `max(tp, ε) / max(tp + fp, ε)` and recall `tp / max(p, ε)` at every rank (with the leading
/// (recall 0, precision 1) point), integrated with the trapezoidal rule.
pub fn average_precision(distances: &[f64], labels: &[bool], numpos: Option<usize>) -> Result<f64> {
    let (tp, fp, p, _) = tpfp(distances, labels, numpos)?;
    let recall: Vec<f64> = tp.iter().map(|t| t / p.max(HPATCHES_SMALL)).collect();
    let precision: Vec<f64> = tp
        .iter()
        .zip(&fp)
        .map(|(t, f)| t.max(HPATCHES_SMALL) / (t + f).max(HPATCHES_SMALL))
        .collect();
    Ok(trapz(&precision, &recall))
}

/// Area under the ROC curve exactly as hpatches-benchmark's `metrics.roc` (trapezoidal,
/// `tpr = tp / p`, `fpr = fp / n`).
pub fn roc_auc(distances: &[f64], labels: &[bool]) -> Result<f64> {
    let (tp, fp, p, n) = tpfp(distances, labels, None)?;
    let tpr: Vec<f64> = tp.iter().map(|t| t / p.max(HPATCHES_SMALL)).collect();
    let fpr: Vec<f64> = fp.iter().map(|f| f / n.max(HPATCHES_SMALL)).collect();
    Ok(trapz(&tpr, &fpr))
}

/// ROC curve points (false positive rate, true positive rate) in rank order, for plots.
pub fn roc_curve(distances: &[f64], labels: &[bool]) -> Result<Vec<(f64, f64)>> {
    let (tp, fp, p, n) = tpfp(distances, labels, None)?;
    Ok(tp
        .iter()
        .zip(&fp)
        .map(|(t, f)| (f / n.max(HPATCHES_SMALL), t / p.max(HPATCHES_SMALL)))
        .collect())
}

/// False positive rate at `recall` (UBC PhotoTour "FPR95" with `recall` = [`UBC_RECALL`]), as
/// HardNet/L2-Net evaluate it (`ErrorRateAt95Recall`): rank pairs by ascending distance, cut at
/// the first rank where the positives reach `recall · P`, FPR = negatives above the cut / all
/// negatives.
pub fn fpr_at_recall(distances: &[f64], labels: &[bool], recall: f64) -> Result<f64> {
    check_scored(distances, labels)?;
    if distances.is_empty() {
        return Err(Error::InvalidInput(
            "FPR at recall needs at least one pair".into(),
        ));
    }
    let positives = labels.iter().filter(|&&l| l).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return Err(Error::InvalidInput(format!(
            "FPR at recall needs positives and negatives (got {positives} and {negatives})"
        )));
    }
    let mut order: Vec<usize> = (0..distances.len()).collect();
    order.sort_by(|&a, &b| distances[a].total_cmp(&distances[b]));
    let needed = recall * positives as f64;
    let (mut tp, mut fp) = (0usize, 0usize);
    for &i in &order {
        if labels[i] {
            tp += 1;
            if tp as f64 >= needed {
                break;
            }
        } else {
            fp += 1;
        }
    }
    Ok(fp as f64 / negatives as f64)
}

/// Pixel thresholds of the mean matching accuracy curve (D2-Net, Dusmanu et al. 2019, Fig. 4:
/// 1…10 px).
pub const MMA_THRESHOLDS: [f64; 10] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];

/// Thresholds (px) of homography accuracy (SuperPoint, DeTone et al. 2018, Table 3: ε = 1, 3, 5).
pub const HOMOGRAPHY_THRESHOLDS: [f64; 3] = [1.0, 3.0, 5.0];

/// Applies a 3×3 homography to a point; `None` when it maps to infinity.
pub fn apply_homography(h: &[[f64; 3]; 3], x: f64, y: f64) -> Option<(f64, f64)> {
    let w = h[2][0] * x + h[2][1] * y + h[2][2];
    if w.abs() < f64::EPSILON {
        return None;
    }
    Some((
        (h[0][0] * x + h[0][1] * y + h[0][2]) / w,
        (h[1][0] * x + h[1][1] * y + h[1][2]) / w,
    ))
}

/// Reprojection errors ‖H·x1 − x2‖ (px, in image 2) of matched points; a point that `h` sends to
/// infinity has an infinite error.
pub fn reprojection_errors(
    h: &[[f64; 3]; 3],
    pts1: &[(f64, f64)],
    pts2: &[(f64, f64)],
) -> Vec<f64> {
    pts1.iter()
        .zip(pts2)
        .map(|(&(x1, y1), &(x2, y2))| match apply_homography(h, x1, y1) {
            Some((x, y)) => ((x - x2).powi(2) + (y - y2).powi(2)).sqrt(),
            None => f64::INFINITY,
        })
        .collect()
}

/// Matches correct at `t` px: reprojection error `< t` (D2-Net's MMA criterion).
pub fn correct_at(errors: &[f64], t: f64) -> usize {
    errors.iter().filter(|&&e| e < t).count()
}

/// Matching accuracy of one pair at each threshold: the fraction of matches with error `< t`
/// (a pair without matches has accuracy 0, so a method cannot gain by matching nothing).
pub fn matching_accuracy(errors: &[f64], thresholds: &[f64]) -> Vec<f64> {
    thresholds
        .iter()
        .map(|&t| {
            if errors.is_empty() {
                0.0
            } else {
                correct_at(errors, t) as f64 / errors.len() as f64
            }
        })
        .collect()
}

/// Matches wrong at `t` px (‖H·x₁ − x₂‖ ≥ t) whose two frames are both *unrepeated*: the frame
/// in image 1 has no frame of image 2 within `t` px of H·x₁, and the frame in image 2 has no
/// frame of image 1 whose projection lies within `t` px of it (all distances in image 2, as the
/// matching accuracy's). The detector found such frames in one image only, so no describer can
/// match them correctly; mutual nearest neighbours pairs whatever is left, and the MMA counts
/// those pairs. This splits a method's wrong matches into the detector's share and its own.
/// `frames1`, `frames2`: every frame of each image; `pts1`, `pts2`: the matched ones.
pub fn unrepeated_wrong_matches(
    h: &[[f64; 3]; 3],
    frames1: &[(f64, f64)],
    frames2: &[(f64, f64)],
    pts1: &[(f64, f64)],
    pts2: &[(f64, f64)],
    t: f64,
) -> usize {
    let projected: Vec<(f64, f64)> = frames1
        .iter()
        .filter_map(|&(x, y)| apply_homography(h, x, y))
        .collect();
    let near2 = PointGrid::new(frames2, t);
    let near_projected = PointGrid::new(&projected, t);
    pts1.iter()
        .zip(pts2)
        .filter(|&(&(x1, y1), &p2)| match apply_homography(h, x1, y1) {
            Some(p1) => {
                let wrong = (p1.0 - p2.0).hypot(p1.1 - p2.1) >= t;
                wrong && !near2.any_within(p1, t) && !near_projected.any_within(p2, t)
            }
            // A frame that projects to infinity has no counterpart either.
            None => !near_projected.any_within(p2, t),
        })
        .count()
}

/// Points bucketed in square cells of side `cell`, for "is any point within r ≤ cell of p".
struct PointGrid {
    cell: f64,
    cells: std::collections::HashMap<(i64, i64), Vec<(f64, f64)>>,
}

impl PointGrid {
    fn new(points: &[(f64, f64)], cell: f64) -> Self {
        let cell = if cell > 0.0 { cell } else { 1.0 };
        let mut cells: std::collections::HashMap<(i64, i64), Vec<(f64, f64)>> =
            std::collections::HashMap::new();
        for &p in points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
            cells.entry(Self::key(p, cell)).or_default().push(p);
        }
        PointGrid { cell, cells }
    }

    fn key(p: (f64, f64), cell: f64) -> (i64, i64) {
        ((p.0 / cell).floor() as i64, (p.1 / cell).floor() as i64)
    }

    /// Whether a point lies strictly within `r` (at most the cell side) of `p`.
    fn any_within(&self, p: (f64, f64), r: f64) -> bool {
        if !(p.0.is_finite() && p.1.is_finite()) {
            return false;
        }
        let (cx, cy) = Self::key(p, self.cell);
        (cx - 1..=cx + 1).any(|x| {
            (cy - 1..=cy + 1).any(|y| {
                self.cells
                    .get(&(x, y))
                    .is_some_and(|v| v.iter().any(|q| (q.0 - p.0).hypot(q.1 - p.1) < r))
            })
        })
    }
}

/// Mean corner error (px) of an estimated homography: the four corners of image 1
/// ((0,0), (w−1,0), (0,h−1), (w−1,h−1), as SuperPoint's evaluation) mapped by the ground truth
/// and by the estimate, mean distance (in image 2). Infinite if either maps a corner to infinity.
pub fn homography_corner_error(
    h_gt: &[[f64; 3]; 3],
    h_est: &[[f64; 3]; 3],
    width: u32,
    height: u32,
) -> f64 {
    let (w, h) = (f64::from(width) - 1.0, f64::from(height) - 1.0);
    let corners = [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)];
    let mut sum = 0.0;
    for (x, y) in corners {
        match (apply_homography(h_gt, x, y), apply_homography(h_est, x, y)) {
            (Some(a), Some(b)) => sum += ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt(),
            _ => return f64::INFINITY,
        }
    }
    sum / 4.0
}

/// Fraction of `errors` at or below each threshold (SuperPoint's homography "correctness":
/// `mean_dist <= thresh`); failed estimates carry an infinite error.
pub fn accuracy_at(errors: &[f64], thresholds: &[f64]) -> Vec<f64> {
    thresholds
        .iter()
        .map(|&t| {
            if errors.is_empty() {
                0.0
            } else {
                errors.iter().filter(|&&e| e <= t).count() as f64 / errors.len() as f64
            }
        })
        .collect()
}

/// Pose-error thresholds (degrees) of the AUC (SuperGlue, Sarlin et al. 2020, Table 1: 5/10/20°).
pub const POSE_AUC_THRESHOLDS: [f64; 3] = [5.0, 10.0, 20.0];

/// Upper threshold (degrees) of mAA (Image Matching Challenge, Jin et al. 2021): mean accuracy
/// over the thresholds 1, 2, …, 10°.
pub const MAA_MAX_DEGREES: u32 = 10;

/// Area under the cumulative pose-error curve up to each threshold, normalised to [0, 1], as
/// SuperGlue's `pose_auc`: errors sorted, recall (i+1)/n, the curve starts at (0, 0), integrated
/// (trapezoid) up to the threshold with the recall held flat after the last error below it.
/// Failed estimates carry an infinite error.
pub fn pose_auc(errors: &[f64], thresholds: &[f64]) -> Vec<f64> {
    if errors.is_empty() {
        return vec![0.0; thresholds.len()];
    }
    let mut e: Vec<f64> = errors.to_vec();
    e.sort_by(f64::total_cmp);
    let n = e.len() as f64;
    let mut errs = vec![0.0];
    let mut recall = vec![0.0];
    for (i, v) in e.iter().enumerate() {
        errs.push(*v);
        recall.push((i + 1) as f64 / n);
    }
    thresholds
        .iter()
        .map(|&t| {
            // numpy searchsorted(side='left'): the first index with errs[i] >= t.
            let last = errs.partition_point(|&v| v < t);
            let mut r: Vec<f64> = recall[..last].to_vec();
            let mut x: Vec<f64> = errs[..last].to_vec();
            r.push(recall[last.saturating_sub(1)]);
            x.push(t);
            trapz(&r, &x) / t
        })
        .collect()
}

/// Mean average accuracy up to [`MAA_MAX_DEGREES`]: the mean over t = 1, …, 10° of the fraction of
/// pairs with error `< t` (Image Matching Challenge 2021).
pub fn mean_average_accuracy(errors: &[f64]) -> f64 {
    if errors.is_empty() {
        return 0.0;
    }
    let thresholds: Vec<f64> = (1..=MAA_MAX_DEGREES).map(f64::from).collect();
    let acc: f64 = thresholds
        .iter()
        .map(|&t| errors.iter().filter(|&&e| e < t).count() as f64 / errors.len() as f64)
        .sum();
    acc / thresholds.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn unrepeated_wrong_matches_by_hand() {
        // H shifts by +10 px in x. Image 1: A (0,0), B (10,10), C (50,50), projected to
        // (10,0), (20,10), (60,50). Image 2: a (10.5,0) is A's counterpart (0.5 px), z (21,10)
        // B's (1 px), x (90,90) and y (60,60) nobody's (y is 10 px from C's projection).
        let h = [[1.0, 0.0, 10.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let f1 = [(0.0, 0.0), (10.0, 10.0), (50.0, 50.0)];
        let f2 = [(10.5, 0.0), (90.0, 90.0), (60.0, 60.0), (21.0, 10.0)];
        // Matches A–a (correct), B–x (wrong, B has a counterpart), C–y (wrong, neither has
        // one), A–x (wrong, A has one).
        let p1 = [f1[0], f1[1], f1[2], f1[0]];
        let p2 = [f2[0], f2[1], f2[2], f2[1]];
        assert_eq!(unrepeated_wrong_matches(&h, &f1, &f2, &p1, &p2, 3.0), 1);
        // At 1 px B's counterpart (exactly 1 px away) no longer counts: B–x joins C–y.
        assert_eq!(unrepeated_wrong_matches(&h, &f1, &f2, &p1, &p2, 1.0), 2);
        // A correct match never counts, and without matches there is nothing to count.
        assert_eq!(
            unrepeated_wrong_matches(&h, &f1, &f2, &p1[..1], &p2[..1], 3.0),
            0
        );
        assert_eq!(unrepeated_wrong_matches(&h, &[], &[], &[], &[], 3.0), 0);
        // With a frame at C's projection (60,50), C has a counterpart: its wrong match is the
        // describer's error, not the detector's.
        let shifted_only = [(60.0, 50.0)];
        assert_eq!(
            unrepeated_wrong_matches(&h, &f1, &shifted_only, &[f1[2]], &[(70.0, 50.0)], 3.0),
            0
        );
    }

    #[test]
    fn unrepeated_wrong_matches_equals_brute_force() {
        // Against the definition evaluated pair by pair (no grid), on clustered points with
        // negative coordinates, points on cell boundaries and a projective H.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let h = [[1.02, 0.01, -3.0], [-0.02, 0.98, 2.5], [1e-5, -2e-5, 1.0]];
        for t in [1.0, 3.0, 5.0] {
            let pts = |n: usize, next: &mut dyn FnMut() -> f64| -> Vec<(f64, f64)> {
                (0..n)
                    .map(|i| {
                        // A square of side 40 t: about half the frames have no counterpart.
                        if i % 7 == 0 {
                            // On a cell boundary of the grid.
                            ((next() * 40.0).floor() * t - 20.0 * t, 3.0 * t)
                        } else {
                            (next() * 40.0 * t - 20.0 * t, next() * 40.0 * t - 20.0 * t)
                        }
                    })
                    .collect()
            };
            let f1 = pts(300, &mut next);
            let f2 = pts(300, &mut next);
            let pairs: Vec<(usize, usize)> = (0..300).map(|i| (i, (i * 37 + 11) % 300)).collect();
            let p1: Vec<_> = pairs.iter().map(|&(i, _)| f1[i]).collect();
            let p2: Vec<_> = pairs.iter().map(|&(_, j)| f2[j]).collect();
            let proj: Vec<(f64, f64)> = f1
                .iter()
                .filter_map(|&(a, b)| apply_homography(&h, a, b))
                .collect();
            let d = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).hypot(a.1 - b.1);
            let brute = p1
                .iter()
                .zip(&p2)
                .filter(|&(&a, &b)| {
                    let pa = apply_homography(&h, a.0, a.1).unwrap();
                    d(pa, b) >= t
                        && f2.iter().all(|&q| d(pa, q) >= t)
                        && proj.iter().all(|&q| d(b, q) >= t)
                })
                .count();
            let got = unrepeated_wrong_matches(&h, &f1, &f2, &p1, &p2, t);
            assert_eq!(got, brute, "t = {t}");
            assert!(
                brute > 0 && brute < 300,
                "t = {t}: {brute} (the case must discriminate)"
            );
        }
    }

    #[test]
    fn ap_hand_computed() {
        // Ranks by distance: 0.1 (pos), 0.2 (neg), 0.3 (pos).
        // recall:    0, 0.5, 0.5, 1
        // precision: 1, 1,   0.5, 2/3
        // trapz: 0.5·(1+1)/2 + 0 + 0.5·(0.5+2/3)/2 = 0.5 + 0.291666...
        let ap = average_precision(&[0.3, 0.1, 0.2], &[true, true, false], None).unwrap();
        close(ap, 0.5 + 0.5 * (0.5 + 2.0 / 3.0) / 2.0);
        // numpos = 3: one positive never retrieved, so recall steps are 1/3.
        // recall: 0, 1/3, 1/3, 2/3; precision 1, 1, 1/2, 2/3
        let ap = average_precision(&[0.3, 0.1, 0.2], &[true, true, false], Some(3)).unwrap();
        close(ap, 1.0 / 3.0 + (1.0 / 3.0) * (0.5 + 2.0 / 3.0) / 2.0);
    }

    #[test]
    fn ap_ties_keep_input_order() {
        // Equal distances: a stable sort ranks the first-listed entry first.
        let pos_first = average_precision(&[1.0, 1.0], &[true, false], None).unwrap();
        let neg_first = average_precision(&[1.0, 1.0], &[false, true], None).unwrap();
        close(pos_first, 1.0);
        // recall 0,0,1; precision 1, ε/1 → ~0, 1/2 → 1·(ε+0.5)/2
        assert!((neg_first - 0.25).abs() < 1e-9, "{neg_first}");
    }

    #[test]
    fn roc_auc_hand_computed() {
        // Ranks: pos, neg, pos, neg → tpr 0,.5,.5,1,1 ; fpr 0,0,.5,.5,1 → AUC 0.75
        let auc = roc_auc(&[0.1, 0.2, 0.3, 0.4], &[true, false, true, false]).unwrap();
        close(auc, 0.75);
        let curve = roc_curve(&[0.1, 0.2, 0.3, 0.4], &[true, false, true, false]).unwrap();
        assert_eq!(
            curve,
            vec![(0.0, 0.0), (0.0, 0.5), (0.5, 0.5), (0.5, 1.0), (1.0, 1.0)]
        );
    }

    #[test]
    fn infinite_distances_are_never_retrieved() {
        let ap = average_precision(&[0.1, f64::INFINITY], &[true, true], None).unwrap();
        close(ap, 0.5);
    }

    #[test]
    fn fpr95_hand_computed() {
        // 20 positives at distances 0..19, negatives at 0.5, 18.5, 100 (3 negatives).
        // 95 % of 20 = 19 positives reached at distance 18 → negatives before: 0.5 → 1 of 3.
        let mut d: Vec<f64> = (0..20).map(f64::from).collect();
        let mut l = vec![true; 20];
        d.extend([0.5, 18.5, 100.0]);
        l.extend([false, false, false]);
        close(fpr_at_recall(&d, &l, UBC_RECALL).unwrap(), 1.0 / 3.0);
        assert!(fpr_at_recall(&[1.0], &[true], UBC_RECALL).is_err());
    }

    #[test]
    fn matching_accuracy_and_homography_errors() {
        let h = [[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let e = reprojection_errors(&h, &[(0.0, 0.0), (1.0, 1.0)], &[(2.0, 0.0), (3.0, 4.0)]);
        assert_eq!(e, vec![0.0, 3.0]);
        assert_eq!(matching_accuracy(&e, &[1.0, 3.0, 3.5]), vec![0.5, 0.5, 1.0]);
        assert_eq!(matching_accuracy(&[], &[1.0]), vec![0.0]);
        let shifted = [[1.0, 0.0, 5.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        close(homography_corner_error(&h, &shifted, 640, 480), 3.0);
        // A scale change of 2 about the origin: corners (0,0),(9,0),(0,9),(9,9) move 0,9,9,9√2.
        let id = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let s2 = [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]];
        close(
            homography_corner_error(&id, &s2, 10, 10),
            (0.0 + 9.0 + 9.0 + 9.0 * 2f64.sqrt()) / 4.0,
        );
        assert_eq!(
            accuracy_at(&[0.5, 3.0, f64::INFINITY], &[1.0, 3.0, 5.0]),
            vec![1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0]
        );
    }

    #[test]
    fn pose_auc_hand_computed() {
        // errors 1, 3, inf; recall 1/3, 2/3, 1. At t=5: points (0,0),(1,1/3),(3,2/3),(5,2/3):
        // area = 0.5·1/3 + 2·(1/3+2/3)/2 + 2·2/3 = 1/6 + 1 + 4/3 = 2.5 → /5 = 0.5
        let auc = pose_auc(&[3.0, f64::INFINITY, 1.0], &[5.0, 2.0]);
        close(auc[0], 0.5);
        // t=2: points (0,0),(1,1/3),(2,1/3): 1/6 + 1/3 = 0.5 → /2 = 0.25
        close(auc[1], 0.25);
        // mAA: accuracy (<t) for t=1..10: t=1: 0; t=2,3: 1/3; t≥4: 2/3 (7 thresholds) → (2/3+14/3)/10
        close(
            mean_average_accuracy(&[3.0, f64::INFINITY, 1.0]),
            (2.0 / 3.0 + 14.0 / 3.0) / 10.0,
        );
    }
}
