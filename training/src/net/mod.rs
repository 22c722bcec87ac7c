//! Descriptor networks as flat layer lists.
//!
//! A network is a `Vec<Layer>` plus its weights in a tch `VarStore`. The same list drives the
//! tch forward pass (training) and the ONNX export ([`crate::onnx`]), so the two cannot drift
//! apart. Every network starts with [`Layer::PatchNorm`] (per-patch normalisation,
//! ARCHITECTURE.md "Conventions") and float networks end with [`Layer::L2Norm`].

pub mod hynet;
pub mod l2net;
pub mod tfeat;

use anyhow::{bail, Context, Result};
use descl::model::metadata::{OUTPUT_DIM_KEY, OUTPUT_KIND_KEY};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use tch::{nn, Device, Kind, Tensor};

/// Epsilon of the per-patch normalisation: (x − mean) / sqrt(var + ε), biased variance — the
/// definition of PyTorch's `InstanceNorm2d(1, affine=False)` that the official TFeat uses.
pub const PATCH_NORM_EPS: f64 = 1e-5;
/// Epsilon of batch normalisation (PyTorch default, used by L2-Net/HardNet).
pub const BATCH_NORM_EPS: f64 = 1e-5;
/// Running-statistics momentum of batch normalisation (PyTorch default).
pub const BATCH_NORM_MOMENTUM: f64 = 0.1;
/// ε inside the square root of the final L2 normalisation (HardNet's `L2Norm`).
pub const L2_NORM_EPS: f64 = 1e-10;
/// ε of Filter Response Normalisation (HyNet's `FRN(eps=1e-6)`, not learned).
pub const FRN_EPS: f64 = 1e-6;
/// Initial TLU threshold τ (HyNet's reference initialisation).
pub const TLU_INIT: f64 = -1.0;
/// Side of the input patches: descl's patch size (ARCHITECTURE.md "Conventions", Patch), as
/// the `i64` that tch shapes take.
pub const INPUT_SIZE: i64 = descl::patch::PATCH_SIZE as i64;
/// Key of the architecture name in a weights file's safetensors metadata. Saved weights say
/// which network they belong to (with [`WEIGHTS_WIDTH_KEY`] and the output kind and size under
/// the ONNX metadata's keys, [`descl::model::metadata`]), so that loading them into another is
/// an error naming the file: shapes alone cannot tell a float TFeat from a 128-bit binary one.
pub const WEIGHTS_ARCH_KEY: &str = "arch";
/// Key of the channel multiplier in a weights file's safetensors metadata.
pub const WEIGHTS_WIDTH_KEY: &str = "width";
/// Widths closer than this are the same network (they are written as shortest decimals).
const WIDTH_TOLERANCE: f64 = 1e-9;
/// State-dict prefix of a network's output offset ([`Layer::Offset`], [`Net::with_offset`]):
/// its vector is `offset.bias`.
pub const OFFSET_LAYER: &str = "offset";

/// One layer. Parametric layers carry the state-dict prefix of their weights (PyTorch naming,
/// e.g. `features.1` → `features.1.weight`, `features.1.bias`).
#[derive(Debug, Clone, PartialEq)]
pub enum Layer {
    /// Per-patch normalisation: (x − mean) / sqrt(var + [`PATCH_NORM_EPS`]) over each patch.
    PatchNorm,
    /// 2-D convolution, square kernel.
    Conv {
        name: String,
        cin: i64,
        cout: i64,
        kernel: i64,
        stride: i64,
        pad: i64,
        bias: bool,
    },
    /// Batch normalisation without affine parameters (L2-Net); running statistics in the state dict.
    BatchNorm {
        name: String,
        channels: i64,
    },
    Tanh,
    Relu,
    /// Max pooling, square kernel, no padding.
    MaxPool {
        kernel: i64,
        stride: i64,
    },
    /// Dropout (training only; absent from the exported graph).
    Dropout {
        p: f64,
    },
    /// (N, C, H, W) → (N, C·H·W).
    Flatten,
    /// Fully connected layer with bias.
    Linear {
        name: String,
        cin: i64,
        cout: i64,
    },
    /// Row-wise unit length: x / sqrt(Σx² + [`L2_NORM_EPS`]).
    L2Norm,
    /// Filter Response Normalisation (Singh & Krishnan 2020): γ · x / sqrt(mean_{h,w}(x²) + ε) + β,
    /// per sample and channel; `weight` = γ, `bias` = β, shape (1, C, 1, 1).
    Frn {
        name: String,
        channels: i64,
    },
    /// Thresholded Linear Unit: max(x, τ), `tau` of shape (1, C, 1, 1).
    Tlu {
        name: String,
        channels: i64,
    },
    /// A fixed vector added to every (unit) descriptor, `bias` of shape (C); an [`Layer::L2Norm`]
    /// follows. Not trained: [`Net::with_offset`] sets it (`descl-train offset`).
    Offset {
        name: String,
        channels: i64,
    },
}

