//! One image pair: match descriptors with the chosen [`Matcher`], then verify geometry. The
//! one pair path: `descl match` (one pair or a folder), `descl sfm` and the Python bindings all
//! call [`match_pair`], so every matcher works everywhere.

use super::guided::{guided_match, GuideModel};
use super::ivf::{self, IvfConfig};
use super::kdtree::{approximate_match, ApproxConfig};
use super::{filters, match_descriptors, MatchConfig, Matches};
use crate::describe::Descriptors;
use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::{verify, HomographyCheck, Intrinsics, ModelKind, RansacConfig, Verification};
use crate::identity::SetIdentity;
use serde::{Deserialize, Serialize};

/// Search radius (pixels) of guided matching around the first model's prediction.
pub const GUIDED_RADIUS_PX: f32 = 4.0;

/// Fewest verified inliers for a pair to have a model: COLMAP's
/// `TwoViewGeometryOptions::min_num_inliers` default. Below it RANSAC's model is dropped (an
/// unrelated pair often yields a "fundamental matrix" on ~10 chance inliers).
pub const COLMAP_MIN_NUM_INLIERS: usize = 15;

/// COLMAP's two-view RANSAC threshold (`TwoViewGeometryOptions::ransac_options.max_error`,
/// pixels), used for its planar / panoramic label.
pub const COLMAP_MAX_ERROR_PX: f64 = 4.0;

fn default_min_inliers() -> usize {
    COLMAP_MIN_NUM_INLIERS
}

/// How descriptors of a pair are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Matcher {
    /// Exact brute force (SGEMM for float, popcount for binary).
    #[default]
    Exact,
    /// PCA + kd-tree candidates with exact re-ranking (float descriptors only).
    Approx,
    /// Exact, verified, then matched again near the model's prediction (COLMAP's guided
    /// matching; needs a homography or fundamental matrix).
    Guided,
    /// Inverted-file search ([`super::ivf`]; float descriptors only).
    Ivf,
}

impl Matcher {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Matcher::Exact => "exact",
            Matcher::Approx => "approx",
            Matcher::Guided => "guided",
            Matcher::Ivf => "ivf",
        }
    }
}

fn default_guided_radius() -> f32 {
    GUIDED_RADIUS_PX
}

/// Matching and verification settings for a pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairConfig {
    /// Matcher (files written before it was recorded read as `exact`).
    #[serde(default)]
    pub matcher: Matcher,
    pub matching: MatchConfig,
    /// None: no verification.
    pub geometry: Option<ModelKind>,
    pub ransac: RansacConfig,
    /// Guided matching's search radius in pixels.
    #[serde(default = "default_guided_radius")]
    pub guided_radius: f32,
    /// Fewest inliers for a verified model (files written before it was recorded read as
    /// COLMAP's 15).
    #[serde(default = "default_min_inliers")]
    pub min_inliers: usize,
    /// After an F or E model, also fit a homography to the same matches and record it
    /// ([`Verification::homography`]): COLMAP's test for planar scenes and pure rotations,
    /// which labels pairs in a database. Off by default (one more RANSAC per pair); the COLMAP
    /// database path turns it on.
    #[serde(default)]
    pub planar_check: bool,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            matcher: Matcher::Exact,
            matching: MatchConfig::default(),
            geometry: Some(ModelKind::Fundamental),
            ransac: RansacConfig::default(),
            guided_radius: GUIDED_RADIUS_PX,
            min_inliers: COLMAP_MIN_NUM_INLIERS,
            planar_check: false,
        }
    }
}

