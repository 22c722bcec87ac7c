//! Flags shared by several subcommands, and their mapping to the library's typed configs: raw
//! flags are parsed by clap (`ValueEnum` for every choice, so a typo is a usage error, never a
//! silent default) and turned into ready-to-run configs here, in one place.

use anyhow::Context;
use descl::describe::Describer;
use descl::detect::{DetectorConfig, DetectorKind, Selection, DEFAULT_MAX_KEYPOINTS};
use descl::features::{FeatureMeta, Features};
use descl::geometry::{Intrinsics, ModelKind, RansacConfig};
use descl::image_set::{load_in_blocks, CameraInfo, Load};
use descl::io::colmap::CameraModel;
use descl::io::output::Format;
use descl::io::snapshot::Snapshot;
use descl::matching::filters::LOWE_RATIO;
use descl::matching::pairs::PairMode;
use descl::matching::two_view::{Matcher, PairConfig, COLMAP_MIN_NUM_INLIERS, GUIDED_RADIUS_PX};
use descl::matching::MatchConfig;
use descl::model::{Device, DEFAULT_MODEL};
use descl::names::SetInput;
use descl::pipeline::{check_max_image_size, Extractor, COLMAP_MAX_IMAGE_SIZE};
use descl::progress::Progress;
use descl::provenance::SetIdentity;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// ONNX Runtime's CPU provider.
    Cpu,
    /// CUDA; fails if unavailable.
    Cuda,
    /// CUDA when available, else CPU.
    Auto,
}

