//! The benchmark report: every number in one serde structure (written as JSON) and the markdown
//! tables derived from it.

use crate::eval::hpatches::{MatchingResult, RetrievalResult, VerificationResult};
use crate::eval::phototour::PhotoTourResult;
use crate::eval::reconstruction::SceneReconstruction;
use crate::eval::robustness::{self, RobustnessFamily};
use crate::eval::runner::{PoseSummary, Timing};
use crate::eval::sequences::{summarise, PairResult, SequenceSummary, MMA3_INDEX};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Reads an `f64` that is infinite when a pair failed (a corner or pose error): serde_json
/// writes non-finite numbers as `null`, so `null` reads back as +∞.
pub(crate) fn infinite_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Name of the combined group of all homography sequences.
pub const ALL_SEQUENCES: &str = "all";

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub logical_cpus: usize,
    pub os: String,
}

impl Machine {
    /// This machine (CPU model from /proc/cpuinfo where available).
    pub fn current() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu,
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }
}

/// Protocol settings recorded with the numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub detector: String,
    pub max_keypoints: usize,
    pub magnification: f32,
    pub matcher: String,
    pub homography_ransac: String,
    pub pose_ransac: String,
    /// Keypoints per image of the reconstruction suite, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sfm_max_keypoints: Option<usize>,
    /// How the reconstruction suite chose its `sfm_max_keypoints` per image
    /// (`DetectorConfig::selection`); None in reports written before 2026-11-25, whose suite
    /// kept the strongest frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sfm_selection: Option<crate::detect::Selection>,
    /// Runs per pipeline and scene of the reconstruction suite; None in reports written before
    /// 2026-11-26, whose suite ran each once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sfm_runs: Option<usize>,
    /// The mapper of descl's side of the reconstruction suite with its version ("colmap",
    /// "pycolmap 4.2.1"); None in reports written before 2026-11-28, all `colmap mapper`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sfm_mapper: Option<String>,
    /// The reconstruction suite's same-run peers that ran, with their tools' versions and
    /// settings; empty in reports before 2026-11-29 (COLMAP's pipeline alone, unrecorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sfm_peers: Vec<PeerSettings>,
    /// Peers the reconstruction suite skipped, each with why (a pycolmap that cannot run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sfm_skipped: Vec<String>,
}

/// A same-run peer of the reconstruction suite ([`crate::eval::reconstruction::Peer`]) as it
/// ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerSettings {
    /// Its method name in [`BenchReport::sfm`].
    pub method: String,
    /// The tool and its version ("COLMAP 3.8", "pycolmap 4.2.1").
    pub tool: String,
    /// What it ran and with which settings.
    pub settings: String,
}

/// One group of homography sequences for one method.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SequenceGroup {
    pub summary: SequenceSummary,
    pub pairs: Vec<PairResult>,
}

/// HPatches patch tasks of one method on one split.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HPatchesReport {
    pub split: String,
    pub verification: Option<VerificationResult>,
    pub matching: MatchingResult,
    pub retrieval: Option<RetrievalResult>,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub descl_version: String,
    pub command: String,
    pub unix_time: u64,
    pub machine: Machine,
    pub settings: Settings,
    pub methods: Vec<String>,
    /// method → group (dataset, plus "all") → results.
    pub sequences: BTreeMap<String, BTreeMap<String, SequenceGroup>>,
    /// method → family ([`robustness::JPEG`], [`robustness::BLUR`], [`robustness::ZOOM`]) → its
    /// levels; empty in reports written before the suite existed (and without the zoom family
    /// before 2026-11-27).
    #[serde(default)]
    pub robustness: BTreeMap<String, BTreeMap<String, RobustnessFamily>>,
    pub pose: BTreeMap<String, PoseSummary>,
    /// detector → method → Oxford repeatability and matching score.
    pub matching_score: BTreeMap<String, BTreeMap<String, crate::eval::oxford::ScoreSummary>>,
    pub hpatches: BTreeMap<String, HPatchesReport>,
    /// method → one result per test dataset.
    pub phototour: BTreeMap<String, Vec<PhotoTourResult>>,
    /// method (and [`crate::eval::reconstruction::COLMAP_SIFT_PIPELINE`]) → scene → reconstruction against the ground truth.
    #[serde(default)]
    pub sfm: BTreeMap<String, BTreeMap<String, SceneReconstruction>>,
    pub timing: Timing,
}

/// Groups pair results per dataset and adds the combined group [`ALL_SEQUENCES`].
pub fn group_sequences(
    by_group: &BTreeMap<String, Vec<PairResult>>,
) -> BTreeMap<String, SequenceGroup> {
    let mut out = BTreeMap::new();
    let mut all = Vec::new();
    for (g, pairs) in by_group {
        all.extend(pairs.iter().cloned());
        out.insert(
            g.clone(),
            SequenceGroup {
                summary: summarise(pairs),
                pairs: pairs.clone(),
            },
        );
    }
    if by_group.len() > 1 {
        out.insert(
            ALL_SEQUENCES.to_string(),
            SequenceGroup {
                summary: summarise(&all),
                pairs: Vec::new(),
            },
        );
    }
    out
}

