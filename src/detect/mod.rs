//! Keypoint detection: image → oriented local affine frames with a response, strongest first.
//! Two detectors: DoG (OpenCV's SIFT detector, [`dog`]) and Harris-Affine (Rust,
//! [`harris_affine`]). Both express their frames in the conventions of ARCHITECTURE.md
//! "Conventions" ([`Frame`]).

#[cfg(feature = "full")]
pub mod dog;
pub mod harris_affine;
#[cfg(feature = "full")]
pub mod vlfeat;

use crate::error::{Error, Result};
#[cfg(feature = "full")]
use crate::frame::Detection;
#[cfg(feature = "full")]
use crate::image::GrayImage;
use serde::{Deserialize, Serialize};

/// Measurement-region magnification m (ARCHITECTURE.md "Conventions", Frame): a DoG frame is
/// `a = m·σ·R(angle)`, so the
/// patch covers 2m·σ = 12σ (HardNet / kornia / hloc).
pub const DEFAULT_MAGNIFICATION: f32 = 6.0;
/// Default cap on keypoints per image (the strongest by detector response): `descl
/// extract --max-keypoints` and `descl.Extractor(max_keypoints=…)`.
pub const DEFAULT_MAX_KEYPOINTS: usize = 2048;

/// OpenCV's default SIFT contrast threshold (Lowe 2004 §4 uses 0.03 on [0,1] images with
/// 3 scales per octave; OpenCV divides its 0.04 by the number of octave layers).
pub const DEFAULT_CONTRAST_THRESHOLD: f32 = 0.04;

/// DoG contrast threshold in OpenCV's units equal to COLMAP's default
/// `SiftExtraction.peak_threshold` (0.02 / `octave_resolution` 3, on |DoG| of an image in
/// [0, 1]) times OpenCV's `nOctaveLayers` (3), since OpenCV SIFT keeps an extremum where
/// |DoG| ≥ `contrastThreshold` / `nOctaveLayers`. With OpenCV's default 0.04 a Strecha image
/// gives ~4 300 DoG extrema, half the 8192 budget COLMAP fills. `descl sfm`'s default.
pub const COLMAP_PEAK_CONTRAST_THRESHOLD: f32 = 0.02;

/// COLMAP's `SiftExtraction.max_num_orientations` default: orientations kept per DoG location
/// under [`Selection::Colmap`].
pub const COLMAP_MAX_NUM_ORIENTATIONS: usize = 2;

/// How `max_keypoints` chooses an image's keypoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// The `max_keypoints` strongest frames by detector response (each orientation of a
    /// location is a frame of its own).
    #[default]
    Strongest,
    /// What COLMAP's SIFT extraction keeps for `SiftExtraction.max_num_features` = N
    /// (`ExtractSiftFeaturesCPU`): whole DoG levels, from the coarsest down, until they hold
    /// more than N keypoint *locations* — the finest kept level whole, so an image keeps more
    /// than N (COLMAP kept 10 737 locations per fountain-P11 image on average at N = 8192) —
    /// and at most [`COLMAP_MAX_NUM_ORIENTATIONS`] orientations per location, each a frame
    /// with its own descriptor (COLMAP's database held 12 475 descriptors per fountain-P11
    /// image at 8192).
    /// A location is what OpenCV's SIFT emits once per orientation, sharing centre, size and
    /// response ([`location_key`]); its DoG level is recovered from its scale ([`dog_level`]).
    Colmap,
}

impl Selection {
    /// Every rule, in the order the command line lists them.
    pub const ALL: &'static [Selection] = &[Selection::Strongest, Selection::Colmap];

    /// The name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Selection::Strongest => "strongest",
            Selection::Colmap => "colmap",
        }
    }
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which detector to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DetectorKind {
    /// Difference of Gaussians, OpenCV SIFT detector (Lowe 2004).
    #[default]
    Dog,
    /// Harris-Affine (Mikolajczyk & Schmid 2004).
    HarrisAffine,
    /// VLFeat's DoG (`vl_covdet`, [`vlfeat`]): a reference implementation; needs the cargo
    /// feature `vlfeat`.
    VlfeatDog,
    /// VLFeat's Harris-Affine (`vl_covdet` Harris-Laplace + affine shape, [`vlfeat`]): the
    /// reference for descl's own; needs the cargo feature `vlfeat`.
    VlfeatHarrisAffine,
    /// VLFeat's SIFT detector (`vl_sift`) run as COLMAP 4's CPU SIFT extraction runs it
    /// ([`vlfeat::detect_vlfeat_sift`]): COLMAP's keypoints; needs the cargo feature `vlfeat`.
    VlfeatSift,
}

