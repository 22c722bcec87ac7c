//! L2-Net (Tian et al., CVPR 2017) in the variant HardNet trains (Mishchuk et al., NIPS 2017):
//! seven 3×3/8×8 convolutions 32-32-64(s2)-64-128(s2)-128-128(8×8), each followed by batch
//! normalisation without affine parameters, ReLU between them, dropout 0.3 before the last
//! convolution, then L2 normalisation. Parameter names follow HardNet's `nn.Sequential`
//! (`features.0` … `features.20`).

use super::{scaled, Layer};

/// Output dimension of L2-Net.
pub const L2NET_DIM: i64 = 128;
/// Dropout before the last convolution (HardNet).
pub const L2NET_DROPOUT: f64 = 0.3;
/// Kernel of the last convolution: it covers the whole 8×8 map left after two stride-2 layers.
const L2NET_FINAL_KERNEL: i64 = 8;

/// L2-Net's layers; `width` scales the hidden channels (1.0 = the paper), the output stays 128.
pub fn layers(width: f64) -> Vec<Layer> {
    // (output channels, stride) of the six 3×3 convolutions.
    let blocks = [(32, 1), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1)];
    let mut layers = vec![Layer::PatchNorm];
    let mut cin = 1;
    let mut index = 0;
    for (c, stride) in blocks {
        let cout = scaled(c, width);
        layers.push(Layer::Conv {
            name: format!("features.{index}"),
            cin,
            cout,
            kernel: 3,
            stride,
            pad: 1,
            bias: false,
        });
        layers.push(Layer::BatchNorm {
            name: format!("features.{}", index + 1),
            channels: cout,
        });
        layers.push(Layer::Relu);
        index += 3;
        cin = cout;
    }
    layers.push(Layer::Dropout { p: L2NET_DROPOUT });
    index += 1;
    layers.push(Layer::Conv {
        name: format!("features.{index}"),
        cin,
        cout: L2NET_DIM,
        kernel: L2NET_FINAL_KERNEL,
        stride: 1,
        pad: 0,
        bias: false,
    });
    layers.push(Layer::BatchNorm {
        name: format!("features.{}", index + 1),
        channels: L2NET_DIM,
    });
    layers.push(Layer::Flatten);
    layers.push(Layer::L2Norm);
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_hardnet_sequential() {
        let names: Vec<String> = layers(1.0)
            .into_iter()
            .filter_map(|l| match l {
                Layer::Conv { name, .. } | Layer::BatchNorm { name, .. } => Some(name),
                _ => None,
            })
            .collect();
        assert_eq!(names.first().map(String::as_str), Some("features.0"));
        assert_eq!(names[names.len() - 2], "features.19");
        assert_eq!(names[names.len() - 1], "features.20");
    }
}
