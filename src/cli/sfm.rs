//! `descl sfm IMAGES_DIR --database out.db`: extract, match and verify every chosen pair with
//! descl (any describer, any matcher), write a COLMAP database, and with `--reconstruct` run
//! `colmap mapper` on it.

use super::args::{CameraModelArg, DescribeArgs, MatchArgs};
use super::progress::Bar;
use anyhow::{bail, Context};
use descl::io::colmap_model::{run_mapper, MapperOptions};
use descl::matching::pairs::PairMode;
use descl::sfm::{build_database, SfmConfig};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Folder of images.
    images_dir: PathBuf,
    /// COLMAP database to write.
    #[arg(long, value_name = "DB")]
    database: PathBuf,
    /// Replace an existing database.
    #[arg(long)]
    overwrite: bool,
    /// Run `colmap mapper` afterwards and report registered images and reprojection error.
    #[arg(long)]
    reconstruct: bool,
    /// Where the mapper writes its models (default: `<database stem>-sparse` beside it).
    #[arg(long, value_name = "DIR", requires = "reconstruct")]
    sparse_dir: Option<PathBuf>,
    /// Let the mapper refine the principal point (COLMAP holds it at the image centre).
    #[arg(long, requires = "reconstruct")]
    refine_principal_point: bool,
    /// COLMAP camera model.
    #[arg(long, value_enum, default_value_t = CameraModelArg::SimpleRadial)]
    camera_model: CameraModelArg,
    /// One camera shared by all images (same camera and size).
    #[arg(long)]
    single_camera: bool,
    /// Pairs: exhaustive (default), or each image with the next W.
    #[arg(long, value_name = "W", conflicts_with = "pairs")]
    sequential: Option<usize>,
    /// Pairs file: `nameA nameB` per line.
    #[arg(long, value_name = "FILE")]
    pairs: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    matching: MatchArgs,
    #[command(flatten)]
    describe: DescribeArgs,
}

impl Args {
    fn config(&self) -> anyhow::Result<SfmConfig> {
        Ok(SfmConfig {
            pair: self.matching.pair_config()?,
            pairs: match (&self.sequential, &self.pairs) {
                (Some(w), _) => PairMode::Sequential(*w),
                (None, Some(p)) => PairMode::File(p.clone()),
                (None, None) => PairMode::Exhaustive,
            },
            camera_model: self.camera_model.into(),
            single_camera: self.single_camera,
        })
    }

    fn sparse_dir(&self) -> PathBuf {
        self.sparse_dir.clone().unwrap_or_else(|| {
            let stem = self
                .database
                .file_stem()
                .map_or("colmap".into(), |s| s.to_string_lossy());
            self.database.with_file_name(format!("{stem}-sparse"))
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.database.exists() && !args.overwrite {
        bail!(
            "{}: database already exists (pass --overwrite to replace it)",
            args.database.display()
        );
    }
    let cfg = args.config()?;
    let extractor = args.describe.extractor()?;
    let bar = Bar::new(true);
    let summary = build_database(
        &args.images_dir,
        &args.database,
        args.overwrite,
        &cfg,
        |p| extractor.extract(p),
        &bar,
    )?;
    eprintln!(
        "{}: {} images, {} pairs, {} verified (mean {:.0} matches, {:.0} inliers per pair)",
        summary.database.display(),
        summary.images.len(),
        summary.pairs,
        summary.verified_pairs,
        summary.mean_matches,
        summary.mean_inliers
    );
    let mut out = serde_json::json!({ "database": summary });
    if args.reconstruct {
        out["reconstruction"] = reconstruct(&args, summary.images.len())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    if !summary.skipped.is_empty() {
        bail!(
            "{} images or pairs failed (see the warnings)",
            summary.skipped.len()
        );
    }
    Ok(())
}

/// Runs `colmap mapper` on the database and reports what it registered.
fn reconstruct(args: &Args, total_images: usize) -> anyhow::Result<serde_json::Value> {
    let options = MapperOptions {
        num_threads: None,
        refine_principal_point: args.refine_principal_point,
    };
    let recon = run_mapper(
        &args.database,
        &args.images_dir,
        &args.sparse_dir(),
        &options,
    )
    .context("colmap mapper")?;
    eprintln!(
        "reconstruction {}: {}/{total_images} images registered, {} points, mean reprojection error {:.3} px",
        recon.path.display(),
        recon.images.len(),
        recon.num_points,
        recon.mean_reprojection_error
    );
    Ok(serde_json::json!({
        "path": recon.path,
        "registered_images": recon.images.len(),
        "total_images": total_images,
        "num_points": recon.num_points,
        "mean_reprojection_error_px": recon.mean_reprojection_error,
        "mean_track_length": recon.mean_track_length,
        "images": recon.images,
    }))
}
