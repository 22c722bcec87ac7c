//! A training run: a JSON config → checkpoints, a JSON-lines log, the final weights, the ONNX
//! model and its model card, all in the run's output folder (and optionally installed into
//! `models/`).
//!
//! Resume is exact: batches and dropout masks are seeded per step from the run seed, and the
//! checkpoint holds the weights, the optimizer state and the step, so an interrupted run
//! continued with `--resume` follows the same trajectory as an uninterrupted one.

use crate::data::{Augment, TrackMix, TrackSet, PATCH_SIDE};
use crate::loss;
use crate::net::{Arch, Net};
use crate::optim::{OptimConfig, Optimizer};
use anyhow::{bail, Context, Result};
use descl::model::card::{sha256_file, InputSpec, ModelCard, OutputKind, OutputSpec, PatchSpec};
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// File names inside a run's output folder.
pub const CONFIG_FILE: &str = "config.json";
pub const LOG_FILE: &str = "log.jsonl";
pub const CHECKPOINT_WEIGHTS: &str = "checkpoint.safetensors";
pub const CHECKPOINT_META: &str = "checkpoint.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Odd constant mixing the step into the batch RNG seed (golden-ratio increment of SplitMix64).
const STEP_SEED_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Network of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetConfig {
    pub arch: Arch,
    /// Channel multiplier (1.0 = the paper's network).
    #[serde(default = "one")]
    pub width: f64,
    /// Binary descriptors of this many bits (CDF §3.2: tanh head, 256 bits); absent = float.
    #[serde(default)]
    pub bits: Option<i64>,
}

fn one() -> f64 {
    1.0
}

/// Training data of a run: one track file (`tracks`, optionally generated from `synthetic`), or
/// several `sources` mixed by weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// Track file (see [`crate::data`]); generated from `synthetic` when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracks: Option<PathBuf>,
    /// How to generate the tracks when the file does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<crate::data::synthetic::SyntheticConfig>,
    /// Several track files mixed by weight (instead of `tracks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<TrackSource>,
    #[serde(default)]
    pub augment: Augment,
    /// Classes held out of training (per source) to report a nearest-neighbour accuracy.
    #[serde(default)]
    pub validation: usize,
}

/// One source of a mixed run: a track file, generated when missing from `synthetic` (random
/// homographies of the training photos) or `colmap` (a reconstruction's real tracks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackSource {
    pub tracks: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<crate::data::synthetic::SyntheticConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colmap: Option<crate::data::colmap::ColmapTracksConfig>,
    /// Relative share of the batch's classes drawn from this source.
    #[serde(default = "one")]
    pub weight: f64,
    /// A held-out scene: never trained on, only validated on (model selection and stopping
    /// on scenes the run has not seen). With any such source, validation uses these alone
    /// (up to `data.validation` classes each) and the training sources keep all their classes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validation_only: bool,
    /// The photo sets the source's tracks come from and their licences (from
    /// `../shared/data/train/SCENES.md`), copied into the model card: a user of the model
    /// must know which scenes it saw and under which terms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenes: Vec<SceneLicence>,
}

/// A training photo set and its licence (SCENES.md: `class` is `open` for CC0 / CC BY / BSD /
/// Apache, `restricted` for non-commercial, share-alike, GPL or unstated terms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SceneLicence {
    pub scene: String,
    pub licence: String,
    pub class: String,
}

impl DataConfig {
    /// The sources of the run, the single-file form included.
    pub fn all_sources(&self) -> Result<Vec<TrackSource>> {
        match (&self.tracks, self.sources.is_empty()) {
            (Some(tracks), true) => Ok(vec![TrackSource {
                tracks: tracks.clone(),
                synthetic: self.synthetic.clone(),
                colmap: None,
                weight: 1.0,
                validation_only: false,
                scenes: Vec::new(),
            }]),
            (None, false) if self.synthetic.is_none() => Ok(self.sources.clone()),
            (None, true) => bail!("data needs `tracks` or `sources`"),
            _ => bail!("data takes either `tracks` (+ `synthetic`) or `sources`, not both"),
        }
    }
}

/// A model's name names its files (`NAME.onnx`, `NAME.json`, `NAME.safetensors`): a plain
/// file stem, not empty, without path separators, not starting with a dot.
pub fn check_model_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        bail!("name {name:?} must be a plain file stem");
    }
    Ok(())
}

/// Learning-rate schedule: `lr(step) = base · warm-up ramp · decay(step / iterations)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    Constant,
    /// Linear decay to zero (HardNet).
    #[default]
    Linear,
    /// Half-cosine decay to zero.
    Cosine,
    /// Halved after each of [`SDGMNET_HALVING_PARTS`] equal parts of the iterations (SDGMNet
    /// §IV-A: "The learning rate is initialized with 1 and divided by 2 after each 10% of
    /// iterations").
    Halving,
}

/// [`Decay::Halving`] halves the rate after each 1/10 of the iterations (SDGMNet §IV-A).
pub const SDGMNET_HALVING_PARTS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    #[serde(default)]
    pub decay: Decay,
    /// Steps of linear warm-up from 0.
    #[serde(default)]
    pub warmup: usize,
}

impl Schedule {
    pub fn lr(&self, base: f64, step: usize, iterations: usize) -> f64 {
        let ramp = if step < self.warmup {
            (step + 1) as f64 / self.warmup as f64
        } else {
            1.0
        };
        let t = step as f64 / iterations.max(1) as f64;
        let decay = match self.decay {
            Decay::Constant => 1.0,
            Decay::Linear => 1.0 - t,
            Decay::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * t).cos()),
            // ⌊step · parts / iterations⌋ halvings, in integers (no rounding at the boundaries).
            Decay::Halving => {
                let halvings = step.saturating_mul(SDGMNET_HALVING_PARTS) / iterations.max(1);
                0.5f64.powi(i32::try_from(halvings).unwrap_or(i32::MAX))
            }
        };
        base * ramp * decay
    }
}

/// A run config (JSON), saved beside the model it makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Model name: `NAME.onnx`, `NAME.json`.
    pub name: String,
    pub net: NetConfig,
    /// `{"name": "hardnet", ...parameters}` (see [`loss::from_config`]).
    pub loss: serde_json::Value,
    pub data: DataConfig,
    pub iterations: usize,
    /// Classes per batch.
    pub batch: usize,
    /// Views per class in a batch (HardNet: 2).
    #[serde(default = "two")]
    pub views: usize,
    pub lr: f64,
    #[serde(default)]
    pub schedule: Schedule,
    pub optimizer: OptimConfig,
    pub seed: u64,
    /// "cpu", "cuda" or "cuda:N".
    #[serde(default = "cpu")]
    pub device: String,
    /// libtorch intra-op threads (default: libtorch's choice).
    #[serde(default)]
    pub threads: Option<i32>,
    /// Output folder of the run.
    pub out: PathBuf,
    /// Folder to install `NAME.onnx`, `NAME.json` and the weights `NAME.safetensors` into at the
    /// end (e.g. "models").
    #[serde(default)]
    pub install: Option<PathBuf>,
    /// Weights to start from instead of a random initialisation (fine-tuning, e.g. a shipped
    /// `models/NAME.safetensors`); the network (arch, width, bits) must be theirs. Ignored when
    /// `--resume` finds a checkpoint. `descl-train train --init` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
    /// Load only the trunk of `init` (every tensor but the output head's, [`Net::load_trunk`]):
    /// a binary network started from a float model's weights, its head freshly initialised.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub init_trunk_only: bool,
    /// A teacher the network learns to reproduce, beside (or instead of) `loss`
    /// ([`crate::distill`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distill: Option<crate::distill::DistillConfig>,
    #[serde(default = "hundred")]
    pub log_every: usize,
    #[serde(default = "thousand")]
    pub checkpoint_every: usize,
}

