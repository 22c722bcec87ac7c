//! `descl bench`: the benchmarks of docs/BENCHMARKS.md for any number of methods in one run
//! (the suites themselves are `descl::eval::suite`).

use super::args::{DeviceArg, MapperArg};
use super::progress::Bar;
use anyhow::Context;
use clap::builder::TypedValueParser;
use descl::describe::{Describer, ROOTSIFT, SIFT};
use descl::eval::plot;
use descl::eval::reconstruction::{Peer, DEFAULT_SFM_RUNS};
use descl::eval::runner::BENCH_MAX_KEYPOINTS;
use descl::eval::suite::{self, BenchConfig, DataPaths, Suite};
use descl::io::atomic::write_bytes_atomic;
use descl::model::card::ModelCard;
use descl::model::DEFAULT_MODEL;
use descl::sfm::SFM_MAX_KEYPOINTS;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteArg {
    /// HPatches sequences + Oxford Affine: MMA at 1..10 px, homography accuracy.
    Sequences,
    /// The dev sequences' reference images against JPEG (quality 90..15) and blurred (σ 1..5 px)
    /// copies of themselves (identity homography) and against copies turned and magnified
    /// about the centre (×1.25 10° .. ×2.5 60°): MMA per family and level.
    Robustness,
    /// Oxford matching score and repeatability for DoG and Harris-Affine frames.
    MatchingScore,
    /// Relative pose on Strecha scenes: AUC at 5/10/20°, mAA@10.
    Pose,
    /// HPatches patches (hpatches-release layout): verification, matching, retrieval mAP.
    Hpatches,
    /// UBC PhotoTour: FPR at 95 % recall on the 100k pairs of each dataset.
    Phototour,
    /// Reconstruction of each Strecha scene (`descl sfm`'s mapper) against the ground-truth cameras,
    /// with pycolmap 4's and COLMAP's own SIFT pipelines in the same run (`--sfm-peer`).
    Sfm,
    /// Every suite whose data is present.
    All,
}

/// A same-run peer of the sfm suite (`descl::eval::reconstruction::Peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerArg {
    /// pycolmap 4's extract_features + match_exhaustive + incremental_mapping.
    Pycolmap,
    /// pycolmap 4's extract_features + match_exhaustive + global_mapping.
    PycolmapGlobal,
    /// colmap feature_extractor + exhaustive_matcher + mapper.
    Colmap,
}

