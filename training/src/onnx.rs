//! ONNX export (tch cannot export): hand-written prost messages for the subset of `onnx.proto`
//! descl needs, a writer that turns a [`Net`]'s layer list into an opset-17 graph with input
//! `patches` (N×1×32×32 f32, dynamic N) and output `descriptors` (N×D), and its inverse
//! ([`import`]), which reads a descl-exported file's initializers back into a [`Net`].
//!
//! Every exported model is self-describing: its `metadata_props` hold the preprocessing it
//! expects (keys and formats in [`descl::model::metadata`], shared with the engine that reads
//! them).
//!
//! Field numbers are those of onnx/onnx.proto (IR version 8). `oneof` members are written as
//! optional fields with the same tags, which is the same wire format.

use crate::net::{
    Arch, Layer, Net, BATCH_NORM_EPS, FRN_EPS, INPUT_SIZE, L2_NORM_EPS, OFFSET_LAYER,
    PATCH_NORM_EPS,
};
use anyhow::{bail, Context, Result};
use descl::model::card::OutputKind;
use descl::model::metadata::ModelMetadata;
use prost::Message;
use std::collections::HashMap;
use std::path::Path;

/// IR version written in the model (ONNX 1.12+ understands it; opset 17 needs ≥ 8).
pub const IR_VERSION: i64 = 8;
/// Default-domain operator set the graph uses.
pub const OPSET: i64 = 17;
/// Name of the graph input (ARCHITECTURE.md "Conventions", Model).
pub const INPUT_NAME: &str = "patches";
/// Name of the graph output (ARCHITECTURE.md "Conventions", Model).
pub const OUTPUT_NAME: &str = "descriptors";
/// Symbolic batch dimension.
const BATCH_DIM: &str = "N";

/// `TensorProto.DataType.FLOAT`.
const DT_FLOAT: i32 = 1;
/// Bytes of one float32 in `raw_data`.
const F32_BYTES: usize = std::mem::size_of::<f32>();
/// `TensorProto.DataType.INT64`.
const DT_INT64: i32 = 7;
/// `AttributeProto.AttributeType` values.
const AT_FLOAT: i32 = 1;
const AT_INT: i32 = 2;
const AT_INTS: i32 = 7;

#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// Named metadata (ONNX Runtime: `ModelMetadata::custom`); descl's preprocessing keys.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(string, tag = "8")]
    pub name: String,
    /// Little-endian element bytes.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    /// `oneof value { Tensor tensor_type = 1; ... }`
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeProtoTensor {
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Dimension {
    /// `oneof value { int64 dim_value = 1; string dim_param = 2; }`
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i,
        r#type: AT_INT,
        ..Default::default()
    }
}

fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: ints.to_vec(),
        r#type: AT_INTS,
        ..Default::default()
    }
}

fn attr_float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        f,
        r#type: AT_FLOAT,
        ..Default::default()
    }
}

fn float_tensor(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: DT_FLOAT,
        name: name.into(),
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn int64_tensor(name: &str, values: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![values.len() as i64],
        data_type: DT_INT64,
        name: name.into(),
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn value_info(name: &str, dims: Vec<Dimension>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: DT_FLOAT,
                shape: Some(TensorShapeProto { dim: dims }),
            }),
        }),
    }
}

fn fixed(v: i64) -> Dimension {
    Dimension {
        dim_value: Some(v),
        dim_param: None,
    }
}

fn symbolic(s: &str) -> Dimension {
    Dimension {
        dim_value: None,
        dim_param: Some(s.into()),
    }
}

/// Builds the graph node by node; each node's output is the next node's input.
struct GraphBuilder {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    current: String,
}

impl GraphBuilder {
    fn node(&mut self, op: &str, extra_inputs: Vec<String>, attribute: Vec<AttributeProto>) {
        let name = format!("{}_{}", op.to_ascii_lowercase(), self.nodes.len());
        let mut input = vec![self.current.clone()];
        input.extend(extra_inputs);
        self.nodes.push(NodeProto {
            input,
            output: vec![name.clone()],
            name: name.clone(),
            op_type: op.into(),
            attribute,
        });
        self.current = name;
    }