fn two() -> usize {
    2
}
fn cpu() -> String {
    "cpu".into()
}
fn hundred() -> usize {
    100
}
fn thousand() -> usize {
    1000
}

impl RunConfig {
    pub fn load(path: &Path) -> Result<RunConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read config", path.display()))?;
        let config: RunConfig = serde_json::from_str(&text)
            .with_context(|| format!("{}: bad run config", path.display()))?;
        config
            .validate()
            .with_context(|| format!("{}: bad run config", path.display()))?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        if self.iterations == 0 || self.batch < 2 || self.views < 2 {
            bail!("need iterations ≥ 1, batch ≥ 2 classes and views ≥ 2");
        }
        if self.lr.is_nan() || self.lr <= 0.0 {
            bail!("lr must be > 0");
        }
        check_model_name(&self.name)?;
        // Syntax only: a config may be checked, and its tracks generated, on a machine
        // without the GPU it trains on; training itself asks for the device.
        parse_device_name(&self.device)?;
        let sources = self.data.all_sources()?;
        if sources.iter().all(|s| s.validation_only) {
            bail!("every track source is validation_only: nothing to train on");
        }
        self.data.augment.photometric.validate()?;
        if let Some(d) = &self.distill {
            d.validate()?;
        }
        Ok(())
    }
}

/// "cpu" | "cuda" | "cuda:N" → tch device; CUDA must be available.
pub fn parse_device(s: &str) -> Result<Device> {
    let d = parse_device_name(s)?;
    if d != Device::Cpu && !tch::Cuda::is_available() {
        bail!("device {s:?} requested but libtorch sees no CUDA device");
    }
    Ok(d)
}

/// "cpu" | "cuda" | "cuda:N" → tch device, whether or not this machine has it.
pub fn parse_device_name(s: &str) -> Result<Device> {
    Ok(match s {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
            Some(n) => Device::Cuda(n),
            None => bail!("unknown device {other:?} (cpu, cuda, cuda:N)"),
        },
    })
}

/// The checkpoint's sidecar: where training stopped.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointMeta {
    /// Steps completed.
    step: usize,
    /// Training wall time so far (seconds).
    wall_time_s: f64,
    seed: u64,
    last_loss: f64,
    /// The loss's running state ([`loss::Loss::state`]).
    #[serde(default)]
    loss_state: serde_json::Value,
    /// The `init` weights the run started from (file and SHA-256 when it started), so a resumed
    /// run's card names them even if the file has changed since.
    #[serde(default)]
    init: Option<InitRecord>,
    /// The checkout's commit when the run started (a resumed run keeps its first start's).
    #[serde(default)]
    code_commit: Option<String>,
    /// The devices that ran the steps so far, in order ("cuda:0", then "cpu" if the run was
    /// resumed there): the card's `training.device`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    devices: Vec<String>,
    /// What the run computes ([`run_plan`]), recorded when it starts; a resume with another plan
    /// is refused. None in checkpoints from before plans were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plan: Option<serde_json::Value>,
}

/// Weights a run started from: `training.init` in its card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitRecord {
    pub file: PathBuf,
    pub sha256: String,
}

/// What a finished run reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub name: String,
    pub onnx: PathBuf,
    pub card: PathBuf,
    pub iterations: usize,
    pub wall_time_s: f64,
    pub final_loss: f64,
    pub validation_nn_accuracy: Option<f64>,
}

/// The loss over the last steps (mean of the last `LOSS_WINDOW` logged values).
const LOSS_WINDOW: usize = 100;

/// Runs (or resumes) a training run.
pub fn train(config: &RunConfig, resume: bool) -> Result<RunSummary> {
    match train_until(config, resume, None)? {
        Some(summary) => Ok(summary),
        None => bail!("training stopped early"),
    }
}

/// Like [`train`], but stops after a checkpoint at step `stop_at` (if given and before the end),
/// returning `None`: a controlled interruption, used to test that `--resume` is exact.
pub fn train_until(
    config: &RunConfig,
    resume: bool,
    stop_at: Option<usize>,
) -> Result<Option<RunSummary>> {
    run(config, resume, stop_at, false)
}

/// Finishes a run at its last checkpoint, without further steps: validation, weights, ONNX and
/// card from the checkpoint's weights, the card's `training.iterations_completed` saying how
/// far the schedule got (`training.iterations` keeps the planned length). For runs whose
/// machine went away before the end (a GPU lease, a pre-empted cluster job); `--resume` can
/// still continue the run afterwards, the checkpoint is left as it was.
pub fn finish_at_checkpoint(config: &RunConfig) -> Result<RunSummary> {
    if !config.out.join(CHECKPOINT_META).exists() {
        bail!(
            "{}: no checkpoint to finish from",
            config.out.join(CHECKPOINT_META).display()
        );
    }
    match run(config, true, None, true)? {
        Some(summary) => Ok(summary),
        None => bail!("training stopped early"),
    }
}

/// The name a card and a checkpoint give the device this process trains on.
fn device_label(device: Device) -> String {
    match device {
        Device::Cpu => format!("cpu ({} libtorch threads)", tch::get_num_threads()),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}"),
    }
}

