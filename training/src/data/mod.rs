//! Training data: classes of k views of one physical point, as 32×32 u8 patches.
//!
//! A [`TrackSet`] is generated once (e.g. [`synthetic`]) and cached in a flat file so training
//! iterations only index memory. File layout (little endian):
//! `TRACKS_MAGIC` · u32 header length · JSON [`TrackHeader`] · classes×views×32×32 u8.

pub mod synthetic;

use anyhow::{bail, Context, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// First bytes of a track file.
pub const TRACKS_MAGIC: &[u8; 10] = b"DESCLTRK1\n";
/// Side of a stored patch.
pub const PATCH_SIDE: usize = 32;
/// Pixels per stored patch.
pub const PATCH_PIXELS: usize = PATCH_SIDE * PATCH_SIDE;

/// What a track file holds and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrackHeader {
    pub classes: usize,
    pub views: usize,
    pub patch_size: usize,
    /// Generator description (source images, parameters, seed): copied into model cards.
    pub source: serde_json::Value,
}

/// Classes × views × 32×32 u8 patches (value = round(255 · intensity)).
#[derive(Debug, Clone, PartialEq)]
pub struct TrackSet {
    pub header: TrackHeader,
    pub pixels: Vec<u8>,
}

/// Geometric augmentation applied identically to every view of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Augment {
    /// Random horizontal flip.
    #[serde(default)]
    pub flip: bool,
    /// Random rotation by a multiple of 90°.
    #[serde(default)]
    pub rot90: bool,
}

impl TrackSet {
    pub fn new(views: usize, source: serde_json::Value) -> Self {
        TrackSet {
            header: TrackHeader {
                classes: 0,
                views,
                patch_size: PATCH_SIDE,
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
                push_transformed(&mut out, self.patch(c, v), flip, turns);
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
        let mut set = TrackSet::new(views, serde_json::json!({"kind": "test"}));
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
}
