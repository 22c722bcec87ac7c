//! Match filters. They compose: every enabled filter must accept a candidate (A's nearest
//! neighbour in B), then `top_k` keeps the best survivors.
//!
//! Defaults (mutual + ratio 0.8) follow the published practice for learned descriptors:
//! Lowe's ratio test (Lowe 2004, IJCV, §7.1: reject when d1/d2 > 0.8) combined with the mutual
//! nearest-neighbour check as in the HardNet / HPatches matching evaluations and hloc's
//! `NN-ratio` / `NN-mutual` matchers (hloc uses ratio 0.8 with mutual for learned float
//! descriptors). For binary descriptors the ratio of two small integers is coarse (Hamming
//! distances are integer bit counts), so a distance gate (`max_distance`, bits) and a best/second
//! gap (`min_gap`, bits) are offered as well.

use super::{Matches, NearestTwo, NO_INDEX};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Lowe's ratio threshold (Lowe 2004, §7.1), also hloc's default for learned descriptors.
pub const LOWE_RATIO: f32 = 0.8;

/// Which matches to keep. All enabled filters must pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchConfig {
    /// Keep a → b only if a is also b's nearest neighbour in A.
    pub mutual: bool,
    /// Keep only if d1 < ratio · d2 (d1, d2: distances to the best and second-best neighbour).
    pub ratio: Option<f32>,
    /// Apply the ratio test to B's side too: b's two nearest neighbours in A must pass it as
    /// well. COLMAP's cross-checked SIFT matcher (`SiftMatchingOptions::cross_check`) keeps a
    /// match only when each direction passes its ratio test on its own (`FindBestMatchesOneWay`
    /// in colmap/feature/sift.cc, run both ways). Needs `ratio`. Left out of files when off, so
    /// records written before it read the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ratio_both_ways: bool,
    /// Keep only if d1 ≤ max_distance (L2 for float, bits for binary).
    pub max_distance: Option<f32>,
    /// Keep only if d2 − d1 ≥ min_gap (meant for Hamming distances, in bits).
    pub min_gap: Option<f32>,
    /// Keep at most this many matches, the ones with the smallest distance.
    pub top_k: Option<usize>,
}

impl Default for MatchConfig {
    /// Mutual nearest neighbours with Lowe's ratio 0.8 (see the module docs for the sources).
    fn default() -> Self {
        MatchConfig {
            mutual: true,
            ratio: Some(LOWE_RATIO),
            ratio_both_ways: false,
            max_distance: None,
            min_gap: None,
            top_k: None,
        }
    }
}

impl MatchConfig {
    /// Rejects meaningless settings (ratio outside (0, 1], negative gate or gap, top-k of 0).
    /// Comparisons are negated on purpose so that NaN fails them.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn check(&self) -> Result<()> {
        if let Some(r) = self.ratio {
            if !(r > 0.0 && r <= 1.0) {
                return Err(Error::InvalidInput(format!(
                    "ratio must be in (0, 1], got {r}"
                )));
            }
        }
        if let Some(d) = self.max_distance {
            if !(d >= 0.0) {
                return Err(Error::InvalidInput(format!(
                    "max distance must be ≥ 0, got {d}"
                )));
            }
        }
        if let Some(g) = self.min_gap {
            if !(g >= 0.0) {
                return Err(Error::InvalidInput(format!("min gap must be ≥ 0, got {g}")));
            }
        }
        if self.ratio_both_ways && self.ratio.is_none() {
            return Err(Error::InvalidInput(
                "the ratio test both ways needs the ratio test (drop --no-ratio)".into(),
            ));
        }
        if self.top_k == Some(0) {
            return Err(Error::InvalidInput("top-k must be at least 1".into()));
        }
        Ok(())
    }
}