impl From<PeerArg> for Peer {
    fn from(p: PeerArg) -> Peer {
        match p {
            PeerArg::Pycolmap => Peer::PycolmapIncremental,
            PeerArg::PycolmapGlobal => Peer::PycolmapGlobal,
            PeerArg::Colmap => Peer::Colmap,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Suites to run (default: sequences, robustness and pose, the dev data).
    #[arg(value_enum)]
    suites: Vec<SuiteArg>,
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
    /// Keypoints per image of the sfm suite, and COLMAP's features per image (its default).
    #[arg(long, default_value_t = SFM_MAX_KEYPOINTS)]
    sfm_max_keypoints: usize,
    /// Runs per pipeline and scene of the sfm suite: each row is the run with the median centre
    /// error (of an even count the better middle one: prefer odd counts), every run beside it. Each run is a whole
    /// pipeline seeded with its index: descl's verification draw and mapper, the peers' mapper.
    #[arg(long, default_value_t = DEFAULT_SFM_RUNS, value_parser = clap::value_parser!(u16).range(1..=100).map(usize::from))]
    sfm_runs: usize,
    /// The mapper of descl's side of the sfm suite (as `descl sfm --mapper`); COLMAP's own
    /// pipeline always maps with `colmap mapper`.
    #[arg(long, value_enum, default_value_t = super::sfm::DEFAULT_MAPPER)]
    sfm_mapper: MapperArg,
    /// A same-run peer of the sfm suite, repeatable: `pycolmap` (pycolmap 4's own SIFT pipeline
    /// with its incremental mapper), `pycolmap-global` (the same with its global mapper),
    /// `colmap` (the colmap CLI's pipeline). Default: all three, the pycolmap rows skipped with
    /// a note in the report where pycolmap cannot run ($DESCL_PYTHON or python3); a peer named
    /// here that cannot run is an error.
    #[arg(long = "sfm-peer", value_enum, value_name = "PEER")]
    sfm_peers: Vec<PeerArg>,
    /// Keep the sfm suite's databases and models in DIR/SCENE/METHOD (each must not exist
    /// yet), e.g. for `scripts/sfm-stage-errors`; without it they are temporary.
    #[arg(long, value_name = "DIR")]
    sfm_keep: Option<PathBuf>,
    /// Inference device.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    device: DeviceArg,
    /// Write every number as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown tables here (they are always printed to stdout).
    #[arg(long)]
    md: Option<PathBuf>,
    /// Write PNG plots (MMA vs threshold, MMA@3 per robustness level, UBC ROC) into this folder.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Write this run's numbers into the `metrics` of every benchmarked model's card
    /// (its suites' entries are replaced, others kept).
    #[arg(long)]
    record: bool,
}

impl Args {
    /// Refuses data folders that are not there before any work: a folder flag given (`--data`,
    /// `--oxford`, …) or `$DESCL_DATA` set must name a folder, for `all` too (which skips only
    /// the suites whose folder under the data root is absent), and `all` needs some data.
    /// Otherwise a run reads nothing and exits 0 with an empty report.
    fn check_data_folders(&self) -> anyhow::Result<()> {
        // `$DESCL_DATA` is the data root when `--data` is not given.
        let env = std::env::var_os(descl::data::DATA_ENV)
            .map(PathBuf::from)
            .filter(|_| self.data.is_none());
        let env_name = format!("${}", descl::data::DATA_ENV);
        let given = [
            ("--data", &self.data, "every suite"),
            (env_name.as_str(), &env, "every suite"),
            (
                "--oxford",
                &self.oxford,
                "the sequences, robustness and matching-score suites",
            ),
            (
                "--hpatches-sequences",
                &self.hpatches_sequences,
                "the sequences and robustness suites",
            ),
            ("--strecha", &self.strecha, "the pose and sfm suites"),
            (
                "--hpatches-patches",
                &self.hpatches_patches,
                "the hpatches suite",
            ),
            (
                "--hpatches-tasks",
                &self.hpatches_tasks,
                "the hpatches suite",
            ),
            ("--phototour", &self.phototour, "the phototour suite"),
        ];
        for (flag, dir, suites) in &given {
            let Some(d) = dir else { continue };
            if !d.is_dir() {
                let what = if d.exists() {
                    "not a folder"
                } else {
                    "no such folder"
                };
                anyhow::bail!("{flag} {}: {what} (the data of {suites})", d.display());
            }
        }
        self.check_outputs_outside(given.iter().filter_map(|(_, dir, _)| dir.as_deref()))?;
        let any_given = given.iter().any(|(_, dir, _)| dir.is_some());
        if self.suites.contains(&SuiteArg::All) && !any_given && descl::data::data_root().is_none()
        {
            anyhow::bail!(
                "bench all: no data: there is no data root (${} or ../shared/data); give --data DIR or the suites' folders",
                descl::data::DATA_ENV
            );
        }
        Ok(())
    }

    /// Refuses a report (`--json`, `--md`) or `--plots` folder inside a data folder (`given`,
    /// and the default data root, which holds the same data): it would write over or among the benchmark's own files (a
    /// report over an HPatches `H_1_2` or an Oxford image, issue 55).
    fn check_outputs_outside<'a>(
        &self,
        given: impl Iterator<Item = &'a Path>,
    ) -> anyhow::Result<()> {
        let root = descl::data::data_root();
        let data: Vec<PathBuf> = given
            .map(Path::to_path_buf)
            .chain(root)
            .filter_map(|d| d.canonicalize().ok())
            .collect();
        let outputs = [
            ("--json", self.json.as_deref()),
            ("--md", self.md.as_deref()),
            ("--plots", self.plots.as_deref()),
            ("--sfm-keep", self.sfm_keep.as_deref()),
        ];
        for (flag, out) in outputs {
            let Some(out) = out else { continue };
            let resolved = descl::io::atomic::resolved_path(out);
            if let Some(d) = data.iter().find(|d| resolved.starts_with(d)) {
                anyhow::bail!(
                    "{flag} {}: inside the benchmark data folder {}; an output written there could replace the data, so choose a path outside it",
                    out.display(),
                    d.display()
                );
            }
            // The two folder outputs: an existing file there (`--plots /dev/null`) failed at
            // the end of the run with "File exists (os error 17)".
            let folder = matches!(flag, "--plots" | "--sfm-keep");
            if folder && out.exists() && !out.is_dir() {
                anyhow::bail!(
                    "{flag} {}: not a folder ({flag} names a folder to write into); choose a folder",
                    out.display()
                );
            }
        }
        Ok(())
    }

    fn config(&self) -> BenchConfig {
        let all = self.suites.contains(&SuiteArg::All);
        let suites = match &self.suites[..] {
            [] => vec![Suite::Sequences, Suite::Robustness, Suite::Pose],
            _ if all => vec![
                Suite::Sequences,
                Suite::Robustness,
                Suite::MatchingScore,
                Suite::Pose,
                Suite::Hpatches,
                Suite::Phototour,
                Suite::Sfm,
            ],
            given => given
                .iter()
                .filter_map(|s| match s {
                    SuiteArg::Sequences => Some(Suite::Sequences),
                    SuiteArg::Robustness => Some(Suite::Robustness),
                    SuiteArg::MatchingScore => Some(Suite::MatchingScore),
                    SuiteArg::Pose => Some(Suite::Pose),
                    SuiteArg::Hpatches => Some(Suite::Hpatches),
                    SuiteArg::Phototour => Some(Suite::Phototour),
                    SuiteArg::Sfm => Some(Suite::Sfm),
                    SuiteArg::All => None,
                })
                .collect(),
        };
        let root = self.data.clone().or_else(descl::data::data_root);
        let d = root.as_deref().map(DataPaths::under).unwrap_or_default();
        let pick = |flag: &Option<PathBuf>, default: Option<PathBuf>| flag.clone().or(default);
        BenchConfig {
            suites,
            skip_missing: all,
            data: DataPaths {
                hpatches_sequences: pick(&self.hpatches_sequences, d.hpatches_sequences),
                oxford: pick(&self.oxford, d.oxford),
                strecha: pick(&self.strecha, d.strecha),
                hpatches_patches: pick(&self.hpatches_patches, d.hpatches_patches),
                hpatches_tasks: pick(&self.hpatches_tasks, d.hpatches_tasks),
                phototour: pick(&self.phototour, d.phototour),
            },
            split: self.split.clone(),
            max_keypoints: self.max_keypoints,
            sfm_max_keypoints: self.sfm_max_keypoints,
            sfm_runs: self.sfm_runs,
            sfm_mapper: self.sfm_mapper.into(),
            sfm_keep: self.sfm_keep.clone(),
            sfm_peers: (!self.sfm_peers.is_empty()).then(|| {
                let mut peers: Vec<Peer> = Vec::new();
                for p in self.sfm_peers.iter().map(|&p| Peer::from(p)) {
                    if !peers.contains(&p) {
                        peers.push(p);
                    }
                }
                peers
            }),
            // `descl` rather than argv[0]: the command is for people to re-run.
            command: std::iter::once("descl".to_string())
                .chain(std::env::args().skip(1))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Before any work: a report inside the data first (the more telling message), then a
    // benchmark must not fail at its end for its report.
    args.check_data_folders()?;
    let outputs: Vec<(&str, &Path)> = [
        ("--json", args.json.as_deref()),
        ("--md", args.md.as_deref()),
        ("--plots", args.plots.as_deref()),
        ("--sfm-keep", args.sfm_keep.as_deref()),
    ]
    .into_iter()
    .filter_map(|(flag, p)| p.map(|p| (flag, p)))
    .collect();
    descl::io::atomic::check_distinct_outputs(&outputs)?;
    use descl::io::atomic::OutputKind;
    for (p, kind) in [
        (&args.json, OutputKind::JsonReport),
        (&args.md, OutputKind::MarkdownReport),
    ] {
        if let Some(p) = p {
            descl::io::atomic::check_writable(p, kind)?;
        }
    }
    let cfg = args.config();
    let specs = if args.methods.is_empty() {
        vec![
            SIFT.to_string(),
            ROOTSIFT.to_string(),
            DEFAULT_MODEL.to_string(),
        ]
    } else {
        args.methods.clone()
    };
    let methods = specs
        .iter()
        .map(|s| Describer::open(s, args.device.into()).with_context(|| format!("method `{s}`")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let report = suite::run(&cfg, &methods, &Bar::new(true))?;
    let md = report.markdown();
    outln!("{md}");
    if let Some(p) = &args.md {
        write_bytes_atomic(p, md.as_bytes())?;
    }
    if let Some(p) = &args.json {
        write_bytes_atomic(p, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    if args.record {
        for m in &methods {
            let Some(card_path) = m.card_path() else {
                continue;
            };
            let mut card = ModelCard::load(card_path)?;
            card.metrics.extend(report.card_metrics(m.name()));
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
