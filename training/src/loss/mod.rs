//! Training losses behind one trait. Each paper's method is one file:
//! `hardnet` (hardest-in-batch triplet), `cdf` (CDF dynamic soft margin, float and binary),
//! `adasample` (AdaSample angular hinge), `active` (active margin), `sdgm` (SDGMNet).

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
}

pub mod hardnet;

use anyhow::{bail, Result};

/// The loss named by a run config's `loss` object: `{"name": "hardnet", ...parameters}`.
pub fn from_config(config: &serde_json::Value) -> Result<Box<dyn Loss>> {
    let name = config
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    match name {
        "hardnet" => Ok(Box::new(hardnet::HardNetLoss::from_config(config)?)),
        other => bail!("unknown loss {other:?} (known: hardnet)"),
    }
}