fn f1(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "–".into()
    }
}

impl BenchReport {
    /// The markdown tables of every section that has results.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}{} ({} logical CPUs, {}); descl {}.",
            crate::io::atomic::MARKDOWN_REPORT_START,
            self.machine.cpu,
            self.machine.logical_cpus,
            self.machine.os,
            self.descl_version
        );
        let _ = writeln!(
            s,
            "Protocol: {} top-{} by response, magnification {}, matcher {}, homography {}, pose {}.\n",
            self.settings.detector,
            self.settings.max_keypoints,
            self.settings.magnification,
            self.settings.matcher,
            self.settings.homography_ransac,
            self.settings.pose_ransac
        );
        self.md_sequences(&mut s);
        self.md_robustness(&mut s);
        self.md_pose(&mut s);
        self.md_matching_score(&mut s);
        self.md_hpatches(&mut s);
        self.md_phototour(&mut s);
        self.md_sfm(&mut s);
        self.md_timing(&mut s);
        s
    }

    /// Homography sequences: MMA and homography accuracy per method.
    fn md_sequences(&self, s: &mut String) {
        if self.sequences.is_empty() {
            return;
        }
        let groups: Vec<String> = self
            .sequences
            .values()
            .next()
            .map(|g| g.keys().cloned().collect())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "### Homography sequences: MMA@3 (%) and homography accuracy\n"
        );
        let mut header = "| method |".to_string();
        let mut rule = "|---|".to_string();
        for g in &groups {
            let n = self
                .sequences
                .values()
                .next()
                .and_then(|m| m.get(g))
                .map_or(0, |x| x.summary.pairs);
            let _ = write!(header, " {g} MMA@3 ({n}) |");
            rule += "---|";
        }
        header += " MMA@1 / @5 / @10 | H acc @1 / @3 / @5 px | keypoints | matches | correct@3 | wrong@3 unrepeated | MMA@3, matches with ratio 0.8 |";
        rule += "---|---|---|---|---|---|---|";
        let _ = writeln!(s, "{header}\n{rule}");
        for (m, by_group) in &self.sequences {
            let mut row = format!("| {m} |");
            for g in &groups {
                let v = by_group
                    .get(g)
                    .map_or(f64::NAN, |x| x.summary.mma[MMA3_INDEX].1);
                let _ = write!(row, " {} |", f1(v));
            }
            let main = by_group
                .get(ALL_SEQUENCES)
                .or_else(|| by_group.values().next());
            if let Some(x) = main {
                let sm = &x.summary;
                let _ = write!(
                    row,
                    " {} / {} / {} | {} / {} / {} | {:.0} | {:.0} | {:.0} | {:.1} | {}, {:.0} |",
                    f1(sm.mma[0].1),
                    f1(sm.mma[4].1),
                    f1(sm.mma[9].1),
                    f1(sm.homography_accuracy[0].1),
                    f1(sm.homography_accuracy[1].1),
                    f1(sm.homography_accuracy[2].1),
                    sm.mean_keypoints,
                    sm.mean_matches,
                    sm.mean_correct_3px,
                    sm.mean_unrepeated_wrong_3px,
                    f1(sm.lowe_mma3),
                    sm.mean_lowe_matches
                );
            }
            let _ = writeln!(s, "{row}");
        }
        s.push('\n');
    }

    /// Robustness pairs: MMA@3 per family (all levels) and per level.
    fn md_robustness(&self, s: &mut String) {
        let Some(first) = self.robustness.values().next() else {
            return;
        };
        let images = first
            .values()
            .next()
            .and_then(|f| f.levels.first())
            .map_or(0, |l| l.summary.pairs);
        let geometry: Vec<&str> = first
            .keys()
            .map(|family| match family.as_str() {
                robustness::ZOOM => {
                    "zoom: turned and magnified about the centre, the magnified copy as image 1"
                }
                _ => "identity homography",
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let _ = writeln!(
            s,
            "### Robustness ({images} dev reference images against changed copies; {}): MMA@3 (%)\n",
            geometry.join("; ")
        );
        let mut header = "| method |".to_string();
        let mut rule = "|---|".to_string();
        for (family, f) in first {
            let _ = write!(header, " {family} (all) |");
            rule += "---|";
            for l in &f.levels {
                let label = match family.as_str() {
                    robustness::JPEG => format!("q{}", l.level),
                    robustness::BLUR => format!("σ{}", l.level),
                    robustness::ZOOM => {
                        format!("×{} {}°", l.level, l.rotation_deg.map_or(f64::NAN, |r| r))
                    }
                    _ => format!("{}", l.level),
                };
                let _ = write!(header, " {label} |");
                rule += "---|";
            }
        }
        let _ = writeln!(s, "{header}\n{rule}");
        for (m, families) in &self.robustness {
            let mut row = format!("| {m} |");
            for (family, f0) in first {
                let f = families.get(family);
                let mma3 =
                    |x: Option<&SequenceSummary>| f1(x.map_or(f64::NAN, |x| x.mma[MMA3_INDEX].1));
                let _ = write!(row, " {} |", mma3(f.map(|f| &f.summary)));
                for (i, _) in f0.levels.iter().enumerate() {
                    let l = f.and_then(|f| f.levels.get(i)).map(|l| &l.summary);
                    let _ = write!(row, " {} |", mma3(l));
                }
            }
            let _ = writeln!(s, "{row}");
        }
        s.push('\n');
        // Where the wrong matches come from: MMA is a precision, and mutual nearest neighbours
        // also pairs frames that the detector found in one image only.
        let _ = writeln!(
            s,
            "Per pair (mean over each family's pairs): mutual-NN matches / correct at 3 px / wrong at 3 px / of those, between two unrepeated frames (no counterpart within 3 px in the other image: the detector's share, which no describer can make correct); then MMA@3 and matches under `descl match`'s matcher (mutual NN + Lowe's ratio 0.8)\n"
        );
        let mut header = "| method |".to_string();
        let mut rule = "|---|".to_string();
        for family in first.keys() {
            let _ = write!(header, " {family} | {family}, ratio 0.8 |");
            rule += "---|---|";
        }
        let _ = writeln!(s, "{header}\n{rule}");
        for (m, families) in &self.robustness {
            let mut row = format!("| {m} |");
            for family in first.keys() {
                match families.get(family).map(|f| &f.summary) {
                    Some(x) => {
                        let _ = write!(
                            row,
                            " {:.0} / {:.0} / {:.0} / {:.1} | {}, {:.0} |",
                            x.mean_matches,
                            x.mean_correct_3px,
                            x.mean_matches - x.mean_correct_3px,
                            x.mean_unrepeated_wrong_3px,
                            f1(x.lowe_mma3),
                            x.mean_lowe_matches
                        );
                    }
                    None => row += " — | — |",
                }
            }
            let _ = writeln!(s, "{row}");
        }
        s.push('\n');
    }

    /// Relative pose AUC per method.
    fn md_pose(&self, s: &mut String) {
        if self.pose.is_empty() {
            return;
        }
        let n = self.pose.values().next().map_or(0, |p| p.pairs);
        let _ = writeln!(
            s,
            "### Relative pose ({n} pairs): AUC (%) of max(rotation, translation) error\n"
        );
        let _ = writeln!(
            s,
            "| method | AUC@5° | AUC@10° | AUC@20° | mAA@10° |\n|---|---|---|---|---|"
        );
        for (m, p) in &self.pose {
            let _ = writeln!(
                s,
                "| {m} | {} | {} | {} | {} |",
                f1(p.auc[0].1),
                f1(p.auc[1].1),
                f1(p.auc[2].1),
                f1(p.maa10)
            );
        }
        s.push('\n');
    }

    /// Oxford matching score and repeatability per detector and method: the means over all
    /// pairs (with correspondences and the detector's time per image), then one table per
    /// sequence.
    fn md_matching_score(&self, s: &mut String) {
        use crate::eval::oxford::means;
        if self.matching_score.is_empty() {
            return;
        }
        let n = self
            .matching_score
            .values()
            .flat_map(|m| m.values())
            .next()
            .map_or(0, |x| x.pairs);
        let _ = writeln!(
            s,
            "### Oxford matching score and repeatability ({n} pairs, overlap error < 40 %)\n"
        );
        let _ = writeln!(
            s,
            "| detector | method | repeatability (%) | correspondences | matching score (%) | detection ms / image |\n|---|---|---|---|---|---|"
        );
        for (d, by_method) in &self.matching_score {
            for (m, x) in by_method {
                let _ = writeln!(
                    s,
                    "| {d} | {m} | {} | {:.0} | {} | {:.0} |",
                    f1(x.repeatability),
                    x.correspondences,
                    f1(x.matching_score),
                    x.detect_ms_per_image
                );
            }
        }
        s.push('\n');
        let mut sequences: Vec<&str> = self
            .matching_score
            .values()
            .flat_map(|m| m.values())
            .flat_map(|x| x.details.iter().map(|p| p.sequence.as_str()))
            .collect();
        sequences.sort_unstable();
        sequences.dedup();
        for seq in sequences {
            let _ = writeln!(
                s,
                "#### {seq}\n\n| detector | method | repeatability (%) | correspondences | matching score (%) |\n|---|---|---|---|---|"
            );
            for (d, by_method) in &self.matching_score {
                for (m, x) in by_method {
                    let (r, ms, c) = means(x.details.iter().filter(|p| p.sequence == seq));
                    let _ = writeln!(s, "| {d} | {m} | {} | {c:.0} | {} |", f1(r), f1(ms));
                }
            }
            s.push('\n');
        }
    }

    /// HPatches patch tasks per method.
    fn md_hpatches(&self, s: &mut String) {
        if self.hpatches.is_empty() {
            return;
        }
        let split = self
            .hpatches
            .values()
            .next()
            .map_or(String::new(), |h| h.split.clone());
        let _ = writeln!(s, "### HPatches patches, split {split}: mAP (%)\n");
        let _ = writeln!(
            s,
            "| method | distance | verification | matching | retrieval | matching easy / hard / tough |\n|---|---|---|---|---|---|"
        );
        for (m, h) in &self.hpatches {
            let per = |t: &str| {
                let g = &h.matching.per_difficulty[t];
                let v: Vec<f64> = g.values().copied().collect();
                f1(v.iter().sum::<f64>() / v.len().max(1) as f64)
            };
            let _ = writeln!(
                s,
                "| {m} | {} | {} | {} | {} | {} / {} / {} |",
                h.matching.metric.name(),
                h.verification.as_ref().map_or("–".into(), |v| f1(v.map)),
                f1(h.matching.map),
                h.retrieval.as_ref().map_or("–".into(), |r| f1(r.map)),
                per("e"),
                per("h"),
                per("t")
            );
        }
        s.push('\n');
    }

    /// UBC PhotoTour FPR95 per method and dataset.
    fn md_phototour(&self, s: &mut String) {
        if self.phototour.is_empty() {
            return;
        }
        let _ = writeln!(s, "### UBC PhotoTour: FPR (%) at 95 % recall\n");
        let sets: Vec<String> = self
            .phototour
            .values()
            .next()
            .map(|v| v.iter().map(|r| r.dataset.clone()).collect())
            .unwrap_or_default();
        let mut header = "| method |".to_string();
        let mut rule = "|---|".to_string();
        for d in &sets {
            let _ = write!(header, " test {d} |");
            rule += "---|";
        }
        let _ = writeln!(s, "{header} mean |\n{rule}---|");
        for (m, rs) in &self.phototour {
            let mut row = format!("| {m} |");
            for r in rs {
                let _ = write!(row, " {:.2} |", r.fpr95);
            }
            let mean = rs.iter().map(|r| r.fpr95).sum::<f64>() / rs.len().max(1) as f64;
            let _ = writeln!(s, "{row} {mean:.2} |");
        }
        s.push('\n');
    }

    /// Reconstructions per scene and method.
    fn md_sfm(&self, s: &mut String) {
        if self.sfm.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "### Reconstruction (descl's side mapped by {}, principal point fixed) against the ground-truth cameras\n",
            self.settings.sfm_mapper.as_deref().unwrap_or("colmap")
        );
        if let Some(k) = self.settings.sfm_max_keypoints {
            let cap = match self.settings.sfm_selection {
                Some(crate::detect::Selection::Colmap) => format!(
                    "DoG keypoints chosen as COLMAP chooses {k} features (whole DoG levels from the coarsest until they hold more than {k} locations, at most {} orientations each)",
                    crate::detect::COLMAP_MAX_NUM_ORIENTATIONS
                ),
                _ => format!("DoG: the {k} strongest frames"),
            };
            let _ = writeln!(
                s,
                "{cap}, at COLMAP's peak threshold (contrast threshold {}; COLMAP: `max_num_features` {k}) per image, exhaustive pairs, one camera per image.\n",
                crate::detect::COLMAP_PEAK_CONTRAST_THRESHOLD
            );
        }
        if let Some(m) = self
            .settings
            .sfm_mapper
            .as_deref()
            .filter(|m| *m != "colmap")
        {
            let _ = writeln!(
                s,
                "descl's databases mapped by {m} (as `descl sfm` maps them); COLMAP's pipeline by `colmap mapper`.\n"
            );
        }
        for p in &self.settings.sfm_peers {
            let _ = writeln!(s, "Peer `{}`: {}: {}.\n", p.method, p.tool, p.settings);
        }
        for why in &self.settings.sfm_skipped {
            let _ = writeln!(s, "Peer {why}.\n");
        }
        if let Some(n) = self.settings.sfm_runs.filter(|&n| n > 1) {
            let _ = writeln!(
                s,
                "Each pipeline run whole {n} times, run k seeded with k: descl's verification (its matches shuffled by seed k before USAC draws) and mapper, each peer's mapper (its SIFT descriptors and matches vary from run to run besides). Each row is the run with the median centre error (of an even count, the better middle one); the last columns give the runs' spread and every run's centre error in the order they ran (– : no model).\n"
            );
        }
        let _ = writeln!(
            s,
            "| scene | method | registered | rotation error ° (median) | centre error % (median, of the scene's extent) | 3-D points | reprojection error px | seconds, one whole pipeline: wall (CPU) | seconds per stage, median of the runs: extract / match / map | centre error % spread (min–max) | centre error % of each run |\n|---|---|---|---|---|---|---|---|---|---|---|"
        );
        let scenes: std::collections::BTreeSet<&String> =
            self.sfm.values().flat_map(|m| m.keys()).collect();
        for scene in scenes {
            for (m, by_scene) in &self.sfm {
                let Some(r) = by_scene.get(scene) else {
                    continue;
                };
                let runs = r
                    .centre_errors_rel()
                    .iter()
                    .map(|e| e.map_or_else(|| "–".to_string(), |e| format!("{:.3}", 100.0 * e)))
                    .collect::<Vec<_>>()
                    .join(", ");
                // Runs made by descl sfm's fallback angle (crate::sfm::map) are marked.
                let fallbacks = r.fallback_angles();
                let mut mark = if let Some(angle) = fallbacks.first() {
                    format!(" ({} run(s) at the {angle}° fallback)", fallbacks.len())
                } else {
                    String::new()
                };
                let focal = r.fallback_focal_priors();
                if let Some(k) = focal.first() {
                    mark.push_str(&format!(
                        " ({} run(s) from the {k} · max(w, h) focal-prior fallback)",
                        focal.len()
                    ));
                }
                // And runs whose model descl refined (descl sfm's default from 2026-11-26 to
                // 2026-11-28, `--refine` since): marked, the plain 4 px model being the default.
                let refined = r.refined_px();
                if let Some(px) = refined.first() {
                    mark.push_str(&format!(
                        " ({} run(s) refined at {} px)",
                        refined.len(),
                        crate::sfm::px_text(*px)
                    ));
                }
                let stages = stages_cell(r);
                let spread = spread_cell(r);
                match &r.accuracy {
                    Some(a) => {
                        let _ = writeln!(
                            s,
                            "| {scene} | {m} | {}/{}{mark} | {:.3} | {:.3} | {} | {:.3} | {} | {stages} | {spread} | {runs} |",
                            a.registered,
                            a.total,
                            a.median_rotation_error_deg,
                            100.0 * a.median_centre_error_rel,
                            a.num_points,
                            a.mean_reprojection_error,
                            seconds_cell(r)
                        );
                    }
                    None => {
                        let why = r.error.as_deref().unwrap_or("no model");
                        let _ = writeln!(
                            s,
                            "| {scene} | {m} | failed: {} | | | | | {} | {stages} | {spread} | {runs} |",
                            why.replace('|', "/"),
                            seconds_cell(r)
                        );
                    }
                }
            }
        }
        s.push('\n');
        for (peer, title, name) in SFM_PEER_TABLES {
            self.md_sfm_against(s, peer, title, name);
        }
    }

    /// Where each pipeline wins: every descl method against the peer `peer` (a method of
    /// [`BenchReport::sfm`]; `name` its name in the table, `title` the table's), scene by
    /// scene: the centre error's ratio to the peer's median run, the points', the registered
    /// images and the whole pipeline's time (what a user choosing between them compares).
    /// A descl median inside the range of the peer's own runs is a tie: the peer's run-to-run
    /// spread is the noise floor of the comparison.
    fn md_sfm_against(&self, s: &mut String, peer: &str, title: &str, name: &str) {
        let Some(colmap) = self.sfm.get(peer) else {
            return;
        };
        let _ = writeln!(
            s,
            "#### {title}\n\n| scene | method | centre error ÷ {name}'s | {name}'s runs | points ÷ {name}'s | registered | seconds ÷ {name}'s: wall (CPU) | centre error |\n|---|---|---|---|---|---|---|---|"
        );
        let mut wins: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for (scene, c) in colmap {
            let runs: Vec<f64> = c.centre_errors_rel().into_iter().flatten().collect();
            // COLMAP's run-to-run range (its one reported run in reports without runs).
            let (lo, hi) = c
                .accuracy
                .iter()
                .map(|a| a.median_centre_error_rel)
                .chain(runs)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), e| {
                    (l.min(e), h.max(e))
                });
            for (m, by_scene) in &self.sfm {
                if crate::eval::reconstruction::Peer::of_method(m).is_some() {
                    continue;
                }
                let Some(r) = by_scene.get(scene) else {
                    continue;
                };
                let tally = wins.entry(m.as_str()).or_default();
                tally.1 += 1;
                let Some(a) = &r.accuracy else {
                    let _ = writeln!(s, "| {scene} | {m} | no model | | | | | {name} |");
                    continue;
                };
                let Some(ca) = &c.accuracy else {
                    // COLMAP's pipeline made no model where descl's did: descl's scene.
                    tally.0 += 1;
                    let _ = writeln!(
                        s,
                        "| {scene} | {m} | {name}: no model | | | {}/{} | | descl |",
                        a.registered, a.total
                    );
                    continue;
                };
                let e = a.median_centre_error_rel;
                let verdict = if e < lo {
                    "descl".to_string()
                } else if e > hi {
                    name.to_string()
                } else {
                    format!("tie (within {name}'s runs)")
                };
                if e <= ca.median_centre_error_rel {
                    tally.0 += 1;
                }
                let _ = writeln!(
                    s,
                    "| {scene} | {m} | {:.2} | {:.3}–{:.3} % | {:.0} % | {}/{} | {} | {verdict} |",
                    e / ca.median_centre_error_rel,
                    100.0 * lo,
                    100.0 * hi,
                    100.0 * a.num_points as f64 / ca.num_points.max(1) as f64,
                    a.registered,
                    a.total,
                    seconds_ratio_cell(r, c)
                );
            }
        }
        s.push('\n');
        for (m, (won, of)) in wins {
            let _ = writeln!(
                s,
                "{m}: centre error at most {name}'s median on {won} of {of} scenes.\n"
            );
        }
    }

    /// Describe and match time per method.
    fn md_timing(&self, s: &mut String) {
        if self.timing.per_method.is_empty() {
            return;
        }
        let t = &self.timing;
        let _ = writeln!(
            s,
            "### Speed: detection {:.2} s for {} images ({:.0} keypoints/image, shared by all methods)\n",
            t.detect_s,
            t.images,
            t.keypoints as f64 / t.images.max(1) as f64
        );
        let _ = writeln!(
            s,
            "| method | describe (s) | patches/s | match (ms/pair) |\n|---|---|---|---|"
        );
        for (m, mt) in &t.per_method {
            let _ = writeln!(
                s,
                "| {m} | {:.2} | {:.0} | {:.1} |",
                mt.describe_s,
                mt.patches_per_s(),
                1000.0 * mt.match_s / mt.pairs_matched.max(1) as f64
            );
        }
        s.push('\n');
    }
}

