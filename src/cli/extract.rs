//! `descl extract`: images (or folders of images) → one features file each in `--out`
//! (default: the current folder). A bad image is reported and skipped; the others are still
//! processed and the exit status says something failed.

use super::args::{format_parser, shard_parser, DescribeArgs};
use super::progress::Bar;
use descl::image::image_inputs;
use descl::image_set::{extract_all, still_to_extract, SetImage};
use descl::io::output::{self, Format};
use descl::io::plan::{ExtractPlan, PreviousPlan, EXTRACT_PLAN_FILE};
use descl::names::SetInput;
use descl::shard::Shard;
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Image files, or folders whose images (by extension, in their folders too) are all
    /// extracted. An image of a folder is named by its path under the folder (`a/0000.jpg`,
    /// as hloc names it; its features file is `a/0000.npz` in --out), a file by its file name.
    #[arg(required = true, value_name = "IMAGES_OR_DIRS")]
    inputs: Vec<PathBuf>,
    /// Output folder (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Output format: npz (one file per image), or h5 (hloc's features.h5 in --out).
    #[arg(long, default_value = "npz", value_parser = format_parser())]
    format: Format,
    #[command(flatten)]
    describe: DescribeArgs,
    /// This process's share of the images: I/N (0 ≤ I < N), or slurm/N and k8s/N to take I
    /// from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (image k of the inputs sorted by name
    /// is shard k mod N's, whatever order they are given in). Every shard records the
    /// whole run's images in --out (descl-extract-plan.json) for `descl sfm merge`.
    #[arg(long, value_name = "I/N", value_parser = shard_parser)]
    shard: Option<Shard>,
    /// Skip images whose features file is already in --out, complete and made from the same
    /// image bytes with the same model and settings (others are extracted again): a killed or
    /// repeated run only does what is missing or stale.
    #[arg(long)]
    resume: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Summary {
    model: String,
    device: String,
    detector: String,
    images: Vec<SetImage>,
    failed: usize,
    /// Inputs skipped by --resume (already in --out).
    skipped_existing: usize,
    /// Stored features --resume did not reuse (made from other bytes or settings), and why.
    redone_stale: Vec<String>,
    seconds: ExtractRunSeconds,
}

/// The run's wall time and the extractor's time in each stage (thread-seconds for decode +
/// detect, which runs in parallel beside the network); each image's own `seconds` is its
/// share of that work.
#[derive(Serialize)]
struct ExtractRunSeconds {
    total: f64,
    stages: descl::pipeline::ExtractSeconds,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::args::refuse_h5_shards(args.format, args.shard.as_ref())?;
    let all = expand_inputs(&args.inputs)?;
    descl::names::check_unique(&all)?;
    descl::names::check_distinct_files(&all)?;
    let images = args.shard.unwrap_or_default().select(&all);
    // The describer first: a model that fails to load leaves no output folder behind.
    let extractor = args.describe.extractor()?;
    let mut writer = output::open(args.format, &args.out)?;
    let names: Vec<String> = all.iter().map(|i| i.name.clone()).collect();
    writer.expect_images(&names)?;
    writer.expect_settings(&extractor.settings())?;
    // The whole run's plan (every shard writes the same) before any work: a killed run leaves
    // it, so that its images without features are known to be missing (`descl match` and
    // `descl sfm merge` refuse the set until they are done).
    // Said once the plan is replaced: a run refused below replaces nothing (hostile round of
    // 4aa9455, F12: the warning came before the refusal).
    let replaced_plan = replaced_plan_warning(&args.out, &names);
    let plan = ExtractPlan::of(&all, extractor.settings());
    if args.shard.is_some_and(|s| s.count > 1) {
        descl::io::plan::refuse_other_plan(&args.out, EXTRACT_PLAN_FILE, &plan)?;
    }
    let previous = PreviousPlan::replace(&args.out, EXTRACT_PLAN_FILE, &plan)?;
    if let Some(warning) = replaced_plan {
        eprintln!("{warning}");
    }
    let total = images.len();
    let (images, redone_stale) = match args.resume {
        true => still_to_extract(images, &extractor, writer.as_ref()),
        false => (images, Vec::new()),
    };
    let skipped_existing = total - images.len();
    for why in redone_stale.iter().filter(|_| !args.json) {
        eprintln!("extracting again: {why}");
    }
    let bar = Bar::new(images.len() > 1);
    let started = std::time::Instant::now();
    let (_, reports) = extract_all(&images, &extractor, writer, &bar)?;
    let wall_seconds = started.elapsed().as_secs_f64();
    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    // A run that stored nothing leaves its folder as it was.
    if failed == reports.len() && skipped_existing == 0 {
        previous.restore()?;
    }
    report(
        &args,
        Summary {
            model: extractor.describer().provenance(),
            device: extractor.describer().device().to_string(),
            detector: extractor.detector().kind.to_string(),
            images: reports,
            failed,
            skipped_existing,
            redone_stale,
            seconds: ExtractRunSeconds {
                total: wall_seconds,
                stages: extractor.seconds(),
            },
        },
    )?;
    if failed > 0 {
        anyhow::bail!("{failed} of {} images failed", images.len());
    }
    Ok(())
}

