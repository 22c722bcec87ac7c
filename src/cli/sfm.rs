//! `descl sfm IMAGES_DIR --database out.db`: extract, match and verify every chosen pair with
//! descl (any describer, any matcher), write a COLMAP database, and with `--reconstruct` map
//! it (pycolmap's incremental mapper, or `colmap mapper` with `--mapper colmap`); `descl sfm map` maps a
//! database that exists.

use super::args::{CameraModelArg, DescribeArgs, MapperArg, MatchArgs, PairArgs, Preset};
use super::progress::Bar;
use anyhow::{bail, Context};
use clap::builder::TypedValueParser;
use descl::io::cameras::{KnownCamera, KnownCameras};
use descl::io::output::ColmapOptions;
use descl::matching::pairs::PairMode;
use descl::sfm::mapper::{BundleTermination, MapperOptions};
use descl::sfm::{
    build_database, merge_database, merge_hloc, Mapped, MergeInputs, SfmConfig, SfmStageSeconds,
};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    stage: Option<Stage>,
    /// Folder of images.
    #[arg(required = true)]
    images_dir: Option<PathBuf>,
    /// COLMAP database to write.
    #[arg(long, value_name = "DB", required = true)]
    database: Option<PathBuf>,
    /// Replace an existing database (and, with --reconstruct, the models of an earlier run in
    /// the sparse folder).
    #[arg(long)]
    overwrite: bool,
    /// Map the database afterwards (pycolmap's mapper, or --mapper colmap) and report registered
    /// images and reprojection error. The mapper is checked before any work: pycolmap through
    /// `$DESCL_PYTHON` or python3, colmap as `$DESCL_COLMAP` or `colmap` on PATH.
    #[arg(long)]
    reconstruct: bool,
    /// Where the mapper writes its models (default: `<database stem>-sparse` beside it),
    /// checked before any work: an earlier run's models there are refused, or removed with
    /// --overwrite.
    #[arg(long, value_name = "DIR", requires = "reconstruct")]
    sparse_dir: Option<PathBuf>,
    #[command(flatten)]
    mapping: MappingArgs,
    /// COLMAP camera model.
    #[arg(long, value_enum, default_value_t = CameraModelArg::SimpleRadial)]
    camera_model: CameraModelArg,
    /// One camera shared by all images (same camera and size).
    #[arg(long)]
    single_camera: bool,
    #[command(flatten)]
    cameras: KnownCameraArgs,
    /// With --camera-params or --cameras-file: let the mapper refine the given focal lengths
    /// and distortion (by default it holds them as given).
    #[arg(long)]
    refine_intrinsics: bool,
    #[command(flatten)]
    pairs: PairArgs,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    matching: MatchArgs,
    #[command(flatten)]
    describe: DescribeArgs,
}

/// The mapper of `descl sfm --reconstruct`, `descl sfm map` and `descl bench sfm` when none is
/// named: pycolmap 4's incremental mapper (2026-11-29, issue 54; docs/BENCHMARKS.md "Mappers").
/// The library's `MapperOptions::default()` stays `colmap mapper`, which needs no Python.
pub const DEFAULT_MAPPER: MapperArg = MapperArg::Pycolmap;

