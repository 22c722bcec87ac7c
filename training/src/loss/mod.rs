//! Training losses behind one trait. Each paper's method is one file:
//! `hardnet` (hardest-in-batch triplet), `cdf` (CDF dynamic soft margin, float and binary),
//! `adasample` (AdaSample angular hinge), `active` (active margin), `sdgm` (SDGMNet);
//! `mining` holds the distances and HardNet negative mining the papers' losses share.
//! Losses that keep running statistics save them in checkpoints ([`Loss::state`]).

pub mod active;
pub mod adasample;
pub mod cdf;
pub mod mining;
pub mod sdgm;

use tch::Tensor;

/// A training loss over one batch of descriptors.
///
/// `descriptors` has shape (n, k, d): n classes (3D points / synthetic tracks) × k views of each,
/// in the output space of the network (unit vectors for float models, tanh outputs for binary).
/// Rows of different classes are negatives of each other (HardNet batch layout, k = 2).
/// `progress` = step / total steps, in [0, 1] (warm-up and curriculum schedules).
pub trait Loss: Send {
    /// Short name written in logs and model cards.
    fn name(&self) -> &'static str;
    /// The scalar loss to back-propagate.
    fn forward(&mut self, descriptors: &Tensor, progress: f64) -> Tensor;
    /// Called at the end of every epoch (e.g. the active margin update, Alg. 1).
    fn end_epoch(&mut self) {}
    /// Scalar statistics of the last `forward` for the JSON-lines log (name, value).
    fn stats(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// The running state (moving statistics, margin, sampling position) saved in checkpoints,
    /// so that a resumed run continues exactly. Stateless losses keep the default.
    fn state(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Restores a [`Loss::state`] when a run resumes.
    fn restore(&mut self, _state: &serde_json::Value) -> anyhow::Result<()> {
        Ok(())
    }
}

pub mod hardnet;

use anyhow::{bail, Result};

/// The loss named by a run config's `loss` object: `{"name": "hardnet", ...parameters}`.
///
/// Names and parameters (all optional, defaults = the papers' values):
/// - `hardnet`: `margin`, `anchor_swap`;
/// - `cdf`: `variant` ("difference" | "positive" | "gaussian"), `binary` (bool);
///   `cdf-binary` = `cdf` with `binary: true`;
/// - `adasample`: `lambda` (number or "inf"), `seed`;
/// - `active`: `margin`, `step`, `share`, `easy_epochs`, `seed`;
/// - `sdgm`: `fine_tune` (bool).
pub fn from_config(config: &serde_json::Value) -> Result<Box<dyn Loss>> {
    let name = config
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let f64_or = |key: &str, default: f64| -> Result<f64> {
        match config.get(key) {
            None => Ok(default),
            Some(serde_json::Value::String(s)) if s == "inf" => Ok(f64::INFINITY),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| anyhow::anyhow!("loss {name}: {key} must be a number, got {v}")),
        }
    };
    let bool_or =
        |key: &str, default: bool| config.get(key).and_then(|v| v.as_bool()).unwrap_or(default);
    let seed = config.get("seed").and_then(|v| v.as_u64()).unwrap_or(0);
    match name {
        "hardnet" => Ok(Box::new(hardnet::HardNetLoss::from_config(config)?)),
        "cdf" | "cdf-binary" => {
            let variant = match config.get("variant").and_then(|v| v.as_str()) {
                None => cdf::CdfVariant::Difference,
                Some(v) => cdf::CdfVariant::parse(v).ok_or_else(|| {
                    anyhow::anyhow!(
                        "loss cdf: unknown variant {v:?} (known: difference, positive, gaussian)"
                    )
                })?,
            };
            let binary = name == "cdf-binary" || bool_or("binary", false);
            Ok(Box::new(cdf::CdfLoss::new(variant, binary)))
        }
        "adasample" => {
            let lambda = f64_or("lambda", adasample::LAMBDA)?;
            if lambda.is_nan() || lambda < 0.0 {
                bail!("loss adasample: lambda must be ≥ 0, got {lambda}");
            }
            Ok(Box::new(adasample::AdaSampleLoss::new(lambda, seed)))
        }
        "active" => {
            let schedule = active::MarginSchedule::new(
                f64_or("margin", active::INITIAL_MARGIN)?,
                f64_or("step", active::MARGIN_STEP)?,
                f64_or("share", active::ZERO_LOSS_SHARE)?,
            );
            let easy = config
                .get("easy_epochs")
                .and_then(|v| v.as_u64())
                .map_or(active::EASY_EPOCHS, |v| v as usize);
            Ok(Box::new(active::ActiveLoss::with(schedule, easy, seed)))
        }
        "sdgm" => Ok(Box::new(sdgm::SdgmLoss::new(bool_or("fine_tune", false)))),
        other => bail!(
            "unknown loss {other:?} (known: hardnet, cdf, cdf-binary, adasample, active, sdgm)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_method_is_selectable_by_config() {
        for (config, name) in [
            (json!({"name": "hardnet"}), "hardnet"),
            (json!({"name": "cdf"}), "cdf"),
            (json!({"name": "cdf", "variant": "positive"}), "cdf-dpos"),
            (
                json!({"name": "cdf", "variant": "gaussian"}),
                "cdf-gaussian",
            ),
            (json!({"name": "cdf-binary"}), "cdf-binary"),
            (
                json!({"name": "adasample", "lambda": "inf", "seed": 3}),
                "adasample",
            ),
            (
                json!({"name": "active", "margin": 3.0, "easy_epochs": 1}),
                "active",
            ),
            (json!({"name": "sdgm"}), "sdgm"),
            (json!({"name": "sdgm", "fine_tune": true}), "sdgm-finetune"),
        ] {
            assert_eq!(from_config(&config).unwrap().name(), name, "{config}");
        }
        assert!(from_config(&json!({"name": "cdf", "variant": "dneg"})).is_err());
        assert!(from_config(&json!({"name": "adasample", "lambda": -1.0})).is_err());
        assert!(from_config(&json!({"name": "triplet"})).is_err());
    }

    #[test]
    fn restored_state_continues_exactly() {
        use tch::{Device, Kind};
        tch::manual_seed(3);
        let unit = |t: Tensor| &t / t.square().sum_dim_intlist(-1, true, Kind::Float).sqrt();
        let batches: Vec<Tensor> = (0..4)
            .map(|_| unit(Tensor::randn([8, 3, 16], (Kind::Float, Device::Cpu))))
            .collect();
        for config in [
            json!({"name": "cdf"}),
            json!({"name": "cdf", "variant": "gaussian"}),
            json!({"name": "adasample", "seed": 4}),
            json!({"name": "active", "seed": 4, "easy_epochs": 1}),
            json!({"name": "sdgm"}),
        ] {
            let mut a = from_config(&config).unwrap();
            for (i, b) in batches[..3].iter().enumerate() {
                let _ = a.forward(b, 0.5);
                if i == 1 {
                    a.end_epoch();
                }
            }
            let mut b = from_config(&config).unwrap();
            // Through JSON, as in a checkpoint file.
            let saved: serde_json::Value = serde_json::from_str(&a.state().to_string()).unwrap();
            b.restore(&saved).unwrap();
            let la = f64::try_from(a.forward(&batches[3], 0.5)).unwrap();
            let lb = f64::try_from(b.forward(&batches[3], 0.5)).unwrap();
            assert_eq!(la, lb, "{config}");
            // And the state matters: a fresh loss gives a different value on this batch.
            let lf =
                f64::try_from(from_config(&config).unwrap().forward(&batches[3], 0.5)).unwrap();
            assert_ne!(la, lf, "{config}: state has no effect, the test is vacuous");
        }
    }
}