    /// Adds a float initializer and returns its name.
    /// An initializer that exists already with the same content (the L2 normalisation's ε,
    /// used twice by a network with an output offset) is shared, not written twice.
    fn weight(&mut self, name: &str, dims: &[i64], values: &[f32]) -> String {
        let t = float_tensor(name, dims, values);
        if !self.initializers.contains(&t) {
            self.initializers.push(t);
        }
        name.into()
    }
}

/// The tensor `name` of `net` as (shape, f32 values).
fn param(net: &Net, name: &str) -> Result<(Vec<i64>, Vec<f32>)> {
    let t = net
        .param(name)?
        .f_to_kind(tch::Kind::Float)?
        .f_to_device(tch::Device::Cpu)?;
    let shape = t.size();
    let values =
        Vec::<f32>::try_from(t.f_flatten(0, -1)?).with_context(|| format!("parameter {name}"))?;
    Ok((shape, values))
}

/// The metadata of `net` cut at `magnification` (descl's patch size, input range and per-patch
/// normalisation; output kind and size from the net).
pub fn metadata(net: &Net, magnification: f64) -> Result<ModelMetadata> {
    if !(magnification.is_finite() && magnification > 0.0) {
        bail!("magnification must be a positive number, got {magnification}");
    }
    let kind = if net.is_binary() {
        OutputKind::Binary
    } else {
        OutputKind::Float
    };
    let dim = usize::try_from(net.output_dim()).context("negative output size")?;
    Ok(ModelMetadata::descl(magnification, kind, dim))
}

