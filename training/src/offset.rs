//! An output offset: a float network's unit descriptors d become (d + s·ū) / ‖d + s·ū‖, with
//! ū the direction of the mean descriptor of training patches and s a scale
//! ([`OFFSET_SCALE`] by default). Fitted, never trained: the network's weights are unchanged.
//!
//! Why (issue 23; docs/BENCHMARKS.md, "An output offset"): under mutual nearest neighbours
//! without a ratio test (the MMA protocol of the dev sequences and of the independent
//! evaluation) the detector's unrepeated frames pair with each other, and a describer whose
//! unrelated descriptors are spread evenly over the sphere (what hardest-negative losses train
//! for) pairs them mutually more often than SIFT's, whose descriptors crowd around their mean
//! and make hubs (a hub is the nearest neighbour of many, mutual with one at most). The map
//! above gives a network such a crowd: descriptors on the ū side are drawn together, the
//! others spread, so nearest-neighbour relations among unrelated descriptors stop being
//! symmetric, while a descriptor and its true match, which are close, keep each other: the
//! map is smooth and one-to-one on the sphere minus −ū. Added to the unit descriptor, so s = 1
//! is an offset as long as a descriptor; adding small multiples of the mean (norm ≈ 0.1) did
//! nothing, which is why the earlier analysis missed it (scripts/analysis/post-hoc-transforms.py).
//!
//! The direction is a statistic of the training photos only: the mean of the network's
//! descriptors of the frames `descl extract` finds in them with its defaults (the 2048
//! strongest DoG frames, the frames of the dev benchmarks and of the independent evaluation),
//! on [`FIT_IMAGES_PER_SOURCE`] photos of each training source of a run config (evenly spaced
//! in name order). These are the patches the describer meets in use, unrepeated frames
//! included. The mean depends on which frames: that of the tracks' patches (reconstructed
//! points only) points elsewhere (cosine 0.34) and that of every DoG frame, weak ones
//! included, elsewhere again (cosine −0.13), and either does less (docs/BENCHMARKS.md). No
//! evaluation image and no held-out scene enters it.

use crate::net::Net;
use crate::train::RunConfig;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// Default ‖offset‖: the length of a unit descriptor. Chosen a priori, not tuned: the dev
/// groups' numbers at other scales are in docs/BENCHMARKS.md.
pub const OFFSET_SCALE: f64 = 1.0;
/// Photos per training source the mean is taken over.
pub const FIT_IMAGES_PER_SOURCE: usize = 4;

/// The photos the mean is taken over: [`FIT_IMAGES_PER_SOURCE`] of each training source's
/// photo folder (the COLMAP cut's `images`), evenly spaced in name order. Held-out sources
/// and sources without a photo folder (synthetic views, whose photos are the same scenes')
/// give none; a config with no training photo folder is refused.
pub fn fit_photos(config: &RunConfig) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for source in config.data.all_sources()? {
        let Some(colmap) = source.colmap.as_ref().filter(|_| !source.validation_only) else {
            continue;
        };
        let photos = list_photos(&colmap.images)?;
        let k = FIT_IMAGES_PER_SOURCE.min(photos.len());
        out.extend((0..k).map(|i| photos[i * photos.len() / k].clone()));
    }
    if out.is_empty() {
        bail!("the config has no training source with a photo folder (`colmap.images`)");
    }
    Ok(out)
}

/// The frames [`mean_direction`] describes, in words, for the card.
#[cfg(feature = "tracks")]
pub fn fit_detector() -> String {
    format!(
        "descl extract's defaults: the {} strongest DoG frames, images shrunk to {} px",
        descl::detect::DEFAULT_MAX_KEYPOINTS,
        descl::pipeline::COLMAP_MAX_IMAGE_SIZE
    )
}

/// Without descl's detector no offset is fitted ([`mean_direction`] refuses).
#[cfg(not(feature = "tracks"))]
pub fn fit_detector() -> String {
    String::from("none: built without feature `tracks`")
}

#[cfg(feature = "tracks")]
fn list_photos(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut photos = descl::image::list_images(dir)?;
    photos.sort();
    Ok(photos)
}

#[cfg(not(feature = "tracks"))]
fn list_photos(dir: &Path) -> Result<Vec<PathBuf>> {
    bail!(
        "{}: fitting an offset runs descl's detector (build with feature `tracks`)",
        dir.display()
    )
}

