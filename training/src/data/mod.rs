//! Training data: classes of k views of one physical point, as 32×32 u8 patches.
//!
//! A [`TrackSet`] is generated once (e.g. [`synthetic`]) and cached in a flat file so training
//! iterations only index memory. File layout (little endian):
//! `TRACKS_MAGIC` · u32 header length · JSON [`TrackHeader`] · classes×views×32×32 u8.

pub mod colmap;
pub mod jitter;
pub mod photometric;
pub mod synthetic;

use anyhow::{bail, Context, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// Why a track generator is missing: the build without feature `tracks` (no OpenCV, the GPU
/// host's build) trains only from track files made elsewhere.
#[cfg(not(feature = "tracks"))]
pub(crate) const NO_TRACKS_FEATURE: &str = "this descl-train was built without the `tracks` \
     feature (no OpenCV): generate the track file with a default build (`descl-train tracks \
     --config ...`) and bring it here";

/// First bytes of a track file.
pub const TRACKS_MAGIC: &[u8; 10] = b"DESCLTRK1\n";
/// Side of a stored patch: descl's patch size, the models' input.
pub const PATCH_SIDE: usize = descl::patch::PATCH_SIZE;
/// Pixels per stored patch.
pub const PATCH_PIXELS: usize = PATCH_SIDE * PATCH_SIDE;

/// The frames newly cut tracks follow, recorded in every track file's `source.frames`: DoG
/// positions in descl's frame convention since OpenCV's upscale offset is removed
/// (`descl::detect::dog::OPENCV_SIFT_UPSCALE_OFFSET_PX`). A file without it was cut from
/// positions ¼ px off and is not reused (`train::load_or_generate_source`).
pub const TRACK_FRAMES: &str = "dog-pixel-centre";

/// What a track file holds and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrackHeader {
    pub classes: usize,
    pub views: usize,
    pub patch_size: usize,
    /// Measurement-region magnification the patches were cut at (frame a = m·σ·R, see
    /// ARCHITECTURE.md "Conventions"); a model trained on these tracks expects the same m.
    /// Files written before this field existed were cut at m = 6.
    #[serde(default = "default_magnification")]
    pub magnification: f64,
    /// Generator description (source images, parameters, seed): copied into model cards.
    pub source: serde_json::Value,
}

fn default_magnification() -> f64 {
    f64::from(descl::detect::DEFAULT_MAGNIFICATION)
}

/// Classes × views × 32×32 u8 patches (value = round(255 · intensity)).
#[derive(Debug, Clone, PartialEq)]
pub struct TrackSet {
    pub header: TrackHeader,
    pub pixels: Vec<u8>,
}

/// Batch-time augmentation: geometric (identical for every view of a class) and photometric
/// (independent per view, [`photometric`]).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Augment {
    /// Random horizontal flip.
    #[serde(default)]
    pub flip: bool,
    /// Random rotation by a multiple of 90°.
    #[serde(default)]
    pub rot90: bool,
    /// Per-view JPEG, blur, exposure and noise (off unless configured).
    #[serde(default, skip_serializing_if = "photometric::Photometric::is_off")]
    pub photometric: photometric::Photometric,
}

impl TrackSet {
    pub fn new(views: usize, magnification: f64, source: serde_json::Value) -> Self {
        TrackSet {
            header: TrackHeader {
                classes: 0,
                views,
                patch_size: PATCH_SIDE,
                magnification,
                source,
            },
            pixels: Vec::new(),
        }
    }