/// The run's summary: as JSON on stdout with --json, else each image's keypoints and output
/// and the images --resume found done, on stderr.
fn report(args: &Args, summary: Summary) -> anyhow::Result<()> {
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    for r in summary.images.iter().filter(|r| r.error.is_none()) {
        let out = r.output.as_ref().map(|p| p.display().to_string());
        eprintln!(
            "{}: {} keypoints → {}",
            r.path.display(),
            r.keypoints.unwrap_or(0),
            out.as_deref().unwrap_or("")
        );
    }
    if summary.skipped_existing > 0 {
        eprintln!(
            "{} images already in {}",
            summary.skipped_existing,
            args.out.display()
        );
    }
    Ok(())
}

/// Files as given (named by their file names), folders replaced by their images (named by
/// their paths under the folder); sorted by name (then path) and without repeats, so that
/// shards given the inputs in different orders share the same list. Missing inputs stay in the
/// list so that they are reported like any other bad image; two inputs of one name are refused
/// by the set path.
fn expand_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<SetInput>> {
    let mut images = Vec::new();
    for input in inputs {
        if input.is_dir() {
            images.extend(image_inputs(input)?);
            continue;
        }
        // Checked before the plan is written: a mistyped path must not replace a set's plan.
        anyhow::ensure!(
            input.exists(),
            "{}: no such file or folder (nothing was extracted)",
            input.display()
        );
        // The set commands skip hidden files in folders: its features would never be matched.
        let hidden = input
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        anyhow::ensure!(
            !hidden,
            "{}: a hidden file (its name starts with `.`); descl match, pairs and sfm merge skip hidden files in a folder, so its features would never be used: rename it",
            input.display()
        );
        images.push(SetInput::file(input)?);
    }
    images.sort();
    images.dedup();
    Ok(images)
}

/// The warning for this run's plan replacing one that listed images this run does not (a run
/// of other images into the same folder): their features files stay, and `descl match` and
/// `descl sfm merge` will refuse them as another run's.
fn replaced_plan_warning(out: &std::path::Path, images: &[String]) -> Option<String> {
    let Ok(Some(old)) = descl::io::plan::read_plan::<ExtractPlan>(out, EXTRACT_PLAN_FILE) else {
        return None;
    };
    let now: std::collections::HashSet<&str> = images.iter().map(String::as_str).collect();
    let dropped: Vec<&str> = old
        .images
        .iter()
        .map(String::as_str)
        .filter(|n| !now.contains(n))
        .collect();
    dropped.first().map(|first| {
        format!(
            "warning: {} listed {} images that this run does not ({first}{}); their features files stay, and `descl match --images` and `descl sfm merge` refuse the folder while they are there (another run's features): remove them, or extract the whole set in one command (--resume reuses what is there)",
            out.join(EXTRACT_PLAN_FILE).display(),
            dropped.len(),
            if dropped.len() > 1 { ", …" } else { "" }
        )
    })
}
