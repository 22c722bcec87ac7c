//! HyNet's network (Tian et al., NeurIPS 2020), the encoder SDGMNet adopts (SDGMNet Fig. 3):
//! L2-Net's seven convolutions with every batch normalisation + ReLU replaced by Filter Response
//! Normalisation + Thresholded Linear Unit, an FRN + TLU on the input, dropout 0.3 before the
//! last (8×8, bias-free) convolution, a final affine-free batch normalisation and L2
//! normalisation. Layer names follow the reference PyTorch state dict (`layer1.2.weight`, …).

use super::{scaled, Layer};

/// Dropout before the last convolution (SDGMNet Fig. 3: "0.3 dropout rate").
pub const DROPOUT: f64 = 0.3;

/// The layer list; `width` scales the channel counts (1.0 = 32-32-64-64-128-128 → 128).
pub fn layers(width: f64) -> Vec<Layer> {
    let c32 = scaled(32, width);
    let c64 = scaled(64, width);
    let c128 = scaled(128, width);
    let conv = |name: &str, cin: i64, cout: i64, stride: i64| Layer::Conv {
        name: name.to_string(),
        cin,
        cout,
        kernel: 3,
        stride,
        pad: 1,
        bias: true,
    };
    let frn = |name: &str, channels: i64| Layer::Frn {
        name: name.to_string(),
        channels,
    };
    let tlu = |name: &str, channels: i64| Layer::Tlu {
        name: name.to_string(),
        channels,
    };
    vec![
        Layer::PatchNorm,
        frn("layer1.0", 1),
        tlu("layer1.1", 1),
        conv("layer1.2", 1, c32, 1),
        frn("layer1.3", c32),
        tlu("layer1.4", c32),
        conv("layer2.0", c32, c32, 1),
        frn("layer2.1", c32),
        tlu("layer2.2", c32),
        conv("layer3.0", c32, c64, 2),
        frn("layer3.1", c64),
        tlu("layer3.2", c64),
        conv("layer4.0", c64, c64, 1),
        frn("layer4.1", c64),
        tlu("layer4.2", c64),
        conv("layer5.0", c64, c128, 2),
        frn("layer5.1", c128),
        tlu("layer5.2", c128),
        conv("layer6.0", c128, c128, 1),
        frn("layer6.1", c128),
        tlu("layer6.2", c128),
        Layer::Dropout { p: DROPOUT },
        Layer::Conv {
            name: "layer7.1".to_string(),
            cin: c128,
            cout: 128,
            kernel: 8,
            stride: 1,
            pad: 0,
            bias: false,
        },
        Layer::BatchNorm {
            name: "layer7.2".to_string(),
            channels: 128,
        },
        Layer::Flatten,
        Layer::L2Norm,
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{Arch, Net, FRN_EPS};
    use super::*;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn frn_and_tlu_match_plain_loops() {
        // The input FRN + TLU of HyNet alone, with hand-set γ, β, τ.
        let mut net = Net::new(Arch::Hynet, 0.25, Device::Cpu).unwrap();
        net.layers = layers(0.25)[1..3].to_vec();
        let (gamma, beta, tau) = (1.7f32, -0.3f32, -0.5f32);
        tch::no_grad(|| {
            for (name, mut t) in net.vs.variables() {
                let value = match name.as_str() {
                    "layer1.0.weight" => gamma,
                    "layer1.0.bias" => beta,
                    "layer1.1.tau" => tau,
                    _ => continue,
                };
                let _ = t.fill_(value as f64);
            }
        });
        let x: Vec<f32> = (0..2 * 32 * 32)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        let got = net
            .forward_t(&Tensor::from_slice(&x).view([2, 1, 32, 32]), false)
            .unwrap();
        let got = Vec::<f32>::try_from(got.flatten(0, -1)).unwrap();
        for (s, patch) in x.chunks(32 * 32).enumerate() {
            let nu2 = patch.iter().map(|v| (v * v) as f64).sum::<f64>() / patch.len() as f64;
            let scale = 1.0 / (nu2 + FRN_EPS).sqrt();
            for (i, v) in patch.iter().enumerate() {
                let want = ((gamma as f64) * (*v as f64) * scale + beta as f64).max(tau as f64);
                let g = got[s * 1024 + i] as f64;
                assert!(
                    (g - want).abs() < 1e-5,
                    "sample {s} pixel {i}: {g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn hynet_is_unit_length_with_reference_parameter_names() {
        let net = Net::new(Arch::Hynet, 0.25, Device::Cpu).unwrap();
        let y = net
            .forward_t(
                &Tensor::rand([3, 1, 32, 32], (Kind::Float, Device::Cpu)),
                true,
            )
            .unwrap();
        assert_eq!(y.size(), vec![3, 128]);
        let norms =
            Vec::<f32>::try_from(y.square().sum_dim_intlist(1, false, Kind::Float)).unwrap();
        assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-4), "{norms:?}");
        let names: std::collections::HashSet<String> = net.vs.variables().into_keys().collect();
        for n in [
            "layer1.0.weight",
            "layer1.1.tau",
            "layer1.2.weight",
            "layer6.2.tau",
            "layer7.1.weight",
            "layer7.2.running_var",
        ] {
            assert!(names.contains(n), "missing {n}");
        }
        assert!(
            !names.contains("layer7.1.bias"),
            "the last convolution has no bias"
        );
    }
}