/// How a database is mapped: `descl sfm --reconstruct` (each flag needs it) and `descl sfm map`.
#[derive(clap::Args, Clone)]
pub struct MappingArgs {
    /// The mapper: pycolmap 4's incremental mapper (PyPI `pycolmap`, imported by $DESCL_PYTHON
    /// or python3; `pip install pycolmap`), or Debian's COLMAP 3.8 `colmap mapper`, which folds
    /// forward motion pycolmap maps, is slower and varies more across seeds, but whose median
    /// was 3–15 % ahead on two validation scenes (docs/BENCHMARKS.md, "Mappers"), or pycolmap's
    /// global mapper. --refine refines with colmap's tools, whichever mapper made the model.
    /// [default: pycolmap]
    #[arg(long, value_enum)]
    mapper: Option<MapperArg>,
    /// Let the mapper refine the principal point (COLMAP holds it at the image centre).
    #[arg(long)]
    refine_principal_point: bool,
    /// The mapper's smallest initial-pair triangulation angle, degrees (COLMAP's
    /// `Mapper.init_min_tri_angle`). Default: COLMAP's 16°, and only if that makes no model at
    /// all at COLMAP's 4 px filter (see --filter-max-reproj-error), one more mapper run
    /// starting at 8° with COLMAP's full inlier minimum (a pair of
    /// settings COLMAP's own relaxation never tries; forward motion needs it; COLMAP relaxes
    /// further inside that run). Not given, when no run makes a model and some
    /// image has no known focal length (no EXIF), the angles are tried once more on a copy of
    /// the database whose cameras of unknown focal length start from 0.85 · max(width, height)
    /// (OpenSfM's prior, a wide camera's) instead of COLMAP's 1.2 ·; the database keeps its own
    /// (the model's cameras.bin holds what the mapper refined; the JSON's `focal_prior_factor`
    /// records the fallback). Given, it is used as is, with neither fallback.
    #[arg(long, value_name = "DEG", value_parser = parse_angle)]
    init_min_tri_angle: Option<f64>,
    /// The mapper's largest reprojection error an observation keeps after bundle adjustment,
    /// pixels (COLMAP's `Mapper.filter_max_reproj_error`). Default: COLMAP's 4 px. Given, the
    /// mapper runs at PX (the fallbacks of --init-min-tri-angle included).
    #[arg(long, value_name = "PX", value_parser = parse_pixels)]
    filter_max_reproj_error: Option<f64>,
    /// Refine the 4 px model (`descl sfm`'s default until 2026-11-28): observations past 1 px
    /// dropped (for images up to 1536 px; scaled with the images' longest side above, 2 px at
    /// 3072 px), one more bundle adjustment, its points triangulated again at 4 px with those
    /// cameras held fixed. It helped the dev scenes and made the default model's cameras worse
    /// on the three validation scenes (docs/BENCHMARKS.md, "Mapping policy").
    #[arg(long, conflicts_with = "filter_max_reproj_error")]
    refine: bool,
    /// The run's random seed (0 when not given): the mapper's (COLMAP's `--random_seed`,
    /// pycolmap's `random_seed`) and, in `descl sfm`, the pair verification's draw (the matches
    /// reach USAC shuffled by seed N). Another seed, another initial pair and other RANSAC
    /// samples: to see a scene's spread. Without --reconstruct `descl sfm` seeds the
    /// verification alone (a database per seed); `sfm map` and `sfm merge` seed the mapper only
    /// (their pairs are verified already).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=i32::MAX as i64).map(u64::from))]
    random_seed: Option<u64>,
    /// Hold every camera's focal length and distortion as the database gives them (COLMAP's
    /// `Mapper.ba_refine_focal_length 0`, `ba_refine_extra_params 0`): for a database of
    /// calibrated cameras (`descl sfm merge --camera-params` or `--cameras-file`). `descl sfm
    /// --camera-params` holds them without it.
    #[arg(long)]
    hold_intrinsics: bool,
}

/// Cameras the user knows, for `descl sfm` and `descl sfm merge`.
#[derive(clap::Args, Clone)]
pub struct KnownCameraArgs {
    /// Every image's camera, in COLMAP's parameter order for --camera-model and COLMAP's pixels
    /// (top-left pixel centre at 0.5, 0.5), as COLMAP's `ImageReader.camera_params`:
    /// SIMPLE_RADIAL `f,cx,cy,k`, SIMPLE_PINHOLE `f,cx,cy`, PINHOLE `fx,fy,cx,cy`. Written into
    /// the database as a known focal length and held fixed by the mapper (--refine-intrinsics
    /// refines them). A principal point outside an image is refused.
    #[arg(long, value_name = "P1,P2,...", conflicts_with = "cameras_file")]
    camera_params: Option<String>,
    /// A camera per image: lines `NAME MODEL WIDTH HEIGHT PARAMS...` (hloc's
    /// queries_with_intrinsics.txt; COLMAP's order and pixels; `#` comments), every image of the
    /// set listed, each checked against its image's size.
    #[arg(long, value_name = "FILE")]
    cameras_file: Option<PathBuf>,
}

impl KnownCameraArgs {
    fn known(&self, model: CameraModelArg) -> anyhow::Result<KnownCameras> {
        Ok(match (&self.camera_params, &self.cameras_file) {
            (Some(p), _) => KnownCameras::All(KnownCamera::parse(model.into(), p)?),
            (None, Some(file)) => KnownCameras::read_file(file)?,
            (None, None) => KnownCameras::Unknown,
        })
    }

    fn given(&self) -> bool {
        self.camera_params.is_some() || self.cameras_file.is_some()
    }

    /// Where the cameras came from, for `--json`: the parameters, the file, or EXIF / prior.
    fn source(&self) -> serde_json::Value {
        match (&self.camera_params, &self.cameras_file) {
            (Some(p), _) => serde_json::json!({ "camera_params": p }),
            (None, Some(f)) => serde_json::json!({ "cameras_file": f }),
            (None, None) => serde_json::json!("exif or prior"),
        }
    }
}