    /// Appends one class: `views` patches of 32×32 floats in [0, 1].
    pub fn push_class(&mut self, patches: &[&[f32]]) -> Result<()> {
        if patches.len() != self.header.views || patches.iter().any(|p| p.len() != PATCH_PIXELS) {
            bail!(
                "a class needs {} patches of {PATCH_PIXELS} pixels",
                self.header.views
            );
        }
        for p in patches {
            self.pixels
                .extend(p.iter().map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8));
        }
        self.header.classes += 1;
        Ok(())
    }

    /// SHA-256 (lowercase hex) of the patches' bytes: the identity of what a run trains or
    /// validates on. The header's record of how the file was made is beside it in a card; two
    /// cuts from different reconstructions of one scene with one configuration have the same
    /// record and different patches, and only this tells them apart.
    pub fn patches_sha256(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(&self.pixels);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// What a run's plan records of this set: classes, views and [`TrackSet::patches_sha256`].
    pub fn identity(&self) -> serde_json::Value {
        serde_json::json!({"classes": self.header.classes, "views": self.header.views,
                           "patches_sha256": self.patches_sha256()})
    }

    /// The pixels of view `v` of class `c`.
    pub fn patch(&self, c: usize, v: usize) -> &[u8] {
        let start = (c * self.header.views + v) * PATCH_PIXELS;
        &self.pixels[start..start + PATCH_PIXELS]
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let header = serde_json::to_vec(&self.header)?;
        let mut bytes =
            Vec::with_capacity(TRACKS_MAGIC.len() + 4 + header.len() + self.pixels.len());
        bytes.extend_from_slice(TRACKS_MAGIC);
        bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&self.pixels);
        descl::io::atomic::write_bytes_atomic(path, &bytes)
            .with_context(|| format!("{}: cannot write track file", path.display()))
    }

    pub fn load(path: &Path) -> Result<TrackSet> {
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot open track file", path.display()))?;
        let mut magic = [0u8; 10];
        file.read_exact(&mut magic)
            .with_context(|| format!("{}: truncated track file", path.display()))?;
        if &magic != TRACKS_MAGIC {
            bail!("{}: not a descl track file", path.display());
        }
        let mut len = [0u8; 4];
        file.read_exact(&mut len)
            .with_context(|| format!("{}: truncated track file", path.display()))?;
        let mut header = vec![0u8; u32::from_le_bytes(len) as usize];
        file.read_exact(&mut header)
            .with_context(|| format!("{}: truncated track header", path.display()))?;
        let header: TrackHeader = serde_json::from_slice(&header)
            .with_context(|| format!("{}: bad track header", path.display()))?;
        if header.patch_size != PATCH_SIDE {
            bail!(
                "{}: patch size {} (expected {PATCH_SIDE})",
                path.display(),
                header.patch_size
            );
        }
        let mut pixels = Vec::new();
        file.read_to_end(&mut pixels)
            .with_context(|| format!("{}: cannot read patches", path.display()))?;
        if pixels.len() != header.classes * header.views * PATCH_PIXELS {
            bail!(
                "{}: {} patch bytes, header says {} classes × {} views",
                path.display(),
                pixels.len(),
                header.classes,
                header.views
            );
        }
        Ok(TrackSet { header, pixels })
    }

    /// Every `every`-th class (0, k, 2k, …), for carrying a uniform share of a large track file
    /// where it cannot travel whole (a GPU host reached through a size-limited transfer). The
    /// header's `source` becomes `{"generator": "subset", "every", "of_classes", "of_sha256",
    /// "of"}`: the original's generator record and the content hash of the file it was cut from,
    /// so that a card trained on it says so and a generator check never mistakes it for the
    /// whole file.
    pub fn every_nth(&self, every: usize, of_sha256: &str) -> Result<TrackSet> {
        if every == 0 {
            bail!("a subset takes every k-th class with k >= 1 (got 0)");
        }
        let stride = self.header.views * PATCH_PIXELS;
        let classes = self.header.classes.div_ceil(every);
        let mut pixels = Vec::with_capacity(classes * stride);
        for c in (0..self.header.classes).step_by(every) {
            pixels.extend_from_slice(&self.pixels[c * stride..(c + 1) * stride]);
        }
        Ok(TrackSet {
            header: TrackHeader {
                classes,
                source: serde_json::json!({
                    "generator": "subset",
                    "every": every,
                    "of_classes": self.header.classes,
                    "of_sha256": of_sha256,
                    "of": self.header.source,
                }),
                ..self.header.clone()
            },
            pixels,
        })
    }

    /// Splits off the last `n` classes (e.g. a validation set of training tracks).
    pub fn split_off(&mut self, n: usize) -> TrackSet {
        let n = n.min(self.header.classes);
        let keep = self.header.classes - n;
        let pixels = self
            .pixels
            .split_off(keep * self.header.views * PATCH_PIXELS);
        self.header.classes = keep;
        TrackSet {
            header: TrackHeader {
                classes: n,
                ..self.header.clone()
            },
            pixels,
        }
    }

    /// A batch of `classes` distinct classes × `views` distinct views each, as f32 in [0, 1]
    /// (classes·views·32·32, class-major), with the same augmentation for all views of a class.
    pub fn random_batch<R: Rng>(
        &self,
        rng: &mut R,
        classes: usize,
        views: usize,
        augment: Augment,
    ) -> Result<Vec<f32>> {
        if classes > self.header.classes || views > self.header.views || views == 0 {
            bail!(
                "batch of {classes} classes × {views} views from {} classes × {} views",
                self.header.classes,
                self.header.views
            );
        }
        let chosen = rand::seq::index::sample(rng, self.header.classes, classes);
        let mut out = Vec::with_capacity(classes * views * PATCH_PIXELS);
        for c in chosen.iter() {
            let vs = rand::seq::index::sample(rng, self.header.views, views);
            let flip = augment.flip && rng.gen_bool(0.5);
            let turns = if augment.rot90 {
                rng.gen_range(0..4)
            } else {
                0
            };
            for v in vs.iter() {
                let start = out.len();
                push_transformed(&mut out, self.patch(c, v), flip, turns);
                augment.photometric.apply(rng, &mut out[start..])?;
            }
        }
        Ok(out)
    }

    /// All views of classes `range` in order (class-major), as f32 in [0, 1].
    pub fn classes_f32(&self, range: std::ops::Range<usize>) -> Vec<f32> {
        let start = range.start * self.header.views * PATCH_PIXELS;
        let end = range.end.min(self.header.classes) * self.header.views * PATCH_PIXELS;
        self.pixels[start..end]
            .iter()
            .map(|&p| p as f32 / 255.0)
            .collect()
    }
}

