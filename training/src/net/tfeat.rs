//! TFeat (Balntas et al., BMVC 2016): a shallow triplet network.
//!
//! InstanceNorm → Conv(1→32, 7×7) → tanh → MaxPool 2 → Conv(32→64, 6×6) → tanh →
//! Linear(64·8·8 → 128) → tanh, plus descl's L2 normalisation. Parameter names follow the
//! official PyTorch module (`features.1`, `features.4`, `descr.0`) so its weights load as-is.

use super::{scaled, Layer};

/// Output dimension of TFeat.
pub const TFEAT_DIM: i64 = 128;
/// Spatial side after conv 7 (32→26), pool 2 (→13) and conv 6 (→8).
const TFEAT_FINAL_SIDE: i64 = 8;

/// TFeat's layers; `width` scales the two convolutions' channels (1.0 = the paper).
pub fn layers(width: f64) -> Vec<Layer> {
    let c1 = scaled(32, width);
    let c2 = scaled(64, width);
    vec![
        Layer::PatchNorm,
        Layer::Conv {
            name: "features.1".into(),
            cin: 1,
            cout: c1,
            kernel: 7,
            stride: 1,
            pad: 0,
            bias: true,
        },
        Layer::Tanh,
        Layer::MaxPool {
            kernel: 2,
            stride: 2,
        },
        Layer::Conv {
            name: "features.4".into(),
            cin: c1,
            cout: c2,
            kernel: 6,
            stride: 1,
            pad: 0,
            bias: true,
        },
        Layer::Tanh,
        Layer::Flatten,
        Layer::Linear {
            name: "descr.0".into(),
            cin: c2 * TFEAT_FINAL_SIDE * TFEAT_FINAL_SIDE,
            cout: TFEAT_DIM,
        },
        Layer::Tanh,
        Layer::L2Norm,
    ]
}
