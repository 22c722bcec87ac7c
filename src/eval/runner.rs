//! Runs the image-level benchmarks for several methods on the SAME frames, through the users'
//! pipeline ([`Extractor`], one per method): every image is loaded and detected once (DoG,
//! strongest `max_keypoints` by response, [`Extractor::detect`]), then each method's extractor
//! describes those frames ([`Extractor::describe_detected`]); pairs are matched by mutual
//! nearest neighbour without ratio test and verified with USAC MAGSAC (homography 3 px;
//! essential matrix 1 px / mean focal). Times every stage.

use crate::describe::Describer;
use crate::describe::Descriptors;
use crate::detect::DetectorConfig;
use crate::error::{Error, Result};
use crate::eval::metrics::{mean_average_accuracy, pose_auc, POSE_AUC_THRESHOLDS};
use crate::eval::pose::{self, PoseScene};
use crate::eval::robustness::Degradation;
use crate::eval::sequences::{self, evaluate_pair, HomographySequence, PairResult};
use crate::frame::Frame;
use crate::geometry::{self, Intrinsics, ModelKind, RansacConfig};
use crate::image::{load_gray, GrayImage};
use crate::matching::{checked_nearest_two, filters, match_descriptors, MatchConfig};
use crate::pipeline::Extractor;
use crate::progress::Progress;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// Keypoints per image in the benchmark protocol (the harness: top 2048 by response).
pub const BENCH_MAX_KEYPOINTS: usize = 2048;
/// RANSAC threshold (px) of the homography estimate.
pub const HOMOGRAPHY_RANSAC_PX: f64 = 3.0;
/// RANSAC threshold (px, divided by the mean focal length) of the essential matrix estimate.
pub const POSE_RANSAC_PX: f64 = 1.0;

/// Mutual nearest neighbours, no ratio test, no gate (the "cross-check" matcher).
pub fn mutual_nn() -> MatchConfig {
    MatchConfig {
        mutual: true,
        ratio: None,
        max_distance: None,
        min_gap: None,
        top_k: None,
        ratio_both_ways: false,
    }
}

/// Accumulated time per stage.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MethodTiming {
    pub describe_s: f64,
    pub patches: usize,
    pub match_s: f64,
    pub pairs_matched: usize,
}

impl MethodTiming {
    /// Descriptors per second.
    pub fn patches_per_s(&self) -> f64 {
        if self.describe_s > 0.0 {
            self.patches as f64 / self.describe_s
        } else {
            0.0
        }
    }
}

/// Timing of a run: detection is shared by the methods, the rest is per method.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timing {
    pub images: usize,
    pub detect_s: f64,
    pub keypoints: usize,
    pub per_method: BTreeMap<String, MethodTiming>,
}

/// One image: its frames (shared) and each method's descriptors (order of the methods).
struct ImageFeatures {
    frames: Vec<Frame>,
    size: (u32, u32),
    descriptors: Vec<Descriptors>,
}

/// One [`Extractor`] per method (each with its own handle on the method, [`Describer::try_clone`])
/// with the detector settings `det`: the benchmarks describe through the users' pipeline.
fn extractors(methods: &[Describer], det: &DetectorConfig) -> Result<Vec<Extractor>> {
    methods
        .iter()
        .map(|m| Ok(Extractor::with_describer(m.try_clone()?, *det)))
        .collect()
}

fn extract(
    path: &std::path::Path,
    extractors: &[Extractor],
    det: &DetectorConfig,
    timing: &mut Timing,
) -> Result<ImageFeatures> {
    let source = path.display().to_string();
    extract_image(&load_gray(path)?, &source, extractors, det, timing)
}