/// Separates an architecture from its channel multiplier in a card's `architecture`.
const CARD_WIDTH_TAG: &str = "-w";

/// The architectures descl trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// TFeat (Balntas et al. 2016) with descl's final L2 normalisation.
    Tfeat,
    /// L2-Net as used by HardNet (Tian et al. 2017; Mishchuk et al. 2017).
    L2net,
    /// HyNet (Tian et al. 2020): L2-Net with FRN + TLU, the network of SDGMNet.
    Hynet,
}

impl Arch {
    pub fn parse(s: &str) -> Result<Arch> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "tfeat" => Ok(Arch::Tfeat),
            "l2net" => Ok(Arch::L2net),
            "hynet" => Ok(Arch::Hynet),
            other => bail!("unknown architecture {other:?} (known: tfeat, l2net, hynet)"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Tfeat => "tfeat",
            Arch::L2net => "l2net",
            Arch::Hynet => "hynet",
        }
    }

    /// A model card's `architecture`: the name, with `-w<width>` when the channel multiplier
    /// is not 1 (`l2net-w0.5`).
    pub fn card_name(self, width: f64) -> String {
        if (width - 1.0).abs() < 1e-9 {
            self.name().to_string()
        } else {
            format!("{}{CARD_WIDTH_TAG}{width}", self.name())
        }
    }

    /// The inverse of [`Arch::card_name`]: architecture and width from a card.
    pub fn parse_card_name(s: &str) -> Result<(Arch, f64)> {
        match s.split_once(CARD_WIDTH_TAG) {
            Some((name, width)) => {
                let w: f64 = width
                    .parse()
                    .map_err(|_| anyhow::anyhow!("architecture {s:?}: width {width:?}"))?;
                if !(w.is_finite() && w > 0.0) {
                    bail!("architecture {s:?}: width {w} is not positive");
                }
                Ok((Arch::parse(name)?, w))
            }
            None => Ok((Arch::parse(s)?, 1.0)),
        }
    }

    /// The layer list; `width` scales the channel counts (1.0 = the paper's network).
    pub fn layers(self, width: f64) -> Vec<Layer> {
        match self {
            Arch::Tfeat => tfeat::layers(width),
            Arch::L2net => l2net::layers(width),
            Arch::Hynet => hynet::layers(width),
        }
    }
}

/// The binary-descriptor version of a float network (CDF §3.2): the last projection outputs
/// `bits` channels (256 in the paper) and the final L2 normalisation becomes tanh, the
/// differentiable proxy of sign used in training; descl binarises the outputs by sign.
pub fn binary_head(layers: Vec<Layer>, bits: i64) -> Vec<Layer> {
    let last_proj = last_projection(&layers);
    let mut out: Vec<Layer> = Vec::with_capacity(layers.len());
    for (i, layer) in layers.into_iter().enumerate() {
        let after = last_proj.is_some_and(|p| i > p);
        let layer = match layer {
            Layer::Conv {
                name,
                cin,
                kernel,
                stride,
                pad,
                bias,
                ..
            } if Some(i) == last_proj => Layer::Conv {
                name,
                cin,
                cout: bits,
                kernel,
                stride,
                pad,
                bias,
            },
            Layer::Linear { name, cin, .. } if Some(i) == last_proj => Layer::Linear {
                name,
                cin,
                cout: bits,
            },
            Layer::BatchNorm { name, .. } if after => Layer::BatchNorm {
                name,
                channels: bits,
            },
            // TFeat already ends in tanh: drop the L2 norm rather than apply tanh twice.
            Layer::L2Norm if matches!(out.last(), Some(Layer::Tanh)) => continue,
            Layer::L2Norm => Layer::Tanh,
            other => other,
        };
        out.push(layer);
    }
    out
}

/// Output channels of a layer list: those of its last projection (0 without one).
fn layers_output_dim(layers: &[Layer]) -> i64 {
    layers
        .iter()
        .rev()
        .find_map(|l| match l {
            Layer::Conv { cout, .. } | Layer::Linear { cout, .. } => Some(*cout),
            _ => None,
        })
        .unwrap_or(0)
}

