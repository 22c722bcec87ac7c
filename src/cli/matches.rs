//! `descl match`: one pair (`descl match A B`, images or `.npz` features files) or many
//! (`--images DIR` with `--exhaustive`, `--sequential W` or `--pairs FILE`, into `--out-dir`,
//! skipping pairs already written so an interrupted run resumes).

use anyhow::{bail, Context};
use descl::detect::{DetectorConfig, DEFAULT_CONTRAST_THRESHOLD};
use descl::features::Features;
use descl::geometry::{Intrinsics, ModelKind, RansacConfig};
use descl::io::features::read_features;
use descl::io::matches::{write_matches, MatchesFile, MatchesMeta};
use descl::matching::filters::LOWE_RATIO;
use descl::matching::guided::{guided_match, GuideModel};
use descl::matching::kdtree::{approximate_match, ApproxConfig};
use descl::matching::pairs::{file_names, make_pairs, PairMode};
use descl::matching::two_view::{match_pair, verify_matches, PairConfig, PairResult};
use descl::matching::MatchConfig;
use descl::model::DEFAULT_MODEL;
use descl::pipeline::{Extractor, ExtractorConfig};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Default keypoint cap when matching images directly (as `descl extract`).
const DEFAULT_MAX_KEYPOINTS: usize = 2048;

/// Feature extraction options (used when inputs are images).
#[derive(clap::Args, Debug, Clone)]
pub struct ExtractArgs {
    /// Model name (see `descl models`) or path to an .onnx file.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Where the model runs: cpu, cuda or auto.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda", "auto"])]
    pub device: String,
    /// Keep at most N keypoints per image (0 = all).
    #[arg(long, default_value_t = DEFAULT_MAX_KEYPOINTS, value_name = "N")]
    pub max_keypoints: usize,
}

impl ExtractArgs {
    pub fn extractor(&self) -> anyhow::Result<Extractor> {
        Ok(Extractor::new(ExtractorConfig {
            model: self.model.clone(),
            device: self.device.parse()?,
            detector: DetectorConfig {
                max_keypoints: self.max_keypoints,
                contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
                ..Default::default()
            },
        })?)
    }
}

/// Matching and verification options.
#[derive(clap::Args, Debug, Clone)]
pub struct MatchArgs {
    /// exact (SGEMM / popcount brute force), approx (PCA + kd-tree, exact re-ranking; float
    /// only), or guided (exact, then again near the first model's prediction, COLMAP-style).
    #[arg(long, default_value = "exact", value_parser = ["exact", "approx", "guided"])]
    pub matcher: String,
    /// Lowe's ratio threshold (Lowe 2004; hloc's default for learned descriptors).
    #[arg(long, default_value_t = LOWE_RATIO)]
    pub ratio: f32,
    /// Turn the ratio test off.
    #[arg(long)]
    pub no_ratio: bool,
    /// Mutual nearest neighbours only (default on; --mutual false to turn off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub mutual: bool,
    /// Distance gate: keep matches with descriptor distance ≤ D (L2, or bits for binary).
    #[arg(long, value_name = "D")]
    pub max_distance: Option<f32>,
    /// Binary descriptors: keep matches whose second-best is at least G bits worse.
    #[arg(long, value_name = "G")]
    pub min_gap: Option<f32>,
    /// Keep the K best matches.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Geometric verification model.
    #[arg(long, default_value = "fundamental", value_parser = ["homography", "fundamental", "essential", "none"])]
    pub geometry: String,
    /// RANSAC (USAC MAGSAC) inlier threshold in pixels.
    #[arg(long, default_value_t = RansacConfig::default().threshold_px, value_name = "PX")]
    pub threshold: f64,
    /// RANSAC confidence.
    #[arg(long, default_value_t = RansacConfig::default().confidence)]
    pub confidence: f64,
    /// RANSAC iteration cap.
    #[arg(long, default_value_t = RansacConfig::default().max_iters)]
    pub max_iters: i32,
    /// Guided matching: search radius around the prediction (pixels).
    #[arg(long, default_value_t = 4.0, value_name = "PX")]
    pub guided_radius: f32,
    /// Intrinsics for the essential matrix, both images: fx,fy,cx,cy.
    #[arg(long, value_name = "FX,FY,CX,CY", conflicts_with = "intrinsics_file")]
    pub intrinsics: Option<String>,
    /// Intrinsics from a file (JSON {fx,fy,cx,cy} or a 3×3 K), both images.
    #[arg(long, value_name = "FILE")]
    pub intrinsics_file: Option<PathBuf>,
}

