//! `descl extract`: images (or folders of images) → one features file each in `--out`
//! (default: the current folder). A bad image is reported and skipped; the others are still
//! processed and the exit status says something failed.

use super::args::{format_parser, shard_parser, DescribeArgs};
use super::progress::Bar;
use anyhow::Context;
use descl::image::list_images;
use descl::image_set::{extract_all, SetImage};
use descl::io::output::{self, Format};
use descl::shard::Shard;
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Image files, or folders whose images (by extension, not recursive) are all extracted.
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
    /// from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (image k of the sorted inputs is shard
    /// k mod N's).
    #[arg(long, value_name = "I/N", value_parser = shard_parser)]
    shard: Option<Shard>,
    /// Skip images whose features file is already in --out (complete, same model): a killed
    /// or repeated run only does what is missing.
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
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let images = args
        .shard
        .unwrap_or_default()
        .select(&expand_inputs(&args.inputs)?);
    // The describer first: a model that fails to load leaves no output folder behind.
    let extractor = args.describe.extractor()?;
    let writer = output::open(args.format, &args.out)
        .with_context(|| format!("output folder {}", args.out.display()))?;
    let total = images.len();
    let images: Vec<PathBuf> = images
        .into_iter()
        .filter(|p| !(args.resume && writer.has_image(p)))
        .collect();
    let skipped_existing = total - images.len();
    let bar = Bar::new(images.len() > 1);
    let (_, reports) = extract_all(&images, &extractor, writer, &bar)?;
    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    if args.json {
        let summary = Summary {
            model: extractor.describer().provenance(),
            device: extractor.describer().device().to_string(),
            detector: extractor.detector().kind.to_string(),
            images: reports,
            failed,
            skipped_existing,
        };
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        for r in reports.iter().filter(|r| r.error.is_none()) {
            let out = r.output.as_ref().map(|p| p.display().to_string());
            eprintln!(
                "{}: {} keypoints → {}",
                r.path.display(),
                r.keypoints.unwrap_or(0),
                out.as_deref().unwrap_or("")
            );
        }
    }
    if skipped_existing > 0 && !args.json {
        eprintln!(
            "{skipped_existing} images already in {}",
            args.out.display()
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} images failed", images.len());
    }
    Ok(())
}

/// Files as given, folders replaced by their images (sorted). Missing inputs stay in the list
/// so that they are reported like any other bad image.
fn expand_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut images = Vec::new();
    for input in inputs {
        if input.is_dir() {
            images.extend(list_images(input)?);
        } else {
            images.push(input.clone());
        }
    }
    Ok(images)
}