impl From<DeviceArg> for Device {
    fn from(d: DeviceArg) -> Device {
        match d {
            DeviceArg::Cpu => Device::Cpu,
            DeviceArg::Cuda => Device::Cuda,
            DeviceArg::Auto => Device::Auto,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MatcherArg {
    /// SGEMM / popcount brute force.
    Exact,
    /// PCA + kd-tree candidates, exact re-ranking (float descriptors).
    Approx,
    /// Exact, then again near the first model's prediction (COLMAP-style).
    Guided,
    /// Inverted-file search (k-means cells, the nearest cells probed; COLMAP 4's kind of CPU
    /// matcher; float descriptors; exact below 4096 descriptors, `matching::ivf::IVF_MIN_ROWS`).
    Ivf,
}

impl From<MatcherArg> for Matcher {
    fn from(m: MatcherArg) -> Matcher {
        match m {
            MatcherArg::Exact => Matcher::Exact,
            MatcherArg::Approx => Matcher::Approx,
            MatcherArg::Guided => Matcher::Guided,
            MatcherArg::Ivf => Matcher::Ivf,
        }
    }
}

/// The incremental mapper of `descl sfm --reconstruct` and `descl bench sfm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MapperArg {
    /// `colmap mapper` ($DESCL_COLMAP or colmap on PATH).
    Colmap,
    /// pycolmap's incremental mapper ($DESCL_PYTHON or python3, importing pycolmap).
    Pycolmap,
    /// pycolmap's global mapper (GLOMAP: rotation averaging, global positioning; no initial
    /// pair, so the angle fallback repeats the run).
    PycolmapGlobal,
}

impl From<MapperArg> for descl::sfm::mapper::MapperKind {
    fn from(m: MapperArg) -> Self {
        match m {
            MapperArg::Colmap => descl::sfm::mapper::MapperKind::Colmap,
            MapperArg::Pycolmap => descl::sfm::mapper::MapperKind::Pycolmap,
            MapperArg::PycolmapGlobal => descl::sfm::mapper::MapperKind::PycolmapGlobal,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GeometryArg {
    Homography,
    Fundamental,
    /// Needs intrinsics (flag, file or EXIF).
    Essential,
    /// No verification.
    None,
}

impl GeometryArg {
    fn model(self) -> Option<ModelKind> {
        match self {
            GeometryArg::Homography => Some(ModelKind::Homography),
            GeometryArg::Fundamental => Some(ModelKind::Fundamental),
            GeometryArg::Essential => Some(ModelKind::Essential),
            GeometryArg::None => None,
        }
    }
}

/// A value parser for a library enum that lists its variants (`ALL`) and names them (`name`):
/// the command line offers exactly the library's choices, so a new detector or output format
/// is a library change only.
pub fn choice<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser;
    let names: Vec<&'static str> = all.iter().map(|&t| name(t)).collect();
    clap::builder::PossibleValuesParser::new(names).try_map(move |s: String| {
        all.iter()
            .copied()
            .find(|&t| name(t) == s)
            .ok_or_else(|| format!("unknown choice {s:?}"))
    })
}

/// `--format` of the outputs.
pub fn format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    choice(Format::ALL, Format::name)
}

/// `--format h5` is one `features.h5` / `matches.h5` per folder, written by one process under a
/// lock: shards running in parallel cannot share it (the second would fail on the lock after
/// its model loaded). Refused before any work, with the route that does shard: npz shards in
/// one folder (checked and merged by provenance), then one `descl match --format h5` from them.
pub fn refuse_h5_shards(format: Format, shard: Option<&descl::shard::Shard>) -> anyhow::Result<()> {
    if format == Format::H5 && shard.is_some() {
        anyhow::bail!(
            "--format h5 cannot be sharded: features.h5 and matches.h5 are one file each, written by one process. \
             Run the shards in the npz format (the default): `descl extract IMAGES --out FEATURES --shard I/N`, \
             `descl match --images FEATURES --pairs pairs.txt --out-dir MATCHES --shard I/N`, then \
             `descl sfm merge --features FEATURES --matches MATCHES --hloc OUT` writes features.h5 and matches.h5 from them"
        );
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CameraModelArg {
    #[value(name = "SIMPLE_PINHOLE")]
    SimplePinhole,
    #[value(name = "PINHOLE")]
    Pinhole,
    #[value(name = "SIMPLE_RADIAL")]
    SimpleRadial,
}

impl From<CameraModelArg> for CameraModel {
    fn from(c: CameraModelArg) -> CameraModel {
        match c {
            CameraModelArg::SimplePinhole => CameraModel::SimplePinhole,
            CameraModelArg::Pinhole => CameraModel::Pinhole,
            CameraModelArg::SimpleRadial => CameraModel::SimpleRadial,
        }
    }
}

/// Detector defaults of a command. The variants' doc comments are `--preset`'s help text,
/// which clap prints verbatim: plain words and numbers, no rustdoc links (the numbers are
/// `DEFAULT_MAX_KEYPOINTS`, `DEFAULT_CONTRAST_THRESHOLD` and `descl::sfm::sfm_detector`'s;
/// tests/cli_extract.rs checks them against the constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// descl extract's and descl match's: the 2048 strongest DoG frames at OpenCV's contrast
    /// threshold 0.04.
    Match,
    /// descl sfm's: 8192 DoG frames chosen as COLMAP chooses its features, at COLMAP's peak
    /// threshold (0.02 in OpenCV's units).
    Sfm,
}

impl Preset {
    /// The describer when `-m` is not given.
    pub fn model(self) -> &'static str {
        match self {
            Preset::Match | Preset::Sfm => DEFAULT_MODEL,
        }
    }

    pub fn detector(self) -> DetectorConfig {
        match self {
            Preset::Match => DetectorConfig {
                max_keypoints: DEFAULT_MAX_KEYPOINTS,
                ..DetectorConfig::default()
            },
            Preset::Sfm => descl::sfm::sfm_detector(),
        }
    }
}

/// How features are computed: describer, device, detector.
#[derive(clap::Args, Debug, Clone)]
pub struct DescribeArgs {
    /// Describer: a model name (see `descl models`), a path to an .onnx file, `sift` or
    /// `rootsift`. Default: descl-l2net-w0.5-distill-dist-offset, for every command.
    #[arg(long, short = 'm', value_name = "MODEL")]
    pub model: Option<String>,
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Keypoint detector [default: dog].
    #[arg(long, value_parser = choice(DetectorKind::ALL, DetectorKind::name))]
    pub detector: Option<DetectorKind>,
    /// Keep at most N keypoints per image (0 = all) [default: 2048; descl sfm: 8192,
    /// COLMAP's max_num_features].
    #[arg(long, value_name = "N")]
    pub max_keypoints: Option<usize>,
    /// DoG contrast threshold (OpenCV SIFT `contrastThreshold`) [default: 0.04, OpenCV's;
    /// descl sfm: 0.02, COLMAP's peak threshold in OpenCV's units].
    #[arg(long, value_name = "X", value_parser = contrast_threshold_parser)]
    pub contrast_threshold: Option<f32>,
    /// How --max-keypoints chooses: `strongest` (by response) or `colmap` (as COLMAP's SIFT
    /// extraction keeps `max_num_features` = N: whole DoG levels from the coarsest down until
    /// they hold more than N locations, at most 2 orientations per location) [default:
    /// strongest; descl sfm: colmap].
    #[arg(long, value_parser = choice(Selection::ALL, Selection::name))]
    pub selection: Option<Selection>,
    /// Defaults for the flags above that are not given: `match` (descl extract's and descl
    /// match's: the default model, 2048 strongest DoG frames at OpenCV's threshold) or `sfm`
    /// (descl sfm's: its model, 8192 chosen as COLMAP chooses its features, at COLMAP's
    /// threshold). Extract with
    /// `--preset sfm` for `descl sfm merge` to give what `descl sfm` gives.
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,
    /// Shrink images whose longer side exceeds N pixels before detection (COLMAP's default);
    /// keypoints are given in the original image's pixels. 0 = never [default: 3200].
    #[arg(long, value_name = "N", value_parser = max_image_size_parser)]
    pub max_image_size: Option<usize>,
}

impl DescribeArgs {
    /// Opens the describer (models are resolved and loaded here), with the detector defaults
    /// of `--preset`, else of `descl extract` and `descl match`.
    pub fn extractor(&self) -> anyhow::Result<Extractor> {
        self.extractor_for(Preset::Match)
    }

    /// As [`Self::extractor`], with `fallback`'s defaults when `--preset` is not given
    /// (`descl sfm` passes [`Preset::Sfm`]).
    pub fn extractor_for(&self, fallback: Preset) -> anyhow::Result<Extractor> {
        let preset = self.preset.unwrap_or(fallback);
        let model = self.model.as_deref().unwrap_or(preset.model());
        let describer = Describer::open(model, self.device.into())
            .with_context(|| format!("describer `{model}`"))?;
        let defaults = preset.detector();
        Ok(
            Extractor::with_describer(describer, self.detector(&defaults))
                .max_image_size(self.max_image_size.unwrap_or(COLMAP_MAX_IMAGE_SIZE)),
        )
    }

    /// The flags above given on the command line, as it spells them (`--device` aside: it
    /// changes no result).
    fn given(&self) -> Vec<&'static str> {
        [
            (self.model.is_some(), "-m/--model"),
            (self.preset.is_some(), "--preset"),
            (self.detector.is_some(), "--detector"),
            (self.max_keypoints.is_some(), "--max-keypoints"),
            (self.contrast_threshold.is_some(), "--contrast-threshold"),
            (self.selection.is_some(), "--selection"),
            (self.max_image_size.is_some(), "--max-image-size"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }

    /// A usage error when a flag above is given but every input is features already
    /// extracted (`made`: their set's identity, None when some input is an image).
    pub fn refuse_for_features(&self, made: Option<&SetIdentity>) -> anyhow::Result<()> {
        match made {
            Some(made) => descl::provenance::refuse_extraction_flags(&self.given(), made)
                .map_err(super::usage_error),
            None => Ok(()),
        }
    }

    /// The detector settings: the flags given, the rest from `defaults`.
    fn detector(&self, defaults: &DetectorConfig) -> DetectorConfig {
        DetectorConfig {
            kind: self.detector.unwrap_or(defaults.kind),
            max_keypoints: self.max_keypoints.unwrap_or(defaults.max_keypoints),
            contrast_threshold: self
                .contrast_threshold
                .unwrap_or(defaults.contrast_threshold),
            selection: self.selection.unwrap_or(defaults.selection),
            ..*defaults
        }
    }
}

/// Matching and verification of pairs.
#[derive(clap::Args, Debug, Clone)]
pub struct MatchArgs {
    /// Descriptor matcher.
    #[arg(long, value_enum, default_value_t = MatcherArg::Exact)]
    pub matcher: MatcherArg,
    /// Lowe's ratio threshold (Lowe 2004; hloc's default for learned descriptors).
    #[arg(long, default_value_t = LOWE_RATIO)]
    pub ratio: f32,
    /// Turn the ratio test off.
    #[arg(long)]
    pub no_ratio: bool,
    /// The ratio test in both directions, as COLMAP's cross-checked SIFT matcher makes it: B's
    /// descriptor must pass it against A's too (fewer, cleaner matches).
    #[arg(long, conflicts_with = "no_ratio")]
    pub ratio_both_ways: bool,
    /// Mutual nearest neighbours only (default on; --mutual false to turn off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub mutual: bool,
    /// Distance gate: keep matches with descriptor distance ≤ D (L2, or bits for binary). The
    /// default model's output offset shrinks distances: with a gate, use its network
    /// (`-m descl-hynet-sdgm-real25all-b1024`).
    #[arg(long, value_name = "D")]
    pub max_distance: Option<f32>,
    /// Binary descriptors: keep matches whose second-best is at least G bits worse (refused
    /// for float descriptors, whose distances are not bit counts).
    #[arg(long, value_name = "G")]
    pub min_gap: Option<f32>,
    /// Keep the K best matches.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Geometric verification model. `essential` needs both images' intrinsics (--intrinsics,
    /// a file, or an EXIF focal length); in descl sfm, pairs of an image whose focal length is
    /// only COLMAP's guess are verified with `fundamental` instead, as COLMAP does.
    #[arg(long, value_enum, default_value_t = GeometryArg::Fundamental)]
    pub geometry: GeometryArg,
    /// RANSAC (USAC MAGSAC) inlier threshold in pixels [default: 1; descl sfm: 4, COLMAP's
    /// two-view max_error, whose mapper re-estimates each initial pair at 4 px from the
    /// stored inliers].
    #[arg(long, value_name = "PX", value_parser = ransac_threshold_parser)]
    pub threshold: Option<f64>,
    /// RANSAC confidence, in (0, 1).
    #[arg(long, default_value_t = RansacConfig::default().confidence, value_parser = ransac_confidence_parser)]
    pub confidence: f64,
    /// RANSAC iteration cap (≥ 1).
    #[arg(long, default_value_t = RansacConfig::default().max_iters, value_parser = ransac_max_iters_parser)]
    pub max_iters: i32,
    /// Guided matching: search radius around the prediction (pixels).
    #[arg(long, default_value_t = GUIDED_RADIUS_PX, value_name = "PX")]
    pub guided_radius: f32,
    /// Fewest inliers for a pair to have a verified model (COLMAP's default).
    #[arg(long, default_value_t = COLMAP_MIN_NUM_INLIERS, value_name = "N")]
    pub min_inliers: usize,
}

impl MatchArgs {
    /// The validated pair settings, `default_threshold` when `--threshold` is not given
    /// (`descl match`'s 1 px, `RansacConfig::default`, or `descl sfm`'s 4 px).
    pub fn pair_config_with(&self, default_threshold: f64) -> anyhow::Result<PairConfig> {
        let cfg = PairConfig {
            matcher: self.matcher.into(),
            matching: MatchConfig {
                mutual: self.mutual,
                ratio: (!self.no_ratio).then_some(self.ratio),
                ratio_both_ways: self.ratio_both_ways,
                max_distance: self.max_distance,
                min_gap: self.min_gap,
                top_k: self.top_k,
            },
            geometry: self.geometry.model(),
            ransac: RansacConfig {
                threshold_px: self.threshold.unwrap_or(default_threshold),
                confidence: self.confidence,
                max_iters: self.max_iters,
                seed: 0,
            },
            guided_radius: self.guided_radius,
            min_inliers: self.min_inliers,
            planar_check: false,
        };
        cfg.check()?;
        Ok(cfg)
    }
}

/// Which pairs of a set to match (`descl match --images`, `descl sfm`, `descl pairs`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PairArgs {
    /// All pairs (the default of `descl sfm`).
    #[arg(long, conflicts_with_all = ["sequential", "pairs", "retrieval"])]
    pub exhaustive: bool,
    /// Each image with the next W (ordered captures, video); with --retrieval, retrieval adds
    /// the loop closures.
    #[arg(long, value_name = "W", conflicts_with = "pairs")]
    pub sequential: Option<usize>,
    /// Pairs file: `nameA nameB` per line (hloc's pairs.txt; either order, repeats ignored;
    /// image names find their features files by stem).
    #[arg(long, value_name = "FILE", conflicts_with = "retrieval")]
    pub pairs: Option<PathBuf>,
    /// Each image with its K most similar images (its own descriptors' residuals per visual
    /// word of a codebook learned on the set, compared by ASMK's selective kernel; see `descl
    /// pairs`).
    #[arg(long, value_name = "K")]
    pub retrieval: Option<usize>,
}

impl PairArgs {
    /// The chosen pairs; `default` when no flag is given (None: one is required).
    pub fn mode(&self, default: Option<PairMode>) -> anyhow::Result<PairMode> {
        let mut modes = Vec::new();
        if self.exhaustive {
            modes.push(PairMode::Exhaustive);
        }
        if let Some(w) = self.sequential {
            modes.push(PairMode::Sequential(w));
        }
        if let Some(p) = &self.pairs {
            modes.push(PairMode::File(p.clone()));
        }
        if let Some(k) = self.retrieval {
            anyhow::ensure!(k > 0, "--retrieval K needs K ≥ 1");
            modes.push(PairMode::Retrieval(k));
        }
        match modes.len() {
            0 => default.context(
                "choose the pairs: --exhaustive, --sequential W, --pairs FILE or --retrieval K",
            ),
            1 => Ok(modes.remove(0)),
            _ => Ok(PairMode::Union(modes)),
        }
    }
}

/// A number of type `T`, or a message saying `s` is not one.
fn number<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))
}