impl MatchArgs {
    pub fn pair_config(&self) -> PairConfig {
        PairConfig {
            matching: MatchConfig {
                mutual: self.mutual,
                ratio: (!self.no_ratio).then_some(self.ratio),
                max_distance: self.max_distance,
                min_gap: self.min_gap,
                top_k: self.top_k,
            },
            geometry: match self.geometry.as_str() {
                "homography" => Some(ModelKind::Homography),
                "fundamental" => Some(ModelKind::Fundamental),
                "essential" => Some(ModelKind::Essential),
                _ => None,
            },
            ransac: RansacConfig {
                threshold_px: self.threshold,
                confidence: self.confidence,
                max_iters: self.max_iters,
            },
        }
    }

    /// Intrinsics of an image: flag, file, else EXIF (None when unknown).
    fn intrinsics_for(&self, image: &Path, size: [u32; 2]) -> anyhow::Result<Option<Intrinsics>> {
        if let Some(s) = &self.intrinsics {
            return Ok(Some(Intrinsics::parse(s)?));
        }
        if let Some(p) = &self.intrinsics_file {
            return Ok(Some(Intrinsics::from_file(p)?));
        }
        Ok(if image.is_file() {
            Intrinsics::from_exif(image, size[0], size[1])
                .ok()
                .flatten()
        } else {
            None
        })
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Two inputs A and B: images, or .npz features files from `descl extract`.
    #[arg(value_name = "A B", num_args = 0..=2)]
    inputs: Vec<PathBuf>,
    /// Matches file to write (.npz) for a single pair.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// Draw the pair side by side (PNG): inliers green, outliers red.
    #[arg(long, value_name = "PNG")]
    viz: Option<PathBuf>,
    /// Match the images of a folder (or its .npz features files, if it has any); pairs from
    /// --exhaustive, --sequential or --pairs (names as listed in the folder).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "viz"])]
    images: Option<PathBuf>,
    /// All pairs.
    #[arg(long, requires = "images")]
    exhaustive: bool,
    /// Each image with the next W.
    #[arg(long, value_name = "W", requires = "images")]
    sequential: Option<usize>,
    /// Pairs file: `nameA nameB` per line.
    #[arg(long, value_name = "FILE", requires = "images")]
    pairs: Option<PathBuf>,
    /// Output folder for `<A>__<B>.npz` matches files (pairs already there are skipped).
    #[arg(long, value_name = "DIR", requires = "images")]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    matching: MatchArgs,
    #[command(flatten)]
    extract: ExtractArgs,
}

/// One pair's line in the JSON summary.
#[derive(Serialize)]
struct PairReport {
    a: String,
    b: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    matches: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inliers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    geometry: Option<ModelKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<[[f64; 3]; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    skipped_existing: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Loads features from a `.npz` or extracts them from an image (creating the extractor once).
struct Loader<'a> {
    args: &'a ExtractArgs,
    extractor: Option<Extractor>,
}

impl Loader<'_> {
    fn load(&mut self, path: &Path) -> anyhow::Result<Features> {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
        {
            return Ok(read_features(path)?);
        }
        if self.extractor.is_none() {
            self.extractor = Some(self.args.extractor()?);
        }
        match &self.extractor {
            Some(x) => Ok(x.extract(path)?),
            None => bail!("no extractor"),
        }
    }
}

/// The image a features file came from (for EXIF and drawing): the input itself for images.
fn image_of(input: &Path, f: &Features) -> PathBuf {
    if input
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
    {
        PathBuf::from(&f.meta.image)
    } else {
        input.to_path_buf()
    }
}

fn run_pair(
    m: &MatchArgs,
    fa: &Features,
    fb: &Features,
    img_a: &Path,
    img_b: &Path,
) -> anyhow::Result<PairResult> {
    let cfg = m.pair_config();
    let ka = m.intrinsics_for(img_a, [fa.meta.image_width, fa.meta.image_height])?;
    let kb = m.intrinsics_for(img_b, [fb.meta.image_width, fb.meta.image_height])?;
    if cfg.geometry == Some(ModelKind::Essential) && (ka.is_none() || kb.is_none()) {
        bail!("--geometry essential needs intrinsics: --intrinsics fx,fy,cx,cy, --intrinsics-file, or an EXIF focal length");
    }
    let k = ka.as_ref().zip(kb.as_ref());
    match m.matcher.as_str() {
        "approx" => {
            let (descl::describe::Descriptors::Float(da), descl::describe::Descriptors::Float(db)) =
                (&fa.descriptors, &fb.descriptors)
            else {
                bail!("--matcher approx needs float descriptors");
            };
            descl::matching::validate(&fa.descriptors, &fb.descriptors, &cfg.matching)?;
            let matches = approximate_match(
                da.view(),
                db.view(),
                &ApproxConfig::default(),
                &cfg.matching,
            )?;
            Ok(verify_matches(fa, fb, matches, &cfg, k)?)
        }
        "guided" => {
            let first = match_pair(fa, fb, &cfg, k)?;
            let guide = match first
                .verification
                .as_ref()
                .and_then(|v| v.model.map(|mm| (v.kind, mm)))
            {
                Some((ModelKind::Homography, h)) => GuideModel::Homography(h),
                Some((ModelKind::Fundamental, f)) => GuideModel::Fundamental(f),
                Some((ModelKind::Essential, _)) => {
                    bail!("--matcher guided works with --geometry homography or fundamental")
                }
                None => return Ok(first),
            };
            let pa: Vec<[f32; 2]> = fa.frames.iter().map(|f| [f.x, f.y]).collect();
            let pb: Vec<[f32; 2]> = fb.frames.iter().map(|f| [f.x, f.y]).collect();
            let matches = guided_match(
                &pa,
                &pb,
                &fa.descriptors,
                &fb.descriptors,
                &guide,
                m.guided_radius,
                &cfg.matching,
            )?;
            Ok(verify_matches(fa, fb, matches, &cfg, k)?)
        }
        _ => Ok(match_pair(fa, fb, &cfg, k)?),
    }
}

fn matches_file(
    r: &PairResult,
    fa: &Features,
    fb: &Features,
    a: &Path,
    b: &Path,
    cfg: &PairConfig,
) -> MatchesFile {
    let v = r.verification.as_ref();
    MatchesFile {
        pairs: r.matches.pairs.clone(),
        distances: r.matches.distances.clone(),
        inliers: v.map(|v| v.inliers.clone()),
        model: v.and_then(|v| v.model),
        meta: MatchesMeta {
            a: a.display().to_string(),
            b: b.display().to_string(),
            size_a: [fa.meta.image_width, fa.meta.image_height],
            size_b: [fb.meta.image_width, fb.meta.image_height],
            model: fa.meta.model.clone(),
            config: cfg.clone(),
            num_matches: r.matches.len(),
            num_inliers: v.map(|v| v.num_inliers),
            geometry: v.map(|v| v.kind),
            reason: v.and_then(|v| v.reason.clone()),
        },
    }
}

fn report(a: &Path, b: &Path, r: &PairResult, output: Option<&Path>) -> PairReport {
    let v = r.verification.as_ref();
    PairReport {
        a: a.display().to_string(),
        b: b.display().to_string(),
        matches: Some(r.matches.len()),
        inliers: v.map(|v| v.num_inliers),
        geometry: v.map(|v| v.kind),
        model: v.and_then(|v| v.model),
        reason: v.and_then(|v| v.reason.clone()),
        output: output.map(|p| p.display().to_string()),
        skipped_existing: false,
        error: None,
    }
}

fn print_human(r: &PairReport) {
    let inl = r
        .inliers
        .map(|n| format!(", {n} inliers"))
        .unwrap_or_default();
    let why = r
        .reason
        .as_ref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    eprintln!(
        "{} – {}: {} matches{inl}{why}",
        r.a,
        r.b,
        r.matches.unwrap_or(0)
    );
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.images.is_some() {
        return run_many(&args);
    }
    let [a, b] = &args.inputs[..] else {
        bail!("give two inputs A B (images or .npz features files), or --images DIR with --exhaustive, --sequential W or --pairs FILE");
    };
    let mut loader = Loader {
        args: &args.extract,
        extractor: None,
    };
    let fa = loader
        .load(a)
        .with_context(|| format!("features of {}", a.display()))?;
    let fb = loader
        .load(b)
        .with_context(|| format!("features of {}", b.display()))?;
    let (img_a, img_b) = (image_of(a, &fa), image_of(b, &fb));
    let r = run_pair(&args.matching, &fa, &fb, &img_a, &img_b)?;
    if let Some(out) = &args.out {
        write_matches(
            out,
            &matches_file(&r, &fa, &fb, a, b, &args.matching.pair_config()),
        )?;
    }
    if let Some(png) = &args.viz {
        let points: Vec<[f32; 4]> = r
            .matches
            .pairs
            .iter()
            .map(|p| {
                let (x, y) = (fa.frames[p[0] as usize], fb.frames[p[1] as usize]);
                [x.x, x.y, y.x, y.y]
            })
            .collect();
        let inl = r.verification.as_ref().map(|v| v.inliers.as_slice());
        descl::io::viz::write_match_picture(&img_a, &img_b, &points, inl, png)?;
    }
    let rep = report(a, b, &r, args.out.as_deref());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_human(&rep);
    }
    Ok(())
}