/// Metric names under which `descl bench --record` files its numbers in model cards.
pub const CARD_SEQUENCES: &str = "dev-homography-sequences";
pub const CARD_ROBUSTNESS: &str = "dev-robustness";
pub const CARD_POSE: &str = "strecha-relative-pose";
pub const CARD_HPATCHES: &str = "hpatches-patches";
pub const CARD_PHOTOTOUR: &str = "ubc-phototour";
pub const CARD_SFM: &str = "strecha-reconstruction";

/// Two decimals: cards keep what the tables show, not float noise.
fn r2(v: f64) -> serde_json::Value {
    serde_json::json!((v * 100.0).round() / 100.0)
}

/// The pose AUC threshold (degrees) a card quotes for its same-run peers.
const PEER_POSE_AUC_DEG: f64 = 10.0;

/// A method's headline sequence group: the combined [`ALL_SEQUENCES`], else its only group.
fn headline(groups: &BTreeMap<String, SequenceGroup>) -> Option<&SequenceGroup> {
    groups.get(ALL_SEQUENCES).or_else(|| groups.values().next())
}

fn by_threshold(values: &[(f64, f64)], unit: &str) -> serde_json::Map<String, serde_json::Value> {
    values
        .iter()
        .map(|&(t, v)| (format!("{t}{unit}"), r2(v)))
        .collect()
}