/// The layers an output offset appends to a float network of `dim` outputs: the offset, then
/// the L2 normalisation again.
fn offset_tail(dim: i64) -> [Layer; 2] {
    [
        Layer::Offset {
            name: OFFSET_LAYER.into(),
            channels: dim,
        },
        Layer::L2Norm,
    ]
}

/// Whether a safetensors file holds an output offset (`offset.bias`, [`Net::with_offset`]).
fn weights_have_offset(weights: &Path) -> Result<bool> {
    let bytes = std::fs::read(weights)
        .with_context(|| format!("{}: cannot read weights", weights.display()))?;
    let tensors = safetensors::SafeTensors::deserialize(&bytes)
        .with_context(|| format!("{}: not a safetensors file", weights.display()))?;
    let offset = format!("{OFFSET_LAYER}.bias");
    Ok(tensors.names().iter().any(|n| **n == offset))
}

/// Index of the last projection (conv or linear): where the output head begins.
fn last_projection(layers: &[Layer]) -> Option<usize> {
    layers
        .iter()
        .rposition(|l| matches!(l, Layer::Conv { .. } | Layer::Linear { .. }))
}

/// Scales a channel count by `width`, at least 1.
pub(crate) fn scaled(channels: i64, width: f64) -> i64 {
    ((channels as f64 * width).round() as i64).max(1)
}

/// The var-store path of a dotted state-dict prefix (`features.1` → sub("features").sub("1")).
fn sub_path<'a>(root: &nn::Path<'a>, name: &str) -> nn::Path<'a> {
    let mut parts = name.split('.');
    let first = root.sub(parts.next().unwrap_or_default());
    parts.fold(first, |p, part| p.sub(part))
}

/// A network: its layers and their weights.
pub struct Net {
    pub arch: Arch,
    pub width: f64,
    pub layers: Vec<Layer>,
    pub vs: nn::VarStore,
}

impl Net {
    /// A freshly initialised network on `device` (PyTorch's default initialisations: Kaiming
    /// uniform weights, uniform biases in ±1/sqrt(fan_in)).
    pub fn new(arch: Arch, width: f64, device: Device) -> Result<Net> {
        Net::from_layers(arch, width, arch.layers(width), device)
    }

    /// A freshly initialised binary-descriptor network: `arch` with [`binary_head`].
    pub fn new_binary(arch: Arch, width: f64, bits: i64, device: Device) -> Result<Net> {
        Net::from_layers(arch, width, binary_head(arch.layers(width), bits), device)
    }

    /// Whether the network outputs binary-descriptor logits (ends in tanh, not L2 norm).
    pub fn is_binary(&self) -> bool {
        matches!(self.layers.last(), Some(Layer::Tanh))
    }