/// The `.npz` features files of `dir` if it has any, else its images (sorted).
fn list_inputs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut npz: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz")))
        .collect();
    if npz.is_empty() {
        return Ok(descl::sfm::list_images(dir)?);
    }
    npz.sort();
    Ok(npz)
}

fn run_many(args: &Args) -> anyhow::Result<()> {
    let dir = args.images.as_deref().context("--images")?;
    let out_dir = args
        .out_dir
        .as_deref()
        .context("--images needs --out-dir")?;
    let mode = match (args.exhaustive, args.sequential, &args.pairs) {
        (true, None, None) => PairMode::Exhaustive,
        (false, Some(w), None) => PairMode::Sequential(w),
        (false, None, Some(p)) => PairMode::File(p.clone()),
        _ => bail!("choose exactly one of --exhaustive, --sequential W, --pairs FILE"),
    };
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let images = list_inputs(dir)?;
    let names = file_names(&images);
    let pairs = make_pairs(&mode, &names)?;
    let stem = |i: usize| {
        images[i]
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let out_of = |i: usize, j: usize| out_dir.join(format!("{}__{}.npz", stem(i), stem(j)));

    let todo: Vec<(usize, usize)> = pairs
        .iter()
        .copied()
        .filter(|&(i, j)| !out_of(i, j).exists())
        .collect();
    let mut reports: Vec<PairReport> = pairs
        .iter()
        .filter(|&&(i, j)| out_of(i, j).exists())
        .map(|&(i, j)| PairReport {
            a: images[i].display().to_string(),
            b: images[j].display().to_string(),
            matches: None,
            inliers: None,
            geometry: None,
            model: None,
            reason: None,
            output: Some(out_of(i, j).display().to_string()),
            skipped_existing: true,
            error: None,
        })
        .collect();

    // Features once per image that still has a pair to match.
    let mut needed: Vec<usize> = todo.iter().flat_map(|&(i, j)| [i, j]).collect();
    needed.sort_unstable();
    needed.dedup();
    let style = ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {elapsed} eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let bar = ProgressBar::new(needed.len() as u64)
        .with_style(style.clone())
        .with_message("extract");
    let mut loader = Loader {
        args: &args.extract,
        extractor: None,
    };
    let mut features: Vec<Option<Result<Features, String>>> = vec![None; images.len()];
    for &i in &needed {
        features[i] = Some(loader.load(&images[i]).map_err(|e| format!("{e:#}")));
        bar.inc(1);
    }
    bar.finish_and_clear();

    let bar = ProgressBar::new(todo.len() as u64)
        .with_style(style)
        .with_message("match");
    let cfg = args.matching.pair_config();
    for &(i, j) in &todo {
        let (a, b) = (&images[i], &images[j]);
        let out = out_of(i, j);
        let result = match (&features[i], &features[j]) {
            (Some(Ok(fa)), Some(Ok(fb))) => run_pair(&args.matching, fa, fb, a, b).and_then(|r| {
                write_matches(&out, &matches_file(&r, fa, fb, a, b, &cfg))?;
                Ok(r)
            }),
            (Some(Err(e)), _) | (_, Some(Err(e))) => Err(anyhow::anyhow!("{e}")),
            _ => Err(anyhow::anyhow!("features missing")),
        };
        let rep = match result {
            Ok(r) => report(a, b, &r, Some(&out)),
            Err(e) => {
                bar.suspend(|| eprintln!("error: {} – {}: {e:#}", a.display(), b.display()));
                PairReport {
                    a: a.display().to_string(),
                    b: b.display().to_string(),
                    matches: None,
                    inliers: None,
                    geometry: None,
                    model: None,
                    reason: None,
                    output: None,
                    skipped_existing: false,
                    error: Some(format!("{e:#}")),
                }
            }
        };
        reports.push(rep);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    let skipped = reports.iter().filter(|r| r.skipped_existing).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"pairs": reports, "failed": failed, "skipped_existing": skipped})
            )?
        );
    } else {
        reports
            .iter()
            .filter(|r| r.error.is_none() && !r.skipped_existing)
            .for_each(print_human);
        eprintln!(
            "{} pairs: {} matched, {skipped} already done, {failed} failed",
            pairs.len(),
            pairs.len() - skipped - failed
        );
    }
    if failed > 0 {
        bail!("{failed} of {} pairs failed", pairs.len());
    }
    Ok(())
}
