//! SGD with momentum and Adam, with their state exposed as named tensors so a checkpoint can
//! save and restore it exactly (tch's own optimizers keep their state hidden in libtorch).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tch::{nn::VarStore, Tensor};

/// Optimizer settings of a run config (`"optimizer": {"name": "sgd", ...}`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase")]
pub enum OptimConfig {
    /// SGD with (heavy-ball) momentum and L2 weight decay, as HardNet trains.
    Sgd {
        #[serde(default = "default_momentum")]
        momentum: f64,
        #[serde(default)]
        weight_decay: f64,
    },
    /// Adam (Kingma & Ba 2015, Alg. 1) with L2 weight decay.
    Adam {
        #[serde(default = "default_beta1")]
        beta1: f64,
        #[serde(default = "default_beta2")]
        beta2: f64,
        #[serde(default = "default_adam_eps")]
        eps: f64,
        #[serde(default)]
        weight_decay: f64,
    },
}

fn default_momentum() -> f64 {
    0.9
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_adam_eps() -> f64 {
    1e-8
}

/// An optimizer over the trainable variables of a `VarStore`.
pub struct Optimizer {
    pub config: OptimConfig,
    params: Vec<(String, Tensor)>,
    /// Named state tensors: `m.<param>` (momentum / first moment), `v.<param>` (second moment).
    state: HashMap<String, Tensor>,
    /// Number of steps taken (Adam's bias correction needs it).
    pub steps: i64,
}

impl Optimizer {
    pub fn new(vs: &VarStore, config: OptimConfig) -> Result<Optimizer> {
        let mut params: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let mut state = HashMap::new();
        for (name, p) in &params {
            state.insert(format!("m.{name}"), p.f_zeros_like()?);
            if matches!(config, OptimConfig::Adam { .. }) {
                state.insert(format!("v.{name}"), p.f_zeros_like()?);
            }
        }
        Ok(Optimizer {
            config,
            params,
            state,
            steps: 0,
        })
    }

    pub fn zero_grad(&mut self) {
        for (_, p) in self.params.iter_mut() {
            p.zero_grad();
        }
    }

    /// One update with learning rate `lr` from the gradients of the last backward pass.
    pub fn step(&mut self, lr: f64) -> Result<()> {
        let _guard = tch::no_grad_guard();
        self.steps += 1;
        for (name, p) in self.params.iter_mut() {
            let g = p.f_grad()?;
            if !g.defined() {
                continue;
            }
            let m_key = format!("m.{name}");
            match self.config {
                OptimConfig::Sgd {
                    momentum,
                    weight_decay,
                } => {
                    let g = if weight_decay > 0.0 {
                        g.f_add(&p.f_mul_scalar(weight_decay)?)?
                    } else {
                        g
                    };
                    let Some(m) = self.state.get_mut(&m_key) else {
                        bail!("no state {m_key}")
                    };
                    let _ = m.f_mul_scalar_(momentum)?.f_add_(&g)?;
                    let _ = p.f_sub_(&m.f_mul_scalar(lr)?)?;
                }
                OptimConfig::Adam {
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                } => {
                    let g = if weight_decay > 0.0 {
                        g.f_add(&p.f_mul_scalar(weight_decay)?)?
                    } else {
                        g
                    };
                    let t = self.steps as i32;
                    let Some(m) = self.state.get_mut(&m_key) else {
                        bail!("no state {m_key}")
                    };
                    let _ = m
                        .f_mul_scalar_(beta1)?
                        .f_add_(&g.f_mul_scalar(1.0 - beta1)?)?;
                    let m_hat = m.f_div_scalar(1.0 - beta1.powi(t))?;
                    let v_key = format!("v.{name}");
                    let Some(v) = self.state.get_mut(&v_key) else {
                        bail!("no state {v_key}")
                    };
                    let _ = v
                        .f_mul_scalar_(beta2)?
                        .f_add_(&g.f_square()?.f_mul_scalar(1.0 - beta2)?)?;
                    let v_hat = v.f_div_scalar(1.0 - beta2.powi(t))?;
                    let update = m_hat.f_div(&v_hat.f_sqrt()?.f_add_scalar(eps)?)?;
                    let _ = p.f_sub_(&update.f_mul_scalar(lr)?)?;
                }
            }
        }
        Ok(())
    }

    /// The state tensors, prefixed with `optim.`, for a checkpoint.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut v: Vec<(String, Tensor)> = self
            .state
            .iter()
            .map(|(k, t)| (format!("optim.{k}"), t.shallow_clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Restores the state saved by [`Optimizer::state_tensors`].
    pub fn load_state(&mut self, saved: &HashMap<String, Tensor>, steps: i64) -> Result<()> {
        let _guard = tch::no_grad_guard();
        for (k, t) in self.state.iter_mut() {
            let key = format!("optim.{k}");
            let Some(src) = saved.get(&key) else {
                bail!("checkpoint lacks optimizer state {key}")
            };
            t.f_copy_(src)?;
        }
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// One step on f(w) = w²/2 (gradient w) from w = 2, hand-computed.
    fn one_step(config: OptimConfig, lr: f64) -> f64 {
        let vs = VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[2.0f32]));
        let mut opt = Optimizer::new(&vs, config).unwrap();
        opt.zero_grad();
        (w.square().sum(Kind::Float) * 0.5).backward();
        opt.step(lr).unwrap();
        w.double_value(&[0])
    }

    #[test]
    fn sgd_step_matches_hand_computation() {
        // g = 2 + wd·2 = 2.2 (wd 0.1); m = 2.2; w = 2 − 0.5·2.2 = 0.9.
        let w = one_step(
            OptimConfig::Sgd {
                momentum: 0.9,
                weight_decay: 0.1,
            },
            0.5,
        );
        assert!((w - 0.9).abs() < 1e-6, "{w}");
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        // First Adam step: m̂ = g, v̂ = g², update = g/(|g|+ε) ≈ 1 → w = 2 − 0.1.
        let w = one_step(
            OptimConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            0.1,
        );
        assert!((w - 1.9).abs() < 1e-5, "{w}");
    }

    #[test]
    fn config_parses_from_json() {
        let c: OptimConfig = serde_json::from_value(serde_json::json!({"name": "adam"})).unwrap();
        assert_eq!(
            c,
            OptimConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0
            }
        );
    }
}
