//! `descl bench`: the benchmarks of docs/BENCHMARKS.md for any number of methods in one run.

use anyhow::{bail, Context};
use descl::detect::{
    DetectorConfig, DetectorKind, DEFAULT_CONTRAST_THRESHOLD, DEFAULT_MAGNIFICATION,
};
use descl::eval::method::{Method, ROOTSIFT, SIFT};
use descl::eval::report::{group_sequences, BenchReport, HPatchesReport, Machine, Settings};
use descl::eval::runner::{
    self, Timing, BENCH_MAX_KEYPOINTS, HOMOGRAPHY_RANSAC_PX, POSE_RANSAC_PX,
};
use descl::eval::{hpatches, phototour, plot, pose, sequences};
use descl::model::card::ModelCard;
use descl::model::{Device, DEFAULT_MODEL};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Suite {
    /// HPatches sequences + Oxford Affine: MMA at 1..10 px, homography accuracy.
    Sequences,
    /// Oxford matching score and repeatability for DoG and Harris-Affine frames.
    MatchingScore,
    /// Relative pose on Strecha scenes: AUC at 5/10/20°, mAA@10.
    Pose,
    /// HPatches patches (hpatches-release layout): verification, matching, retrieval mAP.
    Hpatches,
    /// UBC PhotoTour: FPR at 95 % recall on the 100k pairs of each dataset.
    Phototour,
    /// The matcher against OpenCV's BFMatcher (speed, same results).
    Match,
    /// Every suite whose data is present.
    All,
}

#[derive(clap::Args)]
pub struct Args {
    /// Suites to run (default: sequences and pose, the dev data).
    #[arg(value_enum)]
    suites: Vec<Suite>,
    /// Method to compare, repeatable: a shipped model name, an .onnx path, `sift` or `rootsift`
    /// (default: sift, rootsift and the default model).
    #[arg(long = "method", short = 'm')]
    methods: Vec<String>,
    /// Data root holding the dataset folders (default: $DESCL_DATA or ../shared/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Oxford Affine folder of sequences (default: DATA/oxford).
    #[arg(long)]
    oxford: Option<PathBuf>,
    /// HPatches sequences folder (default: DATA/hpatches-sequences).
    #[arg(long)]
    hpatches_sequences: Option<PathBuf>,
    /// Folder of Strecha scenes (`SCENE/images`, `SCENE/cameras`; default: DATA/strecha).
    #[arg(long)]
    strecha: Option<PathBuf>,
    /// hpatches-release folder (one folder per sequence; default: DATA/hpatches-release).
    #[arg(long)]
    hpatches_patches: Option<PathBuf>,
    /// Folder with splits.json and the task CSVs (default: DATA/hpatches-tasks).
    #[arg(long)]
    hpatches_tasks: Option<PathBuf>,
    /// HPatches split (a, b, c, full, illum, view).
    #[arg(long, default_value = "a")]
    split: String,
    /// Folder holding liberty/, notredame/, yosemite/ in the UBC release format (default: DATA/phototour).
    #[arg(long)]
    phototour: Option<PathBuf>,
    /// Keypoints per image (strongest DoG responses).
    #[arg(long, default_value_t = BENCH_MAX_KEYPOINTS)]
    max_keypoints: usize,
    /// Inference device: cpu, cuda or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Write every number as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown tables here (they are always printed to stdout).
    #[arg(long)]
    md: Option<PathBuf>,
    /// Write PNG plots (MMA vs threshold, UBC ROC) into this folder.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Write this run's numbers into the `metrics` of every benchmarked model's card
    /// (its suites' entries are replaced, others kept).
    #[arg(long)]
    record: bool,
    /// Descriptors per side in `bench match`.
    #[arg(long, default_value_t = 4000)]
    match_size: usize,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}

