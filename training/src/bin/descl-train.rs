//! `descl-train`: train a descriptor network from a JSON run config, or export weights to ONNX.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use descl_training::net::{Arch, Net};
use std::path::PathBuf;
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

#[derive(Subcommand)]
enum Command {
    /// Train (or resume) the run described by a JSON config.
    Train {
        #[arg(long)]
        config: PathBuf,
        /// Continue from the output folder's last checkpoint.
        #[arg(long)]
        resume: bool,
    },
    /// Generate (or regenerate) a run's synthetic track file without training.
    Tracks {
        #[arg(long)]
        config: PathBuf,
    },
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
    /// Export a safetensors state dict to ONNX (input "patches" N×1×32×32, output "descriptors").
    Export {
        #[arg(long)]
        weights: PathBuf,
        /// tfeat | l2net
        #[arg(long)]
        arch: String,
        /// Channel multiplier the weights were trained with.
        #[arg(long, default_value_t = 1.0)]
        width: f64,
        #[arg(long)]
        out: PathBuf,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train { config, resume } => {
            let cfg = descl_training::train::RunConfig::load(&config)?;
            let summary = descl_training::train::train(&cfg, resume)?;
            println!("{}", serde_json::to_string_pretty(&summary)?);
        }
        Command::Tracks { config } => {
            let cfg = descl_training::train::RunConfig::load(&config)?;
            let synthetic = cfg
                .data
                .synthetic
                .context("config has no data.synthetic generator")?;
            let set = descl_training::data::synthetic::generate(&synthetic)?;
            if let Some(dir) = cfg.data.tracks.parent() {
                std::fs::create_dir_all(dir)?;
            }
            set.save(&cfg.data.tracks)?;
            println!(
                "{}",
                serde_json::json!({"tracks": cfg.data.tracks, "classes": set.header.classes, "views": set.header.views})
            );
        }
        Command::Compare {
            bench,
            methods,
            json,
        } => {
            let report: serde_json::Value = serde_json::from_slice(
                &std::fs::read(&bench).with_context(|| bench.display().to_string())?,
            )
            .with_context(|| format!("{}: not a JSON bench report", bench.display()))?;
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
            arch,
            width,
            out,
        } => {
            let arch = Arch::parse(&arch)?;
            let net = Net::load(arch, width, &weights, tch::Device::Cpu)?;
            let doc = format!(
                "{} exported by descl-train from {}",
                arch.name(),
                weights.display()
            );
            descl_training::onnx::export(&net, &out, &doc)?;
            println!(
                "{}",
                serde_json::json!({"onnx": out, "arch": arch.name(), "dim": net.output_dim()})
            );
        }
    }
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