/// `--contrast-threshold`: checked as the detector checks it, when the flags are parsed (not
/// per image, after work).
pub fn contrast_threshold_parser(s: &str) -> Result<f32, String> {
    let v = number(s)?;
    DetectorConfig {
        contrast_threshold: v,
        ..DetectorConfig::default()
    }
    .check()
    .map(|_| v)
    .map_err(|e| e.to_string())
}

/// `--max-image-size`: checked as the pipeline checks it, when the flags are parsed (not per
/// image, after work).
pub fn max_image_size_parser(s: &str) -> Result<usize, String> {
    let v = number(s)?;
    check_max_image_size(v)
        .map(|_| v)
        .map_err(|e| e.to_string())
}

/// RANSAC's settings checked as verification checks them, when the flags are parsed (not per
/// pair, after the work): `--threshold`, `--confidence`, `--max-iters`.
fn ransac_check<T>(v: T, cfg: RansacConfig) -> Result<T, String> {
    cfg.check().map(|_| v).map_err(|e| e.to_string())
}

pub fn ransac_threshold_parser(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    ransac_check(
        v,
        RansacConfig {
            threshold_px: v,
            ..RansacConfig::default()
        },
    )
}

pub fn ransac_confidence_parser(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    ransac_check(
        v,
        RansacConfig {
            confidence: v,
            ..RansacConfig::default()
        },
    )
}