/// The mean of the descriptors `descl extract` (its defaults: [`descl::detect::DEFAULT_MAX_KEYPOINTS`]
/// strongest DoG frames) gives `photos` under the model
/// `onnx`: its unit direction, its length and how many descriptors it averages.
#[cfg(feature = "tracks")]
pub fn mean_direction(onnx: &Path, photos: &[PathBuf]) -> Result<(Vec<f32>, f64, usize)> {
    use descl::describe::Descriptors;
    let extractor = descl::pipeline::Extractor::new(descl::pipeline::ExtractorConfig {
        model: onnx.display().to_string(),
        device: descl::model::Device::Cpu,
        detector: descl::detect::DetectorConfig {
            max_keypoints: descl::detect::DEFAULT_MAX_KEYPOINTS,
            ..Default::default()
        },
        max_image_size: descl::pipeline::COLMAP_MAX_IMAGE_SIZE,
    })?;
    let (mut sum, mut n) = (Vec::<f64>::new(), 0usize);
    for photo in photos {
        let f = extractor.extract(photo)?;
        let Descriptors::Float(d) = &f.descriptors else {
            bail!("{}: an offset is fitted to a float model", onnx.display());
        };
        if sum.is_empty() {
            sum = vec![0.0; d.ncols()];
        }
        for row in d.rows() {
            for (s, v) in sum.iter_mut().zip(row) {
                *s += f64::from(*v);
            }
        }
        n += d.nrows();
    }
    if n == 0 {
        bail!(
            "no frame found in the {} photos ({}…): no mean to offset along",
            photos.len(),
            photos
                .first()
                .map_or(String::new(), |p| p.display().to_string())
        );
    }
    let norm = sum
        .iter()
        .map(|s| (s / n as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        bail!("the mean descriptor has length {norm}: no direction to offset along");
    }
    let unit = sum.iter().map(|s| (s / n as f64 / norm) as f32).collect();
    Ok((unit, norm, n))
}

#[cfg(not(feature = "tracks"))]
pub fn mean_direction(onnx: &Path, _photos: &[PathBuf]) -> Result<(Vec<f32>, f64, usize)> {
    bail!(
        "{}: fitting an offset runs descl's detector (build with feature `tracks`)",
        onnx.display()
    )
}

/// `net` with the offset `scale`·`direction` ([`Net::with_offset`]).
pub fn apply(net: &Net, direction: &[f32], scale: f64) -> Result<Net> {
    if !(scale.is_finite() && scale > 0.0) {
        bail!("the offset's scale must be a positive number, got {scale}");
    }
    let offset: Vec<f32> = direction
        .iter()
        .map(|v| (f64::from(*v) * scale) as f32)
        .collect();
    net.with_offset(&offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Arch;
    use crate::train::describe;
    use tch::Device;

    /// The map on a hand-made case: d = e₀, offset s·e₁ → (e₀ + s·e₁)/√(1 + s²).
    #[test]
    fn the_offset_net_outputs_the_normalised_sum() {
        let net = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
        let dim = net.output_dim() as usize;
        let mut dir = vec![0.0f32; dim];
        dir[1] = 1.0;
        let with = apply(&net, &dir, 2.0).unwrap();
        let patches: Vec<f32> = (0..3 * 32 * 32)
            .map(|i| ((i * 37) % 255) as f32 / 255.0)
            .collect();
        let d = describe(&net, &patches, Device::Cpu).unwrap();
        let e = describe(&with, &patches, Device::Cpu).unwrap();
        for r in 0..3 {
            let d: Vec<f32> = Vec::try_from(d.get(r)).unwrap();
            let e: Vec<f32> = Vec::try_from(e.get(r)).unwrap();
            let mut want = d.clone();
            want[1] += 2.0;
            let norm = want.iter().map(|v| v * v).sum::<f32>().sqrt();
            for (a, b) in e.iter().zip(&want) {
                assert!((a - b / norm).abs() < 1e-5, "{a} vs {}", b / norm);
            }
        }
        // An offset on an offset, a binary net, a wrong length and a bad scale are refused.
        assert!(apply(&with, &dir, 1.0).is_err());
        let binary = Net::new_binary(Arch::Tfeat, 0.25, 256, Device::Cpu).unwrap();
        assert!(binary.with_offset(&vec![0.0; 256]).is_err());
        assert!(net.with_offset(&dir[1..]).is_err());
        assert!(apply(&net, &dir, 0.0).is_err());
        assert!(apply(&net, &dir, f64::NAN).is_err());
    }
}