    /// Whether the network ends in an output offset ([`Net::with_offset`]).
    pub fn has_offset(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, Layer::Offset { .. }))
    }

    /// This float network followed by `offset` added to its unit descriptors and a second L2
    /// normalisation: d ↦ (d + o) / ‖d + o‖ (on the CPU; the weights are copied). A binary
    /// network, one that has an offset already, or an offset of another length or with a
    /// non-finite value is refused.
    pub fn with_offset(&self, offset: &[f32]) -> Result<Net> {
        if self.is_binary() || !matches!(self.layers.last(), Some(Layer::L2Norm)) {
            bail!(
                "{}: an offset follows a float network's L2 normalisation",
                self.describe()
            );
        }
        if self.has_offset() {
            bail!(
                "{}: the network has an output offset already",
                self.describe()
            );
        }
        let dim = self.output_dim();
        if offset.len() as i64 != dim || offset.iter().any(|v| !v.is_finite()) {
            bail!(
                "an offset of {} finite values is needed for {}, got {} values",
                dim,
                self.describe(),
                offset.len()
            );
        }
        let mut layers = self.layers.clone();
        layers.extend(offset_tail(dim));
        let out = Net::from_layers(self.arch, self.width, layers, Device::Cpu)?;
        let src = self.vs.variables();
        let _guard = tch::no_grad_guard();
        for (name, mut var) in out.vs.variables() {
            let value = if name == format!("{OFFSET_LAYER}.bias") {
                Tensor::f_from_slice(offset)?
            } else {
                src.get(&name)
                    .with_context(|| format!("no parameter {name:?}"))?
                    .f_to_device(Device::Cpu)?
            };
            var.f_copy_(&value.f_to_kind(var.kind())?)?;
        }
        Ok(out)
    }

    /// A freshly initialised network with an explicit layer list (see [`Net::new`]).
    pub fn from_layers(arch: Arch, width: f64, layers: Vec<Layer>, device: Device) -> Result<Net> {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        for layer in &layers {
            match layer {
                Layer::Conv {
                    name,
                    cin,
                    cout,
                    kernel,
                    bias,
                    ..
                } => {
                    let p = sub_path(&root, name);
                    let fan_in = cin * kernel * kernel;
                    let _ = p.f_kaiming_uniform("weight", &[*cout, *cin, *kernel, *kernel])?;
                    if *bias {
                        let bound = 1.0 / (fan_in as f64).sqrt();
                        let _ = p.f_uniform("bias", &[*cout], -bound, bound)?;
                    }
                }
                Layer::BatchNorm { name, channels } => {
                    let p = sub_path(&root, name);
                    let _ = p.f_zeros_no_train("running_mean", &[*channels])?;
                    let _ = p.f_ones_no_train("running_var", &[*channels])?;
                    let _ = p.f_zeros_no_train("num_batches_tracked", &[])?;
                }
                Layer::Linear { name, cin, cout } => {
                    let p = sub_path(&root, name);
                    let _ = p.f_kaiming_uniform("weight", &[*cout, *cin])?;
                    let bound = 1.0 / (*cin as f64).sqrt();
                    let _ = p.f_uniform("bias", &[*cout], -bound, bound)?;
                }
                Layer::Frn { name, channels } => {
                    let p = sub_path(&root, name);
                    let _ = p.f_ones("weight", &[1, *channels, 1, 1])?;
                    let _ = p.f_zeros("bias", &[1, *channels, 1, 1])?;
                }
                Layer::Tlu { name, channels } => {
                    let p = sub_path(&root, name);
                    let _ = p.f_var("tau", &[1, *channels, 1, 1], nn::Init::Const(TLU_INIT))?;
                }
                Layer::Offset { name, channels } => {
                    let p = sub_path(&root, name);
                    let _ = p.f_zeros_no_train("bias", &[*channels])?;
                }
                _ => {}
            }
        }
        Ok(Net {
            arch,
            width,
            layers,
            vs,
        })
    }

    /// A float network whose weights come from a safetensors state dict (PyTorch naming).
    /// Every tensor of the network must be present with the right shape.
    pub fn load(arch: Arch, width: f64, weights: &Path, device: Device) -> Result<Net> {
        Net::load_as(arch, width, None, weights, device)
    }

    /// [`Net::load`] for a float (`bits` None) or binary network.
    pub fn load_as(
        arch: Arch,
        width: f64,
        bits: Option<i64>,
        weights: &Path,
        device: Device,
    ) -> Result<Net> {
        let mut layers = match bits {
            Some(bits) => binary_head(arch.layers(width), bits),
            None => arch.layers(width),
        };
        // A float network saved with an output offset (`descl-train offset`) is that network.
        if bits.is_none() && weights_have_offset(weights)? {
            layers.extend(offset_tail(layers_output_dim(&layers)));
        }
        let net = Net::from_layers(arch, width, layers, device)?;
        net.load_weights(weights)?;
        Ok(net)
    }

    /// "tfeat width 0.25, float 128" / "tfeat width 1, binary 256": what the network is, for
    /// messages.
    pub fn describe(&self) -> String {
        let kind = if self.is_binary() { "binary" } else { "float" };
        let offset = if self.has_offset() {
            " with output offset"
        } else {
            ""
        };
        format!(
            "{} width {}, {kind} {}{offset}",
            self.arch.name(),
            self.width,
            self.output_dim()
        )
    }

    /// The safetensors metadata saved with the weights: architecture, width, output kind and
    /// size.
    fn weights_metadata(&self) -> HashMap<String, String> {
        let kind = if self.is_binary() {
            descl::model::OutputKind::Binary
        } else {
            descl::model::OutputKind::Float
        };
        HashMap::from([
            (WEIGHTS_ARCH_KEY.to_string(), self.arch.name().to_string()),
            (WEIGHTS_WIDTH_KEY.to_string(), self.width.to_string()),
            (OUTPUT_KIND_KEY.to_string(), kind.as_str().to_string()),
            (OUTPUT_DIM_KEY.to_string(), self.output_dim().to_string()),
        ])
    }

    /// Copies the weights of a safetensors state dict into this network. The file must hold
    /// every tensor with the right shape (other tensors, e.g. optimizer state, are ignored) and,
    /// when its metadata says which network it belongs to (files saved by [`Net::save`]), be
    /// this architecture, width and output; every mismatch is an error naming the file.
    pub fn load_weights(&self, weights: &Path) -> Result<()> {
        self.load_weights_from(weights, false).map(|_| ())
    }

    /// Copies every tensor of a safetensors state dict into this network except the output
    /// head's (the last projection and the layers after it, [`Net::head_prefixes`]), which keep
    /// their fresh initialisation: a binary head trained on a float network's trunk (CDF §3.2
    /// binarises the output of a float network), or a head of another size. Architecture and
    /// width must be the file's; the output kind and size may differ. Returns how many tensors
    /// were left at their initialisation.
    pub fn load_trunk(&self, weights: &Path) -> Result<usize> {
        self.load_weights_from(weights, true)
    }

    /// State-dict prefixes of the output head: the last projection (conv or linear) and every
    /// parametric layer after it.
    pub fn head_prefixes(&self) -> Vec<String> {
        let Some(last) = last_projection(&self.layers) else {
            return Vec::new();
        };
        self.layers[last..]
            .iter()
            .filter_map(|l| match l {
                Layer::Conv { name, .. }
                | Layer::Linear { name, .. }
                | Layer::BatchNorm { name, .. }
                | Layer::Frn { name, .. }
                | Layer::Tlu { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    fn load_weights_from(&self, weights: &Path, trunk_only: bool) -> Result<usize> {
        let bytes = std::fs::read(weights)
            .with_context(|| format!("{}: cannot read weights", weights.display()))?;
        let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
            .with_context(|| format!("{}: not a safetensors file", weights.display()))?;
        if let Some(meta) = header.metadata() {
            if meta.contains_key(WEIGHTS_ARCH_KEY) {
                let want = self.weights_metadata();
                let same = |k: &str| match (meta.get(k), want.get(k)) {
                    (Some(a), Some(b)) if k == WEIGHTS_WIDTH_KEY => {
                        match (a.parse::<f64>(), b.parse::<f64>()) {
                            (Ok(a), Ok(b)) => (a - b).abs() < WIDTH_TOLERANCE,
                            _ => false,
                        }
                    }
                    (a, b) => a == b,
                };
                if ![
                    WEIGHTS_ARCH_KEY,
                    WEIGHTS_WIDTH_KEY,
                    OUTPUT_KIND_KEY,
                    OUTPUT_DIM_KEY,
                ]
                .iter()
                .all(|k| same(k) || (trunk_only && (*k == OUTPUT_KIND_KEY || *k == OUTPUT_DIM_KEY)))
                {
                    let field = |k: &str| meta.get(k).map_or("?", String::as_str);
                    bail!(
                        "{}: weights of {} width {}, {} {}; the network is {}",
                        weights.display(),
                        field(WEIGHTS_ARCH_KEY),
                        field(WEIGHTS_WIDTH_KEY),
                        field(OUTPUT_KIND_KEY),
                        field(OUTPUT_DIM_KEY),
                        self.describe()
                    );
                }
            }
        }
        let tensors = Tensor::read_safetensors(weights)
            .with_context(|| format!("{}: cannot read safetensors", weights.display()))?;
        let file: HashMap<String, Tensor> = tensors.into_iter().collect();
        // An offset changes what the network outputs: dropping it would be another model.
        if !trunk_only && !self.has_offset() && file.contains_key(&format!("{OFFSET_LAYER}.bias")) {
            bail!(
                "{}: weights of a network with an output offset (`descl-train offset`); {} has \
                 none",
                weights.display(),
                self.describe()
            );
        }
        let head: Vec<String> = if trunk_only {
            self.head_prefixes()
                .into_iter()
                .map(|p| format!("{p}."))
                .collect()
        } else {
            Vec::new()
        };
        let mut skipped = 0;
        let _guard = tch::no_grad_guard();
        for (name, mut var) in self.vs.variables() {
            if head.iter().any(|p| name.starts_with(p.as_str())) {
                skipped += 1;
                continue;
            }
            let src = match file.get(&name) {
                Some(t) => t,
                None if name.ends_with("num_batches_tracked") => continue,
                None => bail!(
                    "{}: tensor {name:?} missing ({} expects it)",
                    weights.display(),
                    self.describe()
                ),
            };
            if src.size() != var.size() {
                bail!(
                    "{}: tensor {name:?} has shape {:?}, {} expects {:?}",
                    weights.display(),
                    src.size(),
                    self.describe(),
                    var.size()
                );
            }
            var.f_copy_(&src.f_to_kind(var.kind())?.f_to_device(var.device())?)?;
        }
        Ok(skipped)
    }

    /// The tensor `name` of the state dict.
    pub fn param(&self, name: &str) -> Result<Tensor> {
        self.vs
            .variables()
            .remove(name)
            .with_context(|| format!("no parameter {name:?}"))
    }

    /// Output dimension (channels of the last parametric layer).
    pub fn output_dim(&self) -> i64 {
        layers_output_dim(&self.layers)
    }

    /// Forward pass: patches (N, 1, 32, 32) in [0, 1] → descriptors (N, D).
    /// `train` switches batch statistics and dropout on.
    pub fn forward_t(&self, patches: &Tensor, train: bool) -> Result<Tensor> {
        let vars = self.vs.variables();
        let get = |prefix: &str, suffix: &str| -> Result<&Tensor> {
            let key = format!("{prefix}.{suffix}");
            vars.get(&key)
                .with_context(|| format!("no parameter {key:?}"))
        };
        let mut x = patches.shallow_clone();
        for layer in &self.layers {
            x = match layer {
                Layer::PatchNorm => {
                    let n = x.size().first().copied().unwrap_or(0);
                    let flat = x.f_reshape([n, -1])?;
                    // Statistics in f32; the output keeps the input's precision (f16 under
                    // `descl-train throughput --half`, whose weights are f16 too).
                    let flat = flat.f_to_kind(Kind::Float)?;
                    let mean = flat.f_mean_dim(1, true, Kind::Float)?;
                    let centred = flat.f_sub(&mean)?;
                    let var = centred.f_square()?.f_mean_dim(1, true, Kind::Float)?;
                    let out = centred.f_div(&var.f_add_scalar(PATCH_NORM_EPS)?.f_sqrt()?)?;
                    out.f_reshape(x.size())?.f_to_kind(x.kind())?
                }
                Layer::Conv {
                    name,
                    stride,
                    pad,
                    bias,
                    ..
                } => {
                    let w = get(name, "weight")?;
                    let b = if *bias {
                        Some(get(name, "bias")?)
                    } else {
                        None
                    };
                    x.f_conv2d(w, b, [*stride, *stride], [*pad, *pad], [1, 1], 1)?
                }
                Layer::BatchNorm { name, .. } => {
                    let rm = get(name, "running_mean")?;
                    let rv = get(name, "running_var")?;
                    x.f_batch_norm(
                        None::<&Tensor>,
                        None::<&Tensor>,
                        Some(rm),
                        Some(rv),
                        train,
                        BATCH_NORM_MOMENTUM,
                        BATCH_NORM_EPS,
                        false,
                    )?
                }
                Layer::Tanh => x.f_tanh()?,
                Layer::Relu => x.f_relu()?,
                Layer::MaxPool { kernel, stride } => x.f_max_pool2d(
                    [*kernel, *kernel],
                    [*stride, *stride],
                    [0, 0],
                    [1, 1],
                    false,
                )?,
                Layer::Dropout { p } => x.f_dropout(*p, train)?,
                Layer::Flatten => x.f_flatten(1, -1)?,
                Layer::Linear { name, .. } => {
                    x.f_linear(get(name, "weight")?, Some(get(name, "bias")?))?
                }
                Layer::L2Norm => {
                    let norm = x.f_square()?.f_sum_dim_intlist(1, true, Kind::Float)?;
                    x.f_div(&norm.f_add_scalar(L2_NORM_EPS)?.f_sqrt()?)?
                }
                Layer::Frn { name, .. } => {
                    let nu2 = x
                        .f_to_kind(Kind::Float)?
                        .f_square()?
                        .f_mean_dim([2i64, 3].as_slice(), true, Kind::Float)?
                        .f_to_kind(x.kind())?;
                    let normed = x.f_mul(&nu2.f_add_scalar(FRN_EPS)?.f_rsqrt()?)?;
                    normed
                        .f_mul(get(name, "weight")?)?
                        .f_add(get(name, "bias")?)?
                }
                Layer::Tlu { name, .. } => x.f_maximum(get(name, "tau")?)?,
                Layer::Offset { name, .. } => x.f_add(get(name, "bias")?)?,
            };
        }
        Ok(x)
    }

    /// Saves the state dict as safetensors (PyTorch naming, float32), with metadata naming the
    /// network ([`WEIGHTS_ARCH_KEY`]), atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, t) in self.vs.variables() {
            let t = t
                .f_detach()?
                .f_to_kind(Kind::Float)?
                .f_to_device(Device::Cpu)?;
            let shape = t
                .size()
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<std::result::Result<Vec<_>, _>>()
                .with_context(|| format!("tensor {name:?} has a negative dimension"))?;
            let values = Vec::<f32>::try_from(t.f_flatten(0, -1)?)
                .with_context(|| format!("tensor {name:?}"))?;
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            tensors.push((name, shape, bytes));
        }
        let views = tensors
            .iter()
            .map(|(name, shape, bytes)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                    .map(|v| (name.as_str(), v))
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .with_context(|| format!("{}: cannot save weights", path.display()))?;
        let bytes = safetensors::serialize(views, Some(self.weights_metadata()))
            .with_context(|| format!("{}: cannot save weights", path.display()))?;
        descl::io::atomic::write_bytes_atomic(path, &bytes)
            .with_context(|| format!("{}: cannot save weights", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_architecture_names_round_trip() {
        assert_eq!(Arch::Hynet.card_name(1.0), "hynet");
        assert_eq!(Arch::L2net.card_name(0.5), "l2net-w0.5");
        for (arch, width) in [(Arch::Tfeat, 0.25), (Arch::L2net, 0.5), (Arch::Hynet, 1.0)] {
            let name = arch.card_name(width);
            assert_eq!(
                Arch::parse_card_name(&name).unwrap(),
                (arch, width),
                "{name}"
            );
        }
        assert!(Arch::parse_card_name("l2net-wide").is_err());
        assert!(Arch::parse_card_name("l2net-w0").is_err());
    }

    /// An offset network's weights carry `offset.bias`; a network without an offset refuses
    /// them (it would silently be another model), its trunk still loads.
    #[test]
    fn offset_weights_do_not_load_into_a_network_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        let net = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
        let with = net.with_offset(&[0.5; 128]).unwrap();
        assert!(with.has_offset() && !net.has_offset());
        assert!(with.describe().contains("output offset"));
        with.save(&path).unwrap();
        let e = net.load_weights(&path).unwrap_err().to_string();
        assert!(
            e.contains("w.safetensors") && e.contains("output offset"),
            "{e}"
        );
        let binary = Net::new_binary(Arch::Tfeat, 0.25, 256, Device::Cpu).unwrap();
        assert!(binary.load_trunk(&path).is_ok());
        let again = Net::new(Arch::Tfeat, 0.25, Device::Cpu)
            .unwrap()
            .with_offset(&[0.0; 128])
            .unwrap();
        again.load_weights(&path).unwrap();
        let b = again.param("offset.bias").unwrap();
        assert_eq!(b.double_value(&[3]), 0.5);
        // Loading the file by architecture (export, fine-tuning) gives the offset network.
        let loaded = Net::load(Arch::Tfeat, 0.25, &path, Device::Cpu).unwrap();
        assert!(loaded.has_offset());
        assert_eq!(loaded.param("offset.bias").unwrap().double_value(&[0]), 0.5);
    }

    #[test]
    fn arch_names_parse() {
        assert_eq!(Arch::parse("L2-Net").unwrap(), Arch::L2net);
        assert_eq!(Arch::parse("tfeat").unwrap(), Arch::Tfeat);
        assert!(Arch::parse("sift").is_err());
    }

    #[test]
    fn output_is_unit_length_and_shapes_hold() {
        for arch in [Arch::Tfeat, Arch::L2net] {
            let net = Net::new(arch, 0.25, Device::Cpu).unwrap();
            let x = Tensor::rand([3, 1, 32, 32], (Kind::Float, Device::Cpu));
            let y = net.forward_t(&x, false).unwrap();
            assert_eq!(y.size(), vec![3, net.output_dim()]);
            let norms =
                Vec::<f32>::try_from(y.square().sum_dim_intlist(1, false, Kind::Float)).unwrap();
            for n in norms {
                assert!((n - 1.0).abs() < 1e-4, "{arch:?}: squared norm {n}");
            }
        }
    }

    #[test]
    fn half_precision_forward_agrees_with_f32() {
        // `descl-train throughput --half` casts weights and input to f16: every layer must keep
        // the input's precision (a statistic left in f32 would meet f16 weights in the next conv).
        for arch in [Arch::Tfeat, Arch::L2net, Arch::Hynet] {
            tch::manual_seed(3);
            let mut net = Net::new(arch, 0.25, Device::Cpu).unwrap();
            let x = Tensor::rand([4, 1, 32, 32], (Kind::Float, Device::Cpu));
            let full = net.forward_t(&x, false).unwrap();
            net.vs.half();
            let half = net.forward_t(&x.to_kind(Kind::Half), false).unwrap();
            let d = f64::try_from((full - half.to_kind(Kind::Float)).abs().max()).unwrap();
            assert!(d < 2e-2, "{arch:?}: f16 and f32 descriptors differ by {d}");
        }
    }

    #[test]
    fn patch_norm_is_invariant_to_affine_intensity_change() {
        // (x − mean)/std is unchanged by x → a·x + b (a > 0), up to the ε.
        let net = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
        let x = Tensor::rand([2, 1, 32, 32], (Kind::Float, Device::Cpu));
        let y1 = net.forward_t(&x, false).unwrap();
        let y2 = net.forward_t(&(x * 0.5 + 0.2), false).unwrap();
        let d = f64::try_from((y1 - y2).abs().max()).unwrap();
        assert!(d < 1e-3, "max difference {d}");
    }

    #[test]
    fn saved_weights_name_their_network() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        tch::manual_seed(2);
        // A 128-bit binary TFeat has exactly the tensors and shapes of a float one: only the
        // file's metadata can tell them apart.
        let binary = Net::new_binary(Arch::Tfeat, 0.25, 128, Device::Cpu).unwrap();
        binary.save(&path).unwrap();
        let e = Net::load(Arch::Tfeat, 0.25, &path, Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("w.safetensors") && e.contains("binary 128") && e.contains("float 128"),
            "{e}"
        );
        let e = Net::load_as(Arch::Tfeat, 0.5, Some(128), &path, Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("w.safetensors") && e.contains("width 0.5"),
            "{e}"
        );
        // The right network loads them exactly.
        let back = Net::load_as(Arch::Tfeat, 0.25, Some(128), &path, Device::Cpu).unwrap();
        let (a, b) = (binary.vs.variables(), back.vs.variables());
        assert_eq!(a.len(), b.len());
        for (name, t) in &a {
            assert!(t.equal(&b[name]), "{name}");
        }
    }

    #[test]
    fn binary_head_outputs_bits_through_a_single_tanh() {
        for arch in [Arch::Tfeat, Arch::L2net, Arch::Hynet] {
            let net = Net::new_binary(arch, 0.25, 256, Device::Cpu).unwrap();
            assert!(net.is_binary() && !Net::new(arch, 0.25, Device::Cpu).unwrap().is_binary());
            assert_eq!(net.output_dim(), 256, "{arch:?}");
            let tail: Vec<&Layer> = net.layers.iter().rev().take(2).collect();
            assert!(
                matches!(tail[0], Layer::Tanh) && !matches!(tail[1], Layer::Tanh),
                "{arch:?}: {tail:?}"
            );
            assert!(!net.layers.iter().any(|l| matches!(l, Layer::L2Norm)));
            let y = net
                .forward_t(
                    &Tensor::rand([2, 1, 32, 32], (Kind::Float, Device::Cpu)),
                    false,
                )
                .unwrap();
            assert_eq!(y.size(), vec![2, 256]);
            let max = f64::try_from(y.abs().max()).unwrap();
            assert!(
                max < 1.0,
                "{arch:?}: tanh outputs must lie in (−1, 1), max |y| = {max}"
            );
        }
    }

    #[test]
    fn a_binary_network_takes_a_float_networks_trunk_and_keeps_a_fresh_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("float.safetensors");
        for arch in [Arch::Tfeat, Arch::L2net, Arch::Hynet] {
            tch::manual_seed(3);
            let float = Net::new(arch, 0.25, Device::Cpu).unwrap();
            float.save(&path).unwrap();
            tch::manual_seed(4);
            let binary = Net::new_binary(arch, 0.25, 256, Device::Cpu).unwrap();
            let fresh: HashMap<String, Tensor> = binary
                .vs
                .variables()
                .into_iter()
                .map(|(k, v)| (k, v.copy()))
                .collect();
            // The whole-network load refuses the float file (output kind and size differ).
            assert!(binary.load_weights(&path).is_err(), "{arch:?}");
            let skipped = binary.load_trunk(&path).unwrap();
            let head = binary.head_prefixes();
            assert!(!head.is_empty(), "{arch:?}");
            let (src, dst) = (float.vs.variables(), binary.vs.variables());
            let mut in_head = 0;
            for (name, t) in &dst {
                if head.iter().any(|p| name.starts_with(&format!("{p}."))) {
                    in_head += 1;
                    assert!(
                        t.equal(&fresh[name]),
                        "{arch:?} {name}: head must stay fresh"
                    );
                } else {
                    assert!(
                        t.equal(&src[name]),
                        "{arch:?} {name}: trunk must be the file's"
                    );
                }
            }
            assert_eq!(skipped, in_head, "{arch:?}");
            // The head is the last projection and what follows it: 256 outputs, not 128.
            let last = &head[0];
            assert_eq!(dst[&format!("{last}.weight")].size()[0], 256, "{arch:?}");
            // Another width is still refused, naming the file.
            let wider = Net::new_binary(arch, 0.5, 256, Device::Cpu).unwrap();
            let e = wider.load_trunk(&path).unwrap_err().to_string();
            assert!(
                e.contains("float.safetensors") && e.contains("width 0.5"),
                "{e}"
            );
        }
    }
}
