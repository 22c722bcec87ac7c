//! Knowledge distillation: a small network (the student) trained to reproduce what a larger
//! carded model (the teacher) computes on the same patches.
//!
//! Why: descl's most accurate network (HyNet) describes ~1k patches/s on two cores, L2-Net ×0.5
//! 5–6k; `descl sfm` needs the fast one and matching wants the accurate one. A student of the
//! fast architecture that learns the teacher's geometry of the descriptor space, on the
//! training photos' patches, is the way to one default for both (issue 45).
//!
//! The teacher runs in inference mode (batch norm on its running statistics, no gradient) on
//! exactly the batch the student sees, augmentation included. Two targets, each a formula on
//! the batch (`n` classes × `k` views, unit descriptors `s` of the student and `t` of the
//! teacher):
//!
//! - [`DistillTarget::Descriptors`]: the descriptors themselves (FitNets' hint, Romero et al.
//!   2015, with the hint at the output): `L = 1/(nk) Σ_i ‖s_i − t_i‖²`.
//! - [`DistillTarget::Distances`]: the matcher's view of the batch, each view-0 descriptor's
//!   distances to every view-1 descriptor (the `n × n` matrix HardNet mines, Mishchuk et al.
//!   2017, eq. 1): `L = 1/n² Σ_{a,b} (d(s⁰_a, s¹_b) − d(t⁰_a, t¹_b))²`, averaged over the
//!   consecutive view pairs for k > 2. It is unchanged by any rotation of the student's space,
//!   so a student started from its own trained weights need not first turn into the
//!   teacher's coordinates (the distance-wise relation of Park et al. 2019, eq. 4, unnormalised
//!   and squared, because descl's matcher compares these distances directly).
//!
//! The run's own metric loss (`loss` in the config) is added with `metric_weight` (0: the
//! teacher alone). The card records the teacher (name, ONNX SHA-256, the card's path), and
//! `lineage` follows it: a student saw every scene its teacher saw.

use crate::loss::hardnet::distance_matrix;
use crate::net::{Arch, Net};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tch::{Device, Tensor};

/// What the student is taught to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DistillTarget {
    /// The teacher's descriptors (module doc, first formula).
    Descriptors,
    /// The teacher's view-0 × view-1 distance matrix (module doc, second formula).
    Distances,
}

/// A run config's `distill` member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistillConfig {
    /// The teacher: a carded float model's ONNX file (its card beside it), e.g.
    /// `models/descl-hynet-sdgm-real25all-b1024.onnx`.
    pub teacher: PathBuf,
    pub target: DistillTarget,
    /// Weight of the distillation term.
    #[serde(default = "one")]
    pub weight: f64,
    /// Weight of the run's own `loss` (0: distillation alone).
    #[serde(default = "one")]
    pub metric_weight: f64,
}

fn one() -> f64 {
    1.0
}

impl DistillConfig {
    pub fn validate(&self) -> Result<()> {
        let ok = |w: f64| w.is_finite() && w >= 0.0;
        if !ok(self.weight) || !ok(self.metric_weight) || self.weight + self.metric_weight == 0.0 {
            bail!(
                "distill: weight {} and metric_weight {} must be finite, ≥ 0 and not both 0",
                self.weight,
                self.metric_weight
            );
        }
        Ok(())
    }
}

/// The teacher's identity, as the student's card records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeacherRecord {
    /// The model's name (its card's).
    pub name: String,
    /// The ONNX file read, and its SHA-256 (checked against the card before reading).
    pub file: PathBuf,
    pub sha256: String,
    pub architecture: String,
}

/// The card of the teacher at `onnx` (beside it), checked: the file is the card's (SHA-256)
/// and a float model's. What the student's card records of it.
pub fn teacher_card(onnx: &Path) -> Result<(descl::model::ModelCard, TeacherRecord)> {
    let card_path = onnx.with_extension("json");
    let card = descl::model::ModelCard::load(&card_path)
        .with_context(|| format!("distill: the teacher's card {}", card_path.display()))?;
    card.verify_sha256(onnx)
        .with_context(|| format!("distill: teacher {}", onnx.display()))?;
    if card.output.kind != descl::model::OutputKind::Float {
        bail!("distill: teacher {} is not a float model", card.name);
    }
    let record = TeacherRecord {
        name: card.name.clone(),
        file: onnx.to_path_buf(),
        sha256: card.sha256.clone(),
        architecture: card.architecture.clone(),
    };
    Ok((card, record))
}

