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
    let verification = match cfg.geometry {
        None => None,
        Some(kind) => {
            let pa: Vec<[f64; 2]> = matches
                .pairs
                .iter()
                .map(|p| a.frames[p[0] as usize])
                .map(|f| [f.x as f64, f.y as f64])
                .collect();
            let pb: Vec<[f64; 2]> = matches
                .pairs
                .iter()
                .map(|p| b.frames[p[1] as usize])
                .map(|f| [f.x as f64, f.y as f64])
                .collect();
            Some(verify(&pa, &pb, kind, &cfg.ransac, intrinsics)?)
        }
    };
    Ok(PairResult {
        matches,
        verification,
    })
}