impl BenchReport {
    /// This run's numbers for `method`, shaped for a model card's `metrics`: one entry per suite
    /// that ran, each with the command, the protocol and the same run's peers (MMA@3), so a card
    /// never holds a number without the comparison it came from.
    pub fn card_metrics(&self, method: &str) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::json;
        let mut out = serde_json::Map::new();
        let mma3 = |s: &SequenceSummary| s.mma.get(MMA3_INDEX).map_or(f64::NAN, |&(_, v)| v);
        if let Some(groups) = self.sequences.get(method) {
            if let Some(all) = headline(groups) {
                let mut entry = serde_json::Map::new();
                entry.insert("command".into(), json!(self.command));
                entry.insert("protocol".into(), json!(self.settings));
                entry.insert("pairs".into(), json!(all.summary.pairs));
                for (t, v) in &all.summary.mma {
                    entry.insert(format!("mma@{t}"), r2(*v));
                }
                for (g, group) in groups {
                    if g != ALL_SEQUENCES {
                        entry.insert(format!("{g}_mma@3"), r2(mma3(&group.summary)));
                    }
                }
                entry.insert(
                    "homography_accuracy".into(),
                    json!(by_threshold(&all.summary.homography_accuracy, "px")),
                );
                let peers: serde_json::Map<_, _> = self
                    .sequences
                    .iter()
                    .filter(|(m, _)| m.as_str() != method)
                    .filter_map(|(m, g)| headline(g).map(|s| (m.clone(), r2(mma3(&s.summary)))))
                    .collect();
                entry.insert("same_run_mma@3".into(), json!(peers));
                out.insert(CARD_SEQUENCES.into(), json!(entry));
            }
        }
        if let Some(families) = self.robustness.get(method) {
            let mut entry = serde_json::Map::new();
            entry.insert("command".into(), json!(self.command));
            for (family, f) in families {
                entry.insert(format!("{family}_mma@3"), r2(mma3(&f.summary)));
                let levels: serde_json::Map<_, _> = f
                    .levels
                    .iter()
                    .map(|l| {
                        let key = robustness::level_label(l.level, l.rotation_deg);
                        (key, r2(mma3(&l.summary)))
                    })
                    .collect();
                entry.insert(format!("{family}_mma@3_by_level"), json!(levels));
                let peers: serde_json::Map<_, _> = self
                    .robustness
                    .iter()
                    .filter(|(m, _)| m.as_str() != method)
                    .filter_map(|(m, fs)| fs.get(family).map(|x| (m.clone(), r2(mma3(&x.summary)))))
                    .collect();
                entry.insert(format!("same_run_{family}_mma@3"), json!(peers));
            }
            out.insert(CARD_ROBUSTNESS.into(), json!(entry));
        }
        if let Some(p) = self.pose.get(method) {
            let peers: serde_json::Map<_, _> = self
                .pose
                .iter()
                .filter(|(m, _)| m.as_str() != method)
                .map(|(m, s)| {
                    let auc10 = s
                        .auc
                        .iter()
                        .find(|(t, _)| *t == PEER_POSE_AUC_DEG)
                        .map_or(f64::NAN, |a| a.1);
                    (m.clone(), r2(auc10))
                })
                .collect();
            out.insert(
                CARD_POSE.into(),
                json!({
                    "command": self.command,
                    "pairs": p.pairs,
                    "auc": by_threshold(&p.auc, "deg"),
                    "maa@10": r2(p.maa10),
                    "same_run_auc@10deg": peers,
                }),
            );
        }
        if let Some(h) = self.hpatches.get(method) {
            out.insert(
                CARD_HPATCHES.into(),
                json!({
                    "command": self.command,
                    "split": h.split,
                    "verification_map": h.verification.as_ref().map(|v| r2(v.map)),
                    "matching_map": r2(h.matching.map),
                    "retrieval_map": h.retrieval.as_ref().map(|r| r2(r.map)),
                }),
            );
        }
        if let Some(scenes) = self.sfm.get(method) {
            let percent = |rel: f64| (rel * 100_000.0).round() / 1000.0;
            let row = |r: &SceneReconstruction| {
                let mut v = match &r.accuracy {
                    Some(a) => json!({
                        "registered": a.registered,
                        "images": a.total,
                        "median_rotation_error_deg": (a.median_rotation_error_deg * 1000.0).round() / 1000.0,
                        "median_centre_error_percent": percent(a.median_centre_error_rel),
                        "median_direction_error_deg": a.median_direction_error_deg.map(|d| (d * 1000.0).round() / 1000.0),
                        "points": a.num_points,
                    }),
                    None => json!({"error": r.error}),
                };
                let fallbacks = r.fallback_angles().len();
                if fallbacks > 0 {
                    v["runs_at_fallback_init_min_tri_angle"] = json!(fallbacks);
                }
                let focal = r.fallback_focal_priors().len();
                if focal > 0 {
                    v["runs_at_fallback_focal_prior"] = json!(focal);
                }
                let filters = r.filters_px();
                if !filters.is_empty() {
                    v["mapper_filter_px_of_each_run"] = json!(filters);
                }
                if r.runs.len() > 1 {
                    let each: Vec<_> = r
                        .centre_errors_rel()
                        .into_iter()
                        .map(|e| e.map(percent))
                        .collect();
                    v["centre_error_percent_of_each_run"] = json!(each);
                }
                v
            };
            let peers: serde_json::Map<_, _> = self
                .sfm
                .iter()
                .filter(|(m, _)| m.as_str() != method)
                .map(|(m, by_scene)| {
                    let rows: serde_json::Map<_, _> =
                        by_scene.iter().map(|(s, r)| (s.clone(), row(r))).collect();
                    (m.clone(), json!(rows))
                })
                .collect();
            let own: serde_json::Map<_, _> =
                scenes.iter().map(|(s, r)| (s.clone(), row(r))).collect();
            out.insert(
                CARD_SFM.into(),
                json!({"command": self.command, "scenes": own, "same_run": peers}),
            );
        }
        if let Some(rs) = self.phototour.get(method) {
            let fpr: serde_json::Map<_, _> = rs
                .iter()
                .map(|r| (r.dataset.clone(), r2(r.fpr95)))
                .collect();
            out.insert(
                CARD_PHOTOTOUR.into(),
                json!({"command": self.command, "fpr95": fpr}),
            );
        }
        out
    }
}

