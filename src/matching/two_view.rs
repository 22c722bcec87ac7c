//! One image pair: match descriptors, then verify geometry. Shared by `descl match` and
//! `descl sfm`.

use super::{match_descriptors, MatchConfig, Matches};
use crate::error::Result;
use crate::features::Features;
use crate::geometry::{verify, Intrinsics, ModelKind, RansacConfig, Verification};
use serde::{Deserialize, Serialize};

/// Matching and verification settings for a pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairConfig {
    pub matching: MatchConfig,
    /// None: no verification.
    pub geometry: Option<ModelKind>,
    pub ransac: RansacConfig,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            matching: MatchConfig::default(),
            geometry: Some(ModelKind::Fundamental),
            ransac: RansacConfig::default(),
        }
    }
}

/// Matches of a pair and, if asked for, their verification (inlier flags align with `matches`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairResult {
    pub matches: Matches,
    pub verification: Option<Verification>,
}

impl PairResult {
    /// The matches that passed verification (all matches when there was none).
    pub fn inlier_pairs(&self) -> Vec<[u32; 2]> {
        match &self.verification {
            None => self.matches.pairs.clone(),
            Some(v) => self
                .matches
                .pairs
                .iter()
                .zip(&v.inliers)
                .filter(|(_, &ok)| ok)
                .map(|(p, _)| *p)
                .collect(),
        }
    }
}

/// Matches `a` against `b` and verifies the result. `intrinsics` (of a and b) is needed for
/// [`ModelKind::Essential`].
pub fn match_pair(
    a: &Features,
    b: &Features,
    cfg: &PairConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<PairResult> {
    for (side, f) in [("A", a), ("B", b)] {
        if f.frames.len() != f.descriptors.len() {
            return Err(crate::error::Error::InvalidInput(format!(
                "features {side} ({}): {} frames but {} descriptors",
                f.meta.image,
                f.frames.len(),
                f.descriptors.len()
            )));
        }
    }
    let matches = match_descriptors(&a.descriptors, &b.descriptors, &cfg.matching)?;
    verify_matches(a, b, matches, cfg, intrinsics)
}

/// Verifies given matches of `a` and `b` (from any matcher) with `cfg.geometry`.
pub fn verify_matches(
    a: &Features,
    b: &Features,
    matches: Matches,
    cfg: &PairConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<PairResult> {
    let position = |f: &Features, k: u32| -> Result<[f64; 2]> {
        f.frames
            .get(k as usize)
            .map(|fr| [fr.x as f64, fr.y as f64])
            .ok_or_else(|| {
                crate::error::Error::InvalidInput(format!(
                    "match index {k} beyond the {} frames of {}",
                    f.frames.len(),
                    f.meta.image
                ))
            })
    };
    let verification = match cfg.geometry {
        None => None,
        Some(kind) => {
            let pa = matches
                .pairs
                .iter()
                .map(|p| position(a, p[0]))
                .collect::<Result<Vec<_>>>()?;
            let pb = matches
                .pairs
                .iter()
                .map(|p| position(b, p[1]))
                .collect::<Result<Vec<_>>>()?;
            Some(verify(&pa, &pb, kind, &cfg.ransac, intrinsics)?)
        }
    };
    Ok(PairResult {
        matches,
        verification,
    })
}