pub fn ransac_max_iters_parser(s: &str) -> Result<i32, String> {
    let v = number(s)?;
    ransac_check(
        v,
        RansacConfig {
            max_iters: v,
            ..RansacConfig::default()
        },
    )
}

/// `--shard I/N` (also `slurm/N`, `k8s/N`): parsed, the index read from the scheduler's
/// variable, checked.
pub fn shard_parser(spec: &str) -> Result<descl::shard::Shard, String> {
    descl::shard::Shard::parse(spec).map_err(|e| e.to_string())
}

/// Intrinsics given on the command line, for `descl match`.
#[derive(clap::Args, Debug, Clone)]
pub struct IntrinsicsArgs {
    /// Intrinsics for the essential matrix, both images: fx,fy,cx,cy.
    #[arg(long, value_name = "FX,FY,CX,CY", conflicts_with = "intrinsics_file")]
    pub intrinsics: Option<String>,
    /// Intrinsics from a file (JSON {fx,fy,cx,cy} or a 3×3 K), both images.
    #[arg(long, value_name = "FILE")]
    pub intrinsics_file: Option<PathBuf>,
}

impl IntrinsicsArgs {
    /// The intrinsics the flags give (same for every image), if any.
    pub fn given(&self) -> anyhow::Result<Option<Intrinsics>> {
        Ok(match (&self.intrinsics, &self.intrinsics_file) {
            (Some(s), _) => Some(Intrinsics::parse(s)?),
            (None, Some(p)) => Some(Intrinsics::from_file(p)?),
            (None, None) => None,
        })
    }
}

