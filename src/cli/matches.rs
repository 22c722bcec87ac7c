//! `descl match`: one pair (`descl match A B`, images or `.npz` features files) or a set
//! (`--images DIR` with `--exhaustive`, `--sequential W` or `--pairs FILE`, into `--out-dir`,
//! skipping pairs already written so an interrupted run resumes). Both go through the library's
//! one pair path ([`descl::matching::two_view::match_pair`]).

use super::args::{
    features_made, format_parser, is_features_input, match_camera, picture_of, set_inputs,
    shard_parser, DescribeArgs, FeatureLoader, IntrinsicsArgs, MatchArgs, PairArgs,
};
use super::progress::Bar;
use anyhow::{bail, Context};
use descl::features::Features;
use descl::image_set::Load;
use descl::image_set::{self, PairOutcome, SetConfig};
use descl::io::matches::{write_matches, MatchesFile};
use descl::io::output::{self, Format};
use descl::io::viz::{CaptionSettings, VizOptions};
use descl::io::writer::{ImageRecord, PairRecord};
use descl::matching::pairs::PairMode;
use descl::matching::two_view::{match_pair, PairConfig, PairResult};
use descl::names::SetInput;
use descl::shard::Shard;
use std::path::{Path, PathBuf};

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
    /// Draw the pair side by side (PNG): inliers green and translucent, outliers red and
    /// outlined on top, keypoints as dots; a caption (also the PNG's Description text) names
    /// the geometry, its threshold, the inlier and outlier counts, the describer, detector,
    /// keypoint counts and matcher; at most --viz-max matches (an even sample of the list).
    #[arg(long, value_name = "PNG")]
    viz: Option<PathBuf>,
    /// Matches drawn at most in the --viz picture.
    #[arg(long, value_name = "N", default_value_t = descl::io::viz::DEFAULT_MAX_DRAWN, requires = "viz")]
    viz_max: usize,
    /// Draw every match in the --viz picture.
    #[arg(long, requires = "viz", conflicts_with = "viz_max")]
    viz_all: bool,
    /// Match the images of a folder and its folders (or its .npz features files of `descl
    /// extract`, if it has any), or the features in a features.h5 of `descl extract --format
    /// h5` (not extracted again); pairs from --exhaustive, --sequential, --pairs or
    /// --retrieval (images named by their paths under the folder, a/0000.jpg, as hloc names
    /// them).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "viz", "inputs"])]
    images: Option<PathBuf>,
    #[command(flatten)]
    pairs: PairArgs,
    /// Output folder: `<A>__<B>.npz` per pair, or with `--format h5` hloc's features.h5 and
    /// matches.h5 (pairs already there are skipped).
    #[arg(long, value_name = "DIR", requires = "images")]
    out_dir: Option<PathBuf>,
    /// This process's share of the pairs: I/N (0 ≤ I < N), or slurm/N and k8s/N to take I from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX. Shards write disjoint pair files of one
    /// --out-dir (npz); run them in any order, on any machines.
    #[arg(long, value_name = "I/N", requires = "images", value_parser = shard_parser)]
    shard: Option<Shard>,
    /// Match for a COLMAP database, as `descl sfm` does: verify at COLMAP's 4 px unless
    /// --threshold is given, and also fit COLMAP's homography to each F/E-verified pair and
    /// record it, so that `descl sfm merge` labels planar and panoramic pairs as COLMAP does.
    #[arg(long)]
    planar_check: bool,
    /// With a folder of features files: hold at most about N images' features at once (files
    /// are read again where needed), so memory does not grow with the set.
    #[arg(long, value_name = "N", default_value_t = image_set::DEFAULT_MAX_RESIDENT_IMAGES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..))]
    max_resident_images: usize,
    /// With a folder of features files whose extract plan lists images that have no file yet
    /// (an extract shard not run, or an image that failed): match the images there are instead
    /// of refusing.
    #[arg(long, requires = "images")]
    allow_partial: bool,
    /// Let a shard replace the match plan of an earlier run of other settings or other
    /// features in --out-dir (npz); without it such a shard is refused before any matching, as
    /// it would leave its share beside that run's pairs. A whole run needs no flag: it
    /// replaces the plan and matches its stale pairs again (so do the other shards of one run,
    /// and a rerun with the same settings). With --format h5, also let the run replace the
    /// features of another extraction (no image in common) in --out-dir's features.h5.
    #[arg(long, requires = "images")]
    overwrite: bool,
    /// Output format of --out-dir: npz, or h5 (hloc's files).
    #[arg(long, default_value = "npz", value_parser = format_parser())]
    format: Format,
    #[command(flatten)]
    matching: MatchArgs,
    #[command(flatten)]
    intrinsics: IntrinsicsArgs,
    #[command(flatten)]
    describe: DescribeArgs,
}

