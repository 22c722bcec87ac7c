//! Benchmarks with the published protocols: HPatches patches, homography sequences (HPatches,
//! Oxford), Oxford matching score, UBC PhotoTour, relative pose; their metrics and reports.

pub mod distance;
pub mod hpatches;
pub mod metrics;
pub mod overlap;
pub mod oxford;
pub mod phototour;
pub mod plot;
pub mod pose;
pub mod report;
pub mod runner;
pub mod sequences;
pub mod suite;
