//! The official TFeat weights load into descl's TFeat and give the same output as an
//! independent forward pass written with plain loops over the raw safetensors data.

mod common;

use descl_training::net::{Arch, Net};
use std::collections::HashMap;
use tch::{Device, Tensor};

struct Raw {
    shape: Vec<usize>,
    data: Vec<f32>,
}

fn read_raw(path: &std::path::Path) -> HashMap<String, Raw> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let data = view
                .data()
                .chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (
                name,
                Raw {
                    shape: view.shape().to_vec(),
                    data,
                },
            )
        })
        .collect()
}

/// Valid convolution, (C, H, W) → (O, H−k+1, W−k+1).
fn conv(
    x: &[f32],
    c: usize,
    h: usize,
    w: usize,
    wt: &Raw,
    bias: &Raw,
) -> (Vec<f32>, usize, usize, usize) {
    let (o, k) = (wt.shape[0], wt.shape[2]);
    assert_eq!(wt.shape[1], c);
    let (oh, ow) = (h - k + 1, w - k + 1);
    let mut out = vec![0f32; o * oh * ow];
    for oc in 0..o {
        for y in 0..oh {
            for xx in 0..ow {
                let mut s = bias.data[oc] as f64;
                for ic in 0..c {
                    for dy in 0..k {
                        for dx in 0..k {
                            s += wt.data[((oc * c + ic) * k + dy) * k + dx] as f64
                                * x[(ic * h + y + dy) * w + xx + dx] as f64;
                        }
                    }
                }
                out[(oc * oh + y) * ow + xx] = s as f32;
            }
        }
    }
    (out, o, oh, ow)
}

fn reference_tfeat(patch: &[f32], p: &HashMap<String, Raw>) -> Vec<f32> {
    // InstanceNorm2d(1, affine=False): (x − mean)/sqrt(var + 1e-5), biased variance.
    let n = patch.len() as f64;
    let mean = patch.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = patch
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let x: Vec<f32> = patch
        .iter()
        .map(|&v| ((v as f64 - mean) / (var + 1e-5).sqrt()) as f32)
        .collect();
    let (x, c, h, w) = conv(
        &x,
        1,
        32,
        32,
        &p["features.1.weight"],
        &p["features.1.bias"],
    );
    let x: Vec<f32> = x.iter().map(|v| v.tanh()).collect();
    let (ph, pw) = (h / 2, w / 2);
    let mut pooled = vec![0f32; c * ph * pw];
    for ch in 0..c {
        for y in 0..ph {
            for xx in 0..pw {
                let at = |dy: usize, dx: usize| x[(ch * h + 2 * y + dy) * w + 2 * xx + dx];
                pooled[(ch * ph + y) * pw + xx] =
                    at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
            }
        }
    }
    let (x, _, _, _) = conv(
        &pooled,
        c,
        ph,
        pw,
        &p["features.4.weight"],
        &p["features.4.bias"],
    );
    let x: Vec<f32> = x.iter().map(|v| v.tanh()).collect();
    let (lw, lb) = (&p["descr.0.weight"], &p["descr.0.bias"]);
    let (out_dim, in_dim) = (lw.shape[0], lw.shape[1]);
    assert_eq!(in_dim, x.len());
    let y: Vec<f64> = (0..out_dim)
        .map(|o| {
            let s: f64 = lb.data[o] as f64
                + (0..in_dim)
                    .map(|i| lw.data[o * in_dim + i] as f64 * x[i] as f64)
                    .sum::<f64>();
            s.tanh()
        })
        .collect();
    let norm = (y.iter().map(|v| v * v).sum::<f64>() + 1e-10).sqrt();
    y.iter().map(|v| (v / norm) as f32).collect()
}

#[test]
fn official_tfeat_weights_match_an_independent_forward_pass() {
    let Some(root) =
        common::data_root_or_skip("official_tfeat_weights_match_an_independent_forward_pass")
    else {
        return;
    };
    let path = root.join("weights/tfeat-liberty.safetensors");
    let net = Net::load(Arch::Tfeat, 1.0, &path, Device::Cpu).unwrap();
    let raw = read_raw(&path);
    let n = 4;
    let patches = common::test_patches(n);
    let x = Tensor::from_slice(&patches).reshape([n as i64, 1, 32, 32]);
    let y = net.forward_t(&x, false).unwrap();
    let got = Vec::<f32>::try_from(y.flatten(0, -1)).unwrap();
    let mut max_diff = 0f32;
    for k in 0..n {
        let want = reference_tfeat(&patches[k * 1024..(k + 1) * 1024], &raw);
        for (a, b) in got[k * 128..(k + 1) * 128].iter().zip(&want) {
            max_diff = max_diff.max((a - b).abs());
        }
    }
    assert!(max_diff <= 1e-4, "max |tch − reference| = {max_diff}");
    // Distinct patches give distinct descriptors (the comparison is not vacuous).
    assert!(
        got[..128]
            .iter()
            .zip(&got[128..256])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
            > 1e-2
    );
}

#[test]
fn weights_with_a_wrong_shape_are_rejected_with_the_file_name() {
    let Some(root) =
        common::data_root_or_skip("weights_with_a_wrong_shape_are_rejected_with_the_file_name")
    else {
        return;
    };
    let path = root.join("weights/tfeat-liberty.safetensors");
    let err = Net::load(Arch::Tfeat, 0.5, &path, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("tfeat-liberty.safetensors") && err.contains("shape"),
        "{err}"
    );
    let err = Net::load(Arch::L2net, 1.0, &path, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("missing"), "{err}");
}