/// The image of a `descl match` input, read again after extraction (EXIF): the input itself
/// for an image; for features (a `.npz`, or an image of a `features.h5`) the image they record,
/// held to be the one they were extracted from ([`descl::provenance::check_image`]), None when
/// it is not there.
pub fn image_of(input: &Path, f: &Features) -> descl::Result<Option<PathBuf>> {
    if !is_features_input(input) {
        return Ok(Some(input.to_path_buf()));
    }
    let image = PathBuf::from(&f.meta.image);
    Ok(descl::provenance::check_image(&image, input, &f.meta)?
        .found()
        .then_some(image))
}

/// [`image_of`] for drawing on it: an image that is not there is an error naming it
/// ([`descl::provenance::require_image`]).
pub fn picture_of(input: &Path, f: &Features) -> descl::Result<PathBuf> {
    if !is_features_input(input) {
        return Ok(input.to_path_buf());
    }
    let image = PathBuf::from(&f.meta.image);
    descl::provenance::require_image(&image, input, &f.meta)?;
    Ok(image)
}

pub fn is_npz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

/// An input that names image `NAME` of a `features.h5` (`FILE.h5/NAME`, as [`set_inputs`] lists
/// them): the file and the name.
pub fn h5_input(path: &Path) -> Option<(PathBuf, String)> {
    let file = path
        .ancestors()
        .skip(1)
        .find(|a| a.extension().is_some_and(|e| e.eq_ignore_ascii_case("h5")) && a.is_file())?;
    let name = path.strip_prefix(file).ok()?.to_string_lossy().into_owned();
    Some((file.to_path_buf(), name))
}

