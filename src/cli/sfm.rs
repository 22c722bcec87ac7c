//! `descl sfm IMAGES_DIR --database out.db`: extract, match and verify every chosen pair with
//! descl, write a COLMAP database, and with `--reconstruct` run `colmap mapper` on it.

use super::matches::{ExtractArgs, MatchArgs};
use anyhow::{bail, Context};
use descl::io::colmap::CameraModel;
use descl::io::colmap_model::{run_mapper, MapperOptions};
use descl::matching::pairs::PairMode;
use descl::sfm::{build_database, SfmConfig, COLMAP_MIN_NUM_INLIERS};
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
    #[arg(long, default_value = "SIMPLE_RADIAL", value_parser = ["SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL"])]
    camera_model: String,
    /// One camera shared by all images (same camera and size).
    #[arg(long)]
    single_camera: bool,
    /// Pairs: exhaustive (default), or each image with the next W.
    #[arg(long, value_name = "W", conflicts_with = "pairs")]
    sequential: Option<usize>,
    /// Pairs file: `nameA nameB` per line.
    #[arg(long, value_name = "FILE")]
    pairs: Option<PathBuf>,
    /// Fewest inliers for a verified pair (COLMAP's default).
    #[arg(long, default_value_t = COLMAP_MIN_NUM_INLIERS)]
    min_inliers: usize,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    matching: MatchArgs,
    #[command(flatten)]
    extract: ExtractArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.database.exists() && !args.overwrite {
        bail!(
            "{}: database already exists (pass --overwrite to replace it)",
            args.database.display()
        );
    }
    if args.matching.matcher != "exact" {
        bail!(
            "descl sfm uses the exact matcher (--matcher {} is for descl match)",
            args.matching.matcher
        );
    }
    let pair = args.matching.pair_config();
    if pair.geometry == Some(descl::geometry::ModelKind::Essential)
        && (args.matching.intrinsics.is_some() || args.matching.intrinsics_file.is_some())
    {
        bail!("descl sfm takes intrinsics from EXIF or COLMAP's prior per image; --intrinsics is for descl match");
    }
    let cfg = SfmConfig {
        pair,
        pairs: match (&args.sequential, &args.pairs) {
            (Some(w), _) => PairMode::Sequential(*w),
            (None, Some(p)) => PairMode::File(p.clone()),
            (None, None) => PairMode::Exhaustive,
        },
        camera_model: CameraModel::parse(&args.camera_model)?,
        single_camera: args.single_camera,
        min_inliers: args.min_inliers,
    };
    let extractor = args.extract.extractor()?;
    let summary = build_database(
        &args.images_dir,
        &args.database,
        args.overwrite,
        &cfg,
        |p| extractor.extract(p),
        true,
    )?;
    for s in &summary.skipped {
        eprintln!("warning: skipped pair {s}");
    }
    let mut out = serde_json::json!({ "database": summary });
    eprintln!(
        "{}: {} images, {} pairs, {} verified (mean {:.0} matches, {:.0} inliers per pair)",
        summary.database.display(),
        summary.images.len(),
        summary.pairs,
        summary.verified_pairs,
        summary.mean_matches,
        summary.mean_inliers
    );
    if args.reconstruct {
        let sparse = args.sparse_dir.clone().unwrap_or_else(|| {
            let stem = args
                .database
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "colmap".into());
            args.database.with_file_name(format!("{stem}-sparse"))
        });
        let options = MapperOptions {
            num_threads: None,
            refine_principal_point: args.refine_principal_point,
        };
        let recon = run_mapper(&args.database, &args.images_dir, &sparse, &options)
            .context("colmap mapper")?;
        eprintln!(
            "reconstruction {}: {}/{} images registered, {} points, mean reprojection error {:.3} px",
            recon.path.display(),
            recon.images.len(),
            summary.images.len(),
            recon.num_points,
            recon.mean_reprojection_error
        );
        out["reconstruction"] = serde_json::json!({
            "path": recon.path,
            "registered_images": recon.images.len(),
            "total_images": summary.images.len(),
            "num_points": recon.num_points,
            "mean_reprojection_error_px": recon.mean_reprojection_error,
            "mean_track_length": recon.mean_track_length,
            "images": recon.images,
        });
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
