//! Every paper's loss, optimised directly on free descriptors (no network), must make matching
//! views nearest neighbours of each other: a cheap end-to-end check that signs, detaching and
//! mining are right (a wrong sign or a weight that leaks gradient makes the accuracy fall).

use descl_training::loss::active::ActiveLoss;
use descl_training::loss::adasample::{AdaSampleLoss, LAMBDA};
use descl_training::loss::cdf::{CdfLoss, CdfVariant};
use descl_training::loss::sdgm::SdgmLoss;
use descl_training::loss::Loss;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

const CLASSES: i64 = 32;
const STEPS: usize = 300;

/// Share of anchors (view 0) whose nearest view-1 descriptor is their own.
fn matching_accuracy(desc: &Tensor) -> f64 {
    let a = desc.select(1, 0);
    let p = desc.select(1, 1);
    let nearest = a.matmul(&p.tr()).argmax(1, false);
    let truth = Tensor::arange(a.size()[0], (Kind::Int64, Device::Cpu));
    f64::try_from(
        nearest
            .eq_tensor(&truth)
            .to_kind(Kind::Float)
            .mean(Kind::Float),
    )
    .unwrap()
}

/// Optimises free views (CLASSES × k × dim) with `loss`; returns accuracy before and after.
/// `binary`: descriptors are tanh outputs and accuracy is measured on their signs.
fn train(loss: &mut dyn Loss, k: i64, dim: i64, binary: bool, epoch_every: usize) -> (f64, f64) {
    tch::manual_seed(11);
    let centres = Tensor::randn([CLASSES, 1, dim], (Kind::Float, Device::Cpu));
    let noise = Tensor::randn([CLASSES, k, dim], (Kind::Float, Device::Cpu)) * 1.1;
    let vs = nn::VarStore::new(Device::Cpu);
    let x = vs.root().var_copy("x", &(centres + noise));
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
    let describe = |x: &Tensor| {
        if binary {
            x.tanh()
        } else {
            x / x.square().sum_dim_intlist(-1, true, Kind::Float).sqrt()
        }
    };
    let measure = |x: &Tensor| {
        let d = describe(&x.detach());
        matching_accuracy(&if binary { d.sign() } else { d })
    };
    let before = measure(&x);
    for step in 0..STEPS {
        let l = loss.forward(&describe(&x), step as f64 / STEPS as f64);
        assert!(
            f64::try_from(&l).unwrap().is_finite(),
            "{}: loss not finite at step {step}",
            loss.name()
        );
        opt.backward_step(&l);
        if (step + 1) % epoch_every == 0 {
            loss.end_epoch();
        }
    }
    (before, measure(&x))
}

fn check(loss: &mut dyn Loss, k: i64, dim: i64, binary: bool, epoch_every: usize) {
    let (before, after) = train(loss, k, dim, binary, epoch_every);
    eprintln!(
        "{}: matching accuracy {before:.3} → {after:.3}",
        loss.name()
    );
    assert!(
        after > before + 0.2 && after > 0.8,
        "{}: {before} → {after}",
        loss.name()
    );
}

#[test]
fn cdf_float_variants_learn() {
    for variant in [
        CdfVariant::Difference,
        CdfVariant::Positive,
        CdfVariant::Gaussian,
    ] {
        check(&mut CdfLoss::new(variant, false), 2, 16, false, STEPS);
    }
}

#[test]
fn cdf_binary_learns() {
    check(
        &mut CdfLoss::new(CdfVariant::Difference, true),
        2,
        32,
        true,
        STEPS,
    );
}

#[test]
fn adasample_learns() {
    check(&mut AdaSampleLoss::new(LAMBDA, 1), 3, 16, false, STEPS);
}

#[test]
fn active_learns() {
    check(&mut ActiveLoss::new(1), 2, 16, false, 50);
}

#[test]
fn sdgm_learns() {
    check(&mut SdgmLoss::new(false), 2, 16, false, STEPS);
    check(&mut SdgmLoss::new(true), 2, 16, false, STEPS);
}