/// Largest share of a source's classes held out for validation.
pub const MAX_VALIDATION_SHARE: f64 = 0.1;

/// Several track sets mixed by weight: each class of a batch comes from source `i` with
/// probability `weights[i] / Σ weights` (a real reconstruction beside synthetic views, say).
/// One source behaves exactly as the [`TrackSet`] alone (same random stream).
#[derive(Debug, Clone, PartialEq)]
pub struct TrackMix {
    pub sets: Vec<TrackSet>,
    pub weights: Vec<f64>,
}

impl TrackMix {
    /// Checks that the sources agree on what a patch is (magnification) and that the weights
    /// are positive.
    pub fn new(sets: Vec<TrackSet>, weights: Vec<f64>) -> Result<TrackMix> {
        if sets.is_empty() || sets.len() != weights.len() {
            bail!(
                "{} track sources with {} weights",
                sets.len(),
                weights.len()
            );
        }
        if let Some(w) = weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
            bail!("source weights must be positive, got {w}");
        }
        let m = sets[0].header.magnification;
        if let Some(other) = sets.iter().find(|s| s.header.magnification != m) {
            bail!(
                "track sources cut at different magnifications ({m} and {}): a model expects one",
                other.header.magnification
            );
        }
        Ok(TrackMix { sets, weights })
    }

    /// Classes of all sources.
    pub fn classes(&self) -> usize {
        self.sets.iter().map(|s| s.header.classes).sum()
    }

    /// The magnification every source was cut at.
    pub fn magnification(&self) -> f64 {
        self.sets
            .first()
            .map_or(default_magnification(), |s| s.header.magnification)
    }

    /// Fewest views per class over the sources.
    pub fn views(&self) -> usize {
        self.sets.iter().map(|s| s.header.views).min().unwrap_or(0)
    }

    /// Splits off the last `n` classes of every source (a validation set per source), but at
    /// most [`MAX_VALIDATION_SHARE`] of a source, so a small source keeps training classes.
    pub fn split_off(&mut self, n: usize) -> Vec<TrackSet> {
        self.sets
            .iter_mut()
            .map(|s| {
                let cap = (s.header.classes as f64 * MAX_VALIDATION_SHARE) as usize;
                s.split_off(n.min(cap))
            })
            .collect()
    }

    /// What the sources are, for model cards: each header's source with its weight, size and
    /// the patches' SHA-256 ([`TrackSet::patches_sha256`]).
    pub fn describe(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.sets
                .iter()
                .zip(&self.weights)
                .map(|(s, w)| {
                    serde_json::json!({
                        "weight": w,
                        "classes": s.header.classes,
                        "views": s.header.views,
                        "magnification": s.header.magnification,
                        "patches_sha256": s.patches_sha256(),
                        "source": s.header.source,
                    })
                })
                .collect(),
        )
    }

    /// A batch as [`TrackSet::random_batch`]: `classes` classes, each drawn from a source
    /// chosen by weight, grouped by source in source order.
    pub fn random_batch<R: Rng>(
        &self,
        rng: &mut R,
        classes: usize,
        views: usize,
        augment: Augment,
    ) -> Result<Vec<f32>> {
        if let [only] = self.sets.as_slice() {
            return only.random_batch(rng, classes, views, augment);
        }
        let total: f64 = self.weights.iter().sum();
        let mut counts = vec![0usize; self.sets.len()];
        for _ in 0..classes {
            let mut r = rng.gen::<f64>() * total;
            let mut i = 0;
            while i + 1 < self.weights.len() && r >= self.weights[i] {
                r -= self.weights[i];
                i += 1;
            }
            counts[i] += 1;
        }
        let mut out = Vec::with_capacity(classes * views * PATCH_PIXELS);
        for (set, &n) in self.sets.iter().zip(&counts) {
            if n > 0 {
                out.extend(set.random_batch(rng, n, views, augment)?);
            }
        }
        Ok(out)
    }
}