/// Whether an input is features already extracted (a `.npz` or an image of a `features.h5`)
/// rather than an image.
pub fn is_features_input(path: &Path) -> bool {
    is_npz(path) || h5_input(path).is_some()
}

/// Camera knowledge for `descl match`: the flags' intrinsics, else EXIF of the image, else
/// none. Where an essential matrix is verified with the EXIF (`essential`), the features must
/// record the SHA-256 of their image: else nothing holds the EXIF read now to the picture they
/// are of, and shards of one plan read two cameras of one image after an EXIF edit (hostile
/// round of c619326, H-1).
pub fn match_camera(
    given: Option<Intrinsics>,
    essential: bool,
) -> impl Fn(&Path, &Features) -> descl::Result<CameraInfo> + Sync {
    move |input: &Path, f: &Features| {
        if let Some(k) = given {
            // As `sfm --camera-params` is checked: a principal point far outside or a focal
            // length of 1e30 gave "0 inliers" with exit 0 (hostile round of 4aa9455, F13).
            let (w, h) = (f.meta.image_width, f.meta.image_height);
            descl::io::cameras::check_pinhole(&k, w, h).map_err(|why| {
                descl::Error::InvalidInput(format!(
                    "{}: the intrinsics given ({k}) cannot be the camera of this {w}×{h} image: {why}",
                    input.display()
                ))
            })?;
            return Ok((given, true));
        }
        let recorded = f
            .meta
            .provenance
            .as_ref()
            .and_then(|p| p.image_sha256.as_deref());
        let exif = match image_of(input, f)? {
            Some(image) if essential && recorded.is_none() && is_features_input(input) => {
                return Err(descl::Error::InvalidInput(format!(
                    "{}: records no SHA-256 of its image {}, so that image's EXIF focal length cannot be held to the picture these features are of (features of an older descl, or made by hand): give the camera (--intrinsics or --intrinsics-file), or extract the images again",
                    input.display(),
                    image.display()
                )))
            }
            Some(image) => Intrinsics::from_exif_of(
                &image,
                f.meta.image_width,
                f.meta.image_height,
                recorded,
            )?,
            None => None,
        };
        Ok((exif, exif.is_some()))
    }
}

/// Features of an input: read from a `.npz`, or extracted (the describer opened on first use,
/// so matching features files never loads a model).
pub struct FeatureLoader<'a> {
    args: &'a DescribeArgs,
    extractor: std::sync::OnceLock<Result<Extractor, String>>,
}

impl<'a> FeatureLoader<'a> {
    pub fn new(args: &'a DescribeArgs) -> Self {
        FeatureLoader {
            args,
            extractor: std::sync::OnceLock::new(),
        }
    }

    /// The extractor of image inputs, made once (on first use).
    pub fn extractor(&self) -> descl::Result<&Extractor> {
        self.extractor
            .get_or_init(|| self.args.extractor().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| descl::Error::InvalidInput(e.clone()))
    }
}

