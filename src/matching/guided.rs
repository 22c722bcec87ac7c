//! Guided matching: once a first model (H or F) is known, compare each descriptor of A only with
//! the descriptors of B near its predicted position (H) or its epipolar line (F), found with a
//! 2-D kd-tree over B's keypoints. This is COLMAP's guided matching idea
//! (`SiftMatchingOptions::guided_matching`): it recovers matches that the ratio test over the
//! whole image rejected because of repeated structure elsewhere in the image.

use super::kdtree::PositionIndex;
use super::{filters, hamming, MatchConfig, Matches, NearestTwo, Nn2};
use crate::describe::Descriptors;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Samples along an epipolar line are `EPIPOLAR_STEP_FACTOR · radius` apart; each sample
/// queries a disc large enough to cover the band of half-width `radius` between samples.
const EPIPOLAR_STEP_FACTOR: f32 = 4.0;

/// The model that predicts where a point of A lies in B.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GuideModel {
    /// x_b ~ H x_a.
    Homography([[f64; 3]; 3]),
    /// x_bᵀ F x_a = 0: x_b lies on the line F x_a.
    Fundamental([[f64; 3]; 3]),
}

fn mul(m: &[[f64; 3]; 3], p: [f32; 2]) -> [f64; 3] {
    let v = [p[0] as f64, p[1] as f64, 1.0];
    [0, 1, 2].map(|r| m[r][0] * v[0] + m[r][1] * v[1] + m[r][2] * v[2])
}

/// Candidates in B for point `p` of A.
fn candidates(
    model: &GuideModel,
    p: [f32; 2],
    index: &PositionIndex,
    pb: &[[f32; 2]],
    bbox: [f32; 4],
    radius: f32,
) -> Vec<u32> {
    match model {
        GuideModel::Homography(h) => {
            let q = mul(h, p);
            if q[2].abs() < 1e-12 {
                return Vec::new();
            }
            index.within((q[0] / q[2]) as f32, (q[1] / q[2]) as f32, radius)
        }
        GuideModel::Fundamental(f) => {
            let l = mul(f, p);
            let n = (l[0] * l[0] + l[1] * l[1]).sqrt();
            if n < 1e-12 {
                return Vec::new();
            }
            let (a, b, c) = ((l[0] / n) as f32, (l[1] / n) as f32, (l[2] / n) as f32);
            // Closest point of the line to the origin, and its direction.
            let (x0, y0, dx, dy) = (-c * a, -c * b, -b, a);
            let ts = [
                (bbox[0], bbox[1]),
                (bbox[2], bbox[1]),
                (bbox[0], bbox[3]),
                (bbox[2], bbox[3]),
            ]
            .map(|(x, y)| (x - x0) * dx + (y - y0) * dy);
            let (t0, t1) = ts
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &t| {
                    (lo.min(t), hi.max(t))
                });
            let step = EPIPOLAR_STEP_FACTOR * radius;
            let query_r = (radius * radius + (step / 2.0) * (step / 2.0)).sqrt();
            let mut out = Vec::new();
            let mut t = t0 - step / 2.0;
            while t <= t1 + step / 2.0 {
                out.extend(index.within(x0 + t * dx, y0 + t * dy, query_r));
                t += step;
            }
            out.sort_unstable();
            out.dedup();
            out.retain(|&j| {
                let q = pb[j as usize];
                (a * q[0] + b * q[1] + c).abs() <= radius
            });
            out
        }
    }
}