/// [`extract`] for an image already in memory (`source` names it): the image is detected
/// once (by the first extractor; every extractor has the detector settings `det`) and each
/// extractor describes those frames ([`Extractor::describe_detected`]), so all methods see
/// the same frames. The frames kept for scoring carry `det.magnification`.
fn extract_image(
    img: &GrayImage,
    source: &str,
    extractors: &[Extractor],
    det: &DetectorConfig,
    timing: &mut Timing,
) -> Result<ImageFeatures> {
    let Some(first) = extractors.first() else {
        return Err(Error::InvalidInput("no method to benchmark".into()));
    };
    let t = Instant::now();
    let detected = first.detect(img)?;
    timing.detect_s += t.elapsed().as_secs_f64();
    timing.images += 1;
    timing.keypoints += detected.len();
    // One pyramid per image, shared by every model method (built outside their timing).
    if extractors.iter().any(|e| e.describer().uses_patches()) && !detected.is_empty() {
        detected.sampler();
    }
    let mut descriptors = Vec::with_capacity(extractors.len());
    for e in extractors {
        let t = Instant::now();
        descriptors.push(e.describe_detected(&detected, source)?.descriptors);
        let mt = timing
            .per_method
            .entry(e.describer().name().to_string())
            .or_default();
        mt.describe_s += t.elapsed().as_secs_f64();
        mt.patches += detected.len();
    }
    let s = det.magnification / detected.magnification();
    let frames = detected
        .frames()
        .into_iter()
        .map(|f| {
            if s == 1.0 {
                f
            } else {
                Frame {
                    a: f.a.map(|r| r.map(|v| v * s)),
                    ..f
                }
            }
        })
        .collect();
    Ok(ImageFeatures {
        frames,
        size: (img.width as u32, img.height as u32),
        descriptors,
    })
}

fn matched_points(
    a: &ImageFeatures,
    b: &ImageFeatures,
    pairs: &[[u32; 2]],
) -> (Vec<[f64; 2]>, Vec<[f64; 2]>) {
    pairs
        .iter()
        .map(|&[i, j]| {
            let (p, q) = (&a.frames[i as usize], &b.frames[j as usize]);
            (
                [f64::from(p.x), f64::from(p.y)],
                [f64::from(q.x), f64::from(q.y)],
            )
        })
        .unzip()
}

/// The sequences protocol on one pair for method `mi`: mutual nearest neighbours (timed),
/// a homography by USAC MAGSAC at [`HOMOGRAPHY_RANSAC_PX`], MMA and corner error against `h_gt`.
// The pair's identity, its two images and the method: the protocol's inputs, not a bundle.
#[allow(clippy::too_many_arguments)]
fn homography_pair(
    sequence: &str,
    target: usize,
    first: &ImageFeatures,
    other: &ImageFeatures,
    h_gt: &sequences::Mat3,
    mi: usize,
    m: &Describer,
    timing: &mut Timing,
) -> Result<PairResult> {
    let ransac = RansacConfig {
        threshold_px: HOMOGRAPHY_RANSAC_PX,
        ..RansacConfig::default()
    };
    let t = Instant::now();
    let protocol = mutual_nn();
    let nn = checked_nearest_two(&first.descriptors[mi], &other.descriptors[mi], &protocol)?;
    let matches = filters::apply(&nn, &protocol);
    let mt = timing.per_method.entry(m.name().to_string()).or_default();
    mt.match_s += t.elapsed().as_secs_f64();
    mt.pairs_matched += 1;
    let (pa, pb) = matched_points(first, other, &matches.pairs);
    // The same neighbours under `descl match`'s matcher (mutual NN + Lowe's ratio), untimed:
    // the precision its users get, beside the protocol's. (An image 2 with one frame gives it
    // no matches, where `descl match` refuses the pair.)
    let lowe = filters::apply(&nn, &MatchConfig::default());
    let (la, lb) = matched_points(first, other, &lowe.pairs);
    let v = geometry::verify(&pa, &pb, ModelKind::Homography, &ransac, None)?;
    let tup = |p: &[[f64; 2]]| p.iter().map(|q| (q[0], q[1])).collect::<Vec<_>>();
    let at = |f: &ImageFeatures| {
        f.frames
            .iter()
            .map(|p| (f64::from(p.x), f64::from(p.y)))
            .collect::<Vec<_>>()
    };
    Ok(evaluate_pair(
        sequence,
        target,
        (&at(first), &at(other)),
        &tup(&pa),
        &tup(&pb),
        (&tup(&la), &tup(&lb)),
        h_gt,
        v.model.as_ref(),
        first.size,
    ))
}

/// Per-method results of the robustness pairs: method → (degradation, pair result).
pub type RobustnessResults = BTreeMap<String, Vec<(Degradation, PairResult)>>;