impl DetectorKind {
    /// Every detector, in the order the command line lists them.
    pub const ALL: &'static [DetectorKind] = &[
        DetectorKind::Dog,
        DetectorKind::HarrisAffine,
        DetectorKind::VlfeatDog,
        DetectorKind::VlfeatHarrisAffine,
        DetectorKind::VlfeatSift,
    ];

    /// The name on the command line and in features files.
    pub fn name(self) -> &'static str {
        match self {
            DetectorKind::Dog => "dog",
            DetectorKind::HarrisAffine => "harris-affine",
            DetectorKind::VlfeatDog => "vlfeat-dog",
            DetectorKind::VlfeatHarrisAffine => "vlfeat-harris-affine",
            DetectorKind::VlfeatSift => "vlfeat-sift",
        }
    }
}

impl std::fmt::Display for DetectorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Detector settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DetectorConfig {
    pub kind: DetectorKind,
    /// Keep at most this many detections, the strongest by response; 0 keeps all. Under
    /// [`Selection::Colmap`] it is COLMAP's `max_num_features` instead (`selection`).
    pub max_keypoints: usize,
    /// DoG contrast threshold (OpenCV's `contrastThreshold`); ignored by Harris-Affine.
    pub contrast_threshold: f32,
    /// Measurement-region magnification m (ARCHITECTURE.md "Conventions": `a = m·σ·R`).
    pub magnification: f32,
    /// How `max_keypoints` chooses (settings written before it existed read as `Strongest`).
    #[serde(default)]
    pub selection: Selection,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            kind: DetectorKind::Dog,
            max_keypoints: 0,
            contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
            magnification: DEFAULT_MAGNIFICATION,
            selection: Selection::Strongest,
        }
    }
}

impl DetectorConfig {
    /// Checks the settings that do not depend on the image: a positive magnification and a
    /// finite contrast threshold ≥ 0 (the command line refuses others when it parses them).
    pub fn check(&self) -> Result<()> {
        if !(self.magnification.is_finite() && self.magnification > 0.0) {
            return Err(Error::InvalidInput(format!(
                "magnification must be a positive number, got {}",
                self.magnification
            )));
        }
        if !(self.contrast_threshold.is_finite() && self.contrast_threshold >= 0.0) {
            return Err(Error::InvalidInput(format!(
                "contrast threshold must be a finite number ≥ 0, got {}",
                self.contrast_threshold
            )));
        }
        Ok(())
    }
}

/// Detects frames in `img`, sorted by score descending and capped at `cfg.max_keypoints`
/// (0 = all) as `cfg.selection` says. An image without keypoints gives an empty Vec.
#[cfg(feature = "full")]
pub fn detect(img: &GrayImage, cfg: &DetectorConfig) -> Result<Vec<Detection>> {
    cfg.check()?;
    let mut dets = match cfg.kind {
        DetectorKind::Dog => dog::detect_dog(img, cfg.contrast_threshold, cfg.magnification)?,
        DetectorKind::HarrisAffine => {
            harris_affine::detect_harris_affine(img, cfg.magnification, cfg.max_keypoints)
        }
        DetectorKind::VlfeatDog => {
            vlfeat::detect_vlfeat(img, vlfeat::Method::Dog, cfg.magnification)?
        }
        DetectorKind::VlfeatHarrisAffine => {
            vlfeat::detect_vlfeat(img, vlfeat::Method::HarrisAffine, cfg.magnification)?
        }
        DetectorKind::VlfeatSift => vlfeat::detect_vlfeat_sift(
            img,
            // OpenCV's contrastThreshold / nOctaveLayers is VLFeat's peak threshold
            // ([`COLMAP_PEAK_CONTRAST_THRESHOLD`]).
            f64::from(cfg.contrast_threshold) / f64::from(dog::SIFT_OCTAVE_LAYERS),
            dog::SIFT_EDGE_THRESHOLD,
            cfg.magnification,
        )?,
    };
    match cfg.selection {
        Selection::Strongest => sort_and_cap(&mut dets, cfg.max_keypoints),
        Selection::Colmap => select_like_colmap(&mut dets, cfg.max_keypoints, cfg.magnification),
    }
    Ok(dets)
}