/// A pipeline's seconds in the reconstruction table: wall time, and CPU time in brackets when
/// the report has it.
fn seconds_cell(r: &crate::eval::reconstruction::SceneReconstruction) -> String {
    match r.cpu_seconds {
        Some(cpu) => format!("{:.0} ({cpu:.0})", r.seconds),
        None => format!("{:.0}", r.seconds),
    }
}

/// The sfm suite's comparison tables: peer method, table title, the peer's name in the table.
const SFM_PEER_TABLES: [(&str, &str, &str); 3] = [
    (
        crate::eval::reconstruction::PYCOLMAP_INCREMENTAL_PIPELINE,
        "Against pycolmap 4 (its own pipeline, incremental mapper)",
        "pycolmap",
    ),
    (
        crate::eval::reconstruction::PYCOLMAP_GLOBAL_PIPELINE,
        "Against pycolmap 4 (its own pipeline, global mapper)",
        "pycolmap-global",
    ),
    (
        crate::eval::reconstruction::COLMAP_SIFT_PIPELINE,
        "Against COLMAP's pipeline",
        "COLMAP",
    ),
];

/// The median over a pipeline's runs of each stage's seconds: "extract / match / map", or
/// empty when no run recorded its stages (reports before 2026-11-29).
fn stages_cell(r: &crate::eval::reconstruction::SceneReconstruction) -> String {
    let stages: Vec<_> = r.runs.iter().filter_map(|r| r.stages).collect();
    if stages.is_empty() {
        return String::new();
    }
    let median = |f: fn(&crate::eval::reconstruction::StageSeconds) -> f64| {
        let mut v: Vec<f64> = stages.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[(v.len() - 1) / 2]
    };
    format!(
        "{:.1} / {:.1} / {:.1}",
        median(|s| s.extract),
        median(|s| s.matching),
        median(|s| s.map)
    )
}

