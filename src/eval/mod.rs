//! Benchmarks with the published protocols: HPatches patches, homography sequences (HPatches,
//! Oxford) and their JPEG / blur / zoom robustness pairs, Oxford matching score, UBC PhotoTour, relative pose, reconstruction (SfM against
//! ground-truth cameras); their metrics and reports.

pub mod distance;

/// Largest text file of a dataset release that the loaders read (`io::bounded`): the largest
/// in the releases used are tens of MB (UBC PhotoTour's `m50_500000_500000_0.txt`, 500 000
/// lines; hpatches-benchmark's verification pair lists, about a million lines), so 256 MiB is
/// several times any real one while a wrong path (a device, a huge file) fails at once.
pub const MAX_DATASET_TEXT_BYTES: u64 = 256 << 20;

/// A dataset's text file, through [`crate::io::bounded::read_text`].
pub(crate) fn read_dataset_text(path: &std::path::Path) -> crate::error::Result<String> {
    crate::io::bounded::read_text(path, MAX_DATASET_TEXT_BYTES, "dataset text file")
}
pub mod hpatches;
pub mod metrics;
pub mod overlap;
pub mod oxford;
pub mod phototour;
pub mod plot;
pub mod pose;
pub mod pycolmap_peer;
pub mod reconstruction;
pub mod report;
pub mod robustness;
pub mod runner;
pub mod scratch;
pub mod sequences;
pub mod suite;