impl MappingArgs {
    fn options(&self) -> MapperOptions {
        MapperOptions {
            mapper: self.mapper.unwrap_or(DEFAULT_MAPPER).into(),
            num_threads: None,
            refine: self.refine,
            refine_principal_point: self.refine_principal_point,
            init_min_tri_angle_deg: self.init_min_tri_angle,
            filter_max_reproj_error_px: self.filter_max_reproj_error,
            random_seed: self.random_seed,
            hold_intrinsics: self.hold_intrinsics,
        }
    }

    /// The first mapping flag given, by name (they mean nothing without a mapping).
    fn given(&self) -> Option<&'static str> {
        if self.mapper.is_some() {
            Some("--mapper")
        } else if self.refine {
            Some("--refine")
        } else if self.refine_principal_point {
            Some("--refine-principal-point")
        } else if self.init_min_tri_angle.is_some() {
            Some("--init-min-tri-angle")
        } else if self.filter_max_reproj_error.is_some() {
            Some("--filter-max-reproj-error")
        } else if self.hold_intrinsics {
            Some("--hold-intrinsics")
        } else {
            None
        }
    }
}

/// The stages of a run spread over many processes.
#[derive(clap::Subcommand)]
enum Stage {
    /// Build one COLMAP database (--database) or hloc's features.h5 + matches.h5 (--hloc) from
    /// sharded `descl extract` and `descl match` outputs (one process: SQLite and HDF5 files
    /// have one writer). Gives what `descl sfm IMAGES` writes when the matches were made with
    /// `--planar-check`, or what `--format h5` writes for the same pairs.
    Merge(MergeArgs),
    /// Score a reconstruction against a Strecha scene's ground-truth cameras: the median
    /// centre error after the similarity (Umeyama) that fits the registered cameras' centres,
    /// also as a fraction of the largest distance between ground-truth cameras, the median
    /// rotation error after the rotation that fits their orientations (what `descl bench sfm`
    /// reports), and the median direction error (the angle at which each camera sees each
    /// other one, against the ground truth's: no alignment, so orientations that do not fit
    /// the centres show there).
    Evaluate(EvaluateArgs),
    /// Map a COLMAP database as `descl sfm --reconstruct` does (its fallbacks, the same
    /// mapping flags): a database of `descl sfm merge`, or one `descl sfm` wrote before.
    Map(MapArgs),
}