/// Guided matching of A (positions `pa`, descriptors `a`) against B: for each keypoint of A the
/// two nearest descriptors among B's keypoints within `radius` pixels of the prediction, then
/// the usual filters (mutual over the same candidate pairs, ratio, gate, top-k).
pub fn guided_match(
    pa: &[[f32; 2]],
    pb: &[[f32; 2]],
    a: &Descriptors,
    b: &Descriptors,
    model: &GuideModel,
    radius: f32,
    config: &MatchConfig,
) -> Result<Matches> {
    config.check()?;
    super::validate(
        a,
        b,
        &MatchConfig {
            ratio: None,
            ..config.clone()
        },
    )?;
    if pa.len() != a.len() || pb.len() != b.len() {
        return Err(Error::InvalidInput(
            "guided matching: positions and descriptors differ in number".into(),
        ));
    }
    if radius.is_nan() || radius <= 0.0 {
        return Err(Error::InvalidInput(format!(
            "guided matching radius must be > 0, got {radius}"
        )));
    }
    let index = PositionIndex::new(pb)?;
    let bbox = pb.iter().fold(
        [
            f32::INFINITY,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ],
        |bb, p| {
            [
                bb[0].min(p[0]),
                bb[1].min(p[1]),
                bb[2].max(p[0]),
                bb[3].max(p[1]),
            ]
        },
    );
    let dist = |i: usize, j: usize| -> f32 {
        match (a, b) {
            (Descriptors::Float(x), Descriptors::Float(y)) => x
                .row(i)
                .iter()
                .zip(y.row(j).iter())
                .map(|(p, q)| (p - q) * (p - q))
                .sum::<f32>()
                .sqrt(),
            (Descriptors::Binary(x), Descriptors::Binary(y)) => {
                hamming::distance(&x[i], &y[j]) as f32
            }
            _ => f32::INFINITY,
        }
    };
    let per_row: Vec<Vec<(u32, f32)>> = pa
        .par_iter()
        .enumerate()
        .map(|(i, &p)| {
            candidates(model, p, &index, pb, bbox, radius)
                .into_iter()
                .map(|j| (j, dist(i, j as usize)))
                .collect()
        })
        .collect();
    let mut rows = vec![Nn2::EMPTY; pa.len()];
    let mut cols = vec![Nn2::EMPTY; pb.len()];
    for (i, cands) in per_row.iter().enumerate() {
        for &(j, d) in cands {
            rows[i].push(j, d);
            cols[j as usize].push(i as u32, d);
        }
    }
    Ok(filters::apply(&NearestTwo { rows, cols }, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// B is A shifted by (+50, +20) with descriptors permuted; a repeated descriptor far away
    /// defeats the global ratio test but not guided matching.
    #[test]
    fn guided_homography_recovers_repeated_structure() {
        let pa: Vec<[f32; 2]> = (0..20).map(|i| [10.0 + 20.0 * i as f32, 100.0]).collect();
        let mut pb: Vec<[f32; 2]> = pa.iter().map(|p| [p[0] + 50.0, p[1] + 20.0]).collect();
        let mut da = Array2::<f32>::zeros((20, 20));
        for i in 0..20 {
            da[[i, i]] = 1.0;
        }
        let mut db = da.clone();
        // B gets a 21st keypoint far away carrying descriptor 0 again.
        pb.push([900.0, 900.0]);
        db.push_row(da.row(0)).unwrap();
        let (a, b) = (Descriptors::Float(da), Descriptors::Float(db));
        let global = crate::matching::match_descriptors(&a, &b, &MatchConfig::default()).unwrap();
        assert!(
            !global.pairs.contains(&[0, 0]),
            "global ratio test should reject the repeated descriptor"
        );
        let h = GuideModel::Homography([[1.0, 0.0, 50.0], [0.0, 1.0, 20.0], [0.0, 0.0, 1.0]]);
        let m = guided_match(
            &pa,
            &pb,
            &a,
            &b,
            &h,
            5.0,
            &MatchConfig {
                ratio: None,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(m.pairs, (0..20).map(|i| [i, i]).collect::<Vec<_>>());
    }

    #[test]
    fn epipolar_candidates_lie_near_the_line() {
        // Pure horizontal translation: F = [t]x with t = (1,0,0) → lines y_b = y_a.
        let f = GuideModel::Fundamental([[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]);
        let pb: Vec<[f32; 2]> = (0..100)
            .map(|k| [(k % 10) as f32 * 30.0, (k / 10) as f32 * 7.0])
            .collect();
        let index = PositionIndex::new(&pb).unwrap();
        let got = candidates(&f, [5.0, 14.5], &index, &pb, [0.0, 0.0, 270.0, 63.0], 1.0);
        let want: Vec<u32> = (0..100)
            .filter(|&k| (pb[k as usize][1] - 14.5).abs() <= 1.0)
            .collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), 10);
    }
}