/// The location a frame was detected at: its centre and response, bit for bit. OpenCV's SIFT
/// copies a location's keypoint once per orientation, changing only the angle; a frame's
/// scale is recomputed from its rotated matrix and may differ in the last bit, so it is not
/// part of the key (two distinct extrema with the same centre and the same response to the
/// bit would count as one location).
#[cfg(feature = "full")]
fn location_key(d: &Detection) -> (u32, u32, u32) {
    (d.frame.x.to_bits(), d.frame.y.to_bits(), d.score.to_bits())
}

/// Sorts by score descending (stable, so equal scores keep detector order) and truncates to
/// `max` (0 = no cap).
#[cfg(feature = "full")]
pub(crate) fn sort_and_cap(dets: &mut Vec<Detection>, max: usize) {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    if max > 0 {
        dets.truncate(max);
    }
}

/// The DoG level of a frame of scale `m·σ` (`magnification` m): round(S·log2(σ/σ₀)) with S =
/// [`dog::SIFT_OCTAVE_LAYERS`] and σ₀ = [`dog::SIFT_SIGMA`] — the index o·S + layer of the
/// octave o and layer SIFT found it in, since SIFT sizes a keypoint σ₀·2^(o + (layer + ξ)/S)
/// with its sub-level offset ξ in [−½, ½] (OpenCV's `findScaleSpaceExtrema`).
#[cfg(feature = "full")]
pub(crate) fn dog_level(d: &Detection, magnification: f32) -> i32 {
    let sigma = f64::from(d.frame.scale()) / f64::from(magnification);
    let layers = f64::from(dog::SIFT_OCTAVE_LAYERS);
    (layers * (sigma / dog::SIFT_SIGMA).log2()).round() as i32
}

/// [`Selection::Colmap`]: whole DoG levels from the coarsest down until they hold more than
/// `max` locations (0 = all), at most [`COLMAP_MAX_NUM_ORIENTATIONS`] frames per location (the
/// first in detector order, as COLMAP keeps its first orientations); the kept frames sorted by
/// score descending (stable).
#[cfg(feature = "full")]
pub(crate) fn select_like_colmap(dets: &mut Vec<Detection>, max: usize, magnification: f32) {
    use std::collections::{BTreeMap, HashMap};
    // Per location (in detector order): its frames so far and its level, taken from its first
    // frame so that all its orientations share it; locations per level.
    let mut locations: HashMap<(u32, u32, u32), (usize, i32)> = HashMap::new();
    let mut per_level: BTreeMap<i32, usize> = BTreeMap::new();
    let tagged: Vec<(bool, i32)> = dets
        .iter()
        .map(|d| {
            let (n, level) = locations
                .entry(location_key(d))
                .or_insert_with(|| (0, dog_level(d, magnification)));
            *n += 1;
            if *n == 1 {
                *per_level.entry(*level).or_insert(0) += 1;
            }
            (*n <= COLMAP_MAX_NUM_ORIENTATIONS, *level)
        })
        .collect();
    // COLMAP: `num_features += level_num_features[i]; if (num_features > max) { first level
    // to keep = i; break; }`, from the coarsest level down.
    let mut finest_kept = i32::MIN;
    if max > 0 {
        let mut held = 0;
        for (&level, &n) in per_level.iter().rev() {
            held += n;
            if held > max {
                finest_kept = level;
                break;
            }
        }
    }
    let mut tagged = tagged.into_iter();
    dets.retain(|_| {
        tagged
            .next()
            .is_some_and(|(first_ones, level)| first_ones && level >= finest_kept)
    });
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
}

#[cfg(all(test, feature = "full"))]
mod tests {
    use super::*;
    use crate::frame::Frame;

    /// A frame at (x, y) with orientation `deg` (scale 1) and response `score`.
    fn det(x: f32, y: f32, deg: f32, score: f32) -> Detection {
        let (s, c) = deg.to_radians().sin_cos();
        Detection {
            frame: Frame {
                x,
                y,
                a: [[c, -s], [s, c]],
            },
            score,
        }
    }