impl Load for FeatureLoader<'_> {
    fn load(&self, path: &Path) -> descl::Result<Features> {
        if is_npz(path) {
            return descl::io::features::read_features(path);
        }
        if let Some((file, name)) = h5_input(path) {
            return h5::read_features(&file, &name);
        }
        self.extractor()?.extract(path)
    }

    /// A features file's recorded identity (its metadata alone is read).
    fn identity(&self, path: &Path) -> Option<descl::provenance::FeaturesId> {
        if let Some((file, name)) = h5_input(path) {
            return h5::features_identity(&file, &name);
        }
        is_npz(path)
            .then(|| descl::io::features::read_features_meta(path).ok()?.content)
            .flatten()
    }

    /// A features file's identity (recorded, else of its features loaded), or an image's
    /// content.
    fn input_id(&self, path: &Path) -> Option<String> {
        match is_features_input(path) {
            true => descl::image_set::features_input_id(self, path),
            false => descl::image_set::image_input_id(path),
        }
    }

    /// Images go through the extractor's pipeline; features files (or a model that fails to
    /// load, reported per input) in parallel blocks.
    fn load_each(
        &self,
        paths: &[PathBuf],
        progress: &dyn Progress,
        each: &mut dyn FnMut(usize, descl::Result<Features>),
    ) {
        match self.extractor() {
            Ok(x) if !paths.iter().any(|p| is_features_input(p)) => {
                x.load_each(paths, progress, each)
            }
            _ => load_in_blocks(self, paths, progress, each),
        }
    }
}

/// The inputs of a set and, when they are features files, the one identity of their set
/// ([`descl::provenance::set_identity`]).
pub struct InputSet {
    pub inputs: Vec<SetInput>,
    pub made: Option<SetIdentity>,
    /// The files read for the set (and its plan), as they were before the first read.
    pub read: descl::io::snapshot::Snapshot,
}

/// The one identity of features `inputs` (their paths and metadata) when every one is read
/// from a features file (refused when they mix models or settings), None when one is an image.
pub fn features_made(inputs: &[(&Path, &FeatureMeta)]) -> anyhow::Result<Option<SetIdentity>> {
    if !inputs.iter().all(|(p, _)| is_features_input(p)) {
        return Ok(None);
    }
    Ok(descl::provenance::set_identity(
        inputs.iter().copied(),
        None,
    )?)
}

/// The `.npz` features files of `dir` if it has any (in its folders too), else its images; for
/// a `features.h5` file, its images' features (`FILE.h5/NAME`, read without extracting again).
/// Features are held to the extract plan of their folder
/// ([`descl::io::plan::check_features_set`]: its settings and images; images of the plan
/// without features, or no plan and files without provenance, refused unless
/// `allow_partial`). Each input carries its image's name in the set (`a/0000.jpg`, [`descl::names`]): an image's path under `dir`, a features file's
/// recorded name, a `features.h5` group's; sorted by name.
pub fn set_inputs(dir: &Path, allow_partial: bool) -> anyhow::Result<InputSet> {
    if dir.is_file()
        && dir
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("h5"))
    {
        return h5_set_inputs(dir, allow_partial);
    }
    let npz = descl::io::npz_folder::npz_files(dir, false)?;
    if npz.is_empty() {
        let h5 = dir.join(descl::io::plan::HLOC_FEATURES_FILE);
        let inputs = match descl::image::image_inputs(dir) {
            Err(e) if h5.is_file() => anyhow::bail!(
                "{e}; it holds hloc's features.h5: give the file ({})",
                h5.display()
            ),
            images => images?,
        };
        let read = Snapshot::take(inputs.iter().map(|i: &SetInput| i.path.clone()))?;
        return Ok(InputSet {
            inputs,
            made: None,
            read,
        });
    }
    // A folder of both is ambiguous (features of an earlier run left in a subfolder would
    // silently stand for the whole set).
    let images = descl::names::folder_inputs(dir, &descl::image::has_image_extension)?;
    if let (Some(image), Some(features)) = (images.first(), npz.first()) {
        anyhow::bail!(
            "{}: holds both images ({}, …) and features files ({}, …); give the image folder or the features folder (`descl extract --out`), not one inside the other",
            dir.display(),
            image.path.display(),
            features.display()
        );
    }
    // Before the first read of a file or the plan (descl::io::snapshot).
    let plan = dir.join(descl::io::plan::EXTRACT_PLAN_FILE);
    let read = Snapshot::take(npz.iter().cloned().chain([plan]))?;
    let metas = npz
        .iter()
        .map(|p| descl::io::features::read_features_meta(p))
        .collect::<descl::Result<Vec<_>>>()?;
    let names: Vec<String> = metas.iter().map(FeatureMeta::set_name).collect();
    // Each recorded name is checked before it names anything (`../x.jpg` would leave the folder).
    let mut inputs: Vec<SetInput> = names
        .iter()
        .zip(&npz)
        .map(|(name, p)| SetInput::new(name.as_str(), p.as_path()))
        .collect::<descl::Result<_>>()?;
    // Two files recording one image (a features file copied over another's, two extractions
    // in subfolders) would pair an image with itself and repeat its pairs.
    descl::names::check_unique(&inputs)?;
    // One extraction: the folder's extract plan's settings and images (shards run with
    // another budget or model, two runs' files in one folder, an extraction killed before
    // its plan, or an extract shard not run yet would be matched as the set).
    let made = checked(descl::io::plan::check_features_set(
        dir,
        &planned(&names, &npz, &metas),
        allow_partial,
    )?);
    inputs.sort();
    Ok(InputSet { inputs, made, read })
}

