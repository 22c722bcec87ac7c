//! descl-training: descriptor networks in tch, the papers' losses (hard-positive sampling and
//! active batch selection live inside their losses), synthetic training tracks, method
//! comparison over seeds, and an ONNX writer (tch cannot export).

#[cfg(feature = "tracks")]
pub mod compare;
pub mod data;
pub mod distill;
pub mod lineage;
pub mod loss;
pub mod net;
pub mod offset;
pub mod onnx;
pub mod optim;
pub mod soup;
pub mod throughput;
pub mod train;