    fn centres(d: &[Detection]) -> Vec<(f32, f32, f32)> {
        d.iter().map(|d| (d.frame.x, d.frame.y, d.score)).collect()
    }

    /// Three locations: A (response 3) with three orientations, B (2) with one, C (1) with two,
    /// in detector order C, A, A, B, A, C.
    fn three_locations() -> Vec<Detection> {
        vec![
            det(5.0, 5.0, 10.0, 1.0),
            det(1.0, 1.0, 0.0, 3.0),
            det(1.0, 1.0, 90.0, 3.0),
            det(2.0, 2.0, 0.0, 2.0),
            det(1.0, 1.0, 200.0, 3.0),
            det(5.0, 5.0, 300.0, 1.0),
        ]
    }

    /// A DoG frame of σ at level `level` (σ = σ₀·2^(level/S)), magnification 1.
    fn at_level(x: f32, deg: f32, level: i32, score: f32) -> Detection {
        let sigma =
            dog::SIFT_SIGMA * 2f64.powf(f64::from(level) / f64::from(dog::SIFT_OCTAVE_LAYERS));
        let mut d = det(x, 0.0, deg, score);
        for row in &mut d.frame.a {
            for v in row {
                *v *= sigma as f32;
            }
        }
        d
    }

    #[test]
    fn strongest_keeps_the_strongest_frames() {
        let mut d = three_locations();
        sort_and_cap(&mut d, 2);
        // The two strongest frames: both are A's.
        assert_eq!(centres(&d), vec![(1.0, 1.0, 3.0), (1.0, 1.0, 3.0)]);
    }

    #[test]
    fn dog_level_inverts_sifts_size() {
        for level in [-3, -1, 0, 1, 2, 5, 11] {
            assert_eq!(dog_level(&at_level(0.0, 37.0, level, 1.0), 1.0), level);
        }
        // Six times the magnification, six times the scale: the same level.
        let mut d = at_level(0.0, 0.0, 4, 1.0);
        for row in &mut d.frame.a {
            for v in row {
                *v *= 6.0;
            }
        }
        assert_eq!(dog_level(&d, 6.0), 4);
    }

    #[test]
    fn colmap_keeps_whole_coarse_levels_and_two_orientations() {
        // Level 6: locations a (3 orientations) and b; level 3: c, d; level 0: e, f, g.
        // Scores deliberately favour the fine levels: COLMAP selects by level, not response.
        let dets = || {
            vec![
                at_level(1.0, 0.0, 6, 0.1),
                at_level(1.0, 90.0, 6, 0.1),
                at_level(1.0, 180.0, 6, 0.1),
                at_level(2.0, 0.0, 6, 0.2),
                at_level(3.0, 0.0, 3, 0.3),
                at_level(4.0, 0.0, 3, 0.4),
                at_level(5.0, 0.0, 0, 0.5),
                at_level(6.0, 0.0, 0, 0.6),
                at_level(7.0, 0.0, 0, 0.7),
            ]
        };
        let xs = |d: &[Detection]| d.iter().map(|d| d.frame.x).collect::<Vec<_>>();
        // N = 2: level 6 holds 2 (not > 2), level 3 brings 4 > 2 and is kept whole.
        let mut d = dets();
        select_like_colmap(&mut d, 2, 1.0);
        assert_eq!(xs(&d), vec![4.0, 3.0, 2.0, 1.0, 1.0]);
        assert_eq!(d[3].frame.a, at_level(0.0, 0.0, 6, 0.0).frame.a);
        assert_eq!(d[4].frame.a, at_level(0.0, 90.0, 6, 0.0).frame.a);
        // N = 1: level 6 alone holds 2 > 1.
        let mut d = dets();
        select_like_colmap(&mut d, 1, 1.0);
        assert_eq!(xs(&d), vec![2.0, 1.0, 1.0]);
        // N = 7 or 0: everything, still two orientations per location.
        for max in [7, 0] {
            let mut d = dets();
            select_like_colmap(&mut d, max, 1.0);
            assert_eq!(xs(&d), vec![7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 1.0]);
        }
        let mut none = Vec::new();
        select_like_colmap(&mut none, 8, 1.0);
        assert!(none.is_empty());
    }
}