/// Appends `patch` flipped horizontally (optional) then rotated by `turns`·90° counter-clockwise.
fn push_transformed(out: &mut Vec<f32>, patch: &[u8], flip: bool, turns: u32) {
    let n = PATCH_SIDE;
    for r in 0..n {
        for c in 0..n {
            // Output (r, c) reads the source pixel that lands there.
            let (mut sr, mut sc) = (r, c);
            for _ in 0..turns {
                // Inverse of a 90° CCW turn: (r, c) ← (c, n−1−r).
                (sr, sc) = (sc, n - 1 - sr);
            }
            if flip {
                sc = n - 1 - sc;
            }
            out.push(patch[sr * n + sc] as f32 / 255.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn toy(classes: usize, views: usize) -> TrackSet {
        let mut set = TrackSet::new(views, 6.0, serde_json::json!({"kind": "test"}));
        for c in 0..classes {
            let patches: Vec<Vec<f32>> = (0..views)
                .map(|v| {
                    (0..PATCH_PIXELS)
                        .map(|i| ((c * 7 + v * 3 + i) % 256) as f32 / 255.0)
                        .collect()
                })
                .collect();
            let refs: Vec<&[f32]> = patches.iter().map(|p| p.as_slice()).collect();
            set.push_class(&refs).unwrap();
        }
        set
    }

    #[test]
    fn every_nth_keeps_classes_0_k_2k_and_records_its_origin() {
        let views = 2;
        let classes = 7;
        let pixels: Vec<u8> = (0..classes * views)
            .flat_map(|i| std::iter::repeat_n(i as u8, PATCH_PIXELS))
            .collect();
        let set = TrackSet {
            header: TrackHeader {
                classes,
                views,
                patch_size: PATCH_SIDE,
                magnification: 6.0,
                source: serde_json::json!({"generator": "synthetic", "config": {"seed": 3}}),
            },
            pixels,
        };
        let sub = set.every_nth(3, "abc").unwrap();
        // Classes 0, 3, 6 with both views, in order.
        assert_eq!(sub.header.classes, 3);
        assert_eq!(sub.pixels.len(), 3 * views * PATCH_PIXELS);
        let firsts: Vec<u8> = (0..3 * views)
            .map(|i| sub.pixels[i * PATCH_PIXELS])
            .collect();
        assert_eq!(firsts, vec![0, 1, 6, 7, 12, 13]);
        assert_eq!(sub.header.source["generator"], "subset");
        assert_eq!(sub.header.source["every"], 3);
        assert_eq!(sub.header.source["of_classes"], 7);
        assert_eq!(sub.header.source["of_sha256"], "abc");
        assert_eq!(sub.header.source["of"]["config"]["seed"], 3);
        assert_eq!(set.every_nth(1, "x").unwrap().pixels, set.pixels);
        assert!(set.every_nth(0, "x").is_err());
    }

    #[test]
    fn save_load_round_trip_and_truncation_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let set = toy(5, 3);
        set.save(&path).unwrap();
        assert_eq!(TrackSet::load(&path).unwrap(), set);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = TrackSet::load(&path).unwrap_err().to_string();
        assert!(err.contains("t.bin"), "{err}");
    }

    #[test]
    fn batches_hold_distinct_classes_and_views() {
        let set = toy(10, 3);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let b = set
            .random_batch(&mut rng, 4, 2, Augment::default())
            .unwrap();
        assert_eq!(b.len(), 4 * 2 * PATCH_PIXELS);
        // First pixel encodes (7c + 3v) mod 256 / 255: views of one class differ, classes differ.
        let firsts: Vec<u32> = (0..8)
            .map(|i| (b[i * PATCH_PIXELS] * 255.0).round() as u32)
            .collect();
        let mut uniq = firsts.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 8, "{firsts:?}");
        assert!(set
            .random_batch(&mut rng, 11, 2, Augment::default())
            .is_err());
    }

    #[test]
    fn rotation_by_four_turns_and_double_flip_are_identity() {
        let patch: Vec<u8> = (0..PATCH_PIXELS).map(|i| (i % 251) as u8).collect();
        let mut once = Vec::new();
        push_transformed(&mut once, &patch, false, 1);
        // A 90° CCW turn moves the top-right pixel (0, 31) to the top-left (0, 0).
        assert_eq!(once[0], patch[31] as f32 / 255.0);
        let mut four = Vec::new();
        let once_u8: Vec<u8> = once.iter().map(|v| (v * 255.0).round() as u8).collect();
        let mut tmp = once_u8.clone();
        for _ in 0..3 {
            let mut next = Vec::new();
            push_transformed(&mut next, &tmp, false, 1);
            tmp = next.iter().map(|v| (v * 255.0).round() as u8).collect();
        }
        four.extend(tmp);
        assert_eq!(four, patch);
        let mut flipped = Vec::new();
        push_transformed(&mut flipped, &patch, true, 0);
        assert_eq!(flipped[0], patch[31] as f32 / 255.0);
    }

    #[test]
    fn split_off_keeps_the_tail() {
        let mut set = toy(10, 2);
        let tail_first = set.patch(8, 0).to_vec();
        let val = set.split_off(2);
        assert_eq!(set.header.classes, 8);
        assert_eq!(val.header.classes, 2);
        assert_eq!(val.patch(0, 0), tail_first.as_slice());
    }

    #[test]
    fn a_mix_draws_by_weight_and_refuses_mixed_magnifications() {
        // Source 0's first pixels are (7c + 3v) mod 256 with c < 50; source 1's are ≥ 128.
        let a = toy(50, 2);
        let mut b = toy(50, 2);
        for p in b.pixels.iter_mut() {
            *p = 128 + *p / 2;
        }
        let mix = TrackMix::new(vec![a.clone(), b.clone()], vec![1.0, 3.0]).unwrap();
        assert_eq!(mix.classes(), 100);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut from_b = 0;
        for _ in 0..50 {
            let batch = mix
                .random_batch(&mut rng, 8, 2, Augment::default())
                .unwrap();
            assert_eq!(batch.len(), 8 * 2 * PATCH_PIXELS);
            from_b += (0..8)
                .filter(|c| batch[c * 2 * PATCH_PIXELS] * 255.0 >= 127.5)
                .count();
        }
        // 400 classes at p = 3/4: 300 expected, σ ≈ 8.7.
        assert!((260..=340).contains(&from_b), "{from_b}");
        let mut c = toy(5, 2);
        c.header.magnification = 8.0;
        assert!(TrackMix::new(vec![a.clone(), c], vec![1.0, 1.0]).is_err());
        assert!(TrackMix::new(vec![a.clone()], vec![0.0]).is_err());
        // One source draws exactly what the set draws.
        let one = TrackMix::new(vec![a.clone()], vec![2.0]).unwrap();
        let mut r1 = rand::rngs::StdRng::seed_from_u64(9);
        let mut r2 = rand::rngs::StdRng::seed_from_u64(9);
        assert_eq!(
            one.random_batch(&mut r1, 4, 2, Augment::default()).unwrap(),
            a.random_batch(&mut r2, 4, 2, Augment::default()).unwrap()
        );
    }
}