/// The ONNX model of `net` in evaluation mode (batch norm uses running statistics, no dropout),
/// for patches cut at `magnification` (written into its metadata).
pub fn model(net: &Net, doc: &str, magnification: f64) -> Result<ModelProto> {
    let metadata_props = metadata(net, magnification)?
        .entries()
        .into_iter()
        .map(|(key, value)| StringStringEntryProto {
            key: key.into(),
            value,
        })
        .collect();
    let mut g = GraphBuilder {
        nodes: Vec::new(),
        initializers: Vec::new(),
        current: INPUT_NAME.into(),
    };
    for layer in &net.layers {
        match layer {
            Layer::PatchNorm => {
                // InstanceNormalization over the single channel = per-patch normalisation.
                let scale = g.weight("patch_norm.scale", &[1], &[1.0]);
                let bias = g.weight("patch_norm.bias", &[1], &[0.0]);
                g.node(
                    "InstanceNormalization",
                    vec![scale, bias],
                    vec![attr_float("epsilon", PATCH_NORM_EPS as f32)],
                );
            }
            Layer::Conv {
                name,
                kernel,
                stride,
                pad,
                bias,
                ..
            } => {
                let (shape, values) = param(net, &format!("{name}.weight"))?;
                let mut inputs = vec![g.weight(&format!("{name}.weight"), &shape, &values)];
                if *bias {
                    let (shape, values) = param(net, &format!("{name}.bias"))?;
                    inputs.push(g.weight(&format!("{name}.bias"), &shape, &values));
                }
                g.node(
                    "Conv",
                    inputs,
                    vec![
                        attr_ints("kernel_shape", &[*kernel, *kernel]),
                        attr_ints("strides", &[*stride, *stride]),
                        attr_ints("pads", &[*pad, *pad, *pad, *pad]),
                    ],
                );
            }
            Layer::BatchNorm { name, channels } => {
                let ones = vec![1.0f32; *channels as usize];
                let zeros = vec![0.0f32; *channels as usize];
                let scale = g.weight(&format!("{name}.scale"), &[*channels], &ones);
                let bias = g.weight(&format!("{name}.shift"), &[*channels], &zeros);
                let (shape, mean) = param(net, &format!("{name}.running_mean"))?;
                let mean = g.weight(&format!("{name}.running_mean"), &shape, &mean);
                let (shape, var) = param(net, &format!("{name}.running_var"))?;
                let var = g.weight(&format!("{name}.running_var"), &shape, &var);
                g.node(
                    "BatchNormalization",
                    vec![scale, bias, mean, var],
                    vec![attr_float("epsilon", BATCH_NORM_EPS as f32)],
                );
            }
            Layer::Tanh => g.node("Tanh", vec![], vec![]),
            Layer::Relu => g.node("Relu", vec![], vec![]),
            Layer::MaxPool { kernel, stride } => g.node(
                "MaxPool",
                vec![],
                vec![
                    attr_ints("kernel_shape", &[*kernel, *kernel]),
                    attr_ints("strides", &[*stride, *stride]),
                ],
            ),
            Layer::Dropout { .. } => {}
            Layer::Frn { name, .. } => {
                // γ · x / sqrt(mean_{h,w}(x²) + ε) + β, as the tch forward.
                let x = g.current.clone();
                g.node("Mul", vec![x.clone()], vec![]);
                g.node(
                    "ReduceMean",
                    vec![],
                    vec![attr_ints("axes", &[2, 3]), attr_int("keepdims", 1)],
                );
                let eps = g.weight(&format!("{name}.eps"), &[], &[FRN_EPS as f32]);
                g.node("Add", vec![eps], vec![]);
                g.node("Sqrt", vec![], vec![]);
                let norm = g.current.clone();
                g.current = x;
                g.node("Div", vec![norm], vec![]);
                let (shape, values) = param(net, &format!("{name}.weight"))?;
                let gamma = g.weight(&format!("{name}.weight"), &shape, &values);
                g.node("Mul", vec![gamma], vec![]);
                let (shape, values) = param(net, &format!("{name}.bias"))?;
                let beta = g.weight(&format!("{name}.bias"), &shape, &values);
                g.node("Add", vec![beta], vec![]);
            }
            Layer::Tlu { name, .. } => {
                // max(x, τ), τ broadcast over (1, C, 1, 1).
                let (shape, values) = param(net, &format!("{name}.tau"))?;
                let tau = g.weight(&format!("{name}.tau"), &shape, &values);
                g.node("Max", vec![tau], vec![]);
            }
            Layer::Offset { name, .. } => {
                let (shape, values) = param(net, &format!("{name}.bias"))?;
                let offset = g.weight(&format!("{name}.bias"), &shape, &values);
                g.node("Add", vec![offset], vec![]);
            }
            Layer::Flatten => g.node("Flatten", vec![], vec![attr_int("axis", 1)]),
            Layer::Linear { name, .. } => {
                let (shape, values) = param(net, &format!("{name}.weight"))?;
                let w = g.weight(&format!("{name}.weight"), &shape, &values);
                let (shape, values) = param(net, &format!("{name}.bias"))?;
                let b = g.weight(&format!("{name}.bias"), &shape, &values);
                g.node("Gemm", vec![w, b], vec![attr_int("transB", 1)]);
            }
            Layer::L2Norm => {
                // x / sqrt(Σx² + ε), as the tch forward.
                let x = g.current.clone();
                g.node(
                    "ReduceSumSquare",
                    vec![],
                    vec![attr_ints("axes", &[1]), attr_int("keepdims", 1)],
                );
                let eps = g.weight("l2norm.eps", &[], &[L2_NORM_EPS as f32]);
                g.node("Add", vec![eps], vec![]);
                g.node("Sqrt", vec![], vec![]);
                let norm = g.current.clone();
                g.current = x;
                g.node("Div", vec![norm], vec![]);
            }
        }
    }
    // Name the last tensor "descriptors" with an Identity so the output name is fixed.
    let shape = int64_tensor("descriptors.shape", &[0, -1]);
    g.initializers.push(shape);
    g.nodes.push(NodeProto {
        input: vec![g.current.clone(), "descriptors.shape".into()],
        output: vec![OUTPUT_NAME.into()],
        name: "output".into(),
        op_type: "Reshape".into(),
        attribute: vec![],
    });
    let dim = net.output_dim();
    let graph = GraphProto {
        node: g.nodes,
        name: format!("descl-{}", net.arch.name()),
        initializer: g.initializers,
        input: vec![value_info(
            INPUT_NAME,
            vec![
                symbolic(BATCH_DIM),
                fixed(1),
                fixed(INPUT_SIZE),
                fixed(INPUT_SIZE),
            ],
        )],
        output: vec![value_info(
            OUTPUT_NAME,
            vec![symbolic(BATCH_DIM), fixed(dim)],
        )],
    };
    Ok(ModelProto {
        ir_version: IR_VERSION,
        producer_name: "descl-training".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc.into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        metadata_props,
    })
}

/// The doc string of a named descl model (what training writes; a re-export keeps it).
pub fn model_doc(name: &str, arch: Arch) -> String {
    format!(
        "descl model {name} ({} trained by descl-train)",
        arch.name()
    )
}