fn run(
    config: &RunConfig,
    resume: bool,
    stop_at: Option<usize>,
    finish_now: bool,
) -> Result<Option<RunSummary>> {
    config.validate()?;
    let device = parse_device(&config.device)?;
    if device.is_cuda() {
        // Fixed batch shapes: let cuDNN time its convolution algorithms once and keep the
        // fastest (a GPU run's resume is then equal up to rounding, not bit-exact).
        tch::Cuda::cudnn_set_benchmark(true);
    }
    if let Some(t) = config.threads {
        tch::set_num_threads(t);
    }
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("{}: cannot create output folder", config.out.display()))?;
    let meta_path = config.out.join(CHECKPOINT_META);
    let resuming = resume && meta_path.exists();
    let (tracks, validation) = training_and_validation(&config.data)?;
    let plan = run_plan(config, &tracks, &validation)?;
    if tracks.classes() < config.batch {
        bail!(
            "{} training classes, batch needs {}",
            tracks.classes(),
            config.batch
        );
    }
    if tracks.views() < config.views {
        bail!(
            "tracks have {} views per class, the run draws {}",
            tracks.views(),
            config.views
        );
    }

    tch::manual_seed(config.seed as i64);
    let mut net = match config.net.bits {
        Some(bits) => Net::new_binary(config.net.arch, config.net.width, bits, device)?,
        None => Net::new(config.net.arch, config.net.width, device)?,
    };
    // A checkpoint wins over `init`: it already descends from those weights.
    let mut init = match (&config.init, resuming) {
        (Some(file), false) => {
            if config.init_trunk_only {
                let fresh = net
                    .load_trunk(file)
                    .with_context(|| format!("run {}: bad `init` weights", config.name))?;
                eprintln!(
                    "{}: trunk of {} loaded, {fresh} head tensors freshly initialised",
                    config.name,
                    file.display()
                );
            } else {
                net.load_weights(file)
                    .with_context(|| format!("run {}: bad `init` weights", config.name))?;
            }
            Some(InitRecord {
                file: file.clone(),
                sha256: sha256_file(file)?,
            })
        }
        _ => None,
    };
    let mut optimizer = Optimizer::new(&net.vs, config.optimizer)?;
    // Losses that sample (AdaSample, active learning) draw from the run seed unless their own is given.
    let mut loss_config = config.loss.clone();
    if let Some(obj) = loss_config.as_object_mut() {
        obj.entry("seed").or_insert(config.seed.into());
    }
    let mut loss_fn = loss::from_config(&loss_config)?;
    let teacher = match &config.distill {
        Some(d) => Some((d, load_teacher(d, &net, &tracks, device)?)),
        None => None,
    };
    // One epoch = one pass over the training classes (end_epoch drives Alg. 1/2 of active learning).
    let steps_per_epoch = (tracks.classes() / config.batch).max(1);

    // Provenance is taken when the run starts: the code that trains it, not the checkout at its end.
    let mut commit = code_commit();
    let mut devices: Vec<String> = Vec::new();
    let (start, mut wall_before) = if resuming {
        let mut meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(&meta_path)?)
            .with_context(|| format!("{}: bad checkpoint", meta_path.display()))?;
        check_plan(&meta_path, meta.plan.as_ref(), &plan)?;
        if meta.seed != config.seed {
            bail!(
                "{}: checkpoint seed {} differs from config seed {}",
                meta_path.display(),
                meta.seed,
                config.seed
            );
        }
        load_checkpoint(
            &config.out.join(CHECKPOINT_WEIGHTS),
            &mut net,
            &mut optimizer,
            meta.step as i64,
        )?;
        loss_fn
            .restore(&meta.loss_state)
            .with_context(|| format!("{}: loss state", meta_path.display()))?;
        // Checkpoints from before `devices` was recorded: the device of the config the run
        // folder was started with, read before this start's config replaces it (below) and
        // written into the checkpoint at once, so that a later start (another `--device`)
        // cannot lose it. Only now, once the start is known to continue the checkpoint.
        if meta.devices.is_empty() && meta.step > 0 {
            if let Some(first) = previous_config_device(&config.out.join(CONFIG_FILE)) {
                meta.devices.push(first);
                descl::io::atomic::write_bytes_atomic(
                    &meta_path,
                    &serde_json::to_vec_pretty(&meta)?,
                )?;
            }
        }
        init = meta.init;
        if meta.code_commit.is_some() {
            commit = meta.code_commit;
        }
        devices = meta.devices;
        (meta.step, meta.wall_time_s)
    } else {
        (0, 0.0)
    };
    // The run folder's config is this start's, written once the start is known to continue
    // the checkpoint's plan (a refused resume leaves the folder as it was).
    descl::io::atomic::write_bytes_atomic(
        &config.out.join(CONFIG_FILE),
        &serde_json::to_vec_pretty(config)?,
    )?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(start > 0)
        .truncate(start == 0)
        .open(config.out.join(LOG_FILE))
        .with_context(|| format!("{}: cannot open log", config.out.join(LOG_FILE).display()))?;
    if start == 0 {
        // The starting point's accuracy: chance for a random net, the source's for `init`.
        if let Some(v) = validation.evaluate(&net, device)? {
            writeln!(
                log,
                "{}",
                serde_json::json!({"step": 0, "validation_nn_accuracy_start": v.nn_accuracy,
                                   "validation_fpr95_start": v.fpr95})
            )?;
        }
    }

    let bar = ProgressBar::new(config.iterations as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}<{eta_precise}] {bar:40} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(start as u64);

    let end = if finish_now { start } else { config.iterations };
    if end > start && devices.last() != Some(&device_label(device)) {
        devices.push(device_label(device));
    }
    let mut recent: Vec<f64> = Vec::new();
    let mut clock = Instant::now();
    let mut last_log = Instant::now();
    for step in start..end {
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            config.seed ^ (step as u64).wrapping_mul(STEP_SEED_MIX),
        );
        tch::manual_seed((config.seed ^ (step as u64).wrapping_mul(STEP_SEED_MIX)) as i64);
        let pixels =
            tracks.random_batch(&mut rng, config.batch, config.views, config.data.augment)?;
        let n = (config.batch * config.views) as i64;
        let side = PATCH_SIDE as i64;
        let x = Tensor::f_from_slice(&pixels)?
            .f_reshape([n, 1, side, side])?
            .f_to_device(device)?;
        let desc = net.forward_t(&x, true)?;
        let shape = [config.batch as i64, config.views as i64, -1];
        let desc = desc.f_reshape(shape)?;
        let progress = step as f64 / config.iterations as f64;
        let mut distill_value = None;
        let loss = match &teacher {
            Some((d, teacher)) => {
                let t = teacher.describe(&x)?.f_reshape(shape)?;
                let kd = crate::distill::distill_loss(d.target, &desc, &t);
                distill_value = Some(kd.f_double_value(&[])?);
                let kd = kd * d.weight;
                if d.metric_weight > 0.0 {
                    loss_fn.forward(&desc, progress) * d.metric_weight + kd
                } else {
                    kd
                }
            }
            None => loss_fn.forward(&desc, progress),
        };
        let value = loss.f_double_value(&[])?;
        if !value.is_finite() {
            bail!("step {step}: loss is {value}; lower lr or check the data");
        }
        optimizer.zero_grad();
        loss.f_backward()?;
        let lr = config.schedule.lr(config.lr, step, config.iterations);
        optimizer.step(lr)?;
        if (step + 1) % steps_per_epoch == 0 {
            loss_fn.end_epoch();
        }

        recent.push(value);
        if recent.len() > LOSS_WINDOW {
            recent.remove(0);
        }
        bar.inc(1);
        let done = step + 1;
        if done % config.log_every == 0 || done == config.iterations {
            let elapsed = clock.elapsed().as_secs_f64();
            let mut entry = serde_json::json!({
                "step": done,
                "loss": value,
                "loss_avg": mean(&recent),
                "lr": lr,
                "wall_time_s": wall_before + elapsed,
                "s_per_iter": last_log.elapsed().as_secs_f64() / config.log_every.min(done - start).max(1) as f64,
            });
            for (k, v) in loss_fn.stats() {
                entry[k] = serde_json::json!(v);
            }
            if let Some(v) = distill_value {
                entry["distill_loss"] = serde_json::json!(v);
            }
            writeln!(log, "{entry}")?;
            log.flush()?;
            bar.set_message(format!("loss {:.4}", mean(&recent)));
            last_log = Instant::now();
        }
        let interrupted = stop_at == Some(done) && done < config.iterations;
        if interrupted || done % config.checkpoint_every == 0 || done == config.iterations {
            wall_before += clock.elapsed().as_secs_f64();
            clock = Instant::now();
            save_checkpoint(
                &config.out,
                &net,
                &optimizer,
                CheckpointMeta {
                    step: done,
                    wall_time_s: wall_before,
                    seed: config.seed,
                    last_loss: mean(&recent),
                    loss_state: loss_fn.state(),
                    init: init.clone(),
                    code_commit: commit.clone(),
                    devices: devices.clone(),
                    plan: Some(plan.clone()),
                },
            )?;
            // Held-out progress at every checkpoint: the curve model selection and early
            // stopping read (`log.jsonl`), not only the end point.
            if !interrupted && done < config.iterations {
                if let Some(v) = validation.evaluate(&net, device)? {
                    writeln!(
                        log,
                        "{}",
                        serde_json::json!({"step": done, "validation_nn_accuracy": v.nn_accuracy,
                                           "validation_fpr95": v.fpr95})
                    )?;
                    log.flush()?;
                }
            }
        }
        if interrupted {
            bar.abandon_with_message("stopped");
            return Ok(None);
        }
    }
    bar.finish_with_message("done");
    let wall_time_s = wall_before + clock.elapsed().as_secs_f64();
    let final_loss = if recent.is_empty() {
        last_checkpoint_loss(&config.out)?
    } else {
        mean(&recent)
    };

    let held_out = validation.evaluate(&net, device)?;
    let validation_nn_accuracy = held_out.map(|v| v.nn_accuracy);
    if let Some(v) = held_out {
        writeln!(
            log,
            "{}",
            serde_json::json!({"step": end, "validation_nn_accuracy": v.nn_accuracy,
                               "validation_fpr95": v.fpr95})
        )?;
    }

    net.save(&config.out.join(WEIGHTS_FILE))?;
    let onnx_path = config.out.join(format!("{}.onnx", config.name));
    crate::onnx::export(
        &net,
        &onnx_path,
        &crate::onnx::model_doc(&config.name, config.net.arch),
        tracks.magnification(),
    )?;
    let card = model_card(
        config,
        &net,
        &onnx_path,
        &tracks,
        CardRun {
            iterations_completed: end,
            wall_time_s,
            final_loss,
            validation_nn_accuracy,
            validation: validation.record(held_out),
            init: init.as_ref(),
            code_commit: commit.as_deref(),
            devices: &devices,
        },
    )?;
    let card_path = config.out.join(format!("{}.json", config.name));
    card.save(&card_path)?;
    let (onnx, card_out) = match &config.install {
        Some(dir) => install(
            dir,
            &config.name,
            &onnx_path,
            &card_path,
            &config.out.join(WEIGHTS_FILE),
        )?,
        None => (onnx_path, card_path),
    };
    Ok(Some(RunSummary {
        name: config.name.clone(),
        onnx,
        card: card_out,
        iterations: end,
        wall_time_s,
        final_loss,
        validation_nn_accuracy,
    }))
}

