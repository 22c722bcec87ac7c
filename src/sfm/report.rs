//! What a mapping reports: each mapper run ([`MapAttempt`]), the kept reconstruction and its
//! settings ([`Mapped`]), each model's refinement ([`ModelRefinement`]) and where `descl sfm`'s
//! time went ([`SfmStageSeconds`]). Apart from the policy ([`crate::sfm::map`]) because the
//! command line and the benchmarks read these without running anything.

use super::mapper::{BundleTermination, MapperKind};
use crate::image_set;
use crate::io::colmap_model::Reconstruction;
use serde::Serialize;
use std::path::PathBuf;

/// One mapper run of [`map`] (`colmap mapper`, or pycolmap's) and what it made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapAttempt {
    /// The mapper of the run.
    pub mapper: MapperKind,
    /// `Mapper.filter_max_reproj_error`, pixels.
    pub filter_max_reproj_error_px: f64,
    /// `Mapper.init_min_tri_angle`, degrees.
    pub init_min_tri_angle_deg: f64,
    /// None: cameras started from the database's focal lengths; a factor: cameras of unknown
    /// focal length started from factor · max(width, height) ([`FALLBACK_FOCAL_PRIOR_FACTOR`]).
    pub focal_prior_factor: Option<f64>,
    /// Images of its largest model (None: it made no model).
    pub registered: Option<usize>,
    /// 3-D points of its largest model, as the mapper made it (before any triangulation
    /// again: [`Mapped::reconstruction`] has the final count).
    pub num_points: Option<usize>,
    /// Why it made no model (the mapper's message).
    pub error: Option<String>,
    /// Whether its models are the ones [`map`] kept in the output folder.
    pub kept: bool,
    /// Wall time of the run, seconds.
    pub seconds: f64,
}

impl MapAttempt {
    /// The run's settings for a message: "filter 4 px, angle 8°" (", focal prior 0.85 ·
    /// max(w, h)" for the focal-prior fallback).
    pub fn settings(&self) -> String {
        let focal = self
            .focal_prior_factor
            .map(|k| format!(", focal prior {k} · max(w, h)"))
            .unwrap_or_default();
        format!(
            "filter {} px, angle {}°{focal}",
            px_text(self.filter_max_reproj_error_px),
            self.init_min_tri_angle_deg
        )
    }
}