/// The range of a pipeline's runs' centre errors, % ("min–max"), or empty without two runs
/// that made a model.
fn spread_cell(r: &crate::eval::reconstruction::SceneReconstruction) -> String {
    let e: Vec<f64> = r.centre_errors_rel().into_iter().flatten().collect();
    if e.len() < 2 {
        return String::new();
    }
    let (lo, hi) = e
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    format!("{:.3}–{:.3}", 100.0 * lo, 100.0 * hi)
}

/// A pipeline's seconds ÷ COLMAP's pipeline's: wall, and CPU in brackets when both have it.
fn seconds_ratio_cell(
    r: &crate::eval::reconstruction::SceneReconstruction,
    colmap: &crate::eval::reconstruction::SceneReconstruction,
) -> String {
    let wall = r.seconds / colmap.seconds.max(f64::MIN_POSITIVE);
    match (r.cpu_seconds, colmap.cpu_seconds) {
        (Some(a), Some(b)) => format!("{wall:.2} ({:.2})", a / b.max(f64::MIN_POSITIVE)),
        _ => format!("{wall:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comparison with COLMAP's pipeline, on a recorded report (docs/bench, 2026-11-26:
    /// three runs each): descl's 0.0578 % on Herz-Jesus-P8 lies just below COLMAP's best run
    /// (0.0579 %), its 0.0476 % on fountain-P11 below all of COLMAP's (0.0622–0.0658 %); the
    /// ratios were computed by hand from the JSON.
    const COLMAP: &str = crate::eval::reconstruction::COLMAP_SIFT_PIPELINE;

    #[test]
    fn the_table_against_colmap_gives_ratios_and_the_winner_per_scene() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/bench/sfm-hynet-real25all-2026-11-26.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let report: BenchReport = serde_json::from_str(&text).unwrap();
        let mut s = String::new();
        report.md_sfm_against(&mut s, COLMAP, "Against COLMAP's pipeline", "COLMAP");
        // fountain-P11: 0.04757 / 0.06501 = 0.73; 14720 / 14219 = 104 %; 199.96 / 118.21 = 1.69.
        assert!(
            s.contains("| fountain-P11 | descl-hynet-sdgm-real25all-b1024 | 0.73 | 0.062–0.066 % | 104 % | 11/11 | 1.69 | descl |"),
            "{s}"
        );
        // Herz-Jesus-P8: 0.05780 / 0.06016 = 0.96, below COLMAP's best run (0.05787).
        assert!(
            s.contains("| Herz-Jesus-P8 | descl-hynet-sdgm-real25all-b1024 | 0.96 | 0.058–0.063 % | 107 % | 8/8 | 2.04 | descl |"),
            "{s}"
        );
        assert!(
            s.contains("descl-hynet-sdgm-real25all-b1024: centre error at most COLMAP's median on 2 of 2 scenes."),
            "{s}"
        );
        // A report without COLMAP's runs: its one run is the range. COLMAP without a model on
        // a scene descl reconstructed: descl's scene, counted.
        let mut report = report;
        let colmap = report.sfm.get_mut(COLMAP).unwrap();
        colmap.get_mut("fountain-P11").unwrap().runs.clear();
        colmap.get_mut("Herz-Jesus-P8").unwrap().accuracy = None;
        let mut s = String::new();
        report.md_sfm_against(&mut s, COLMAP, "Against COLMAP's pipeline", "COLMAP");
        assert!(s.contains("| 0.73 | 0.065–0.065 % |"), "{s}");
        assert!(
            s.contains("| Herz-Jesus-P8 | descl-hynet-sdgm-real25all-b1024 | COLMAP: no model | | | 8/8 | | descl |"),
            "{s}"
        );
        assert!(s.contains("on 2 of 2 scenes."), "{s}");
    }
}