impl PairConfig {
    /// The settings one pair is verified with, given whether both images' intrinsics are
    /// known (EXIF, a flag or a file): an essential matrix needs them, so without them the pair
    /// is verified with a fundamental matrix instead. A focal length guessed from the image
    /// size (COLMAP's prior, `Intrinsics::default_prior`) is not knowledge: a pair verified
    /// with it would be labelled CALIBRATED beside cameras whose `prior_focal_length` says the
    /// focal length is unknown (issue 44).
    pub fn for_intrinsics(&self, known: bool) -> std::borrow::Cow<'_, PairConfig> {
        if self.geometry == Some(ModelKind::Essential) && !known {
            std::borrow::Cow::Owned(PairConfig {
                geometry: Some(ModelKind::Fundamental),
                ..self.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }

    /// Checks the settings that do not depend on the data: the matcher's needs of the
    /// geometry, the radius, the filters.
    pub fn check(&self) -> Result<()> {
        self.matching.check()?;
        if self.geometry.is_some() {
            self.ransac.check()?;
        }
        if self.matcher == Matcher::Guided {
            if !matches!(
                self.geometry,
                Some(ModelKind::Homography | ModelKind::Fundamental)
            ) {
                return Err(Error::InvalidInput(
                    "the guided matcher needs a homography or fundamental geometry".into(),
                ));
            }
            if !(self.guided_radius.is_finite() && self.guided_radius > 0.0) {
                return Err(Error::InvalidInput(format!(
                    "guided radius must be a positive number of pixels, got {}",
                    self.guided_radius
                )));
            }
        }
        Ok(())
    }
}

/// Matches of a pair and, if asked for, their verification (inlier flags align with `matches`).
/// Two results are equal when their matches and verification are: `seconds` is how long they
/// took, not what they are.
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    pub matches: Matches,
    pub verification: Option<Verification>,
    /// Time spent matching and verifying (zero for a result read from a file).
    #[serde(skip)]
    pub seconds: PairSeconds,
}

impl PartialEq for PairResult {
    fn eq(&self, other: &Self) -> bool {
        self.matches == other.matches && self.verification == other.verification
    }
}

/// Seconds one pair spent in each stage of [`match_pair`] (`descl sfm --json`'s stage split).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PairSeconds {
    /// Descriptor matching (nearest neighbours and filters; both passes of the guided matcher).
    pub matching: f64,
    /// Geometric verification (RANSAC, the planar check).
    pub verification: f64,
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

/// Matches `a` against `b` with `cfg.matcher` and verifies the result. `intrinsics` (of a and
/// b) is needed for [`ModelKind::Essential`].
pub fn match_pair(
    a: &Features,
    b: &Features,
    cfg: &PairConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<PairResult> {
    let started = std::time::Instant::now();
    let mut r = match_and_verify(a, b, cfg, intrinsics)?;
    // Whatever of the pair's time verification did not take was matching.
    r.seconds.matching = (started.elapsed().as_secs_f64() - r.seconds.verification).max(0.0);
    Ok(r)
}

/// The float descriptors of a pair for a matcher that needs them, checked as the exact
/// matcher checks its inputs ([`super::validate`]).
fn float_pair<'a>(
    a: &'a Features,
    b: &'a Features,
    cfg: &PairConfig,
) -> Result<(ndarray::ArrayView2<'a, f32>, ndarray::ArrayView2<'a, f32>)> {
    let (Descriptors::Float(da), Descriptors::Float(db)) = (&a.descriptors, &b.descriptors) else {
        return Err(Error::InvalidInput(format!(
            "the {} matcher needs float descriptors ({} has {}, {} has {})",
            cfg.matcher.name(),
            a.meta.image,
            a.descriptors.kind(),
            b.meta.image,
            b.descriptors.kind()
        )));
    };
    super::validate(&a.descriptors, &b.descriptors, &cfg.matching)?;
    Ok((da.view(), db.view()))
}

/// [`match_pair`] without its clock.
fn match_and_verify(
    a: &Features,
    b: &Features,
    cfg: &PairConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<PairResult> {
    cfg.check()?;
    for (side, f) in [("A", a), ("B", b)] {
        if f.frames.len() != f.descriptors.len() {
            return Err(Error::InvalidInput(format!(
                "features {side} ({}): {} frames but {} descriptors",
                f.meta.image,
                f.frames.len(),
                f.descriptors.len()
            )));
        }
    }
    // Features of two models, two weights of one model or two detector settings are not
    // matched as if made alike (the check sets of features files go through).
    SetIdentity::of(&b.meta).check_same(&b.meta.image, &SetIdentity::of(&a.meta), &a.meta.image)?;
    if cfg.geometry == Some(ModelKind::Essential) && intrinsics.is_none() {
        return Err(Error::InvalidInput(format!(
            "{} – {}: the essential matrix needs both images' intrinsics (given, from a file, or from an EXIF focal length)",
            a.meta.image, b.meta.image
        )));
    }
    match cfg.matcher {
        Matcher::Exact => {
            let matches = match_descriptors(&a.descriptors, &b.descriptors, &cfg.matching)?;
            verify_matches(a, b, matches, cfg, intrinsics)
        }
        Matcher::Approx => {
            let (da, db) = float_pair(a, b, cfg)?;
            let matches = approximate_match(da, db, &ApproxConfig::default(), &cfg.matching)?;
            verify_matches(a, b, matches, cfg, intrinsics)
        }
        Matcher::Ivf => {
            let (da, db) = float_pair(a, b, cfg)?;
            let nn = ivf::nearest_two(da, db, &IvfConfig::default());
            verify_matches(a, b, filters::apply(&nn, &cfg.matching), cfg, intrinsics)
        }
        Matcher::Guided => {
            let exact = PairConfig {
                matcher: Matcher::Exact,
                ..cfg.clone()
            };
            let first = match_and_verify(a, b, &exact, intrinsics)?;
            let guide = match first
                .verification
                .as_ref()
                .and_then(|v| v.model.map(|m| (v.kind, m)))
            {
                Some((ModelKind::Homography, h)) => GuideModel::Homography(h),
                Some((ModelKind::Fundamental, f)) => GuideModel::Fundamental(f),
                // No model (too few matches): the exact result stands. Essential is refused
                // by `check`.
                _ => return Ok(first),
            };
            let first_verification = first.seconds.verification;
            let pa: Vec<[f32; 2]> = a.frames.iter().map(|f| [f.x, f.y]).collect();
            let pb: Vec<[f32; 2]> = b.frames.iter().map(|f| [f.x, f.y]).collect();
            let matches = guided_match(
                &pa,
                &pb,
                &a.descriptors,
                &b.descriptors,
                &guide,
                cfg.guided_radius,
                &cfg.matching,
            )?;
            let mut r = verify_matches(a, b, matches, cfg, intrinsics)?;
            r.seconds.verification += first_verification;
            Ok(r)
        }
    }
}

/// COLMAP's planar test: H and the pair's model kind fitted to all matches at COLMAP's
/// threshold ([`COLMAP_MAX_ERROR_PX`]; at descl's 1 px a homography's 2-D error keeps
/// fewer inliers than F's 1-D epipolar error even on a plane: v_graffiti 1–3, 190 H vs 481 F
/// inliers at 1 px, 532 vs 559 at 4 px).
fn planar_check(
    pa: &[[f64; 2]],
    pb: &[[f64; 2]],
    kind: ModelKind,
    ransac: &RansacConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<Option<HomographyCheck>> {
    let at_colmap = RansacConfig {
        threshold_px: COLMAP_MAX_ERROR_PX,
        ..*ransac
    };
    let h = verify(pa, pb, ModelKind::Homography, &at_colmap, None)?;
    let own = verify(pa, pb, kind, &at_colmap, intrinsics)?;
    Ok(h.model.map(|model| HomographyCheck {
        model,
        num_inliers: h.num_inliers,
        model_inliers: own.num_inliers,
        threshold_px: COLMAP_MAX_ERROR_PX,
    }))
}

/// Verifies given matches of `a` and `b` (from any matcher) with `cfg.geometry`.
pub fn verify_matches(
    a: &Features,
    b: &Features,
    matches: Matches,
    cfg: &PairConfig,
    intrinsics: Option<(&Intrinsics, &Intrinsics)>,
) -> Result<PairResult> {
    let started = std::time::Instant::now();
    let position = |f: &Features, k: u32| -> Result<[f64; 2]> {
        f.frames
            .get(k as usize)
            .map(|fr| [fr.x as f64, fr.y as f64])
            .ok_or_else(|| {
                Error::InvalidInput(format!(
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
            let mut v = verify(&pa, &pb, kind, &cfg.ransac, intrinsics)?;
            if v.model.is_some() && v.num_inliers < cfg.min_inliers {
                v.model = None;
                v.pose = None;
                v.reason = Some(format!(
                    "{} inliers, fewer than the {} a model needs",
                    v.num_inliers, cfg.min_inliers
                ));
            }
            if cfg.planar_check && v.model.is_some() && kind != ModelKind::Homography {
                v.homography = planar_check(&pa, &pb, kind, &cfg.ransac, intrinsics)?;
            }
            Some(v)
        }
    };
    Ok(PairResult {
        matches,
        verification,
        seconds: PairSeconds {
            matching: 0.0,
            verification: started.elapsed().as_secs_f64(),
        },
    })
}