/// A filter for a message: two decimals where they hold it to 1 % (`2.6 px`, not
/// `2.6041666666666665 px`), more where they do not (`0.0001 px`, not `0 px`); no trailing
/// zeros.
pub fn px_text(px: f64) -> String {
    let decimals = (2..=12)
        .find(|&d| {
            let shown: f64 = format!("{px:.d$}").parse().unwrap_or(px);
            (shown - px).abs() <= 0.01 * px.abs()
        })
        .unwrap_or(12);
    let s = format!("{px:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A reconstruction by [`map`] and the mapper settings that made it.
#[derive(Debug, Clone)]
pub struct Mapped {
    /// The mapper that ran, with its version where it reports one: "colmap", "pycolmap
    /// 4.2.1" ([`crate::sfm::mapper::MapperKind::describe`]).
    pub mapper: String,
    /// The largest model of the kept run, in the output folder.
    pub reconstruction: Reconstruction,
    /// `Mapper.init_min_tri_angle` of the run that made the model, degrees.
    pub init_min_tri_angle_deg: f64,
    /// `Mapper.filter_max_reproj_error` of the run that made the model, pixels.
    pub filter_max_reproj_error_px: f64,
    /// Images of the database with a verified pair of at least
    /// [`crate::sfm::mapper::COLMAP_MAPPER_MIN_NUM_MATCHES`] inliers: the most a model
    /// can register.
    pub registrable_images: usize,
    /// The filter of the kept model's refinement ([`refine_filter_px`]: its observations past
    /// it dropped, one more bundle adjustment, its points triangulated again at COLMAP's 4 px
    /// with the cameras held fixed), when it was refined. This model's alone: the run's other
    /// models are refined each on its own ([`Mapped::models`]).
    pub refined_at_px: Option<f64>,
    /// Why the kept model's refinement failed, when it did (the model is then the mapper's
    /// own). A smaller model's failure is not here but in [`Mapped::models`].
    pub refinement_error: Option<String>,
    /// Every mapper run, in the order they ran; exactly one is `kept`.
    pub attempts: Vec<MapAttempt>,
    /// How each model of the kept run was refined, in the output folder's numeric order
    /// (empty for a model COLMAP's mapper made alone, as `descl bench sfm`'s peer).
    pub models: Vec<ModelRefinement>,
    /// The size COLMAP's `min_model_size` rule asks of the largest model
    /// ([`crate::sfm::min_model_images`]), when no run made one that large and the largest
    /// model made is kept all the same (a set of several scenes, or images that do not connect).
    pub below_min_model_size: Option<usize>,
}

impl Mapped {
    /// Whether the model was made at a later initial-pair angle than the first run's (the
    /// [`FALLBACK_INIT_MIN_TRI_ANGLE_DEG`] fallback), because the first angle made no model.
    pub fn angle_fallback(&self) -> bool {
        self.attempts
            .first()
            .is_some_and(|a| a.init_min_tri_angle_deg != self.init_min_tri_angle_deg)
    }

    /// The focal-prior factor of the kept run ([`FALLBACK_FOCAL_PRIOR_FACTOR`]), when no run
    /// from the database's own focal lengths made a model.
    pub fn focal_prior_factor(&self) -> Option<f64> {
        self.attempts
            .iter()
            .find(|a| a.kept)
            .and_then(|a| a.focal_prior_factor)
    }

    /// Whether a fallback made the model: the angle, the focal prior or both.
    pub fn fallback(&self) -> bool {
        self.angle_fallback() || self.focal_prior_factor().is_some()
    }

    /// The runs that were not kept (no model, fewer images, or as many as an earlier run),
    /// for a note: "filter 1 px, angle 16°: 15/33 images; ...".
    pub fn passed_over(&self) -> Vec<String> {
        self.attempts
            .iter()
            .filter(|a| !a.kept)
            .map(|a| {
                let made = match a.registered {
                    Some(n) => format!("{n}/{} images", self.registrable_images),
                    None => "no model".to_string(),
                };
                format!("{}: {made}", a.settings())
            })
            .collect()
    }
}

/// Where the time of `descl sfm`'s stages went (`seconds.stages` of its `--json`, so a user
/// sees which stage to speed up): the extractor's decode + detect (thread-seconds) and
/// describe, the pairs' matching and verification (thread-seconds), and with a reconstruction
/// each mapper run ([`MapAttempt::seconds`]) and the rest of the mapper stage (the
/// refinement of the kept run's models).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SfmStageSeconds {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_detect_thread_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub describe: Option<f64>,
    /// Each mapper run's wall time, in the order they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapper_runs: Option<Vec<f64>>,
    pub matching_thread_seconds: f64,
    /// The mapper stage's wall time less its runs' (at least 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refinement: Option<f64>,
    pub verification_thread_seconds: f64,
}

impl SfmStageSeconds {
    /// The stages of a set run, and of its mapping when there was one: what [`map`] returned
    /// and the wall time of the whole mapper stage, seconds.
    pub fn new(set: &image_set::StageSeconds, mapping: Option<(&Mapped, f64)>) -> SfmStageSeconds {
        let runs = mapping.map(|(m, _)| m.attempts.iter().map(|a| a.seconds).collect::<Vec<_>>());
        SfmStageSeconds {
            decode_detect_thread_seconds: set.extraction.map(|e| e.decode_detect),
            describe: set.extraction.map(|e| e.describe),
            refinement: mapping
                .zip(runs.as_ref())
                .map(|((_, stage), runs)| (stage - runs.iter().sum::<f64>()).max(0.0)),
            mapper_runs: runs,
            matching_thread_seconds: set.matching,
            verification_thread_seconds: set.verification,
        }
    }
}

impl std::fmt::Display for SfmStageSeconds {
    /// One line for people, the stages in the JSON's (alphabetical) order:
    /// `describe 1.2, mapper_runs [3.4, 5.6], …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let one = |k: &str, v: Option<f64>| v.map(|v| format!("{k} {v:.1}"));
        let runs = self.mapper_runs.as_ref().map(|runs| {
            let r: Vec<String> = runs.iter().map(|r| format!("{r:.1}")).collect();
            format!("mapper_runs [{}]", r.join(", "))
        });
        let parts: Vec<String> = [
            one(
                "decode_detect_thread_seconds",
                self.decode_detect_thread_seconds,
            ),
            one("describe", self.describe),
            runs,
            one(
                "matching_thread_seconds",
                Some(self.matching_thread_seconds),
            ),
            one("refinement", self.refinement),
            one(
                "verification_thread_seconds",
                Some(self.verification_thread_seconds),
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// One model of [`map`]'s kept run, as it was moved into the output folder: refined, or the
/// mapper's own and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRefinement {
    /// The model's folder in the output folder.
    pub path: PathBuf,
    /// Whether it is the largest model, the one [`Mapped::reconstruction`] holds.
    pub largest: bool,
    /// The filter it was refined at ([`refine_filter_px`]); None: it is the mapper's own
    /// (nothing was refined, or its refinement failed: `error`).
    pub refined_at_px: Option<f64>,
    /// Why its refinement failed.
    pub error: Option<String>,
    /// How its refinement's bundle adjustment ended (COLMAP's report), when it ran and
    /// reported it. A bundle adjustment that did not converge still refines the model.
    pub bundle_adjustment: Option<BundleTermination>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping whose runs took `seconds` each, the last one kept.
    fn mapped_of_runs(seconds: &[f64]) -> Mapped {
        let attempt = |s: f64, kept: bool| MapAttempt {
            mapper: MapperKind::Colmap,
            filter_max_reproj_error_px: 4.0,
            init_min_tri_angle_deg: 16.0,
            focal_prior_factor: None,
            registered: kept.then_some(2),
            num_points: kept.then_some(10),
            error: None,
            kept,
            seconds: s,
        };
        Mapped {
            mapper: "colmap".into(),
            reconstruction: Reconstruction {
                path: "sparse/0".into(),
                images: Vec::new(),
                num_points: 10,
                mean_reprojection_error: 0.5,
                mean_track_length: 2.0,
            },
            init_min_tri_angle_deg: 16.0,
            filter_max_reproj_error_px: 4.0,
            registrable_images: 2,
            refined_at_px: None,
            refinement_error: None,
            below_min_model_size: None,
            attempts: seconds
                .iter()
                .enumerate()
                .map(|(k, &s)| attempt(s, k + 1 == seconds.len()))
                .collect(),
            models: Vec::new(),
        }
    }

    /// `descl sfm --json`'s `seconds.stages` from the typed results: each mapper run's own
    /// seconds, the rest of the mapper stage as the refinement (never below 0), and no mapper
    /// keys without a reconstruction.
    #[test]
    fn stage_seconds_take_the_mapper_runs_from_the_attempts() {
        let set = image_set::StageSeconds {
            features: 3.0,
            pairs: 2.0,
            extraction: Some(crate::pipeline::ExtractSeconds {
                decode_detect: 2.5,
                describe: 0.5,
            }),
            matching: 1.3,
            verification: 0.7,
        };
        let mapped = mapped_of_runs(&[1.0, 2.5]);
        let stages = SfmStageSeconds::new(&set, Some((&mapped, 5.0)));
        assert_eq!(
            serde_json::to_value(&stages).unwrap(),
            serde_json::json!({
                "decode_detect_thread_seconds": 2.5,
                "describe": 0.5,
                "mapper_runs": [1.0, 2.5],
                "matching_thread_seconds": 1.3,
                "refinement": 1.5,
                "verification_thread_seconds": 0.7,
            })
        );
        assert_eq!(
            stages.to_string(),
            "decode_detect_thread_seconds 2.5, describe 0.5, mapper_runs [1.0, 2.5], \
             matching_thread_seconds 1.3, refinement 1.5, verification_thread_seconds 0.7"
        );
        // A stage timed shorter than its runs (clock granularity) has no negative refinement.
        let short = SfmStageSeconds::new(&set, Some((&mapped, 3.0)));
        assert_eq!(short.refinement, Some(0.0));
        let none = SfmStageSeconds::new(
            &image_set::StageSeconds {
                extraction: None,
                ..set
            },
            None,
        );
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            serde_json::json!({"matching_thread_seconds": 1.3, "verification_thread_seconds": 0.7})
        );
        assert_eq!(
            none.to_string(),
            "matching_thread_seconds 1.3, verification_thread_seconds 0.7"
        );
    }
}
