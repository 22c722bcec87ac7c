//! Benchmarks with the published protocols: HPatches patches, homography sequences (HPatches,
//! Oxford) and their JPEG / blur robustness pairs, Oxford matching score, UBC PhotoTour, relative pose, reconstruction (SfM against
//! ground-truth cameras); their metrics and reports.

pub mod distance;
pub mod hpatches;
pub mod metrics;
pub mod overlap;
pub mod oxford;
pub mod phototour;
pub mod plot;
pub mod pose;
pub mod reconstruction;
pub mod report;
pub mod robustness;
pub mod runner;
pub mod sequences;
pub mod suite;