/// The robustness pairs ([`crate::eval::robustness`]): each sequence's reference image against
/// each of its [`Degradation::all`] copies (the copy as image 1 where
/// [`Degradation::copy_is_first`]), ground truth [`Degradation::pair_homography`], the
/// sequences protocol ([`homography_pair`]) for all methods. A pair's `sequence` is
/// `group/name`, its `target` [`Degradation::target`].
pub fn run_robustness(
    groups: &BTreeMap<String, Vec<HomographySequence>>,
    methods: &[Describer],
    det: &DetectorConfig,
    timing: &mut Timing,
    progress: &dyn Progress,
) -> Result<RobustnessResults> {
    let degradations = Degradation::all();
    let total: usize = groups
        .values()
        .map(|g| g.len() * (1 + degradations.len()))
        .sum();
    progress.set_length(total as u64);
    let ex = extractors(methods, det)?;
    let mut out: RobustnessResults = BTreeMap::new();
    for (group, seqs) in groups {
        for seq in seqs {
            let name = format!("{group}/{}", seq.name);
            progress.message(&name);
            let source = &seq.images[0];
            let img = load_gray(source)?;
            let first = extract_image(&img, &source.display().to_string(), &ex, det, timing)?;
            progress.inc(1);
            for d in &degradations {
                let degraded = format!("{} ({} {})", source.display(), d.family(), d.label());
                let other = extract_image(&d.apply(&img, source)?, &degraded, &ex, det, timing)?;
                progress.inc(1);
                let h_gt = d
                    .pair_homography(img.width, img.height)
                    .map_err(|e| Error::InvalidInput(format!("{degraded}: {e}")))?;
                let (one, two) = if d.copy_is_first() {
                    (&other, &first)
                } else {
                    (&first, &other)
                };
                for (mi, m) in methods.iter().enumerate() {
                    let target = d.target();
                    let r = homography_pair(&name, target, one, two, &h_gt, mi, m, timing)?;
                    out.entry(m.name().to_string()).or_default().push((*d, r));
                }
            }
        }
    }
    Ok(out)
}

/// Per-method results of the homography sequences: pair results by dataset group.
pub type SequenceResults = BTreeMap<String, BTreeMap<String, Vec<PairResult>>>;

/// Runs the pairs 1 → k of every sequence in `groups` (group name → sequences) for all methods.
pub fn run_sequences(
    groups: &BTreeMap<String, Vec<HomographySequence>>,
    methods: &[Describer],
    det: &DetectorConfig,
    timing: &mut Timing,
    progress: &dyn Progress,
) -> Result<SequenceResults> {
    let total: usize = groups
        .values()
        .map(|g| g.len() * sequences::SEQUENCE_LENGTH)
        .sum();
    progress.set_length(total as u64);
    let ex = extractors(methods, det)?;
    let mut out: SequenceResults = BTreeMap::new();
    for (group, seqs) in groups {
        for seq in seqs {
            progress.message(&format!("{group}/{}", seq.name));
            let first = extract(&seq.images[0], &ex, det, timing)?;
            progress.inc(1);
            for k in 2..=sequences::SEQUENCE_LENGTH {
                let other = extract(&seq.images[k - 1], &ex, det, timing)?;
                progress.inc(1);
                let h_gt = &seq.homographies[k - 2];
                for (mi, m) in methods.iter().enumerate() {
                    let r = homography_pair(&seq.name, k, &first, &other, h_gt, mi, m, timing)?;
                    out.entry(m.name().to_string())
                        .or_default()
                        .entry(group.clone())
                        .or_default()
                        .push(r);
                }
            }
        }
    }
    Ok(out)
}

/// One pose pair's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PosePair {
    pub scene: String,
    pub i: usize,
    pub j: usize,
    pub matches: usize,
    pub inliers: usize,
    /// max(rotation, translation-direction) error in degrees; infinite when no pose was found
    /// (JSON writes that as `null`, which reads back as infinite).
    #[serde(deserialize_with = "crate::eval::report::infinite_if_null")]
    pub error_deg: f64,
}

/// Pose summary of one method: AUC (%) at 5/10/20° and mAA@10 (%).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoseSummary {
    pub pairs: usize,
    pub auc: Vec<(f64, f64)>,
    pub maa10: f64,
    pub details: Vec<PosePair>,
}

fn intrinsics(c: &pose::Camera) -> Intrinsics {
    Intrinsics {
        fx: c.k[0][0],
        fy: c.k[1][1],
        cx: c.k[0][2],
        cy: c.k[1][2],
    }
}