/// A loaded teacher.
pub struct Teacher {
    net: Net,
    pub record: TeacherRecord,
    /// Its card's patch magnification: it must be the tracks'.
    pub magnification: f64,
}

impl Teacher {
    /// Reads the carded model at `onnx` (card beside it, SHA-256 checked) onto `device`.
    pub fn load(onnx: &Path, device: Device) -> Result<Teacher> {
        let (card, record) = teacher_card(onnx)?;
        let (arch, width) = Arch::parse_card_name(&card.architecture)
            .with_context(|| format!("distill: teacher {}: architecture", onnx.display()))?;
        let mut net = crate::onnx::import(onnx, arch, width)?;
        net.vs.set_device(device);
        Ok(Teacher {
            net,
            magnification: f64::from(card.patch.magnification),
            record,
        })
    }

    /// The teacher's descriptors of `patches` (N, 1, 32, 32), in inference mode, without
    /// gradient.
    pub fn describe(&self, patches: &Tensor) -> Result<Tensor> {
        let _guard = tch::no_grad_guard();
        self.net.forward_t(patches, false)
    }

    pub fn output_dim(&self) -> i64 {
        self.net.output_dim()
    }
}

/// The distillation term for student descriptors `s` and teacher descriptors `t`, both (n, k, d)
/// (module doc).
pub fn distill_loss(target: DistillTarget, s: &Tensor, t: &Tensor) -> Tensor {
    match target {
        DistillTarget::Descriptors => (s - t)
            .square()
            .sum_dim_intlist(2, false, tch::Kind::Float)
            .mean(tch::Kind::Float),
        DistillTarget::Distances => {
            let k = s.size()[1];
            let terms: Vec<Tensor> = (0..k - 1)
                .map(|v| {
                    let ds = distance_matrix(&s.select(1, v), &s.select(1, v + 1));
                    let dt = distance_matrix(&t.select(1, v), &t.select(1, v + 1));
                    (ds - dt).square().mean(tch::Kind::Float)
                })
                .collect();
            Tensor::stack(&terms, 0).mean(tch::Kind::Float)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32], shape: [i64; 3]) -> Tensor {
        Tensor::from_slice(v).reshape(shape)
    }

    /// Hand-computed: two classes, two views, 2-D unit descriptors.
    #[test]
    fn the_losses_match_hand_computed_values() {
        // Student: class 0 views (1,0),(0,1); class 1 views (0,1),(1,0).
        let s = t(&[1., 0., 0., 1., 0., 1., 1., 0.], [2, 2, 2]);
        // Teacher: every view (1,0).
        let te = t(&[1., 0., 1., 0., 1., 0., 1., 0.], [2, 2, 2]);
        // ‖s−t‖²: 0, 2, 2, 0 → mean 1.
        let d = distill_loss(DistillTarget::Descriptors, &s, &te).double_value(&[]);
        assert!((d - 1.0).abs() < 1e-6, "{d}");
        // Student distances view0 × view1: s⁰ = [(1,0),(0,1)], s¹ = [(0,1),(1,0)]:
        // [[√2, 0], [0, √2]]; the teacher's all 0. Mean of squares: 1 (less ~1e-3: the matrix adds
        // ε = DISTANCE_EPS under its square roots).
        let r = distill_loss(DistillTarget::Distances, &s, &te).double_value(&[]);
        assert!((r - 1.0).abs() < 5e-3, "{r}");
        // Zero when the student is the teacher, and for a rotated student under Distances only.
        assert!(distill_loss(DistillTarget::Distances, &te, &te).double_value(&[]) < 1e-6);
        let rotated = t(&[0., 1., 1., 0., 1., 0., 0., 1.], [2, 2, 2]); // s with axes swapped
        let a = distill_loss(DistillTarget::Distances, &s, &s).double_value(&[]);
        let b = distill_loss(DistillTarget::Distances, &rotated, &s).double_value(&[]);
        assert!(a < 1e-6 && b < 1e-6, "{a} {b}");
        assert!(distill_loss(DistillTarget::Descriptors, &rotated, &s).double_value(&[]) > 1.0);
    }

    #[test]
    fn weights_are_checked() {
        let c = |weight, metric_weight| DistillConfig {
            teacher: "t.onnx".into(),
            target: DistillTarget::Distances,
            weight,
            metric_weight,
        };
        assert!(c(1.0, 0.0).validate().is_ok());
        assert!(c(0.0, 0.0).validate().is_err());
        assert!(c(f64::NAN, 1.0).validate().is_err());
        assert!(c(-1.0, 1.0).validate().is_err());
    }
}
