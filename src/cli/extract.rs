//! `descl extract`: images (or folders of images) → one `<stem>.npz` features file each, in
//! `--out` (default: the current folder). A bad image is reported and skipped; the others are
//! still processed and the exit status says something failed.

use anyhow::Context;
use descl::detect::{
    DetectorConfig, DetectorKind, DEFAULT_CONTRAST_THRESHOLD, DEFAULT_MAGNIFICATION,
};
use descl::io::features::write_features;
use descl::model::{Device, DEFAULT_MODEL};
use descl::pipeline::{Extractor, ExtractorConfig};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Default cap on keypoints per image (strongest by detector response).
const DEFAULT_MAX_KEYPOINTS: usize = 2048;

/// File extensions taken from a folder given as input (case-insensitive).
const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "tif", "tiff", "bmp",
];

#[derive(clap::Args)]
pub struct Args {
    /// Image files, or folders whose images (by extension, not recursive) are all extracted.
    #[arg(required = true, value_name = "IMAGES_OR_DIRS")]
    inputs: Vec<PathBuf>,
    /// Output folder for the `<image stem>.npz` files (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Model name (see `descl models`) or path to an .onnx file.
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: String,
    /// Where the model runs: cpu, cuda (fails if unavailable) or auto (cuda, else cpu).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda", "auto"])]
    device: String,
    /// Keypoint detector.
    #[arg(long, default_value = "dog", value_parser = ["dog", "harris-affine"])]
    detector: String,
    /// Keep at most N keypoints per image, the strongest first (0 = all).
    #[arg(long, default_value_t = DEFAULT_MAX_KEYPOINTS, value_name = "N")]
    max_keypoints: usize,
    /// DoG contrast threshold (OpenCV SIFT `contrastThreshold`).
    #[arg(long, default_value_t = DEFAULT_CONTRAST_THRESHOLD, value_name = "X")]
    contrast_threshold: f32,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// One image's line in the `--json` summary.
#[derive(Serialize)]
struct ImageReport {
    image: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    keypoints: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Summary {
    model: String,
    device: String,
    detector: String,
    images: Vec<ImageReport>,
    failed: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let images = expand_inputs(&args.inputs)?;
    let device: Device = args.device.parse()?;
    let kind = match args.detector.as_str() {
        "harris-affine" => DetectorKind::HarrisAffine,
        _ => DetectorKind::Dog,
    };
    let detector = DetectorConfig {
        kind,
        max_keypoints: args.max_keypoints,
        contrast_threshold: args.contrast_threshold,
        magnification: DEFAULT_MAGNIFICATION,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output folder {}", args.out.display()))?;
    if !args.out.is_dir() {
        anyhow::bail!("output folder {} is not a folder", args.out.display());
    }
    let extractor = Extractor::new(ExtractorConfig {
        model: args.model.clone(),
        device,
        detector,
    })?;

    let bar = if images.len() > 1 {
        ProgressBar::new(images.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} images, {elapsed} elapsed, ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Output names are claimed up front, in input order, so a clash is reported the same way
    // however the images are scheduled.
    let mut outputs_taken: HashMap<PathBuf, PathBuf> = HashMap::new();
    let targets: Vec<_> = images
        .iter()
        .map(|image| output_path(&args.out, image, &mut outputs_taken))
        .collect();
    // Images run in parallel (loading, detection and sampling overlap); the engine serialises
    // inference itself. Reports come back in input order.
    let reports: Vec<ImageReport> = images
        .par_iter()
        .zip(targets)
        .map(|(image, target)| {
            let t = Instant::now();
            let result = target.and_then(|out| {
                let features = extractor.extract(image)?;
                write_features(&out, &features)?;
                Ok((features.frames.len(), out))
            });
            let report = match result {
                Ok((n, out)) => ImageReport {
                    image: image.display().to_string(),
                    keypoints: Some(n),
                    output: Some(out.display().to_string()),
                    seconds: Some(t.elapsed().as_secs_f64()),
                    error: None,
                },
                Err(e) => {
                    bar.suspend(|| eprintln!("error: {e}"));
                    ImageReport {
                        image: image.display().to_string(),
                        keypoints: None,
                        output: None,
                        seconds: None,
                        error: Some(e.to_string()),
                    }
                }
            };
            bar.inc(1);
            report
        })
        .collect();
    bar.finish_and_clear();

    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    if args.json {
        let summary = Summary {
            model: extractor.model().display_name(),
            device: extractor.engine().device().to_string(),
            detector: extractor.detector().kind.to_string(),
            images: reports,
            failed,
        };
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        for r in reports.iter().filter(|r| r.error.is_none()) {
            eprintln!(
                "{}: {} keypoints → {}",
                r.image,
                r.keypoints.unwrap_or(0),
                r.output.as_deref().unwrap_or("")
            );
        }
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
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot list {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && has_image_extension(p))
                .collect();
            if found.is_empty() {
                anyhow::bail!(
                    "{}: no images ({}) in this folder",
                    input.display(),
                    IMAGE_EXTENSIONS.join(", ")
                );
            }
            found.sort();
            images.extend(found);
        } else {
            images.push(input.clone());
        }
    }
    Ok(images)
}

fn has_image_extension(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// `<out>/<stem>.npz`; an image whose output another image already claimed is an error rather
/// than a silent overwrite.
fn output_path(
    out: &Path,
    image: &Path,
    taken: &mut HashMap<PathBuf, PathBuf>,
) -> descl::Result<PathBuf> {
    let stem = image.file_stem().ok_or_else(|| {
        descl::Error::InvalidInput(format!("{}: not a file name", image.display()))
    })?;
    let mut name = stem.to_os_string();
    name.push(".npz");
    let target = out.join(name);
    if let Some(first) = taken.get(&target) {
        return Err(descl::Error::InvalidInput(format!(
            "{}: its output {} is already written for {}; extract images with the same name into different --out folders",
            image.display(),
            target.display(),
            first.display()
        )));
    }
    taken.insert(target.clone(), image.to_path_buf());
    Ok(target)
}