/// Run-config fields that say how a run is operated, not what it computes: a resumed run may
/// change them (another device or thread count, other log and checkpoint intervals, another
/// install folder, a moved run folder; `init` and `init_trunk_only` only act on a fresh start,
/// a checkpoint already descends from the weights).
const OPERATIONAL_FIELDS: [&str; 8] = [
    "device",
    "threads",
    "log_every",
    "checkpoint_every",
    "install",
    "out",
    "init",
    "init_trunk_only",
];

/// The teacher of a distillation run, checked against the student and the tracks: a float
/// model of the student's descriptor size, cutting patches at the tracks' magnification.
fn load_teacher(
    d: &crate::distill::DistillConfig,
    net: &Net,
    tracks: &TrackMix,
    device: Device,
) -> Result<crate::distill::Teacher> {
    let teacher = crate::distill::Teacher::load(&d.teacher, device)?;
    if teacher.output_dim() != net.output_dim() {
        bail!(
            "distill: teacher {} gives {} numbers per descriptor, the student {}",
            teacher.record.name,
            teacher.output_dim(),
            net.output_dim()
        );
    }
    let m = tracks.magnification();
    if (teacher.magnification - m).abs() > 1e-6 * m.abs().max(1.0) {
        bail!(
            "distill: teacher {} cuts patches at magnification {}, the tracks at {m}",
            teacher.record.name,
            teacher.magnification
        );
    }
    Ok(teacher)
}

/// What a run computes: its config, and the identity of every training and validation set
/// ([`TrackSet::identity`]: classes, views, the patches' SHA-256). Two reconstructions of one
/// scene cut with one configuration have the same config and other patches; only the hashes
/// tell such track files apart. Compared through [`comparable_plan`].
fn run_plan(
    config: &RunConfig,
    tracks: &TrackMix,
    validation: &Validation,
) -> Result<serde_json::Value> {
    Ok(serde_json::json!({
        "config": serde_json::to_value(config)?,
        "training": tracks.sets.iter().map(TrackSet::identity).collect::<Vec<_>>(),
        "validation": validation.sets.iter().map(TrackSet::identity).collect::<Vec<_>>(),
    }))
}

/// Members of `data` and of each `data.sources` entry that say where the patches are and how
/// they were made, not which patches they are: the plan's set hashes say that. A track file
/// reached by another path is the same run.
const DATA_LOCATION_FIELDS: [&str; 3] = ["tracks", "synthetic", "colmap"];

/// Members of a source's `scenes` entries that describe a scene's terms, not which scene it is:
/// a corrected licence is the same run, a renamed or moved scene is not.
const SCENE_TERMS_FIELDS: [&str; 2] = ["licence", "class"];

/// The part of a plan a resume must keep. The config is read as today's binary reads it (a
/// field added since gets its default, so rebuilding the binary is no difference), less
/// [`OPERATIONAL_FIELDS`], [`DATA_LOCATION_FIELDS`] and [`SCENE_TERMS_FIELDS`].
fn comparable_plan(plan: &serde_json::Value) -> serde_json::Value {
    let recorded = &plan["config"];
    let mut config = serde_json::from_value::<RunConfig>(recorded.clone())
        .ok()
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or_else(|| recorded.clone());
    if let Some(fields) = config.as_object_mut() {
        for key in OPERATIONAL_FIELDS {
            fields.remove(key);
        }
    }
    if let Some(data) = config.get_mut("data").and_then(|d| d.as_object_mut()) {
        for key in DATA_LOCATION_FIELDS {
            data.remove(key);
        }
        if let Some(serde_json::Value::Array(sources)) = data.get_mut("sources") {
            for source in sources.iter_mut().filter_map(|s| s.as_object_mut()) {
                for key in DATA_LOCATION_FIELDS {
                    source.remove(key);
                }
                if let Some(serde_json::Value::Array(scenes)) = source.get_mut("scenes") {
                    for scene in scenes.iter_mut().filter_map(|s| s.as_object_mut()) {
                        for key in SCENE_TERMS_FIELDS {
                            scene.remove(key);
                        }
                    }
                    // A set of scenes: listed in another order, the same.
                    scenes.sort_by_key(|s| s["scene"].to_string());
                }
            }
        }
    }
    serde_json::json!({"config": config, "training": plan["training"],
                       "validation": plan["validation"]})
}

