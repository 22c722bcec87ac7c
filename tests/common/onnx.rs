//! Hand-encoded ONNX models (protobuf wire format, field numbers from onnx/onnx.proto3), so
//! tests can build small but real models with exactly the inputs and outputs they need.

/// A tensor dimension: fixed size or a symbolic (dynamic) name.
#[derive(Clone, Copy)]
pub enum Dim {
    Fixed(i64),
    Sym(&'static str),
}

/// ONNX TensorProto.DataType.FLOAT
const FLOAT: u64 = 1;

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(b);
            return;
        }
        buf.push(b | 0x80);
    }
}
fn field_varint(buf: &mut Vec<u8>, field: u64, v: u64) {
    varint(buf, field << 3);
    varint(buf, v);
}
fn field_bytes(buf: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(buf, (field << 3) | 2);
    varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// ValueInfoProto { name = 1, type = 2 { tensor_type = 1 { elem_type = 1, shape = 2 { dim = 1 } } } }
fn value_info(name: &str, dims: &[Dim]) -> Vec<u8> {
    let mut shape = Vec::new();
    for d in dims {
        let mut dim = Vec::new();
        match d {
            Dim::Fixed(v) => field_varint(&mut dim, 1, *v as u64),
            Dim::Sym(s) => field_bytes(&mut dim, 2, s.as_bytes()),
        }
        field_bytes(&mut shape, 1, &dim);
    }
    let mut tensor = Vec::new();
    field_varint(&mut tensor, 1, FLOAT);
    field_bytes(&mut tensor, 2, &shape);
    let mut ty = Vec::new();
    field_bytes(&mut ty, 1, &tensor);
    let mut vi = Vec::new();
    field_bytes(&mut vi, 1, name.as_bytes());
    field_bytes(&mut vi, 2, &ty);
    vi
}

/// NodeProto { input = 1, output = 2, op_type = 4 }
fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
    let mut n = Vec::new();
    for i in inputs {
        field_bytes(&mut n, 1, i.as_bytes());
    }
    for o in outputs {
        field_bytes(&mut n, 2, o.as_bytes());
    }
    field_bytes(&mut n, 4, op.as_bytes());
    n
}

/// TensorProto { dims = 1, data_type = 2, name = 8, raw_data = 9 } of float32 values.
fn initializer(name: &str, dims: &[usize], values: &[f32]) -> Vec<u8> {
    let mut t = Vec::new();
    for d in dims {
        field_varint(&mut t, 1, *d as u64);
    }
    field_varint(&mut t, 2, FLOAT);
    field_bytes(&mut t, 8, name.as_bytes());
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    field_bytes(&mut t, 9, &raw);
    t
}

/// ModelProto { ir_version = 1, graph = 7, opset_import = 8 { domain = 1, version = 2 } } around
/// GraphProto { node = 1, name = 2, initializer = 5, input = 11, output = 12 }.
fn model(nodes: &[Vec<u8>], inits: &[Vec<u8>], inputs: &[Vec<u8>], outputs: &[Vec<u8>]) -> Vec<u8> {
    let mut g = Vec::new();
    for n in nodes {
        field_bytes(&mut g, 1, n);
    }
    field_bytes(&mut g, 2, b"test");
    for i in inits {
        field_bytes(&mut g, 5, i);
    }
    for i in inputs {
        field_bytes(&mut g, 11, i);
    }
    for o in outputs {
        field_bytes(&mut g, 12, o);
    }
    let mut m = Vec::new();
    field_varint(&mut m, 1, 8);
    field_bytes(&mut m, 7, &g);
    let mut opset = Vec::new();
    field_bytes(&mut opset, 1, b"");
    field_varint(&mut opset, 2, 17);
    field_bytes(&mut m, 8, &opset);
    m
}

/// `y = Identity(x)` with the given declared shapes (for wrong-interface tests).
pub fn identity(input: &[Dim], output: &[Dim]) -> Vec<u8> {
    model(
        &[node("Identity", &["x"], &["y"])],
        &[],
        &[value_info("x", input)],
        &[value_info("y", output)],
    )
}

/// `y = Flatten(x) · W`: x is N×1×32×32, W is 1024×`dim` (row-major), y is N×`dim`.
pub fn linear(weights: &[f32], dim: usize) -> Vec<u8> {
    assert_eq!(weights.len(), 1024 * dim);
    model(
        &[
            node("Flatten", &["x"], &["flat"]),
            node("MatMul", &["flat", "w"], &["y"]),
        ],
        &[initializer("w", &[1024, dim], weights)],
        &[value_info(
            "x",
            &[Dim::Sym("N"), Dim::Fixed(1), Dim::Fixed(32), Dim::Fixed(32)],
        )],
        &[value_info("y", &[Dim::Sym("N"), Dim::Fixed(dim as i64)])],
    )
}

/// `model` with `metadata_props` (ModelProto field 14, StringStringEntryProto { key = 1,
/// value = 2 }) appended: protobuf allows a repeated field after the others.
pub fn with_metadata(model: &[u8], props: &[(&str, &str)]) -> Vec<u8> {
    let mut m = model.to_vec();
    for (k, v) in props {
        let mut entry = Vec::new();
        field_bytes(&mut entry, 1, k.as_bytes());
        field_bytes(&mut entry, 2, v.as_bytes());
        field_bytes(&mut m, 14, &entry);
    }
    m
}