fn print_human(r: &PairOutcome) {
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
        return run_set(&args);
    }
    if args.pairs.mode(None).is_ok() {
        bail!("--exhaustive, --sequential, --pairs and --retrieval choose pairs of a set: give --images DIR");
    }
    let [a, b] = &args.inputs[..] else {
        bail!("give two inputs A B (images or .npz features files), or --images DIR with --exhaustive, --sequential W or --pairs FILE");
    };
    refuse_set_flags(&args)?;
    let cfg = PairConfig {
        planar_check: args.planar_check,
        ..args
            .matching
            .pair_config_with(default_threshold(args.planar_check))?
    };
    // An input first (the message names it; the pictures behind features files are checked
    // once loaded), then what no output may replace.
    for out in args.out.iter().chain(&args.viz) {
        descl::io::atomic::check_not_an_input(out, [a, b])?;
    }
    if let (Some(out), Some(viz)) = (&args.out, &args.viz) {
        descl::io::atomic::check_distinct_outputs(&[("--out", out), ("--viz", viz)])?;
    }
    if let Some(out) = &args.out {
        descl::io::atomic::check_writable(out, descl::io::atomic::OutputKind::Matches)?;
    }
    if let Some(picture) = &args.viz {
        descl::io::viz::check_replaceable_drawing(picture)?;
    }
    let loader = FeatureLoader::new(&args.describe);
    let camera = match_camera(
        args.intrinsics.given()?,
        cfg.geometry == Some(descl::geometry::ModelKind::Essential),
    );
    let load = |p: &Path| -> anyhow::Result<(Features, descl::image_set::CameraInfo)> {
        let f = loader
            .load(p)
            .with_context(|| format!("features of {}", p.display()))?;
        let c = camera(p, &f)?;
        Ok((f, c))
    };
    let ((fa, (ka, kna)), (fb, (kb, knb))) = (load(a)?, load(b)?);
    let made = features_made(&[(a, &fa.meta), (b, &fb.meta)])?;
    args.describe.refuse_for_features(made.as_ref())?;
    let pictures = checked_outputs(&args, [a, b], [&fa, &fb])?;
    let r = match_pair(&fa, &fb, &cfg, ka.as_ref().zip(kb.as_ref()))?;
    if let Some(out) = &args.out {
        let pair = PairRecord {
            a: record(a, &fa, &ka, kna),
            b: record(b, &fb, &kb, knb),
            result: &r,
            config: &cfg,
        };
        write_matches(out, &MatchesFile::from_pair(&pair))?;
    }
    if let (Some(png), Some(pictures)) = (&args.viz, &pictures) {
        let opts = VizOptions {
            max_drawn: (!args.viz_all).then_some(args.viz_max),
        };
        let settings = CaptionSettings::of(&fa, &fb, &cfg, &r);
        draw(png, pictures, [&fa, &fb], &r, &opts, &settings)?;
    }
    let rep = PairOutcome::of(a, b, &r, args.out.clone());
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_human(&rep);
    }
    Ok(())
}

/// Checks a single pair's outputs before anything is written: none is one of the inputs (the
/// two files and, with --viz, their pictures, which it returns).
fn checked_outputs(
    args: &Args,
    [a, b]: [&PathBuf; 2],
    [fa, fb]: [&Features; 2],
) -> anyhow::Result<Option<[PathBuf; 2]>> {
    let pictures = match &args.viz {
        Some(_) => Some([picture_of(a, fa)?, picture_of(b, fb)?]),
        None => None,
    };
    let read: Vec<&PathBuf> = [a, b]
        .into_iter()
        .chain(pictures.iter().flatten())
        .collect();
    for out in args.out.iter().chain(&args.viz) {
        descl::io::atomic::check_not_an_input(out, &read)?;
    }
    Ok(pictures)
}

/// Flags of a set run (`--images`) given to a single pair: usage errors, never ignored (the
/// user would look for outputs that were never written).
fn refuse_set_flags(args: &Args) -> anyhow::Result<()> {
    let given = [
        (args.out_dir.is_some(), "--out-dir (use --out FILE.npz)"),
        (args.shard.is_some(), "--shard"),
        (args.allow_partial, "--allow-partial"),
        (args.overwrite, "--overwrite"),
        (args.format == Format::H5, "--format h5"),
        (
            args.max_resident_images != image_set::DEFAULT_MAX_RESIDENT_IMAGES,
            "--max-resident-images",
        ),
    ];
    if let Some((_, flag)) = given.iter().find(|(on, _)| *on) {
        bail!("{flag}: a flag of set runs (--images DIR); a single pair A B writes --out and --viz only");
    }
    Ok(())
}

