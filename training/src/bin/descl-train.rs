//! `descl-train`: train a descriptor network from a JSON run config, export weights to ONNX,
//! or read a descl-exported ONNX file's weights back.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use descl_training::data::colmap::ColmapTracksConfig;
use descl_training::net::{Arch, Net};
use descl_training::train::TrackSource;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "descl-train",
    version,
    about = "Train descl descriptor networks and export them to ONNX"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The network a weights file holds (or a random one is made as).
#[derive(Args)]
struct NetArgs {
    /// tfeat | l2net | hynet
    #[arg(long)]
    arch: String,
    /// Channel multiplier the weights were trained with.
    #[arg(long, default_value_t = 1.0)]
    width: f64,
    /// Binary head of this many bits (absent: float descriptors).
    #[arg(long)]
    bits: Option<i64>,
}

/// Batch sizes and time per batch size of a throughput measurement.
#[derive(Args)]
struct TimingArgs {
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096")]
    batch: Vec<usize>,
    /// Seconds timed per batch size.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

#[derive(Subcommand)]
enum Command {
    /// Train (or resume) the run described by a JSON config.
    Train {
        #[arg(long)]
        config: PathBuf,
        /// Continue from the output folder's last checkpoint.
        #[arg(long)]
        resume: bool,
        /// Start from these weights (e.g. models/NAME.safetensors) instead of a random
        /// initialisation; overrides the config's `init`. A checkpoint found by --resume wins.
        #[arg(long, value_name = "SAFETENSORS")]
        init: Option<PathBuf>,
        /// Train on this device instead of the config's (cpu | cuda | cuda:N), e.g. to finish
        /// or continue a GPU run's checkpoint on a CPU; the card lists every device that ran
        /// steps.
        #[arg(long)]
        device: Option<String>,
        /// Stop at the last checkpoint: export its weights (ONNX, safetensors, card with
        /// `training.iterations_completed`) without further steps. For a run whose machine
        /// went away before the end; `--resume` can still continue it later.
        #[arg(long, requires = "resume")]
        finish: bool,
    },
    /// Generate (or regenerate) track files without training: every generated source of a run
    /// config, or the real tracks of a COLMAP reconstruction (`--from-colmap`).
    Tracks {
        /// Regenerate every source of this run config that has a generator.
        #[arg(
            long,
            required_unless_present = "from_colmap",
            conflicts_with = "from_colmap"
        )]
        config: Option<PathBuf>,
        /// Sparse model folder (cameras.bin, images.bin, points3D.bin) of a reconstruction.
        #[arg(long, value_name = "SPARSE", requires_all = ["database", "images", "out"])]
        from_colmap: Option<PathBuf>,
        /// The COLMAP database the model was reconstructed from.
        #[arg(long, value_name = "DB")]
        database: Option<PathBuf>,
        /// Folder the database's image names are relative to.
        #[arg(long, value_name = "DIR")]
        images: Option<PathBuf>,
        /// Track file to write.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Views per class (3D points seen in fewer distinct images are left out).
        #[arg(long, default_value_t = 3)]
        views: usize,
        /// Largest mean reprojection error of a kept point (pixels).
        #[arg(long, default_value_t = 1.0)]
        max_reprojection_error: f64,
        /// Magnification the patches are cut at (the trained model's).
        #[arg(long, default_value_t = descl_training::data::colmap::DESCL_DATABASE_MAGNIFICATION)]
        magnification: f64,
        /// Magnification of the stored keypoint shapes: 6 for `descl sfm` databases of the
        /// shipped models, 1 for COLMAP's own SIFT extractor.
        #[arg(long, default_value_t = descl_training::data::colmap::DESCL_DATABASE_MAGNIFICATION)]
        stored_magnification: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    #[cfg(feature = "tracks")]
    /// Compare training methods over seeds from a `descl bench sequences pose --json` report:
    /// mean ± sd per method and an exact one-sided Mann-Whitney test (MMA@3) against the first.
    Compare {
        #[arg(long)]
        bench: PathBuf,
        /// `METHOD=model,model,...` (the models' names in the report), repeatable; the first is
        /// the baseline.
        #[arg(long = "method", required = true)]
        methods: Vec<String>,
        /// Also write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Export a safetensors state dict to ONNX (input "patches" N×1×32×32, output "descriptors",
    /// preprocessing in the metadata). With --card, the card's model is re-exported: its
    /// magnification is used, its output must be the net's, and its sha256 is updated.
    Export {
        #[arg(long)]
        weights: PathBuf,
        #[command(flatten)]
        net: NetArgs,
        /// Measurement-region magnification the model's patches are cut at (metadata
        /// `patch_mr`); default: the card's with --card, else descl's default (6).
        #[arg(long)]
        magnification: Option<f64>,
        /// Model card of the exported file: checked against the net, its sha256 rewritten.
        #[arg(long, value_name = "JSON")]
        card: Option<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
    /// Inference throughput under libtorch (patches/s per batch size, f32 or f16 on CUDA) of a
    /// network, random or `--weights`; one JSON line per batch size.
    Throughput {
        #[command(flatten)]
        net: NetArgs,
        /// Trained weights (safetensors); default: a random initialisation (same cost).
        #[arg(long)]
        weights: Option<PathBuf>,
        /// cpu | cuda | cuda:N
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Half precision (f16 weights and input; the patch normalisation's statistics in f32).
        #[arg(long)]
        half: bool,
        #[command(flatten)]
        timing: TimingArgs,
    },
    /// Inference throughput of an ONNX model under descl's ONNX Runtime engine (what `descl
    /// extract` describes with; the library `$ORT_DYLIB_PATH` or the set-up's): patches/s per
    /// batch size, one JSON line each. `--device cuda` needs a library with the CUDA provider
    /// (the `onnxruntime-gpu` wheel's).
    ThroughputOnnx {
        /// A shipped model's name or an .onnx path.
        #[arg(long)]
        model: String,
        /// cpu | cuda | auto
        #[arg(long, default_value = "cpu")]
        device: String,
        #[command(flatten)]
        timing: TimingArgs,
    },
    /// Write every K-th class of a track file (classes 0, K, 2K, …) to a new one, e.g. to carry
    /// a uniform share of a large file to a GPU host; its header records the original's
    /// generator, class count and sha256. A run config names the subset as a source without a
    /// generator.
    Subset {
        /// Track file to take classes from.
        #[arg(long, value_name = "FILE")]
        tracks: PathBuf,
        /// Keep every K-th class.
        #[arg(long, value_name = "K")]
        every: usize,
        /// Track file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Score models on a run config's validation sets (its held-out scenes, as a run scores
    /// itself while training): NN accuracy and FPR95 per model, one JSON line each. For
    /// choosing between finished runs on scenes none of them trained on.
    Validate {
        /// Run config whose validation sets are used (`validation_only` sources, cut to
        /// `data.validation` classes each).
        #[arg(long)]
        config: PathBuf,
        /// A shipped model's name, a card or an .onnx file with its card beside it
        /// (repeatable; the card's `architecture` names the network and width).
        #[arg(long = "model", required = true)]
        models: Vec<String>,
        /// Also write each model's numbers, the sets' identities and the same run's peers into
        /// its card's `metrics` (`held-out-validation`), as `descl bench --record` does.
        #[arg(long)]
        record: bool,
    },
    /// Average runs of one recipe fine-tuned from one model into one network (a uniform model
    /// soup, Wortsman et al. 2022): the ingredients' cards are checked (network, output, patch,
    /// initialisation, recipe, source mix, scenes, a finished schedule), then NAME.safetensors,
    /// NAME.onnx and NAME.json are written to --install; with --config, the soup and every
    /// ingredient are scored on its validation sets and the numbers go into the soup's card.
    Soup {
        /// The soup's model name.
        #[arg(long)]
        name: String,
        /// A shipped model's name, a card or an .onnx file with its card beside it
        /// (repeat for each ingredient, at least two).
        #[arg(long = "ingredient", required = true)]
        ingredients: Vec<String>,
        /// Folder the soup is written to (default: training/runs/NAME, beside the runs; a
        /// model in models/ needs its `descl bench --record` numbers). Files of that name
        /// already there are refused, not replaced.
        #[arg(long)]
        install: Option<PathBuf>,
        /// Run config whose validation sets score the soup and its ingredients.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Give a float model an output offset: its unit descriptors d become
    /// (d + s·ū)/‖d + s·ū‖, ū the direction of the mean descriptor of the frames `descl
    /// extract` finds in photos of the config's training sources (no held-out scene),
    /// s = --scale. The network's weights are unchanged; NAME.safetensors, NAME.onnx and
    /// NAME.json are written to --install, the card naming the network (`training.init`), the
    /// patches and the rule; the new model and the network are scored on the config's
    /// validation sets. Why: docs/BENCHMARKS.md, "An output offset".
    Offset {
        /// The new model's name.
        #[arg(long)]
        name: String,
        /// The float model to offset: a shipped model's name, a card or an .onnx file with its
        /// card beside it, with its weights (`.safetensors`) beside the `.onnx`.
        #[arg(long)]
        model: String,
        /// Run config whose training sources' photos give the mean descriptor and whose
        /// validation sets score the result (a config that holds out no scene is refused).
        #[arg(long)]
        config: PathBuf,
        /// ‖offset‖ (a unit descriptor has length 1).
        #[arg(long, default_value_t = descl_training::offset::OFFSET_SCALE)]
        scale: f64,
        /// Folder the model is written to (default: training/runs/NAME). Files of that name
        /// already there are refused, not replaced.
        #[arg(long)]
        install: Option<PathBuf>,
    },
    /// Read the weights of a descl-exported ONNX file back into a safetensors state dict (the
    /// inverse of `export`; float or binary as the graph says), e.g. to fine-tune a shipped model.
    ImportOnnx {
        /// tfeat | l2net | hynet
        #[arg(long)]
        arch: String,
        /// Channel multiplier the model was trained with.
        #[arg(long, default_value_t = 1.0)]
        width: f64,
        #[arg(long)]
        onnx: PathBuf,
        /// Safetensors file to write.
        #[arg(long)]
        out: PathBuf,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train {
            config,
            resume,
            init,
            device,
            finish,
        } => {
            let mut cfg = descl_training::train::RunConfig::load(&config)?;
            if init.is_some() {
                cfg.init = init;
            }
            if let Some(device) = device {
                cfg.device = device;
            }
            let summary = if finish {
                descl_training::train::finish_at_checkpoint(&cfg)?
            } else {
                descl_training::train::train(&cfg, resume)?
            };
            println!("{}", serde_json::to_string_pretty(&summary)?);
        }
        Command::Tracks {
            config,
            from_colmap,
            database,
            images,
            out,
            views,
            max_reprojection_error,
            magnification,
            stored_magnification,
            seed,
        } => {
            let jobs = match (config, from_colmap, database, images, out) {
                (Some(config), ..) => {
                    let cfg = descl_training::train::RunConfig::load(&config)?;
                    cfg.data.all_sources()?
                }
                (None, Some(sparse), Some(database), Some(images), Some(out)) => {
                    vec![TrackSource {
                        tracks: out,
                        synthetic: None,
                        colmap: Some(ColmapTracksConfig {
                            sparse,
                            database,
                            images,
                            views,
                            max_reprojection_error,
                            stored_magnification,
                            magnification,
                            seed,
                            jitter: None,
                        }),
                        weight: 1.0,
                        validation_only: false,
                        scenes: Vec::new(),
                    }]
                }
                _ => anyhow::bail!(
                    "tracks needs --config, or --from-colmap with --database, --images and --out"
                ),
            };
            for job in jobs {
                let set = match (&job.synthetic, &job.colmap) {
                    (Some(s), None) => descl_training::data::synthetic::generate(s)?,
                    (None, Some(c)) => descl_training::data::colmap::generate(c)?,
                    _ => {
                        eprintln!("{}: no generator, kept as it is", job.tracks.display());
                        continue;
                    }
                };
                if let Some(dir) = job.tracks.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("{}: cannot create folder", dir.display()))?;
                }
                set.save(&job.tracks)?;
                println!(
                    "{}",
                    serde_json::json!({"tracks": job.tracks, "classes": set.header.classes,
                        "views": set.header.views, "magnification": set.header.magnification,
                        "stats": set.header.source.get("stats")})
                );
            }
        }
        #[cfg(feature = "tracks")]
        Command::Compare {
            bench,
            methods,
            json,
        } => {
            let report = descl_training::compare::read_report(&bench)?;
            let groups = methods
                .iter()
                .map(|g| {
                    let (name, models) = g
                        .split_once('=')
                        .with_context(|| format!("--method {g:?}: expected METHOD=model,model"))?;
                    Ok((
                        name.to_string(),
                        models.split(',').map(str::to_string).collect(),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let rows = descl_training::compare::compare(&report, &bench, &groups)?;
            print!("{}", descl_training::compare::markdown(&rows));
            if let Some(path) = json {
                descl::io::atomic::write_bytes_atomic(
                    &path,
                    serde_json::to_string_pretty(&rows)?.as_bytes(),
                )?;
            }
        }
        Command::Export {
            weights,
            net: NetArgs { arch, width, bits },
            magnification,
            card,
            out,
        } => {
            let arch = Arch::parse(&arch)?;
            let net = Net::load_as(arch, width, bits, &weights, tch::Device::Cpu)?;
            export(&net, &weights, magnification, card.as_deref(), &out)?;
        }
        Command::Throughput {
            net: NetArgs { arch, width, bits },
            weights,
            device,
            half,
            timing: TimingArgs { batch, seconds },
        } => {
            let arch = Arch::parse(&arch)?;
            let device = descl_training::train::parse_device(&device)?;
            let mut net = match (&weights, bits) {
                (Some(w), _) => Net::load_as(arch, width, bits, w, device)?,
                (None, Some(b)) => Net::new_binary(arch, width, b, device)?,
                (None, None) => Net::new(arch, width, device)?,
            };
            for row in descl_training::throughput::measure(&mut net, device, &batch, half, seconds)?
            {
                println!(
                    "{}",
                    serde_json::json!({"arch": arch.name(), "width": width, "bits": bits,
                        "device": format!("{device:?}"), "row": row})
                );
            }
        }
        Command::ThroughputOnnx {
            model,
            device,
            timing: TimingArgs { batch, seconds },
        } => {
            let resolved = descl::model::resolve(&model)?;
            let device: descl::model::Device = device.parse()?;
            let engine = descl::model::Engine::load_resolved(&resolved, device)?;
            for row in descl_training::throughput::measure_onnx(&engine, &batch, seconds)? {
                println!(
                    "{}",
                    serde_json::json!({"model": resolved.onnx, "runtime": "onnxruntime",
                        "device": engine.device().to_string(), "row": row})
                );
            }
        }
        Command::ImportOnnx {
            arch,
            width,
            onnx,
            out,
        } => {
            let net = descl_training::onnx::import(&onnx, Arch::parse(&arch)?, width)?;
            net.save(&out)?;
            println!(
                "{}",
                serde_json::json!({"weights": out, "from": onnx, "net": net.describe()})
            );
        }
        Command::Validate {
            config,
            models,
            record,
        } => validate(&config, &models, record)?,
        Command::Soup {
            name,
            ingredients,
            install,
            config,
        } => {
            let install = install.unwrap_or_else(|| Path::new("training/runs").join(&name));
            soup(&name, &ingredients, &install, config.as_deref())?
        }
        Command::Offset {
            name,
            model,
            config,
            scale,
            install,
        } => {
            let install = install.unwrap_or_else(|| Path::new("training/runs").join(&name));
            offset(&name, &model, &config, scale, &install)?
        }
        Command::Subset { tracks, every, out } => {
            if matches!((tracks.canonicalize(), out.canonicalize()), (Ok(a), Ok(b)) if a == b) {
                anyhow::bail!("{}: a subset is written to another file", out.display());
            }
            let set = descl_training::data::TrackSet::load(&tracks)?;
            let sha = descl::model::card::sha256_file(&tracks)?;
            let sub = set.every_nth(every, &sha)?;
            sub.save(&out)?;
            println!(
                "{}",
                serde_json::json!({"tracks": out, "classes": sub.header.classes,
                    "of": tracks, "of_classes": set.header.classes, "every": every})
            );
        }
    }
    Ok(())
}

/// Metric name under which `descl-train validate --record` files its numbers in model cards.
const CARD_VALIDATION: &str = "held-out-validation";

/// A run config's validation sets, with the scenes they hold out.
struct HeldOut {
    config: PathBuf,
    validation: descl_training::train::Validation,
    scenes: Vec<String>,
}

impl HeldOut {
    /// The config's held-out sets; their scenes are those the sources declare and those the
    /// track files' records show (a misspelt declaration does not hide a scene).
    fn load(config: &Path) -> Result<HeldOut> {
        let cfg = descl_training::train::RunConfig::load(config)?;
        let sources = cfg.data.all_sources()?;
        if let Some(s) = sources
            .iter()
            .find(|s| s.validation_only && s.scenes.is_empty())
        {
            bail!(
                "{}: held-out source {} names no scene, so no model can be checked against it",
                config.display(),
                s.tracks.display()
            );
        }
        // At least one set: `validation_of` refuses a config that holds out no scene.
        let validation = descl_training::train::validation_of(&cfg.data)?;
        let mut scenes: Vec<String> = sources
            .iter()
            .filter(|s| s.validation_only)
            .flat_map(|s| s.scenes.iter().map(|x| x.scene.clone()))
            .collect();
        for set in &validation.sets {
            let recorded =
                descl_training::lineage::recorded_scenes(&set.header.source, Path::new("."));
            scenes.extend(recorded.into_iter().flatten());
        }
        scenes.sort();
        scenes.dedup();
        Ok(HeldOut {
            config: config.to_path_buf(),
            validation,
            scenes,
        })
    }

    /// Refuses a model whose patches are cut at another magnification, or that saw a scene
    /// these sets hold out (itself or up its `init` lineage, [`descl_training::lineage`]), or
    /// whose lineage cannot be told: its number would be no validation at all.
    fn check(&self, model: &CardedNet) -> Result<()> {
        let name = &model.card.name;
        for set in &self.validation.sets {
            let m = set.header.magnification;
            if (m - f64::from(model.card.patch.magnification)).abs() > 1e-6 {
                bail!(
                    "{name}: cut at magnification {}, the validation tracks at {m}",
                    model.card.patch.magnification
                );
            }
        }
        // Every scene the model and the models it was fine-tuned from trained on. Recorded
        // paths are relative to the folder the runs ran in: the working directory, else the
        // folder above the card's `models/`.
        let repository = model
            .card_path
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let lineage = |base: &Path| {
            descl_training::lineage::trained_scenes(&model.card, &model.card_path, base)
        };
        let trained = lineage(Path::new("."))
            .or_else(|first| lineage(repository).map_err(|_| first))
            .with_context(|| {
                format!(
                    "{name}: which scenes it saw cannot be told, so it cannot be scored on the \
                 scenes {} holds out",
                    self.config.display()
                )
            })?;
        let seen: Vec<&str> = self
            .scenes
            .iter()
            .filter(|h| trained.contains(h.as_str()))
            .map(String::as_str)
            .collect();
        if !seen.is_empty() {
            bail!(
                "{name}: trained on {}, which {} holds out for validation",
                seen.join(", "),
                self.config.display()
            );
        }
        Ok(())
    }

    /// [`HeldOut::check`], then [`HeldOut::evaluate`].
    fn score(&self, model: &CardedNet) -> Result<descl_training::train::ValidationScore> {
        self.check(model)?;
        self.evaluate(model)
    }

    /// The model's validation numbers on these sets, for a model [`HeldOut::check`] passed.
    fn evaluate(&self, model: &CardedNet) -> Result<descl_training::train::ValidationScore> {
        self.validation
            .evaluate(&model.net, tch::Device::Cpu)?
            .with_context(|| format!("{}: no validation set has 2 classes", self.config.display()))
    }
}

/// `descl-train validate`: one JSON line per model; with `record`, each card's `metrics` gets
/// the numbers with the sets and the same run's peers. Every model is loaded and checked
/// before any is scored, and no card is written unless all were scored.
fn validate(config: &Path, models: &[String], record: bool) -> Result<()> {
    let held = HeldOut::load(config)?;
    let loaded = models
        .iter()
        .map(|m| CardedNet::load(m))
        .collect::<Result<Vec<_>>>()?;
    for (i, m) in loaded.iter().enumerate() {
        // Peers are named in the cards: one name, one model.
        if let Some(other) = loaded[..i]
            .iter()
            .find(|o| same_file(&o.card_path, &m.card_path) || o.card.name == m.card.name)
        {
            bail!(
                "{} is given twice, or two models share that name ({} and {})",
                m.card.name,
                other.card_path.display(),
                m.card_path.display()
            );
        }
    }
    for model in &loaded {
        held.check(model)?;
    }
    let mut scores = Vec::with_capacity(loaded.len());
    for model in &loaded {
        let score = held.evaluate(model)?;
        println!(
            "{}",
            serde_json::json!({"model": model.card.name, "onnx": model.onnx,
                "sha256": model.card.sha256, "config": config,
                "validation": held.validation.record(Some(score))})
        );
        scores.push(score);
    }
    if !record {
        return Ok(());
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // Every card is made and checked before the first is written.
    let mut cards = Vec::with_capacity(loaded.len());
    for (model, score) in loaded.iter().zip(&scores) {
        let mut entry = held.validation.record(Some(*score));
        entry["command"] = command.clone().into();
        entry["config"] = config.display().to_string().into();
        let peers: serde_json::Map<String, serde_json::Value> = loaded
            .iter()
            .zip(&scores)
            .filter(|(m, _)| m.card.name != model.card.name)
            .map(|(m, s)| (m.card.name.clone(), s.nn_accuracy.into()))
            .collect();
        entry["same_run_nn_accuracy"] = peers.into();
        let mut card = model.card.clone();
        card.metrics.insert(CARD_VALIDATION.into(), entry);
        card.validate()
            .map_err(|why| anyhow::anyhow!("{}: {why}", model.card_path.display()))?;
        cards.push((card, &model.card_path));
    }
    for (card, path) in cards {
        card.save(path)?;
        eprintln!("{}: {CARD_VALIDATION} recorded", path.display());
    }
    Ok(())
}

/// Whether two paths name one file (both exist: they are cards just read).
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// `descl-train soup`: see the subcommand's help and [`descl_training::soup`]. Nothing is
/// written until the ingredients are checked and scored; files of the soup's name already in
/// `install` are refused; the card is written last, and a failure on the way removes what this
/// call wrote.
fn soup(name: &str, ingredients: &[String], install: &Path, config: Option<&Path>) -> Result<()> {
    use descl_training::soup;
    descl_training::train::check_model_name(name)?;
    let loaded = ingredients
        .iter()
        .map(|m| CardedNet::load(m))
        .collect::<Result<Vec<_>>>()?;
    let cards: Vec<_> = loaded.iter().map(|c| c.card.clone()).collect();
    soup::check_ingredients(&cards)?;
    if cards.iter().any(|c| c.name == name) {
        bail!("--name {name}: an ingredient's name; a soup is a new model");
    }
    let weights = install.join(format!("{name}.safetensors"));
    let onnx = install.join(format!("{name}.onnx"));
    let card_path = install.join(format!("{name}.json"));
    if let Some(taken) = [&weights, &onnx, &card_path]
        .into_iter()
        .find(|p| p.exists())
    {
        bail!(
            "{}: already there; a soup is a new model (another --name or --install)",
            taken.display()
        );
    }
    let nets: Vec<&Net> = loaded.iter().map(|c| &c.net).collect();
    let commit = descl_training::train::code_commit();
    let mut made = CardedNet {
        net: soup::average(&nets)?,
        card: soup::card(name, &cards, commit.as_deref())?,
        onnx: PathBuf::new(),
        card_path: PathBuf::new(),
    };
    if let Some(config) = config {
        let held = HeldOut::load(config)?;
        let s = held.score(&made)?;
        let mut record = held.validation.record(Some(s));
        record["config"] = config.display().to_string().into();
        // The ingredients on the same sets: the only numbers the soup's compare with.
        let mut same_sets = Vec::with_capacity(loaded.len());
        for model in &loaded {
            let v = held.score(model)?;
            same_sets.push(serde_json::json!({"name": model.card.name,
                "sha256": model.card.sha256, "nn_accuracy": v.nn_accuracy, "fpr95": v.fpr95}));
        }
        record["ingredients"] = same_sets.into();
        let t = &mut made.card.training;
        t.insert("validation_nn_accuracy".into(), s.nn_accuracy.into());
        t.insert("validation".into(), record);
    }
    let CardedNet { net, mut card, .. } = made;
    std::fs::create_dir_all(install)
        .with_context(|| format!("{}: cannot create folder", install.display()))?;
    let written = [&weights, &onnx];
    let result = (|| -> Result<()> {
        net.save(&weights)?;
        descl_training::onnx::export(
            &net,
            &onnx,
            &descl_training::onnx::model_doc(name, net.arch),
            f64::from(card.patch.magnification),
        )?;
        card.sha256 = descl::model::card::sha256_file(&onnx)?;
        card.save(&card_path)?;
        Ok(())
    })();
    if let Err(e) = result {
        for path in written {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    println!(
        "{}",
        serde_json::json!({"soup": name, "onnx": onnx, "card": card_path, "weights": weights,
            "ingredients": cards.iter().map(|c| &c.name).collect::<Vec<_>>(),
            "validation": card.training.get("validation")})
    );
    Ok(())
}

/// `descl-train offset`: see the subcommand's help and [`descl_training::offset`]. The model
/// is checked against the config's held-out scenes before anything is fitted; files of the new
/// name already in `install` are refused; the card is written last, and a failure on the way
/// removes what this call wrote.
fn offset(name: &str, model: &str, config: &Path, scale: f64, install: &Path) -> Result<()> {
    use descl_training::{offset, train};
    train::check_model_name(name)?;
    let base = CardedNet::load(model)?;
    if base.card.name == name {
        bail!("--name {name}: the model's own name; an offset model is a new model");
    }
    // Recorded relative to the working directory (the repository root) where it is under it,
    // as training records its `init`.
    let base_weights = base.onnx.with_extension("safetensors");
    let base_weights = std::env::current_dir()
        .ok()
        .and_then(|cwd| base_weights.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or(base_weights);
    if !base_weights.is_file() {
        bail!(
            "{}: the network's weights are not beside its ONNX file (the new card names them \
             as its init)",
            base_weights.display()
        );
    }
    let files = ["safetensors", "onnx", "json"].map(|e| install.join(format!("{name}.{e}")));
    if let Some(taken) = files.iter().find(|p| p.exists()) {
        bail!(
            "{}: already there; an offset model is a new model (another --name or --install)",
            taken.display()
        );
    }
    if base.net.is_binary() || base.net.has_offset() {
        bail!(
            "{}: {}; an offset is fitted to a float network without one",
            base.card.name,
            base.net.describe()
        );
    }
    let held = HeldOut::load(config)?;
    held.check(&base)?;
    let cfg = train::RunConfig::load(config)?;
    let photos = offset::fit_photos(&cfg).with_context(|| config.display().to_string())?;
    // The photos' own scenes, placed as `validate` will place them, before any is described.
    let placed =
        descl_training::lineage::photo_scenes(&photos, Path::new(".")).with_context(|| {
            format!(
                "{}: a training photo that no scene folder holds",
                config.display()
            )
        })?;
    if let Some(h) = held.scenes.iter().find(|h| placed.contains(h.as_str())) {
        bail!(
            "{}: training photos of {h}, which it holds out",
            config.display()
        );
    }
    eprintln!(
        "descl-train offset: the mean descriptor of {} on {} training photos",
        base.card.name,
        photos.len()
    );
    let (direction, mean_norm, descriptors) = offset::mean_direction(&base.onnx, &photos)?;
    let net = offset::apply(&base.net, &direction, scale)?;

    let mut card = base.card.clone();
    card.name = name.to_owned();
    card.file = format!("{name}.onnx");
    card.metrics = serde_json::Map::new();
    let field = |key: &str| base.card.training.get(key).cloned().unwrap_or_default();
    let method = base.card.training_method().unwrap_or("unknown");
    let mut made = CardedNet {
        net,
        card: card.clone(),
        onnx: PathBuf::new(),
        card_path: PathBuf::new(),
    };
    let base_score = held.evaluate(&base)?;
    let score = held.evaluate(&made)?;
    let mut validation = held.validation.record(Some(score));
    validation["config"] = config.display().to_string().into();
    validation["network"] = serde_json::json!({"name": base.card.name,
        "nn_accuracy": base_score.nn_accuracy, "fpr95": base_score.fpr95});
    // The scenes of the sources the photos came from.
    let scenes: Vec<train::SceneLicence> = cfg
        .data
        .all_sources()?
        .into_iter()
        .filter(|s| s.colmap.is_some() && !s.validation_only)
        .flat_map(|s| s.scenes)
        .fold(Vec::new(), |mut all, s| {
            if !all.iter().any(|a: &train::SceneLicence| a.scene == s.scene) {
                all.push(s);
            }
            all
        });
    let mut all_scenes: Vec<serde_json::Value> = base.card.training["data"]["scenes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for s in &scenes {
        if !all_scenes.iter().any(|a| a["scene"] == s.scene.as_str()) {
            all_scenes.push(serde_json::to_value(s)?);
        }
    }
    let training = serde_json::json!({
        "method": format!("{method} + output offset"),
        // The network's own schedule: its weights are the init's, unchanged.
        "iterations": field("iterations"),
        "batch": field("batch"),
        "seed": field("seed"),
        "init": {"file": base_weights, "sha256": descl::model::card::sha256_file(&base_weights)?},
        "offset": {
            "rule": "(d + s·u) / |d + s·u|, d the network's unit descriptor, u the unit mean \
                     descriptor of the frames descl extract finds in the photos",
            "scale": scale,
            "detector": offset::fit_detector(),
            "photos": photos,
            "descriptors": descriptors,
            "mean_descriptor_norm": mean_norm,
            "network": {"name": base.card.name, "sha256": base.card.sha256},
        },
        // Every scene the model saw (the network's and the photos'), for its licences.
        "data": {"scenes": all_scenes, "validation_scenes": train::scenes_of(&cfg, true),
                 "offset_scenes": scenes},
        "config": cfg,
        "code_commit": train::code_commit(),
        "validation_nn_accuracy": score.nn_accuracy,
        "validation": validation,
    });
    let serde_json::Value::Object(training) = training else {
        bail!("training section is not an object");
    };
    made.card.training = training;
    let CardedNet { net, mut card, .. } = made;
    std::fs::create_dir_all(install)
        .with_context(|| format!("{}: cannot create folder", install.display()))?;
    let [weights, onnx, card_path] = &files;
    let result = (|| -> Result<()> {
        net.save(weights)?;
        descl_training::onnx::export(
            &net,
            onnx,
            &descl_training::onnx::model_doc(name, net.arch),
            f64::from(card.patch.magnification),
        )?;
        card.sha256 = descl::model::card::sha256_file(onnx)?;
        card.save(card_path)?;
        Ok(())
    })();
    if let Err(e) = result {
        for path in [weights, onnx] {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    println!(
        "{}",
        serde_json::json!({"offset": name, "onnx": onnx, "card": card_path, "weights": weights,
            "network": base.card.name, "scale": scale, "mean_descriptor_norm": mean_norm,
            "validation": {"nn_accuracy": score.nn_accuracy, "fpr95": score.fpr95},
            "network_validation": {"nn_accuracy": base_score.nn_accuracy,
                                   "fpr95": base_score.fpr95}})
    );
    Ok(())
}

/// A descl-exported model read back into a [`Net`], with the card that names its network.
struct CardedNet {
    net: Net,
    card: descl::model::ModelCard,
    onnx: PathBuf,
    /// Where the card was read from (`validate --record` writes it back there).
    card_path: PathBuf,
}

impl CardedNet {
    /// `model`: a shipped name, a card, or an .onnx file with its card beside it; the file's
    /// SHA-256 is checked against the card's before its weights are read.
    fn load(model: &str) -> Result<CardedNet> {
        let resolved = descl::model::resolve(model)?;
        let (card, card_path) = resolved.card.with_context(|| {
            format!("{model}: no model card beside it (the card names the architecture)")
        })?;
        card.verify_sha256(&resolved.onnx)?;
        let (arch, width) = Arch::parse_card_name(&card.architecture)
            .with_context(|| format!("{}: architecture", card_path.display()))?;
        let net = descl_training::onnx::import(&resolved.onnx, arch, width)?;
        Ok(CardedNet {
            net,
            card,
            onnx: resolved.onnx,
            card_path,
        })
    }
}

/// `descl-train export`: writes `net` to `out`; with a card, re-exports the card's model (the
/// card's magnification and doc string, the card's output checked against the net) and writes
/// the new file's SHA-256 into the card, leaving every other field as it was.
fn export(
    net: &Net,
    weights: &Path,
    magnification: Option<f64>,
    card_path: Option<&Path>,
    out: &Path,
) -> Result<()> {
    let card = card_path
        .map(|p| descl::model::ModelCard::load(p).map(|c| (c, p)))
        .transpose()?;
    let card_m = card.as_ref().map(|(c, _)| f64::from(c.patch.magnification));
    let magnification = match (magnification, card_m) {
        (Some(m), Some(c)) if (m - c).abs() > 1e-6 * c.max(1.0) => {
            bail!("--magnification {m} differs from the card's patch.magnification {c}")
        }
        (Some(m), _) | (None, Some(m)) => m,
        (None, None) => f64::from(descl::detect::DEFAULT_MAGNIFICATION),
    };
    let doc = match &card {
        Some((c, p)) => {
            descl_training::onnx::metadata(net, magnification)?
                .check_card(c)
                .map_err(|diffs| {
                    anyhow::anyhow!(
                        "{}: the card does not describe this net: {diffs}",
                        p.display()
                    )
                })?;
            let named = out.file_name().and_then(|n| n.to_str());
            if named != Some(c.file.as_str()) {
                bail!(
                    "{}: the card's file is {:?}, not {}",
                    p.display(),
                    c.file,
                    out.display()
                );
            }
            descl_training::onnx::model_doc(&c.name, net.arch)
        }
        None => format!(
            "{} exported by descl-train from {}",
            net.arch.name(),
            weights.display()
        ),
    };
    descl_training::onnx::export(net, out, &doc, magnification)?;
    if let Some((mut c, p)) = card {
        c.sha256 = descl::model::card::sha256_file(out)?;
        c.save(p)?;
    }
    println!(
        "{}",
        serde_json::json!({"onnx": out, "arch": net.arch.name(), "dim": net.output_dim(),
            "magnification": magnification, "card": card_path})
    );
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("descl-train: {e:#}");
            ExitCode::FAILURE
        }
    }
}