#[derive(clap::Args)]
pub struct MapArgs {
    /// The COLMAP database (`descl sfm --database`, `descl sfm merge --database`).
    database: PathBuf,
    /// Folder of the database's images.
    #[arg(long, value_name = "DIR")]
    images: PathBuf,
    /// Where the mapper writes its models (default: `<database stem>-sparse` beside it),
    /// checked before any work: an earlier run's models there are refused, or removed with
    /// --overwrite.
    #[arg(long, value_name = "DIR")]
    sparse_dir: Option<PathBuf>,
    /// Replace the models of an earlier run in the sparse folder.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    mapping: MappingArgs,
    /// For a database whose cameras were given (`descl sfm merge --camera-params` or
    /// `--cameras-file`): let the mapper refine them (by default it holds them, as `descl sfm`
    /// does).
    #[arg(long, conflicts_with = "hold_intrinsics")]
    refine_intrinsics: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// Whether `sfm map` holds the database's cameras: asked to, or every camera was given by the
/// user (descl's `descl_given_camera` table) and --refine-intrinsics is not given. Says why on
/// stderr when it decides for the user, and when only some cameras were given.
fn map_holds_intrinsics(args: &MapArgs) -> anyhow::Result<bool> {
    let given = descl::io::colmap::given_cameras(&args.database)?;
    if args.mapping.hold_intrinsics {
        // Held as they are, guesses too: said, since the mapper can then not correct them
        // (hostile round of c29952d, M5: 5.6° instead of 0.47° on fountain-P11).
        let guessed = descl::io::colmap::camera_rows(&args.database)?
            .iter()
            .filter(|c| !c.prior_focal_length)
            .count();
        if guessed > 0 {
            eprintln!(
                "warning: --hold-intrinsics holds {guessed} cameras of {} whose focal length is a guess (prior_focal_length 0: no EXIF, none given, COLMAP's 1.2 × the longer side); the mapper cannot correct them. Drop the flag, or give the cameras (sfm merge --camera-params or --cameras-file)",
                args.database.display()
            );
        }
        return Ok(true);
    }
    if args.refine_intrinsics {
        if given.given == 0 {
            bail!(
                "--refine-intrinsics: no camera of {} was given (--camera-params or --cameras-file); the mapper refines them without the flag",
                args.database.display()
            );
        }
        return Ok(false);
    }
    if given.all() {
        eprintln!(
            "note: {} of {} {} given (--camera-params or --cameras-file): held fixed, as `descl sfm` holds them (--refine-intrinsics refines them)",
            match given.total {
                1 => "the camera".to_string(),
                n => format!("the {n} cameras"),
            },
            args.database.display(),
            if given.total == 1 { "was" } else { "were" }
        );
        return Ok(true);
    }
    if given.given > 0 {
        eprintln!(
            "warning: {} of the {} cameras of {} were given, the others estimated: the mapper refines all of them (--hold-intrinsics holds all)",
            given.given,
            given.total,
            args.database.display()
        );
    }
    Ok(false)
}

fn map(args: MapArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    if args.database.is_dir() {
        bail!(
            "{}: a folder, not a COLMAP database file",
            args.database.display()
        );
    }
    if !args.database.is_file() {
        bail!("{}: no such database file", args.database.display());
    }
    if !args.images.is_dir() {
        bail!("{}: not a folder of images", args.images.display());
    }
    let sparse = args
        .sparse_dir
        .clone()
        .unwrap_or_else(|| descl::sfm::default_sparse_dir(&args.database));
    // Before any mapping and before the sparse folder is made: the folder must take the
    // models, colmap must run where the mapping needs it, and the image folder must hold the
    // database's images (the mapper reads their colours from it, and a wrong folder would
    // colour the points silently). pycolmap is imported by sfm::map before it makes the folder.
    descl::sfm::check_sparse_dir(&sparse, args.overwrite)?;
    descl::sfm::require_colmap(&args.mapping.options(), "descl sfm map")?;
    descl::io::cameras::check_database_cameras(&args.database)?;
    descl::io::colmap::check_database_keypoints(&args.database)?;
    descl::io::colmap::check_database_matches(&args.database)?;
    let folder = descl::io::colmap::check_image_folder(&args.database, &args.images)?;
    if let Some(first) = folder.by_size_only.first() {
        eprintln!(
            "warning: {} of the {} images of {} have no recorded SHA-256 (a database COLMAP or an older descl made, or a removed row): checked by name and size only, not as the same pictures (e.g. {first})",
            folder.by_size_only.len(),
            folder.images,
            args.database.display()
        );
    }
    let total_images = folder.images;
    let mut mapping = args.mapping.clone();
    mapping.hold_intrinsics = map_holds_intrinsics(&args)?;
    let mapped = map_and_report(
        &args.database,
        &args.images,
        &sparse,
        &mapping,
        args.overwrite,
        total_images,
    )?;
    if args.json {
        let runs: Vec<f64> = mapped.attempts.iter().map(|a| a.seconds).collect();
        let mut out = serde_json::json!({
            "database": args.database,
            "reconstruction": reconstruction_json(&mapped, total_images),
            "images_checked_by_size_only": folder.by_size_only,
            "seconds": {"mapper": started.elapsed().as_secs_f64(), "mapper_runs": runs},
        });
        out["reconstruction"]["intrinsics_held"] = mapping.hold_intrinsics.into();
        outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct EvaluateArgs {
    /// A model folder (`images.bin`, `points3D.bin`) or a folder of the mapper's numbered
    /// models (the one with the most registered images is scored).
    model: PathBuf,
    /// The scene folder holding `cameras/<image file>.camera` (Strecha et al. 2008).
    #[arg(long, value_name = "DIR")]
    strecha: PathBuf,
    /// Print the scores as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn evaluate(args: EvaluateArgs) -> anyhow::Result<()> {
    let recon = descl::io::colmap_model::largest_model(&args.model)?
        .with_context(|| format!("{}: no model (no images.bin)", args.model.display()))?;
    let truth = descl::sfm::read_strecha_scene(&args.strecha)?;
    let a = descl::sfm::evaluate(&recon, &truth).with_context(|| {
        format!(
            "{} against {}",
            recon.path.display(),
            args.strecha.display()
        )
    })?;
    eprintln!(
        "{}: {}/{} images of the scene, median rotation error {:.3}°, median centre error {:.4} % of the extent, median direction error {:.3}°, {} points",
        recon.path.display(),
        a.registered,
        a.total,
        a.median_rotation_error_deg,
        100.0 * a.median_centre_error_rel,
        a.median_direction_error_deg.unwrap_or(f64::NAN),
        a.num_points
    );
    if a.registered < a.total {
        eprintln!(
            "warning: {} of the scene's {} cameras registered: the alignment of fewer, nearly collinear cameras fits their centres more easily, so these errors are not comparable with a complete model's",
            a.registered, a.total
        );
    }
    if args.json {
        let mut out = serde_json::to_value(&a)?;
        out["model"] = serde_json::json!(recon.path);
        out["all_cameras_registered"] = serde_json::json!(a.registered == a.total);
        outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// Folder of features files (`descl extract IMAGES --out DIR [--shard I/N]`).
    #[arg(long, value_name = "DIR")]
    features: PathBuf,
    /// Folder of matches files (`descl match --images FEATURES --out-dir DIR --planar-check
    /// [--shard I/N]`).
    #[arg(long, value_name = "DIR")]
    matches: PathBuf,
    /// The images, for EXIF focal lengths (default: the paths the features files record); each
    /// must be the image its features were extracted from (same SHA-256).
    #[arg(long, value_name = "DIR")]
    images: Option<PathBuf>,
    /// COLMAP database to write.
    #[arg(
        long,
        value_name = "DB",
        required_unless_present = "hloc",
        conflicts_with = "hloc"
    )]
    database: Option<PathBuf>,
    /// Write hloc's features.h5 and matches.h5 into this folder instead of a database (the
    /// files `--format h5` writes, from runs sharded in the npz format; needs the cargo
    /// feature `h5`).
    #[arg(long, value_name = "DIR")]
    hloc: Option<PathBuf>,
    /// Replace an existing database (or hloc's files in --hloc).
    #[arg(long)]
    overwrite: bool,
    /// COLMAP camera model.
    #[arg(long, value_enum, default_value_t = CameraModelArg::SimpleRadial)]
    camera_model: CameraModelArg,
    /// One camera shared by all images (same camera and size).
    #[arg(long)]
    single_camera: bool,
    #[command(flatten)]
    cameras: KnownCameraArgs,
    /// Merge what is there when images or pairs that the runs' plans list are missing (a shard
    /// that did not run or failed), or an image file is not found (merged without its EXIF
    /// focal length), reporting them; without it such a merge is refused.
    #[arg(long)]
    allow_partial: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// The plans a merge reads beside the features and the matches.
const PLAN_FILES: [&str; 2] = [
    descl::io::plan::EXTRACT_PLAN_FILE,
    descl::io::plan::MATCH_PLAN_FILE,
];

/// Before a merge: camera flags need a database, and the database is none of the merge's
/// inputs (features, matches, plans, images).
fn check_merge_outputs(args: &MergeArgs) -> anyhow::Result<()> {
    let camera_flags = args.single_camera
        || args.cameras.given()
        || !matches!(args.camera_model, CameraModelArg::SimpleRadial);
    if args.hloc.is_some() && camera_flags {
        bail!("--single-camera, --camera-model, --camera-params and --cameras-file set the cameras of a COLMAP database (--database); hloc's files (--hloc) hold no cameras");
    }
    if let Some(db) = &args.database {
        // --overwrite replaces a database, never a features or matches file the merge reads
        // (checked first: the message names the input).
        let mut read = Vec::new();
        for dir in [&args.features, &args.matches] {
            for pairs in [false, true] {
                read.extend(descl::io::npz_folder::npz_files(dir, pairs).unwrap_or_default());
            }
            read.extend(PLAN_FILES.map(|f| dir.join(f)));
        }
        descl::io::atomic::check_not_an_input(db, &read)?;
        if let Some(images) = &args.images {
            descl::image_set::check_output_outside_set(db, images)?;
        }
        descl::io::atomic::check_writable(db, descl::io::atomic::OutputKind::Database)?;
    }
    Ok(())
}

fn merge(args: MergeArgs) -> anyhow::Result<()> {
    check_merge_outputs(&args)?;
    let inputs = MergeInputs {
        features: args.features,
        matches: args.matches,
        images: args.images,
        allow_partial: args.allow_partial,
    };
    let options = ColmapOptions {
        camera_model: args.camera_model.into(),
        single_camera: args.single_camera,
        known_cameras: args.cameras.known(args.camera_model)?,
    };
    let s = match (&args.database, &args.hloc) {
        (Some(db), _) => merge_database(&inputs, db, args.overwrite, options, &Bar::new(true))?,
        (None, Some(dir)) => merge_hloc(&inputs, dir, args.overwrite, &Bar::new(true))?,
        (None, None) => bail!("give --database DB or --hloc DIR"),
    };
    eprintln!(
        "{}: {} images, {} pairs, {} verified",
        s.output.display(),
        s.images,
        s.pairs,
        s.verified_pairs
    );
    let not_as_sfm = s.verified_not_as_sfm();
    if !not_as_sfm.is_empty() {
        let at: Vec<String> = not_as_sfm
            .iter()
            .map(|&px| format!("{} px", descl::sfm::px_text(px)))
            .collect();
        eprintln!(
            "note: the pairs were verified at {}, not at the {} px of `descl sfm` and its mapping policy (the database holds the inliers of the stricter or looser threshold, not those `descl sfm` writes): match with --planar-check (or --threshold {}) for that",
            at.join(", "),
            descl::sfm::px_text(descl::sfm::COLMAP_MAX_ERROR_PX),
            descl::sfm::px_text(descl::sfm::COLMAP_MAX_ERROR_PX)
        );
    }
    if s.pairs_without_planar_check > 0 && args.database.is_some() {
        eprintln!(
            "warning: {} pairs were matched without --planar-check: COLMAP would label the planar ones 6 (PLANAR_OR_PANORAMIC), here they keep their F/E label",
            s.pairs_without_planar_check
        );
    }
    if s.is_partial() {
        report_partial(&s);
    }
    if !s.differs_from_sfm.is_empty() {
        eprintln!(
            "note: these features were not extracted as `descl sfm` extracts them ({}): the merge is not what `descl sfm` writes for these images (extract with --preset sfm for that)",
            s.differs_from_sfm.join("; ")
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
    }
    Ok(())
}

/// The warning of a merge `--allow-partial` made without some of what the plans list, and the
/// first [`LISTED`] of each kind.
fn report_partial(s: &descl::sfm::MergeSummary) {
    eprintln!(
        "warning (--allow-partial): merged without {} images and {} pairs that the plans list, {} images without planned pairs, {} images without their file{}",
        s.missing_images.len(),
        s.missing_pairs.len(),
        s.images_not_matched.len(),
        s.images_not_found.len(),
        if s.without_plan.is_empty() {
            String::new()
        } else {
            let dirs: Vec<String> =
                s.without_plan.iter().map(|d| d.display().to_string()).collect();
            format!("; no plan in {}", dirs.join(", "))
        }
    );
    for name in s.missing_images.iter().take(LISTED) {
        eprintln!("  missing image: {name}");
    }
    for [a, b] in s.missing_pairs.iter().take(LISTED) {
        eprintln!("  missing pair: {a} – {b}");
    }
    for name in s.images_not_found.iter().take(LISTED) {
        eprintln!("  image not found (no EXIF focal length): {name}");
    }
    let unlisted = [&s.missing_images, &s.images_not_found]
        .iter()
        .map(|v| v.len().saturating_sub(LISTED))
        .sum::<usize>()
        + s.missing_pairs.len().saturating_sub(LISTED);
    if unlisted > 0 {
        eprintln!("  … and {unlisted} more (--json lists them all)");
    }
}

/// How many missing images or pairs of each kind a partial merge lists on stderr.
const LISTED: usize = 20;

impl Args {
    /// Whether the mapper holds the cameras as given (--camera-params or --cameras-file without
    /// --refine-intrinsics, or --hold-intrinsics) rather than refining them.
    fn holds_intrinsics(&self) -> bool {
        self.mapping.hold_intrinsics || (self.cameras.given() && !self.refine_intrinsics)
    }

    /// The run's settings; `--geometry none` with `--reconstruct` is refused (nothing would be
    /// verified for the mapper to map).
    fn config(&self) -> anyhow::Result<SfmConfig> {
        let mut pair = self
            .matching
            .pair_config_with(SfmConfig::default().pair.ransac.threshold_px)?;
        // One seed draws every random part of the run: the verification's too.
        pair.ransac.seed = self.mapping.random_seed.unwrap_or(0);
        if self.reconstruct && pair.geometry.is_none() {
            bail!("--geometry none --reconstruct: the mapper maps verified pairs only, and none would be verified; leave out --geometry none, or --reconstruct");
        }
        Ok(SfmConfig {
            pair,
            pairs: self.pairs.mode(Some(PairMode::Exhaustive))?,
            camera_model: self.camera_model.into(),
            single_camera: self.single_camera,
            known_cameras: self.cameras.known(self.camera_model)?,
        })
    }

    fn sparse_dir(&self) -> PathBuf {
        self.sparse_dir.clone().unwrap_or_else(|| {
            descl::sfm::default_sparse_dir(
                self.database.as_deref().unwrap_or(Path::new("colmap.db")),
            )
        })
    }
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    match args.stage.take() {
        Some(Stage::Merge(m)) => return merge(m),
        Some(Stage::Evaluate(e)) => return evaluate(e),
        Some(Stage::Map(m)) => return map(m),
        None => {}
    }
    let (Some(images_dir), Some(database)) = (args.images_dir.clone(), args.database.clone())
    else {
        bail!("give an image folder and --database DB (or `descl sfm merge`)");
    };
    check_before_work(&args, &database, &images_dir)?;
    let started = std::time::Instant::now();
    let cfg = args.config()?;
    let extractor = args.describe.extractor_for(Preset::Sfm)?;
    let bar = Bar::new(true);
    let summary = build_database(
        &images_dir,
        &database,
        args.overwrite,
        &cfg,
        &extractor,
        &bar,
    )?;
    eprintln!(
        "{}: {} images, {} pairs, {}",
        summary.database.display(),
        summary.images.len(),
        summary.pairs,
        summary.pairs_text()
    );
    // What made the database: the model (name and card SHA-256) and every detector setting
    // (the matching and verification settings are the summary's `pair_config`).
    let mut out = serde_json::json!({
        "database": summary,
        "extract": extractor.settings(),
        "cameras": args.cameras.source(),
    });
    let mut mapping = None;
    if args.reconstruct {
        let mapping_started = std::time::Instant::now();
        let mapped = reconstruct(&args, summary.images.len())?;
        out["reconstruction"] = reconstruction_json(&mapped, summary.images.len());
        out["reconstruction"]["intrinsics_held"] = args.holds_intrinsics().into();
        mapping = Some((mapped, mapping_started.elapsed().as_secs_f64()));
    }
    let mapping = mapping.as_ref().map(|(m, seconds)| (m, *seconds));
    out["seconds"] = seconds_json(&summary.seconds, mapping, started.elapsed().as_secs_f64());
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    if !summary.skipped.is_empty() {
        bail!(
            "{} images or pairs failed (see the warnings)",
            summary.skipped.len()
        );
    }
    Ok(())
}

/// Before any work: a run must not fail at its end for its output (`database`, the models'
/// folder) or its mapper (pycolmap imported now, not after the extraction), and mapping flags
/// need `--reconstruct`.
fn check_before_work(args: &Args, database: &Path, images_dir: &Path) -> anyhow::Result<()> {
    let sparse = args.reconstruct.then(|| args.sparse_dir());
    let options = args.mapping.options();
    descl::image_set::check_output_outside_set(database, images_dir)?;
    descl::sfm::check_outputs(database, sparse.as_deref(), args.overwrite, &options)?;
    if let (Some(sparse), true) = (&sparse, args.overwrite) {
        descl::image_set::check_not_inside_old_models(database, "database", sparse)?;
        descl::image_set::check_not_inside_old_models(images_dir, "image folder", sparse)?;
    }
    if args.refine_intrinsics && !args.cameras.given() {
        bail!("--refine-intrinsics refines the cameras of --camera-params or --cameras-file: give one");
    }
    if args.reconstruct {
        options.mapper.describe()?;
    } else if args.refine_intrinsics {
        bail!("--refine-intrinsics sets how the database is mapped: it needs --reconstruct (or `descl sfm map --refine-intrinsics`)");
    } else if let Some(flag) = args.mapping.given() {
        bail!(
            "{flag} sets how the database is mapped: it needs --reconstruct (or `descl sfm map`)"
        );
    }
    Ok(())
}

/// The run's `seconds` (features, pairs, mapper, total, and each stage's), printed for people
/// on the way: the wall time of the set run's stages, of the mapper stage when there was one
/// (with what [`descl::sfm::map`] returned), and the whole run's `total`.
fn seconds_json(
    set: &descl::image_set::StageSeconds,
    mapping: Option<(&Mapped, f64)>,
    total: f64,
) -> serde_json::Value {
    let mapper = mapping.map(|(_, seconds)| seconds);
    eprintln!(
        "time: {total:.1} s (features {:.1} s, pairs {:.1} s{})",
        set.features,
        set.pairs,
        mapper
            .map(|m| format!(", mapper {m:.1} s"))
            .unwrap_or_default()
    );
    let stages = SfmStageSeconds::new(set, mapping);
    eprintln!("stages: {stages}");
    let mut seconds = serde_json::json!({
        "features": set.features,
        "pairs": set.pairs,
        "total": total,
        "stages": stages,
    });
    if let Some(m) = mapper {
        seconds["mapper"] = serde_json::json!(m);
    }
    seconds
}

/// Runs the mapper on the database and reports what it registered.
fn reconstruct(args: &Args, total_images: usize) -> anyhow::Result<Mapped> {
    let (Some(database), Some(images_dir)) = (&args.database, &args.images_dir) else {
        bail!("--reconstruct needs the image folder and --database");
    };
    // The models of an earlier run into the same folder: replaced under --overwrite (as the
    // database is, inside sfm::map under the folder's lock), else refused.
    // Cameras the user gave stay as given unless asked otherwise.
    let mut mapping = args.mapping.clone();
    mapping.hold_intrinsics = args.holds_intrinsics();
    map_and_report(
        database,
        images_dir,
        &args.sparse_dir(),
        &mapping,
        args.overwrite,
        total_images,
    )
}

/// `sfm::map` with the mapping flags, then its notes and warnings and a line for people: the
/// one mapping of `descl sfm --reconstruct` and `descl sfm map`.
fn map_and_report(
    database: &Path,
    images: &Path,
    sparse: &Path,
    mapping: &MappingArgs,
    overwrite: bool,
    total_images: usize,
) -> anyhow::Result<Mapped> {
    // The errors of sfm::map name the mapper and the database already.
    let mapped = descl::sfm::map(database, images, sparse, &mapping.options(), overwrite)?;
    report_mapper_runs(&mapped);
    report_model_refinements(&mapped.models);
    let recon = &mapped.reconstruction;
    eprintln!(
        "reconstruction {}: {}/{total_images} images registered, {} points, mean reprojection error {:.3} px",
        recon.path.display(),
        recon.images.len(),
        recon.num_points,
        recon.mean_reprojection_error
    );
    Ok(mapped)
}

/// Notes on how the kept model was made (after fallbacks, refined) and a warning when its
/// refinement failed.
fn report_mapper_runs(mapped: &Mapped) {
    let passed_over = mapped.passed_over();
    if !passed_over.is_empty() {
        let focal = mapped
            .focal_prior_factor()
            .map(|k| {
                format!(
                    ", its cameras of unknown focal length started from {k} · max(width, height) \
                     (the database keeps its own priors)"
                )
            })
            .unwrap_or_default();
        eprintln!(
            "note: {} mapper ran {} times; kept the run at a {} px filter and an initial-pair angle of {}°{focal} (others: {})",
            mapped.mapper,
            mapped.attempts.len(),
            descl::sfm::px_text(mapped.filter_max_reproj_error_px),
            mapped.init_min_tri_angle_deg,
            passed_over.join("; ")
        );
    }
    if let Some(least) = mapped.below_min_model_size {
        eprintln!(
            "warning: no mapper run made a model of at least {least} of the {} registrable images (COLMAP's min_model_size rule); kept the largest one made, {} images. The images may show more than one scene, or some may not connect: map each scene's images on their own to reconstruct the others",
            mapped.registrable_images,
            mapped.reconstruction.images.len()
        );
    }
    if let Some(px) = mapped.refined_at_px {
        eprintln!(
            "note: the {} px model was refined: observations past {} px dropped, bundle-adjusted again, its points triangulated again at {} px",
            descl::sfm::px_text(mapped.filter_max_reproj_error_px),
            descl::sfm::px_text(px),
            descl::sfm::px_text(mapped.filter_max_reproj_error_px)
        );
    }
    if let Some(why) = &mapped.refinement_error {
        eprintln!(
            "warning: the {} px model is kept as the mapper made it (not refined): {why}",
            descl::sfm::px_text(mapped.filter_max_reproj_error_px)
        );
    }
}

/// The run's `reconstruction` in `--json`.
fn reconstruction_json(mapped: &Mapped, total_images: usize) -> serde_json::Value {
    let recon = &mapped.reconstruction;
    serde_json::json!({
        "path": recon.path,
        "mapper": mapped.mapper,
        "registered_images": recon.images.len(),
        "total_images": total_images,
        "num_points": recon.num_points,
        "mean_reprojection_error_px": recon.mean_reprojection_error,
        "mean_track_length": recon.mean_track_length,
        "init_min_tri_angle_deg": mapped.init_min_tri_angle_deg,
        "filter_max_reproj_error_px": mapped.filter_max_reproj_error_px,
        "refined_at_filter_px": mapped.refined_at_px,
        "refinement_error": mapped.refinement_error,
        // Every model of the kept run, each refined on its own: which were, which not and why.
        "models": mapped.models,
        "registrable_images": mapped.registrable_images,
        // Set when no run made a model this large and the largest one made was kept.
        "below_min_model_size": mapped.below_min_model_size,
        // Either fallback made the model; `angle_fallback`: the 8° one.
        "fallback": mapped.fallback(),
        "angle_fallback": mapped.angle_fallback(),
        "focal_prior_factor": mapped.focal_prior_factor(),
        "mapper_runs": mapped.attempts,
        "images": recon.images,
    })
}

/// Warnings for the refinement of the kept run's models: a smaller model kept as the mapper
/// made it, and any model whose bundle adjustment did not converge (the largest model's
/// failure has its own warning).
fn report_model_refinements(models: &[descl::sfm::ModelRefinement]) {
    for m in models {
        if let (false, Some(why)) = (m.largest, &m.error) {
            eprintln!(
                "warning: the smaller model {} is kept as the mapper made it (not refined): {why}",
                m.path.display()
            );
        }
        if m.bundle_adjustment == Some(BundleTermination::NoConvergence) {
            eprintln!(
                "warning: {}: the refinement's bundle adjustment did not converge (COLMAP: \"No convergence\"); the model is its last iterate",
                m.path.display()
            );
        }
    }
}

/// A positive, finite number of pixels.
fn parse_pixels(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p.is_finite() => Ok(p),
        Ok(p) => Err(format!("{p}: a positive number of pixels")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// An angle in degrees in (0, 90).
fn parse_angle(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 90.0 => Ok(a),
        Ok(a) => Err(format!("{a}: an angle in degrees between 0 and 90")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}