/// A single pair's input as the writers see it.
fn record<'a>(
    path: &'a Path,
    features: &'a Features,
    k: &'a Option<descl::geometry::Intrinsics>,
    known: bool,
) -> ImageRecord<'a> {
    ImageRecord {
        name: "",
        path,
        features,
        intrinsics: k.as_ref(),
        focal_known: known,
    }
}

/// Draws the pair side by side on their pictures (inliers green, outliers red), captioned with
/// what made the matches.
fn draw(
    png: &Path,
    [a, b]: &[PathBuf; 2],
    [fa, fb]: [&Features; 2],
    r: &PairResult,
    opts: &VizOptions,
    settings: &CaptionSettings,
) -> anyhow::Result<()> {
    let points: Vec<[f32; 4]> = r
        .matches
        .pairs
        .iter()
        .map(|p| {
            let (x, y) = (fa.frames[p[0] as usize], fb.frames[p[1] as usize]);
            [x.x, x.y, y.x, y.y]
        })
        .collect();
    let inliers = r.verification.as_ref().map(|v| v.inliers.as_slice());
    descl::io::viz::write_match_picture(a, b, &points, inliers, opts, settings, png)?;
    Ok(())
}

fn run_set(args: &Args) -> anyhow::Result<()> {
    super::args::refuse_h5_shards(args.format, args.shard.as_ref())?;
    let dir = args.images.as_deref().context("--images")?;
    let out_dir = args
        .out_dir
        .as_deref()
        .context("--images needs --out-dir")?;
    let pairs = args.pairs.mode(None)?;
    let set = set_inputs(dir, args.allow_partial)?;
    args.describe.refuse_for_features(set.made.as_ref())?;
    let inputs = set.inputs;
    let loader = FeatureLoader::new(&args.describe);
    let mut cfg = set_config(args, pairs, &inputs)?;
    // How the features are made, for the match plan: the set's, or the extractor's for images.
    cfg.features = match inputs.first() {
        Some(i) if !is_features_input(&i.path) => Some(loader.extractor()?.settings()),
        _ => set.made.and_then(|m| m.settings),
    };
    let features_plan = check_other_extraction(args, dir, out_dir, &inputs)?;
    let mut writer = output::open(args.format, out_dir)?;
    if let Some(plan) = features_plan {
        writer.expect_extract_plan(plan);
    }
    // A whole run matches every pair of its plan again where the stored ones were made
    // otherwise (stale provenance is redone), so it may replace another run's plan; a shard
    // matches only its share, so beside another run's plan it would leave a mix (issue 55).
    if args.overwrite || args.shard.is_none() {
        writer.replace_other_plan();
    }
    record_extract_plan(args, writer.as_mut(), &inputs)?;
    // The intrinsics read once, by `set_config`: the plan records the camera that verifies
    // (a file read twice could record one camera and verify with another: hostile round of
    // 8b8c880, M-1).
    let camera = match_camera(
        cfg.intrinsics,
        cfg.pair.geometry == Some(descl::geometry::ModelKind::Essential),
    );
    let bar = Bar::new(true);
    let summary = image_set::run(&inputs, &cfg, &loader, camera, writer, &bar)?;
    // Features files are read again where the set is larger than --max-resident-images: an
    // extraction replacing them meanwhile made pairs of two sets. Not where the set is the
    // output folder's own features.h5, which this run writes, under its lock.
    let resolved = descl::io::atomic::resolved_path;
    let own_features = dir.is_file()
        && resolved(dir) == resolved(&out_dir.join(descl::io::plan::HLOC_FEATURES_FILE));
    if !own_features {
        set.read.check_unchanged_after_writing(dir)?;
    }
    let (failed, skipped, redone, total) = (
        summary.failed_pairs(),
        summary.skipped_pairs(),
        summary.redone_pairs(),
        summary.pairs.len(),
    );
    if args.json {
        let json = serde_json::json!({"pairs": summary.pairs, "failed": failed, "skipped_existing": skipped, "redone_stale": redone});
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        summary
            .pairs
            .iter()
            .filter(|r| r.error.is_none() && !r.skipped_existing)
            .for_each(print_human);
        let stale = match redone {
            0 => String::new(),
            n => format!(" ({n} replacing stale results)"),
        };
        eprintln!(
            "{total} pairs: {} matched{stale}, {skipped} already done, {failed} failed",
            total - skipped - failed
        );
    }
    if failed > 0 {
        bail!("{failed} of {total} pairs failed");
    }
    Ok(())
}