/// Applies the filters of `config` to exact two-nearest-neighbour lists.
#[allow(clippy::neg_cmp_op_on_partial_ord)] // `!(d1 < r·d2)` also rejects NaN
pub fn apply(nn: &NearestTwo, config: &MatchConfig) -> Matches {
    let mut out = Matches::default();
    for (i, r) in nn.rows.iter().enumerate() {
        if r.best == NO_INDEX {
            continue;
        }
        if config.mutual && nn.cols.get(r.best as usize).map(|c| c.best) != Some(i as u32) {
            continue;
        }
        if let Some(ratio) = config.ratio {
            // With no second neighbour the test cannot be made; validate() prevents that case.
            if r.second == NO_INDEX || !(r.best_dist < ratio * r.second_dist) {
                continue;
            }
            if config.ratio_both_ways {
                // B's side: a B with one row of A to choose from has no second neighbour.
                match nn.cols.get(r.best as usize) {
                    Some(c) if c.second != NO_INDEX && c.best_dist < ratio * c.second_dist => {}
                    _ => continue,
                }
            }
        }
        if let Some(gate) = config.max_distance {
            if r.best_dist > gate {
                continue;
            }
        }
        if let Some(gap) = config.min_gap {
            if r.second != NO_INDEX && r.second_dist - r.best_dist < gap {
                continue;
            }
        }
        out.pairs.push([i as u32, r.best]);
        out.distances.push(r.best_dist);
    }
    if let Some(k) = config.top_k {
        if out.len() > k {
            let mut order: Vec<usize> = (0..out.len()).collect();
            order.sort_by(|&x, &y| {
                out.distances[x]
                    .total_cmp(&out.distances[y])
                    .then(x.cmp(&y))
            });
            order.truncate(k);
            order.sort_unstable();
            out = Matches {
                pairs: order.iter().map(|&x| out.pairs[x]).collect(),
                distances: order.iter().map(|&x| out.distances[x]).collect(),
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::Nn2;

    fn nn(best: u32, d1: f32, second: u32, d2: f32) -> Nn2 {
        Nn2 {
            best,
            best_dist: d1,
            second,
            second_dist: d2,
        }
    }

    /// Three rows of A, two rows of B, worked by hand:
    /// row 0 → b0 (0.2 vs 0.9: ratio 0.22), b0's best is row 0 → mutual;
    /// row 1 → b0 (0.5 vs 0.6: ratio 0.83), not mutual (b0 prefers row 0);
    /// row 2 → b1 (0.7 vs 0.8: ratio 0.875), b1's best is row 2 → mutual.
    fn case() -> NearestTwo {
        NearestTwo {
            rows: vec![nn(0, 0.2, 1, 0.9), nn(0, 0.5, 1, 0.6), nn(1, 0.7, 0, 0.8)],
            cols: vec![nn(0, 0.2, 1, 0.5), nn(2, 0.7, 1, 0.6)],
        }
    }

    fn cfg(mutual: bool, ratio: Option<f32>) -> MatchConfig {
        MatchConfig {
            mutual,
            ratio,
            ratio_both_ways: false,
            max_distance: None,
            min_gap: None,
            top_k: None,
        }
    }

    #[test]
    fn each_filter_and_their_composition() {
        let c = case();
        assert_eq!(
            apply(&c, &cfg(false, None)).pairs,
            vec![[0, 0], [1, 0], [2, 1]]
        );
        assert_eq!(apply(&c, &cfg(true, None)).pairs, vec![[0, 0], [2, 1]]);
        assert_eq!(
            apply(&c, &cfg(false, Some(0.85))).pairs,
            vec![[0, 0], [1, 0]]
        );
        assert_eq!(apply(&c, &cfg(true, Some(0.8))).pairs, vec![[0, 0]]);
        let gate = MatchConfig {
            max_distance: Some(0.6),
            ..cfg(false, None)
        };
        assert_eq!(apply(&c, &gate).pairs, vec![[0, 0], [1, 0]]);
        let gap = MatchConfig {
            min_gap: Some(0.15),
            ..cfg(false, None)
        };
        assert_eq!(apply(&c, &gap).pairs, vec![[0, 0]]);
        let top = MatchConfig {
            top_k: Some(2),
            ..cfg(false, None)
        };
        let m = apply(&c, &top);
        assert_eq!(m.pairs, vec![[0, 0], [1, 0]]);
        assert_eq!(m.distances, vec![0.2, 0.5]);
    }

    /// The ratio test both ways, by hand: row 0's best is column 0 (0.2 against 0.9: passes A's
    /// test); column 0's two nearest rows are 0 and 1 at 0.2 and 0.22, which fails B's test at
    /// 0.8 (0.2 ≥ 0.8 · 0.22 = 0.176). Column 1's are 2 and 0 at 0.3 and 0.9: passes.
    #[test]
    fn the_ratio_test_both_ways_also_tests_b_s_side() {
        let c = NearestTwo {
            rows: vec![nn(0, 0.2, 1, 0.9), nn(0, 0.22, 1, 0.95), nn(1, 0.3, 0, 0.8)],
            cols: vec![nn(0, 0.2, 1, 0.22), nn(2, 0.3, 0, 0.9)],
        };
        let one_way = cfg(true, Some(0.8));
        assert_eq!(apply(&c, &one_way).pairs, vec![[0, 0], [2, 1]]);
        let both = MatchConfig {
            ratio_both_ways: true,
            ..one_way
        };
        assert_eq!(apply(&c, &both).pairs, vec![[2, 1]]);
        // Without the ratio test it means nothing and is refused.
        assert!(MatchConfig {
            ratio: None,
            ..both
        }
        .check()
        .is_err());
    }

    #[test]
    fn equal_distances_fail_the_ratio_test() {
        let c = NearestTwo {
            rows: vec![nn(0, 3.0, 1, 3.0)],
            cols: vec![nn(0, 3.0, NO_INDEX, f32::INFINITY); 2],
        };
        assert!(apply(&c, &cfg(false, Some(1.0))).is_empty());
    }

    #[test]
    fn bad_settings_are_rejected() {
        assert!(cfg(true, Some(0.0)).check().is_err());
        assert!(cfg(true, Some(1.5)).check().is_err());
        assert!(cfg(true, Some(f32::NAN)).check().is_err());
        assert!(MatchConfig {
            top_k: Some(0),
            ..Default::default()
        }
        .check()
        .is_err());
        assert!(MatchConfig::default().check().is_ok());
    }
}