/// Writes `net` as an ONNX file for patches cut at `magnification` (atomically: all or
/// nothing). The one export path: training and `descl-train export` both come here.
pub fn export(net: &Net, path: &Path, doc: &str, magnification: f64) -> Result<()> {
    let bytes = model(net, doc, magnification)?.encode_to_vec();
    descl::io::atomic::write_bytes_atomic(path, &bytes)
        .with_context(|| format!("{}: cannot write ONNX model", path.display()))?;
    Ok(())
}

/// Reads and decodes an ONNX file.
pub fn read_model(path: &Path) -> Result<ModelProto> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("{}: cannot read ONNX model", path.display()))?;
    ModelProto::decode(bytes.as_slice())
        .with_context(|| format!("{}: not an ONNX model", path.display()))
}

/// The inverse of [`export`]: an `arch` net of `width` whose weights are the initializers of the
/// descl-exported ONNX file at `path`. Float or binary as the graph says: float graphs end in
/// L2 normalisation (a `ReduceSumSquare` node), binary ones in tanh with one output per bit.
///
/// Exact by construction: the net is re-exported in memory and its graph (every node, attribute
/// and initializer byte) must equal the file's, so a file that is not a descl export of this
/// architecture, or whose weights could not all be recovered, is an error naming it. The one
/// state-dict entry ONNX does not carry, batch norm's `num_batches_tracked` (a counter PyTorch
/// only uses when momentum is None; descl uses 0.1), stays 0.
pub fn import(path: &Path, arch: Arch, width: f64) -> Result<Net> {
    let file = read_model(path)?;
    let graph = file
        .graph
        .as_ref()
        .with_context(|| format!("{}: ONNX model without a graph", path.display()))?;
    let bits = if graph.node.iter().any(|n| n.op_type == "ReduceSumSquare") {
        None
    } else {
        let dim = graph
            .output
            .first()
            .and_then(|o| o.r#type.as_ref())
            .and_then(|t| t.tensor_type.as_ref())
            .and_then(|t| t.shape.as_ref())
            .and_then(|s| s.dim.get(1))
            .and_then(|d| d.dim_value);
        Some(dim.with_context(|| {
            format!(
                "{}: output `{OUTPUT_NAME}` has no fixed descriptor size",
                path.display()
            )
        })?)
    };
    let initializers: HashMap<&str, &TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let device = tch::Device::Cpu;
    let mut net = match bits {
        Some(bits) => Net::new_binary(arch, width, bits, device)?,
        None => Net::new(arch, width, device)?,
    };
    // A network with an output offset (`descl-train offset`) carries its vector by name.
    let offset = format!("{OFFSET_LAYER}.bias");
    if bits.is_none() && initializers.contains_key(offset.as_str()) {
        net = net.with_offset(&vec![0.0; usize::try_from(net.output_dim())?])?;
    }
    {
        let _guard = tch::no_grad_guard();
        for (name, mut var) in net.vs.variables() {
            let Some(t) = initializers.get(name.as_str()) else {
                if name.ends_with("num_batches_tracked") {
                    continue;
                }
                bail!(
                    "{}: no initializer {name:?}; not a descl export of {} width {width}{}",
                    path.display(),
                    arch.name(),
                    bits.map_or(String::new(), |b| format!(" with {b} bits"))
                );
            };
            if t.dims != var.size() {
                bail!(
                    "{}: initializer {name:?} has shape {:?}, {} width {width} expects {:?}",
                    path.display(),
                    t.dims,
                    arch.name(),
                    var.size()
                );
            }
            if t.data_type != DT_FLOAT || t.raw_data.len() != F32_BYTES * var.numel() {
                bail!(
                    "{}: initializer {name:?} is not {} raw float32 values",
                    path.display(),
                    var.numel()
                );
            }
            let values: Vec<f32> = t
                .raw_data
                .chunks_exact(F32_BYTES)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let src = tch::Tensor::f_from_slice(&values)?.f_reshape(var.size())?;
            var.f_copy_(&src)?;
        }
    }
    let again = model(&net, "", 1.0)?;
    if again.graph != file.graph {
        bail!(
            "{}: the graph is not what descl exports for {} width {width}{} (re-exporting the \
             recovered weights gives a different graph); check the architecture and width",
            path.display(),
            arch.name(),
            bits.map_or(" (float)".to_string(), |b| format!(" with {b} bits"))
        );
    }
    Ok(net)
}