/// Relative pose on every pair i < j ≤ i + 2 of each scene, for all methods.
pub fn run_pose(
    scenes: &[PoseScene],
    methods: &[Describer],
    det: &DetectorConfig,
    timing: &mut Timing,
    progress: &dyn Progress,
) -> Result<BTreeMap<String, PoseSummary>> {
    progress.set_length(scenes.iter().map(|s| s.images.len()).sum::<usize>() as u64);
    let ex = extractors(methods, det)?;
    let ransac = RansacConfig {
        threshold_px: POSE_RANSAC_PX,
        ..RansacConfig::default()
    };
    let mcfg = mutual_nn();
    let mut details: BTreeMap<String, Vec<PosePair>> = BTreeMap::new();
    for scene in scenes {
        progress.message(&scene.name.clone());
        let mut feats = Vec::with_capacity(scene.images.len());
        for p in &scene.images {
            feats.push(extract(p, &ex, det, timing)?);
            progress.inc(1);
        }
        for (i, j) in pose::pairs(scene.images.len()) {
            let (r_gt, t_gt) = pose::relative_pose(&scene.cameras[i], &scene.cameras[j]);
            let (ki, kj) = (intrinsics(&scene.cameras[i]), intrinsics(&scene.cameras[j]));
            for (mi, m) in methods.iter().enumerate() {
                let t = Instant::now();
                let matches =
                    match_descriptors(&feats[i].descriptors[mi], &feats[j].descriptors[mi], &mcfg)?;
                let mt = timing.per_method.entry(m.name().to_string()).or_default();
                mt.match_s += t.elapsed().as_secs_f64();
                mt.pairs_matched += 1;
                let (pa, pb) = matched_points(&feats[i], &feats[j], &matches.pairs);
                let v =
                    geometry::verify(&pa, &pb, ModelKind::Essential, &ransac, Some((&ki, &kj)))?;
                let error_deg = v.pose.as_ref().map_or(f64::INFINITY, |p| {
                    pose::pose_error_deg(&p.r, &p.t, &r_gt, &t_gt)
                });
                details
                    .entry(m.name().to_string())
                    .or_default()
                    .push(PosePair {
                        scene: scene.name.clone(),
                        i,
                        j,
                        matches: matches.len(),
                        inliers: v.num_inliers,
                        error_deg,
                    });
            }
        }
    }
    Ok(details
        .into_iter()
        .map(|(name, d)| {
            let errors: Vec<f64> = d.iter().map(|p| p.error_deg).collect();
            let auc = POSE_AUC_THRESHOLDS
                .iter()
                .zip(pose_auc(&errors, &POSE_AUC_THRESHOLDS))
                .map(|(&t, a)| (t, 100.0 * a))
                .collect();
            (
                name,
                PoseSummary {
                    pairs: d.len(),
                    auc,
                    maa10: 100.0 * mean_average_accuracy(&errors),
                    details: d,
                },
            )
        })
        .collect())
}

/// Oxford matching score and repeatability for one detector: method → summary over the pairs.
pub fn run_matching_score(
    seqs: &[HomographySequence],
    methods: &[Describer],
    det: &DetectorConfig,
    timing: &mut Timing,
    progress: &dyn Progress,
) -> Result<BTreeMap<String, crate::eval::oxford::ScoreSummary>> {
    use crate::eval::oxford::{score_pair, summarise};
    progress.set_length((seqs.len() * sequences::SEQUENCE_LENGTH) as u64);
    let ex = extractors(methods, det)?;
    let mcfg = mutual_nn();
    let mut pairs: BTreeMap<String, Vec<crate::eval::oxford::ScorePair>> = BTreeMap::new();
    let (detect_s, images) = (timing.detect_s, timing.images);
    for seq in seqs {
        progress.message(&format!("{} {}", det.kind, seq.name));
        let first = extract(&seq.images[0], &ex, det, timing)?;
        progress.inc(1);
        for k in 2..=sequences::SEQUENCE_LENGTH {
            let other = extract(&seq.images[k - 1], &ex, det, timing)?;
            progress.inc(1);
            let size = |f: &ImageFeatures| (f.size.0 as usize, f.size.1 as usize);
            for (mi, m) in methods.iter().enumerate() {
                let t = Instant::now();
                let matches =
                    match_descriptors(&first.descriptors[mi], &other.descriptors[mi], &mcfg)?;
                let mt = timing.per_method.entry(m.name().to_string()).or_default();
                mt.match_s += t.elapsed().as_secs_f64();
                mt.pairs_matched += 1;
                let s = score_pair(
                    &seq.name,
                    k,
                    &first.frames,
                    &other.frames,
                    &matches.pairs,
                    &seq.homographies[k - 2],
                    size(&first),
                    size(&other),
                )?;
                pairs.entry(m.name().to_string()).or_default().push(s);
            }
        }
    }
    let ms_per_image = 1e3 * (timing.detect_s - detect_s) / (timing.images - images).max(1) as f64;
    Ok(pairs
        .into_iter()
        .map(|(m, p)| (m, summarise(p, ms_per_image)))
        .collect())
}