fn folder(flag: &Option<PathBuf>, data: &Option<PathBuf>, name: &str) -> Option<PathBuf> {
    flag.clone().or_else(|| data.as_ref().map(|d| d.join(name)))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut suites = args.suites.clone();
    if suites.is_empty() {
        suites = vec![Suite::Sequences, Suite::Pose];
    }
    let all = suites.contains(&Suite::All);
    let wants = |s: Suite| all || suites.contains(&s);
    let data = args.data.clone().or_else(descl::data::data_root);
    let device: Device = args.device.parse()?;
    let needs_methods = [
        Suite::Sequences,
        Suite::MatchingScore,
        Suite::Pose,
        Suite::Hpatches,
        Suite::Phototour,
    ]
    .iter()
    .any(|&s| wants(s));
    let specs = if args.methods.is_empty() {
        vec![
            SIFT.to_string(),
            ROOTSIFT.to_string(),
            DEFAULT_MODEL.to_string(),
        ]
    } else {
        args.methods.clone()
    };
    let mut methods = Vec::new();
    if needs_methods {
        for spec in &specs {
            methods.push(Method::open(spec, device).with_context(|| format!("method `{spec}`"))?);
        }
        let mut names: Vec<&str> = methods.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            bail!("two methods have the same name: {names:?}");
        }
    }
    let det = DetectorConfig {
        kind: DetectorKind::Dog,
        max_keypoints: args.max_keypoints,
        contrast_threshold: DEFAULT_CONTRAST_THRESHOLD,
        magnification: DEFAULT_MAGNIFICATION,
    };
    let mut timing = Timing::default();
    let mut report = BenchReport {
        descl_version: env!("CARGO_PKG_VERSION").to_string(),
        // `descl` rather than argv[0]: the command is for people to re-run, not this machine's path.
        command: std::iter::once("descl".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        machine: Machine::current(),
        settings: Settings {
            detector: "DoG (OpenCV SIFT detector, default thresholds)".into(),
            max_keypoints: args.max_keypoints,
            magnification: DEFAULT_MAGNIFICATION,
            matcher: "mutual nearest neighbour, no ratio test".into(),
            homography_ransac: format!("USAC MAGSAC {HOMOGRAPHY_RANSAC_PX} px"),
            pose_ransac: format!("USAC MAGSAC {POSE_RANSAC_PX} px / mean focal, recoverPose"),
        },
        methods: methods.iter().map(|m| m.name.clone()).collect(),
        sequences: BTreeMap::new(),
        pose: BTreeMap::new(),
        matching_score: BTreeMap::new(),
        hpatches: BTreeMap::new(),
        phototour: BTreeMap::new(),
        timing: Timing::default(),
        matcher_speed: None,
    };

    if wants(Suite::Sequences) {
        let mut groups = BTreeMap::new();
        for (name, dir) in [
            (
                "hpatches",
                folder(&args.hpatches_sequences, &data, "hpatches-sequences"),
            ),
            ("oxford", folder(&args.oxford, &data, "oxford")),
        ] {
            match dir {
                Some(d) if d.is_dir() => {
                    let seqs = sequences::list_sequences(&d)?
                        .iter()
                        .map(|p| sequences::load_sequence(p))
                        .collect::<descl::Result<Vec<_>>>()?;
                    groups.insert(name.to_string(), seqs);
                }
                Some(d) if !all => bail!("{}: no such folder (the {name} sequences)", d.display()),
                _ => eprintln!("sequences: skipping {name} (no data folder)"),
            }
        }
        if !groups.is_empty() {
            let pb = bar(0, "sequences");
            let res = runner::run_sequences(&groups, &methods, &det, &mut timing, &pb)?;
            pb.finish();
            for (m, by_group) in res {
                report.sequences.insert(m, group_sequences(&by_group));
            }
        }
    }

    if wants(Suite::MatchingScore) {
        match folder(&args.oxford, &data, "oxford") {
            Some(root) if root.is_dir() => {
                let seqs = sequences::list_sequences(&root)?
                    .iter()
                    .map(|p| sequences::load_sequence(p))
                    .collect::<descl::Result<Vec<_>>>()?;
                for kind in [DetectorKind::Dog, DetectorKind::HarrisAffine] {
                    let pb = bar(0, "match score");
                    let d = DetectorConfig { kind, ..det };
                    match runner::run_matching_score(&seqs, &methods, &d, &mut timing, &pb) {
                        Ok(r) => {
                            report.matching_score.insert(kind.to_string(), r);
                        }
                        // A detector this build cannot run is reported, not fatal.
                        Err(descl::Error::InvalidInput(why))
                            if kind == DetectorKind::HarrisAffine =>
                        {
                            eprintln!("matching score: skipping {kind}: {why}")
                        }
                        Err(e) => return Err(e.into()),
                    }
                    pb.finish();
                }
            }
            Some(root) if !all => bail!("{}: no such folder (Oxford Affine)", root.display()),
            _ => eprintln!("matching score: skipping (no Oxford folder)"),
        }
    }

    if wants(Suite::Pose) {
        match folder(&args.strecha, &data, "strecha") {
            Some(root) if root.is_dir() => {
                let mut scenes = Vec::new();
                let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
                    .with_context(|| root.display().to_string())?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join("cameras").is_dir())
                    .collect();
                dirs.sort();
                for d in dirs {
                    scenes.push(pose::load_scene(&d)?);
                }
                let pb = bar(0, "pose");
                report.pose = runner::run_pose(&scenes, &methods, &det, &mut timing, &pb)?;
                pb.finish();
            }
            Some(root) if !all => bail!("{}: no such folder (Strecha scenes)", root.display()),
            _ => eprintln!("pose: skipping (no Strecha folder)"),
        }
    }

    if wants(Suite::Hpatches) {
        run_hpatches(&args, &data, &methods, all, &mut report)?;
    }

    if wants(Suite::Phototour) {
        match folder(&args.phototour, &data, "phototour") {
            Some(root) if root.is_dir() => {
                for m in &methods {
                    let mut results = Vec::new();
                    for set in phototour::DATASETS {
                        let dir = root.join(set);
                        if !dir.is_dir() {
                            continue;
                        }
                        let pb = bar(0, &format!("ubc {set}"));
                        pb.set_message(m.name.clone());
                        let mut describe = |p: &ndarray::Array3<f32>| m.describe_patches(p);
                        results.push(phototour::evaluate(
                            &dir,
                            &dir.join(phototour::TEST_PAIRS_FILE),
                            &mut describe,
                            &pb,
                        )?);
                        pb.finish();
                    }
                    report.phototour.insert(m.name.clone(), results);
                }
            }
            Some(root) if !all => bail!("{}: no such folder (UBC PhotoTour)", root.display()),
            _ => eprintln!("phototour: skipping (no UBC PhotoTour folder)"),
        }
    }

    if wants(Suite::Match) {
        eprintln!(
            "matcher speed: {0} × {0} descriptors, descl vs OpenCV BFMatcher ...",
            args.match_size
        );
        let r = descl::matching::speed::compare_with_opencv(args.match_size, args.match_size, 0)?;
        println!("{}", serde_json::to_string_pretty(&r)?);
        report.matcher_speed = Some(serde_json::to_value(&r)?);
    }

    report.timing = timing;
    let md = report.markdown();
    println!("{md}");
    if let Some(p) = &args.md {
        descl::io::atomic::write_bytes_atomic(p, md.as_bytes())?;
    }
    if let Some(p) = &args.json {
        descl::io::atomic::write_bytes_atomic(
            p,
            serde_json::to_string_pretty(&report)?.as_bytes(),
        )?;
    }
    if args.record {
        for m in &methods {
            let Some(card_path) = &m.card_path else {
                continue;
            };
            let mut card = ModelCard::load(card_path)?;
            card.metrics.extend(report.card_metrics(&m.name));
            card.save(card_path)?;
            eprintln!("recorded: {}", card_path.display());
        }
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        for path in plot::write_plots(&report, dir)? {
            eprintln!("plot: {}", path.display());
        }
    }
    Ok(())
}