/// The identity of a checked set, after saying when it was derived without a plan.
fn checked(set: descl::io::plan::CheckedSet) -> Option<SetIdentity> {
    if let Some(note) = &set.derived {
        eprintln!("warning: {note}");
    }
    set.made
}

/// The features files `files` of images `names` with their metadata, for the plan's check.
fn planned<'a>(
    names: &'a [String],
    files: &'a [PathBuf],
    metas: &'a [FeatureMeta],
) -> Vec<descl::io::plan::PlannedFeatures<'a>> {
    names
        .iter()
        .zip(files)
        .zip(metas)
        .map(|((name, file), meta)| descl::io::plan::PlannedFeatures { name, file, meta })
        .collect()
}

/// The images of a `features.h5` (`FILE.h5/NAME`), held to the extract plan beside it like
/// a features folder's ([`set_inputs`]).
fn h5_set_inputs(file: &Path, allow_partial: bool) -> anyhow::Result<InputSet> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let plan = dir.join(descl::io::plan::EXTRACT_PLAN_FILE);
    let read = Snapshot::take([file.to_path_buf(), plan])?;
    let names = h5::list_features(file)?;
    anyhow::ensure!(!names.is_empty(), "{}: no features", file.display());
    let metas = h5::read_features_metas(file, &names)?;
    let paths: Vec<PathBuf> = names.iter().map(|n| file.join(n)).collect();
    let inputs = names
        .iter()
        .zip(&paths)
        .map(|(n, path)| SetInput::new(n.as_str(), path.as_path()))
        .collect::<descl::Result<_>>()?;
    let made = checked(descl::io::plan::check_features_set(
        dir,
        &planned(&names, &paths, &metas),
        allow_partial,
    )?);
    Ok(InputSet { inputs, made, read })
}

/// Reading hloc's features.h5 back: with the cargo feature `h5`, descl's hloc reader; without
/// it, an error naming the file and the feature (this build has no libhdf5).
#[cfg(feature = "h5")]
mod h5 {
    pub use descl::io::hloc::{
        features_identity, list_features, read_features, read_features_metas,
    };
}

#[cfg(not(feature = "h5"))]
mod h5 {
    use descl::features::Features;
    use descl::provenance::FeaturesId;
    use std::path::Path;

    fn unavailable(file: &Path) -> descl::Error {
        descl::Error::InvalidInput(format!(
            "{}: reading hloc's features.h5 needs descl built with the cargo feature `h5` \
             (`cargo build --features h5`, or the bundle of scripts/bundle-bullseye); this build \
             leaves libhdf5 out",
            file.display()
        ))
    }

    pub fn read_features(file: &Path, _name: &str) -> descl::Result<Features> {
        Err(unavailable(file))
    }

    pub fn features_identity(_file: &Path, _name: &str) -> Option<FeaturesId> {
        None
    }

    pub fn list_features(file: &Path) -> descl::Result<Vec<String>> {
        Err(unavailable(file))
    }

    pub fn read_features_metas(
        file: &Path,
        _names: &[String],
    ) -> descl::Result<Vec<descl::features::FeatureMeta>> {
        Err(unavailable(file))
    }
}