/// Most differences a refused resume lists.
const MAX_PLAN_DIFFERENCES: usize = 8;

/// Refuses to resume a checkpoint whose recorded plan differs from this start's, naming the
/// differences (`config.lr`, `training[3].patches_sha256`, …): the weights would carry steps of
/// two plans while the card described one. A checkpoint from before plans were recorded is
/// resumed with a warning, and records this start's plan from its next checkpoint on.
fn check_plan(
    meta_path: &Path,
    recorded: Option<&serde_json::Value>,
    plan: &serde_json::Value,
) -> Result<()> {
    let Some(recorded) = recorded else {
        eprintln!(
            "{}: a checkpoint from before runs recorded their plan; its config and track files \
             cannot be checked against this start's",
            meta_path.display()
        );
        return Ok(());
    };
    let mut diffs = Vec::new();
    json_differences(
        &comparable_plan(recorded),
        &comparable_plan(plan),
        String::new(),
        &mut diffs,
    );
    if diffs.is_empty() {
        return Ok(());
    }
    let more = diffs.len().saturating_sub(MAX_PLAN_DIFFERENCES);
    diffs.truncate(MAX_PLAN_DIFFERENCES);
    bail!(
        "{}: the run was started with another plan; resuming would mix two runs in one model. \
         Differences (checkpoint → now): {}{}. Restore the config and track files it started \
         with, or start a new run (another `out`, with `init` to continue from these weights)",
        meta_path.display(),
        diffs.join("; "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// Longest value a difference quotes (a whole source record would drown the message).
const MAX_QUOTED_CHARS: usize = 100;

fn shortened(v: &serde_json::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Appends `path: a → b` for every leaf where `a` and `b` differ (objects by key, arrays by
/// index; a missing member is `null`).
fn json_differences(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: String,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    let child = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (u, v) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                json_differences(u, v, child(k), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                json_differences(u, v, format!("{path}[{i}]"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            out.push(format!("{path}: {} entries → {} entries", x.len(), y.len()))
        }
        _ if a != b => out.push(format!("{path}: {} → {}", shortened(a), shortened(b))),
        _ => {}
    }
}

/// The `device` of the run config saved in a run folder, as a card names it.
fn previous_config_device(path: &Path) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    match parse_device_name(value.get("device")?.as_str()?).ok()? {
        Device::Cpu => Some("cpu".to_string()),
        other => Some(device_label(other)),
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn last_checkpoint_loss(out: &Path) -> Result<f64> {
    let meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(out.join(CHECKPOINT_META))?)?;
    Ok(meta.last_loss)
}

/// Loads every source's track file, generating the missing ones from their generator.
pub fn load_or_generate_tracks(data: &DataConfig) -> Result<TrackMix> {
    let sources = data.all_sources()?;
    let mut sets = Vec::with_capacity(sources.len());
    for source in &sources {
        sets.push(load_or_generate_source(source)?);
    }
    TrackMix::new(sets, sources.iter().map(|s| s.weight).collect())
}

/// Held-out track sets and their weights (as the sources are weighted).
#[derive(Debug, Clone, Default)]
pub struct Validation {
    pub sets: Vec<TrackSet>,
    pub weights: Vec<f64>,
    /// True when the sets are whole held-out scenes (`validation_only` sources), false when
    /// they are the last classes of the training sources.
    pub held_out_scenes: bool,
}

/// Validation numbers of a net, weighted over the held-out sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValidationScore {
    /// NN accuracy ([`nn_accuracy`]).
    pub nn_accuracy: f64,
    /// False-positive rate at 95 % recall (HardNet's FPR95, [`fpr95`]); None without
    /// descl's evaluation metrics (the build without feature `tracks`).
    pub fpr95: Option<f64>,
}

impl Validation {
    /// A score with the sets it was measured on, for cards and `descl-train validate`: NN
    /// accuracy, FPR95, whether the sets are held-out scenes, and each set's weight, identity
    /// ([`TrackSet::identity`]) and scene record (generator config and reconstruction stats, as
    /// the track file's header has them). Validation numbers compare only on equal sets: the
    /// held-out tracks are cut again whenever their scenes are reconstructed again.
    pub fn record(&self, score: Option<ValidationScore>) -> serde_json::Value {
        let sets: Vec<serde_json::Value> = self
            .sets
            .iter()
            .zip(&self.weights)
            .map(|(s, w)| {
                let mut id = s.identity();
                id["weight"] = (*w).into();
                id["config"] = s.header.source["config"].clone();
                id["stats"] = s.header.source["stats"].clone();
                id
            })
            .collect();
        serde_json::json!({
            "nn_accuracy": score.map(|v| v.nn_accuracy),
            "fpr95": score.and_then(|v| v.fpr95),
            "held_out_scenes": self.held_out_scenes,
            "sets": sets,
        })
    }

    /// None when no set has 2 classes or more.
    pub fn evaluate(&self, net: &Net, device: Device) -> Result<Option<ValidationScore>> {
        // Each set is described once; both numbers come from the same descriptors.
        let (mut nn, mut fpr, mut total, mut fpr_known) = (0.0, 0.0, 0.0, true);
        for (set, &w) in self.sets.iter().zip(&self.weights) {
            if set.header.classes >= 2 {
                let (a, b) = first_two_views(net, set, device)?;
                nn += w * nn_accuracy_of(&a, &b)?;
                match fpr95_of(&a, &b)? {
                    Some(f) => fpr += w * f,
                    None => fpr_known = false,
                }
                total += w;
            }
        }
        Ok((total > 0.0).then(|| ValidationScore {
            nn_accuracy: nn / total,
            fpr95: fpr_known.then(|| fpr / total),
        }))
    }
}

/// The run's training mix and its validation sets: the `validation_only` sources whole (each
/// cut to its first `data.validation` classes when that is set), or, without such sources,
/// the last `data.validation` classes of every training source (at most
/// [`crate::data::MAX_VALIDATION_SHARE`] of it).
pub fn training_and_validation(data: &DataConfig) -> Result<(TrackMix, Validation)> {
    let sources = data.all_sources()?;
    let (mut train_sets, mut train_weights) = (Vec::new(), Vec::new());
    let mut held = Validation {
        held_out_scenes: sources.iter().any(|s| s.validation_only),
        ..Validation::default()
    };
    for source in &sources {
        let mut set = load_or_generate_source(source)?;
        if source.validation_only {
            keep_first_classes(&mut set, data.validation);
            held.sets.push(set);
            held.weights.push(source.weight);
        } else {
            train_sets.push(set);
            train_weights.push(source.weight);
        }
    }
    let mut mix = TrackMix::new(train_sets, train_weights)?;
    if let Some(set) = held
        .sets
        .iter()
        .find(|s| s.header.magnification != mix.magnification())
    {
        bail!(
            "validation tracks cut at magnification {}, training tracks at {}",
            set.header.magnification,
            mix.magnification()
        );
    }
    if !held.held_out_scenes {
        held.weights = mix.weights.clone();
        held.sets = mix.split_off(data.validation);
    }
    Ok((mix, held))
}

/// A held-out scene's validation set: its first `limit` classes (all when `limit` is 0).
fn keep_first_classes(set: &mut TrackSet, limit: usize) {
    if limit > 0 && set.header.classes > limit {
        set.split_off(set.header.classes - limit);
    }
}

/// The run's held-out scenes (`validation_only` sources) cut as [`training_and_validation`]
/// cuts them, without the training sources: what `descl-train validate` scores finished models
/// on. A run without held-out scenes is refused (its validation classes are the training
/// sources' last ones, which another run may have trained on), and so is a missing track file
/// (scoring never cuts tracks: `descl-train tracks --config` does).
pub fn validation_of(data: &DataConfig) -> Result<Validation> {
    let sources = data.all_sources()?;
    if !sources.iter().any(|s| s.validation_only) {
        bail!(
            "the run holds out no scene (no `validation_only` source): its validation classes \
             are its training sources' last ones, which another model may have trained on"
        );
    }
    let mut held = Validation {
        held_out_scenes: true,
        ..Validation::default()
    };
    for source in sources.iter().filter(|s| s.validation_only) {
        if !source.tracks.exists() {
            bail!(
                "{}: held-out track file missing (`descl-train tracks --config` cuts it)",
                source.tracks.display()
            );
        }
        let mut set = load_or_generate_source(source)?;
        keep_first_classes(&mut set, data.validation);
        held.sets.push(set);
        held.weights.push(source.weight);
    }
    Ok(held)
}

fn load_or_generate_source(source: &TrackSource) -> Result<TrackSet> {
    let path = &source.tracks;
    if path.exists() {
        let set = TrackSet::load(path)?;
        check_made_as_configured(path, &set.header.source, source)?;
        return Ok(set);
    }
    let set = match (&source.synthetic, &source.colmap) {
        (Some(synthetic), None) => crate::data::synthetic::generate(synthetic)
            .with_context(|| format!("{}: generating the missing track file", path.display()))?,
        (None, Some(colmap)) => crate::data::colmap::generate(colmap)
            .with_context(|| format!("{}: generating the missing track file", path.display()))?,
        (None, None) => bail!(
            "{}: track file missing and no generator (`synthetic` or `colmap`) configured",
            path.display()
        ),
        (Some(_), Some(_)) => bail!("{}: a source has one generator", path.display()),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create folder", dir.display()))?;
    }
    set.save(path)?;
    Ok(set)
}

/// A track file is reused only when it records the generator and settings its source
/// configures and, when descl's generators cut it, the frames of today's detector
/// ([`crate::data::TRACK_FRAMES`]); otherwise
/// an error naming the file and what differs (cutting again can take long and replaces the
/// file: the user decides).
fn check_made_as_configured(
    path: &Path,
    recorded: &serde_json::Value,
    source: &TrackSource,
) -> Result<()> {
    let expected = match (&source.synthetic, &source.colmap) {
        (Some(s), None) => Some(("synthetic", serde_json::to_value(s)?)),
        (None, Some(c)) => Some(("colmap", serde_json::to_value(c)?)),
        // A track file without a generator (made elsewhere): what it records is all there is.
        _ => None,
    };
    let mut why = Vec::new();
    if let Some((generator, config)) = expected {
        if recorded["generator"] != generator {
            why.push(format!(
                "generator {} (configured: {generator})",
                recorded["generator"]
            ));
        }
        let keys: std::collections::BTreeSet<&String> = config
            .as_object()
            .into_iter()
            .chain(recorded["config"].as_object())
            .flat_map(|o| o.keys())
            .collect();
        for key in keys {
            let (r, c) = (&recorded["config"][key], &config[key]);
            if r != c {
                why.push(format!("`{key}` {r} (configured: {c})"));
            }
        }
    }
    // Cut by descl's generators (not a file of patches made some other way): from DoG frames.
    let cut_by_descl = ["colmap", "synthetic"]
        .iter()
        .any(|g| recorded["generator"] == *g);
    if cut_by_descl && recorded["frames"] != crate::data::TRACK_FRAMES {
        why.push(format!(
            "frames {} (today's: \"{}\"; a file without it was cut from DoG positions 1/4 px off)",
            recorded["frames"],
            crate::data::TRACK_FRAMES
        ));
    }
    if why.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: the track file was not made as its source is configured: {}; delete it to cut it again, or name another `tracks` file",
        path.display(),
        why.join("; ")
    )
}

fn save_checkpoint(
    out: &Path,
    net: &Net,
    optimizer: &Optimizer,
    meta: CheckpointMeta,
) -> Result<()> {
    let mut tensors: Vec<(String, Tensor)> = net.vs.variables().into_iter().collect();
    tensors.extend(optimizer.state_tensors());
    // Write beside, then rename: a crash mid-write leaves the previous checkpoint intact.
    let tmp = out.join(format!("{CHECKPOINT_WEIGHTS}.tmp"));
    Tensor::write_safetensors(&tensors, &tmp)
        .with_context(|| format!("{}: cannot write checkpoint", tmp.display()))?;
    std::fs::rename(&tmp, out.join(CHECKPOINT_WEIGHTS))?;
    descl::io::atomic::write_bytes_atomic(
        &out.join(CHECKPOINT_META),
        &serde_json::to_vec_pretty(&meta)?,
    )?;
    Ok(())
}

fn load_checkpoint(
    path: &Path,
    net: &mut Net,
    optimizer: &mut Optimizer,
    steps: i64,
) -> Result<()> {
    let saved: HashMap<String, Tensor> = Tensor::read_safetensors(path)
        .with_context(|| format!("{}: cannot read checkpoint", path.display()))?
        .into_iter()
        .collect();
    let _guard = tch::no_grad_guard();
    for (name, mut var) in net.vs.variables() {
        let Some(src) = saved.get(&name) else {
            bail!("{}: checkpoint lacks {name}", path.display())
        };
        var.f_copy_(src)?;
    }
    optimizer
        .load_state(&saved, steps)
        .with_context(|| format!("{}: bad checkpoint", path.display()))
}

/// Descriptors of `patches` (N·32·32 f32) in evaluation mode, in chunks.
pub fn describe(net: &Net, patches: &[f32], device: Device) -> Result<Tensor> {
    const CHUNK: usize = 1024;
    let _guard = tch::no_grad_guard();
    let px = PATCH_SIDE * PATCH_SIDE;
    let mut outs = Vec::new();
    for chunk in patches.chunks(CHUNK * px) {
        let n = (chunk.len() / px) as i64;
        let x = Tensor::f_from_slice(chunk)?
            .f_reshape([n, 1, PATCH_SIDE as i64, PATCH_SIDE as i64])?
            .f_to_device(device)?;
        outs.push(net.forward_t(&x, false)?.f_to_device(Device::Cpu)?);
    }
    Ok(Tensor::f_cat(&outs, 0)?)
}

/// NN accuracy over the sources' validation sets, weighted as the sources are mixed (sources with
/// fewer than 2 held-out classes are left out); None when no source has any.
pub fn validation_accuracy(
    net: &Net,
    sets: &[TrackSet],
    weights: &[f64],
    device: Device,
) -> Result<Option<f64>> {
    let (mut sum, mut total) = (0.0, 0.0);
    for (set, &w) in sets.iter().zip(weights) {
        if set.header.classes >= 2 {
            sum += w * nn_accuracy(net, set, device)?;
            total += w;
        }
    }
    Ok((total > 0.0).then(|| sum / total))
}

/// The descriptors of every class's views 0 and 1 (classes × d each), in evaluation mode.
/// Binary nets are judged on their bits: L2 between ±1 vectors ranks as Hamming distance.
fn first_two_views(net: &Net, set: &TrackSet, device: Device) -> Result<(Tensor, Tensor)> {
    let n = set.header.classes as i64;
    let views = set.header.views as i64;
    let desc = describe(net, &set.classes_f32(0..set.header.classes), device)?
        .f_reshape([n, views, -1])?;
    let desc = if net.is_binary() {
        desc.f_sign()?
    } else {
        desc
    };
    Ok((desc.f_select(1, 0)?, desc.f_select(1, 1)?))
}

/// HardNet's FPR95 on described views 0 (`a`) and 1 (`b`) of a track set: positives are (view 0, view 1) of each class, negatives
/// (view 0 of class i, view 1 of class i+1 mod n) — as many as positives, as in the UBC
/// PhotoTour 50/50 pairs; the false-positive rate at 95 % recall by descl's own
/// `eval::metrics::fpr_at_recall` (the benchmark's definition).
#[cfg(feature = "tracks")]
pub fn fpr95_of(a: &Tensor, b: &Tensor) -> Result<Option<f64>> {
    let n = a.size().first().copied().unwrap_or(0) as usize;
    if n < 2 {
        return Ok(None);
    }
    let shifted = b.f_roll([-1], [0])?;
    let row_l2 = |x: &Tensor, y: &Tensor| -> Result<Vec<f32>> {
        let d = (x - y)
            .f_square()?
            .f_sum_dim_intlist([1i64].as_slice(), false, Kind::Float)?
            .f_sqrt()?;
        Ok(Vec::try_from(d)?)
    };
    let (pos, neg) = (row_l2(a, b)?, row_l2(a, &shifted)?);
    let distances: Vec<f64> = pos.iter().chain(&neg).map(|&d| f64::from(d)).collect();
    let labels: Vec<bool> = (0..2 * n).map(|i| i < n).collect();
    Ok(Some(descl::eval::metrics::fpr_at_recall(
        &distances,
        &labels,
        descl::eval::metrics::UBC_RECALL,
    )?))
}

/// Without descl's evaluation metrics (no feature `tracks`): no FPR95.
#[cfg(not(feature = "tracks"))]
pub fn fpr95_of(_a: &Tensor, _b: &Tensor) -> Result<Option<f64>> {
    Ok(None)
}

/// Fraction of validation classes whose view-0 descriptor has its own view 1 as nearest
/// neighbour among all view-1 descriptors (a cheap progress signal on held-out training tracks).
pub fn nn_accuracy(net: &Net, set: &TrackSet, device: Device) -> Result<f64> {
    let (a, b) = first_two_views(net, set, device)?;
    nn_accuracy_of(&a, &b)
}

/// [`nn_accuracy`] on described views 0 (`a`) and 1 (`b`), classes × d each.
fn nn_accuracy_of(a: &Tensor, b: &Tensor) -> Result<f64> {
    let n = a.size().first().copied().unwrap_or(0);
    let d = crate::loss::hardnet::distance_matrix(a, b);
    let nearest = d.f_argmin(1, false)?;
    let truth = Tensor::f_arange(n, (Kind::Int64, Device::Cpu))?;
    Ok(nearest
        .f_eq_tensor(&truth)?
        .f_to_kind(Kind::Float)?
        .f_mean(Kind::Float)?
        .f_double_value(&[])?)
}

/// The checkout's commit (`git rev-parse --short HEAD`, "-dirty" with uncommitted changes to
/// tracked files), so a card names the code that trained it; None outside a git checkout.
pub fn code_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// What a run did, for its card.
struct CardRun<'a> {
    iterations_completed: usize,
    wall_time_s: f64,
    final_loss: f64,
    validation_nn_accuracy: Option<f64>,
    /// The end point's validation numbers with the sets they were measured on
    /// ([`Validation::record`]).
    validation: serde_json::Value,
    init: Option<&'a InitRecord>,
    code_commit: Option<&'a str>,
    /// Devices that ran the steps, in order.
    devices: &'a [String],
}

/// The scenes (with licences) of the training or the validation-only sources, each once, in
/// source order; `restricted` scenes make the model's own terms those of the most restrictive.
pub fn scenes_of(config: &RunConfig, validation: bool) -> Vec<SceneLicence> {
    let mut out: Vec<SceneLicence> = Vec::new();
    for source in config.data.all_sources().unwrap_or_default() {
        if source.validation_only == validation {
            for s in source.scenes {
                if !out.iter().any(|o| o.scene == s.scene) {
                    out.push(s);
                }
            }
        }
    }
    out
}

fn model_card(
    config: &RunConfig,
    net: &Net,
    onnx: &Path,
    tracks: &TrackMix,
    run: CardRun,
) -> Result<ModelCard> {
    let device_name = run.devices.join(", then ");
    let CardRun {
        wall_time_s,
        final_loss,
        validation_nn_accuracy,
        validation,
        init,
        code_commit,
        ..
    } = run;
    let mut training = serde_json::json!({
        "method": config.loss.get("name").cloned().unwrap_or(serde_json::Value::Null),
        "hyper_parameters": {
            "loss": config.loss,
            "optimizer": config.optimizer,
            "lr": config.lr,
            "schedule": config.schedule,
            "views_per_class": config.views,
            "augment": config.data.augment,
            "width": config.net.width,
        },
        "data": {"sources": tracks.describe(), "classes": tracks.classes(), "views": tracks.views(),
                 "scenes": scenes_of(config, false), "validation_scenes": scenes_of(config, true)},
        "iterations": config.iterations,
        "batch": config.batch,
        "seed": config.seed,
        "device": device_name,
        "wall_time_s": wall_time_s,
        "final_loss": final_loss,
        "validation_nn_accuracy": validation_nn_accuracy,
        "validation": validation,
        "init": init,
        "log": config.out.join(LOG_FILE),
        "code_commit": code_commit,
        "config": config,
    });
    if run.iterations_completed < config.iterations {
        training["iterations_completed"] = run.iterations_completed.into();
    }
    if let Some(d) = &config.distill {
        let (_, teacher) = crate::distill::teacher_card(&d.teacher)?;
        training["distill"] = serde_json::json!({"teacher": teacher, "target": d.target,
            "weight": d.weight, "metric_weight": d.metric_weight});
    }
    let serde_json::Value::Object(training) = training else {
        bail!("training section is not an object")
    };
    let architecture = net.arch.card_name(net.width);
    Ok(ModelCard {
        name: config.name.clone(),
        file: format!("{}.onnx", config.name),
        sha256: sha256_file(onnx)?,
        architecture,
        input: InputSpec {
            size: PATCH_SIDE,
            range: [0.0, 1.0],
        },
        output: OutputSpec {
            dim: net.output_dim() as usize,
            kind: if net.is_binary() {
                OutputKind::Binary
            } else {
                OutputKind::Float
            },
        },
        patch: PatchSpec {
            size: PATCH_SIDE,
            magnification: tracks.magnification() as f32,
        },
        training,
        metrics: serde_json::Map::new(),
    })
}

/// Copies the ONNX model, its card and its weights (`NAME.safetensors`, what `init` fine-tunes
/// from) into `dir` (each atomically).
fn install(
    dir: &Path,
    name: &str,
    onnx: &Path,
    card: &Path,
    weights: &Path,
) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create folder", dir.display()))?;
    let onnx_dst = dir.join(format!("{name}.onnx"));
    let card_dst = dir.join(format!("{name}.json"));
    let weights_dst = dir.join(format!("{name}.safetensors"));
    for (src, dst) in [
        (onnx, &onnx_dst),
        (card, &card_dst),
        (weights, &weights_dst),
    ] {
        let bytes =
            std::fs::read(src).with_context(|| format!("{}: cannot read", src.display()))?;
        descl::io::atomic::write_bytes_atomic(dst, &bytes)?;
    }
    Ok((onnx_dst, card_dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resume compares what a run computes: a track file reached by another path or a
    /// scene's licence corrected is the same plan; a scene renamed (or moved to another
    /// source), a weight or an operational field's neighbour (`lr`) is another.
    #[test]
    fn plans_differ_in_what_is_computed_not_in_where_it_is_found() {
        let plan = |tracks: &str, scene: &str, licence: &str, weight: f64, lr: f64| {
            let config = serde_json::json!({
                "name": "p", "net": {"arch": "tfeat"}, "loss": {"name": "hardnet"},
                "data": {"sources": [
                    {"tracks": tracks, "weight": weight,
                     "scenes": [{"scene": scene, "licence": licence, "class": "open"}]},
                    {"tracks": "held.bin", "validation_only": true}]},
                "iterations": 10, "batch": 16, "lr": lr, "seed": 1, "out": "runs/p",
                "optimizer": {"name": "adam"},
                "device": "cpu"});
            let config: RunConfig = serde_json::from_value(config).unwrap();
            comparable_plan(
                &serde_json::json!({"config": serde_json::to_value(config).unwrap(),
                "training": [{"patches_sha256": "ab"}], "validation": []}),
            )
        };
        let base = plan("a/t.bin", "alpha", "CC0", 1.0, 0.01);
        assert_eq!(
            base,
            plan("./a/../a/t.bin", "alpha", "CC BY 4.0", 1.0, 0.01)
        );
        for other in [
            plan("a/t.bin", "beta", "CC0", 1.0, 0.01),
            plan("a/t.bin", "alpha", "CC0", 0.5, 0.01),
            plan("a/t.bin", "alpha", "CC0", 1.0, 0.02),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn track_files_made_otherwise_are_refused() {
        let source: TrackSource = serde_json::from_value(serde_json::json!({
            "tracks": "t.bin",
            "colmap": {"sparse": "s/0", "database": "d.db", "images": "im", "seed": 1}
        }))
        .unwrap();
        let config = serde_json::to_value(source.colmap.as_ref().unwrap()).unwrap();
        let made = |config: serde_json::Value, frames: Option<&str>| {
            let mut v = serde_json::json!({"generator": "colmap", "config": config, "stats": {}});
            if let Some(f) = frames {
                v["frames"] = f.into();
            }
            v
        };
        let path = Path::new("t.bin");
        check_made_as_configured(
            path,
            &made(config.clone(), Some(crate::data::TRACK_FRAMES)),
            &source,
        )
        .unwrap();
        // Another seed: named, with both values.
        let mut other = config.clone();
        other["seed"] = 2.into();
        let e =
            check_made_as_configured(path, &made(other, Some(crate::data::TRACK_FRAMES)), &source)
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("t.bin") && e.contains("`seed` 2 (configured: 1)"),
            "{e}"
        );
        // Cut before DoG positions lost OpenCV's upscale offset.
        let e = check_made_as_configured(path, &made(config.clone(), None), &source)
            .unwrap_err()
            .to_string();
        assert!(e.contains("frames null") && e.contains("1/4 px"), "{e}");
        // Jitter configured, none recorded.
        let mut jittered = source.clone();
        jittered.colmap.as_mut().unwrap().jitter = Some(crate::data::jitter::FrameJitter {
            rotation_deg: 7.5,
            scale: 0.11,
            shift: 0.02,
        });
        let e = check_made_as_configured(
            path,
            &made(config, Some(crate::data::TRACK_FRAMES)),
            &jittered,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`jitter` null"), "{e}");
    }

    #[test]
    fn schedules_hit_their_end_points() {
        let s = Schedule {
            decay: Decay::Linear,
            warmup: 0,
        };
        assert_eq!(s.lr(1.0, 0, 10), 1.0);
        assert!((s.lr(1.0, 5, 10) - 0.5).abs() < 1e-12);
        let c = Schedule {
            decay: Decay::Cosine,
            warmup: 0,
        };
        assert!((c.lr(2.0, 5, 10) - 1.0).abs() < 1e-12);
        let w = Schedule {
            decay: Decay::Constant,
            warmup: 4,
        };
        assert!((w.lr(1.0, 1, 10) - 0.5).abs() < 1e-12);
        // SDGMNet's: 1 for the first 10 %, then halved at 10 %, 20 %, … (0.5⁹ in the last 10 %).
        let h = Schedule {
            decay: Decay::Halving,
            warmup: 0,
        };
        assert_eq!(h.lr(1.0, 0, 20_000), 1.0);
        assert_eq!(h.lr(1.0, 1_999, 20_000), 1.0);
        assert_eq!(h.lr(1.0, 2_000, 20_000), 0.5);
        assert_eq!(h.lr(1.0, 6_000, 20_000), 0.125);
        assert_eq!(h.lr(1.0, 5_999, 20_000), 0.25);
        assert_eq!(h.lr(1.0, 19_999, 20_000), 0.5f64.powi(9));
        let d: Schedule = serde_json::from_str(r#"{"decay": "halving"}"#).unwrap();
        assert_eq!(d.decay, Decay::Halving);
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
        assert!(parse_device("tpu").is_err());
        assert_eq!(parse_device_name("cuda:1").unwrap(), Device::Cuda(1));
        assert!(parse_device_name("cuda:x").is_err());
    }
}