/// `--format h5` stores the run's features in OUT/features.h5. Where the folder holds the
/// features of another extraction (its extract plan shares no image with this run's, by
/// content, or by name in plans without hashes), they would be replaced and the plan left
/// naming them, a folder no later run could trust (hostile round of 564787c, H1): refused
/// unless `--overwrite`. The same set with images replaced or removed since is the same
/// extraction moving on. Returns the extract plan of features inputs stored here from another
/// folder (their folder's) where the folder had a plan, written with the match plan so that
/// the folder's plan names the features it holds.
fn check_other_extraction(
    args: &Args,
    dir: &Path,
    out_dir: &Path,
    inputs: &[SetInput],
) -> anyhow::Result<Option<descl::io::plan::ExtractPlan>> {
    use descl::io::plan::{read_plan, ExtractPlan, EXTRACT_PLAN_FILE};
    if args.format != Format::H5 {
        return Ok(None);
    }
    let features_input = inputs.first().is_some_and(|i| is_features_input(&i.path));
    let input_folder = if dir.is_file() {
        dir.parent().unwrap_or(Path::new("."))
    } else {
        dir
    };
    let resolved = descl::io::atomic::resolved_path;
    if features_input && resolved(input_folder) == resolved(out_dir) {
        return Ok(None);
    }
    let Some(existing) = read_plan::<ExtractPlan>(out_dir, EXTRACT_PLAN_FILE)? else {
        return Ok(None);
    };
    let incoming: Option<ExtractPlan> = if features_input {
        read_plan(input_folder, EXTRACT_PLAN_FILE)?
    } else {
        Some(ExtractPlan::of(
            inputs,
            args.describe.extractor()?.settings(),
        ))
    };
    {
        let shared = match &incoming {
            Some(new) if !existing.image_sha256.is_empty() && !new.image_sha256.is_empty() => {
                let ours: std::collections::HashSet<&String> =
                    new.image_sha256.iter().filter(|h| !h.is_empty()).collect();
                existing.image_sha256.iter().any(|h| ours.contains(h))
            }
            _ => {
                let ours: std::collections::HashSet<&str> =
                    inputs.iter().map(|i| i.name.as_str()).collect();
                existing.images.iter().any(|n| ours.contains(n.as_str()))
            }
        };
        if !shared && !args.overwrite {
            bail!(
                "{}: holds the features of another extraction ({} images, none of them this run's {}); --format h5 would replace them and leave their plan. Match into another folder, or pass --overwrite to replace them",
                out_dir.join(descl::io::plan::HLOC_FEATURES_FILE).display(),
                existing.images.len(),
                inputs.len()
            );
        }
    }
    Ok(if features_input { incoming } else { None })
}

/// hloc's `features.h5` extracted here from images gets its extract plan, as `descl extract
/// --format h5` writes it: without one, the group of an image deleted since an earlier run
/// stayed and `descl match --images OUT/features.h5` matched it again (issue 55). The writer
/// writes it with the match plan, under the run's claim on the folder (written before the
/// claim, it replaced the plan of an npz extraction running there, both exiting 0).
fn record_extract_plan(
    args: &Args,
    writer: &mut dyn descl::io::writer::Writer,
    inputs: &[SetInput],
) -> anyhow::Result<()> {
    if args.format != Format::H5 || inputs.iter().any(|i| is_features_input(&i.path)) {
        return Ok(());
    }
    let settings = args.describe.extractor()?.settings();
    writer.expect_extract_plan(descl::io::plan::ExtractPlan::of(inputs, settings));
    Ok(())
}

/// The set run's settings from the flags, for `inputs` choosing `pairs`.
fn set_config(args: &Args, pairs: PairMode, inputs: &[SetInput]) -> anyhow::Result<SetConfig> {
    Ok(SetConfig {
        pairs,
        pair: PairConfig {
            planar_check: args.planar_check,
            ..args
                .matching
                .pair_config_with(default_threshold(args.planar_check))?
        },
        store_images: false,
        shard: args.shard.unwrap_or_default(),
        // Features files are read again where needed; extracted images are kept.
        max_resident_images: inputs
            .first()
            .is_some_and(|i| is_features_input(&i.path))
            .then_some(args.max_resident_images),
        // A folder of pair files keeps what succeeded (a rerun does the rest).
        all_or_nothing: false,
        features: None,
        intrinsics: args.intrinsics.given()?,
    })
}

/// RANSAC threshold when --threshold is not given: `descl sfm`'s (COLMAP's 4 px) for matches
/// made for a COLMAP database (`--planar-check`), else `descl match`'s 1 px.
fn default_threshold(for_colmap: bool) -> f64 {
    if for_colmap {
        descl::sfm::SfmConfig::default().pair.ransac.threshold_px
    } else {
        descl::geometry::RansacConfig::default().threshold_px
    }
}
