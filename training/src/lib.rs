//! descl-training: descriptor networks in tch, the papers' losses and samplers, synthetic
//! training tracks, and an ONNX writer (tch cannot export).

pub mod data;
pub mod loss;
pub mod net;
pub mod onnx;
pub mod optim;
pub mod sampler;
pub mod train;