fn run_hpatches(
    args: &Args,
    data: &Option<PathBuf>,
    methods: &[Method],
    all: bool,
    report: &mut BenchReport,
) -> anyhow::Result<()> {
    let tasks = folder(&args.hpatches_tasks, data, "hpatches-tasks");
    let release = folder(&args.hpatches_patches, data, "hpatches-release");
    let (Some(tasks), Some(release)) = (tasks, release) else {
        eprintln!("hpatches: skipping (no data folder)");
        return Ok(());
    };
    if !release.is_dir() || !tasks.join("splits.json").is_file() {
        if all {
            eprintln!(
                "hpatches: skipping ({} or {} missing)",
                release.display(),
                tasks.join("splits.json").display()
            );
            return Ok(());
        }
        bail!(
            "hpatches needs the release folder {} and {}",
            release.display(),
            tasks.join("splits.json").display()
        );
    }
    let splits = hpatches::load_splits(&tasks.join("splits.json"))?;
    let split = splits
        .get(&args.split)
        .with_context(|| format!("no split `{}` in splits.json", args.split))?;
    let file = |stem: &str| tasks.join(format!("{stem}_split-{}.csv", split.name));
    for m in methods {
        let pb = bar(0, "hpatches");
        pb.set_message(m.name.clone());
        let mut describe = |p: &ndarray::Array3<f32>| m.describe_patches(p);
        let descr = hpatches::describe_sequences(&release, &split.test, &mut describe, &pb)?;
        pb.finish();
        let verification = {
            let (p, i, e) = (
                file("verif_pos"),
                file("verif_neg_intra"),
                file("verif_neg_inter"),
            );
            if p.is_file() && i.is_file() && e.is_file() {
                let (vp, vi, ve) = (
                    hpatches::read_verification_pairs(&p)?,
                    hpatches::read_verification_pairs(&i)?,
                    hpatches::read_verification_pairs(&e)?,
                );
                Some(hpatches::verification(
                    &descr,
                    (&p, &vp),
                    (&i, &vi),
                    (&e, &ve),
                )?)
            } else {
                eprintln!(
                    "hpatches: no verification pair files ({}), verification skipped",
                    p.display()
                );
                None
            }
        };
        let matching = hpatches::matching(&descr, &split.test, &bar(0, "matching"))?;
        let retrieval = {
            let (q, d) = (file("retr_queries"), file("retr_distractors"));
            if q.is_file() && d.is_file() {
                let (lq, ld) = (
                    hpatches::read_patch_list(&q)?,
                    hpatches::read_patch_list(&d)?,
                );
                Some(hpatches::retrieval(
                    &descr,
                    (&q, &lq),
                    (&d, &ld),
                    &bar(0, "retrieval"),
                )?)
            } else {
                None
            }
        };
        report.hpatches.insert(
            m.name.clone(),
            HPatchesReport {
                split: split.name.clone(),
                verification,
                matching,
                retrieval,
            },
        );
    }
    Ok(())
}
