//! Features files: one image's [`Features`] as an `.npz` that `numpy.load` opens without
//! descl (and without `allow_pickle`):
//!
//! | member | dtype, shape | content |
//! |---|---|---|
//! | `frames` | `<f4`, N×6 | x, y, a11, a12, a21, a22 (ARCHITECTURE.md "Conventions") |
//! | `scores` | `<f4`, N | detector response |
//! | `descriptors` | `<f4`, N×D (unit rows) or `|u1`, N×32 | float descriptors, or 256-bit codes: bit i is bit i % 8 of byte i / 8 (`numpy.unpackbits(d, axis=1, bitorder="little")`) |
//! | `meta` | `<U…`, scalar | JSON of [`FeatureMeta`] (`json.loads(str(z["meta"]))`) |

use crate::describe::{BinaryDescriptor, Descriptors, BINARY_BITS};
use crate::error::{Error, Result};
use crate::features::{FeatureMeta, Features};
use crate::frame::Frame;
use crate::io::atomic::write_atomic;
use crate::io::npz::{read_npz_members, write_npz, NpyArray, NpyData};
use crate::provenance::FeaturesId;
use ndarray::Array2;
use std::path::Path;

/// Values per frame row.
const FRAME_COLS: usize = 6;
/// Bytes per binary descriptor.
const BINARY_BYTES: usize = BINARY_BITS / 8;

/// Writes `features` to `path` atomically (a complete file or none).
pub fn write_features(path: &Path, features: &Features) -> Result<()> {
    let n = features.frames.len();
    if features.scores.len() != n || features.descriptors.len() != n {
        return Err(Error::InvalidInput(format!(
            "{}: {} frames, {} scores and {} descriptors differ in number",
            path.display(),
            n,
            features.scores.len(),
            features.descriptors.len()
        )));
    }
    let frames = NpyArray {
        shape: vec![n, FRAME_COLS],
        data: NpyData::F32(features.frames.iter().flat_map(|f| f.to_row()).collect()),
    };
    let scores = NpyArray {
        shape: vec![n],
        data: NpyData::F32(features.scores.clone()),
    };
    let descriptors = match &features.descriptors {
        Descriptors::Float(d) => NpyArray {
            shape: vec![n, d.ncols()],
            data: NpyData::F32(d.iter().copied().collect()),
        },
        Descriptors::Binary(d) => NpyArray {
            shape: vec![n, BINARY_BYTES],
            data: NpyData::U8(
                d.iter()
                    .flat_map(|words| words.iter().flat_map(|w| w.to_le_bytes()))
                    .collect(),
            ),
        },
    };
    // The identity matches files record, stored so that it is read without the arrays.
    let mut stored_meta = features.meta.clone();
    stored_meta.content = Some(FeaturesId::of(features));
    let meta_json = serde_json::to_string(&stored_meta)
        .map_err(|e| Error::format(path, format!("cannot serialise meta: {e}")))?;
    let meta = NpyArray::unicode_scalar(&meta_json);
    write_atomic(path, |w| {
        write_npz(
            w,
            &[
                ("frames", &frames),
                ("scores", &scores),
                ("descriptors", &descriptors),
                ("meta", &meta),
            ],
            path,
        )
    })
}

fn parse_meta(meta: NpyArray, path: &Path) -> Result<FeatureMeta> {
    let bad = |reason: String| Error::format(path, reason);
    let meta = match (meta.shape.as_slice(), meta.data) {
        ([], NpyData::Unicode { mut values, .. }) if values.len() == 1 => values.swap_remove(0),
        (s, d) => {
            return Err(bad(format!(
                "`meta` must be a unicode scalar, is {} {s:?}",
                dtype_name(&d)
            )))
        }
    };
    let meta: FeatureMeta = serde_json::from_str(&meta)
        .map_err(|e| bad(format!("`meta` is not descl metadata: {e}")))?;
    crate::features::check_frames(&[], meta.image_width, meta.image_height).map_err(bad)?;
    Ok(meta)
}

/// The metadata of a features file alone (its other members are not read).
pub fn read_features_meta(path: &Path) -> Result<FeatureMeta> {
    let mut arrays = read_npz_members(path, Some(&["meta"]))?;
    match arrays.pop() {
        Some((_, meta)) => parse_meta(meta, path),
        None => Err(Error::format(
            path,
            "not a descl features file: no `meta` array",
        )),
    }
}

// The members of a features file (the module table).
use crate::io::atomic::FEATURES_MEMBERS as MEMBERS;

/// Reads a features file, checking every member's dtype and shape and that all agree on N.
pub fn read_features(path: &Path) -> Result<Features> {
    let bad = |reason: String| Error::format(path, reason);
    // Only the four members: anything else in the archive is never decompressed.
    let mut arrays = read_npz_members(path, Some(&MEMBERS))?;
    let mut take = |name: &str| -> Result<NpyArray> {
        let i = arrays
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| bad(format!("not a descl features file: no `{name}` array")))?;
        Ok(arrays.swap_remove(i).1)
    };
    let (frames, scores, descriptors, meta) = (
        take("frames")?,
        take("scores")?,
        take("descriptors")?,
        take("meta")?,
    );

    let frames = match (frames.shape.as_slice(), frames.data) {
        ([_, FRAME_COLS], NpyData::F32(v)) => v
            .chunks_exact(FRAME_COLS)
            .map(|r| Frame::from_row([r[0], r[1], r[2], r[3], r[4], r[5]]))
            .collect::<Vec<_>>(),
        (s, d) => {
            return Err(bad(format!(
                "`frames` must be float32 N×6, is {} {s:?}",
                dtype_name(&d)
            )))
        }
    };
    let n = frames.len();
    let scores = match (scores.shape.as_slice(), scores.data) {
        ([m], NpyData::F32(v)) if *m == n => v,
        (s, d) => {
            return Err(bad(format!(
                "`scores` must be float32 of shape [{n}], is {} {s:?}",
                dtype_name(&d)
            )))
        }
    };
    let descriptors = match (descriptors.shape.as_slice(), descriptors.data) {
        ([m, dim], NpyData::F32(v)) if *m == n && *dim > 0 => Descriptors::Float(
            Array2::from_shape_vec((n, *dim), v).map_err(|e| bad(format!("`descriptors`: {e}")))?,
        ),
        ([m, BINARY_BYTES], NpyData::U8(v)) if *m == n => Descriptors::Binary(
            v.chunks_exact(BINARY_BYTES)
                .map(unpack_bytes)
                .collect::<Vec<BinaryDescriptor>>(),
        ),
        (s, d) => {
            return Err(bad(format!(
                "`descriptors` must be float32 {n}×D or uint8 {n}×{BINARY_BYTES}, is {} {s:?}",
                dtype_name(&d)
            )))
        }
    };
    let meta = parse_meta(meta, path)?;
    crate::features::check_frames(&frames, meta.image_width, meta.image_height).map_err(bad)?;
    check_finite(&scores, &descriptors).map_err(bad)?;
    let mut f = Features {
        frames,
        scores,
        descriptors,
        meta,
    };
    // The recorded identity must be the arrays' (a file whose arrays were replaced is refused,
    // so a recorded identity can be trusted without reading the arrays); older files get it.
    let id = FeaturesId::of(&f);
    if f.meta.content.as_ref().is_some_and(|c| *c != id) {
        return Err(bad(
            "the arrays are not the features the file's `meta` records (content identity differs)"
                .into(),
        ));
    }
    f.meta.content = Some(id);
    Ok(f)
}

/// The largest L2 norm a float descriptor row of a features file may have. descl's
/// descriptors are unit vectors, and SIFT-like ones from other tools are scaled at most to 512
/// (OpenCV's and VLFeat's byte range); this is 2000 times that. The exact matcher computes
/// squared distances as ‖a‖² + ‖b‖² − 2a·b in f32 (`matching::brute`): rows of norm above about
/// 1.8e19 overflow their squared norms to infinity, and every distance is then NaN or
/// infinite. Descriptors scaled by 1e20 (a file without provenance, so no recorded identity
/// catches it) gave 0 matches and exit 0; 1e6 keeps the squared norms (1e12) far from f32's
/// limit (3.4e38) while refusing such files by name.
pub const MAX_DESCRIPTOR_NORM: f64 = 1e6;

/// Scores and float descriptors must be finite, and descriptor norms at most
/// [`MAX_DESCRIPTOR_NORM`]: a NaN score was taken as any other (and sorts nowhere), a NaN
/// descriptor was refused only at matching, by a message that did not name the file, and
/// descriptors of absurd norm gave no match at all. Checked where every features file is read
/// (`.npz` and `features.h5`), so the error names the file; the reason names the row.
pub(crate) fn check_finite(
    scores: &[f32],
    descriptors: &Descriptors,
) -> std::result::Result<(), String> {
    if let Some(k) = scores.iter().position(|s| !s.is_finite()) {
        return Err(format!("score {k} is not finite ({})", scores[k]));
    }
    if let Descriptors::Float(d) = descriptors {
        if let Some(k) = d
            .rows()
            .into_iter()
            .position(|r| r.iter().any(|v| !v.is_finite()))
        {
            return Err(format!(
                "descriptor {k} holds a value that is not finite (NaN or infinite); extract the features again"
            ));
        }
        // In f64, so that the norm itself cannot overflow.
        let norm = |r: ndarray::ArrayView1<f32>| {
            r.iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                .sqrt()
        };
        if let Some((k, n)) = d
            .rows()
            .into_iter()
            .map(norm)
            .enumerate()
            .find(|&(_, n)| n > MAX_DESCRIPTOR_NORM)
        {
            return Err(format!(
                "descriptor {k} has norm {n:e}, more than the {MAX_DESCRIPTOR_NORM:e} a descriptor may have (descl's are unit vectors, SIFT's at most 512): scaled or damaged descriptors, which no distance can compare; extract the features again"
            ));
        }
    }
    Ok(())
}

fn unpack_bytes(b: &[u8]) -> BinaryDescriptor {
    let mut d = [0u64; 4];
    for (w, bytes) in d.iter_mut().zip(b.chunks_exact(8)) {
        *w = u64::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]);
    }
    d
}

fn dtype_name(d: &NpyData) -> &'static str {
    match d {
        NpyData::F32(_) => "float32",
        NpyData::U8(_) => "uint8",
        NpyData::U32(_) => "uint32",
        NpyData::F64(_) => "float64",
        NpyData::Unicode { .. } => "unicode",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn meta() -> FeatureMeta {
        FeatureMeta {
            model: "m".into(),
            model_sha256: None,
            detector: "dog".into(),
            image_width: 640,
            image_height: 480,
            image: "a.png".into(),
            name: None,
            provenance: None,
            content: None,
        }
    }

    /// `n` made-up features (float or binary) for writer tests.
    pub(crate) fn features(binary: bool, n: usize) -> Features {
        let frames = (0..n)
            .map(|i| Frame {
                x: i as f32,
                y: 2.0 * i as f32,
                a: [[1.0, 0.5], [-0.5, 2.0]],
            })
            .collect();
        let descriptors = if binary {
            Descriptors::Binary((0..n).map(|i| [i as u64, u64::MAX, 1 << 63, 7]).collect())
        } else {
            let mut d = Array2::from_shape_fn((n, 128), |(i, j)| (i * 128 + j) as f32);
            crate::describe::l2_normalize_rows(&mut d);
            Descriptors::Float(d)
        };
        Features {
            frames,
            scores: (0..n).map(|i| i as f32 * 0.1).collect(),
            descriptors,
            meta: meta(),
        }
    }

    #[test]
    fn round_trip_float_binary_and_empty() {
        let dir = tempfile::tempdir().unwrap();
        for (binary, n) in [(false, 5), (true, 3), (false, 0), (true, 0)] {
            let p = dir.path().join(format!("f{binary}{n}.npz"));
            let mut f = features(binary, n);
            write_features(&p, &f).unwrap();
            f.meta.content = Some(FeaturesId::of(&f));
            assert_eq!(read_features(&p).unwrap(), f);
        }
    }

    #[test]
    fn binary_bytes_are_little_endian_words() {
        // Bit i of the descriptor must be bit i % 8 of byte i / 8 (numpy bitorder="little").
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.npz");
        let mut f = features(true, 1);
        f.descriptors = Descriptors::Binary(vec![[1 << 9, 0, 0, 1 << 63]]);
        write_features(&p, &f).unwrap();
        let arrays = crate::io::npz::read_npz(&p).unwrap();
        let (_, d) = arrays.iter().find(|(n, _)| n == "descriptors").unwrap();
        let NpyData::U8(bytes) = &d.data else {
            panic!("not u8")
        };
        let mut expect = vec![0u8; 32];
        expect[1] = 0b10; // bit 9
        expect[31] = 0x80; // bit 255
        assert_eq!(bytes, &expect);
    }

    #[test]
    fn malformed_files_are_format_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.npz");
        write_features(&p, &features(false, 4)).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let cut = dir.path().join("cut.npz");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let e = read_features(&cut).unwrap_err();
        assert!(
            matches!(e, Error::Format { .. }) && e.to_string().contains("cut.npz"),
            "{e}"
        );

        // Mismatched N between members.
        let frames = NpyArray {
            shape: vec![2, 6],
            data: NpyData::F32(vec![0.0; 12]),
        };
        let scores = NpyArray {
            shape: vec![3],
            data: NpyData::F32(vec![0.0; 3]),
        };
        let desc = NpyArray {
            shape: vec![2, 128],
            data: NpyData::F32(vec![0.0; 256]),
        };
        let meta = NpyArray::unicode_scalar(&serde_json::to_string(&meta()).unwrap());
        let q = dir.path().join("mismatch.npz");
        write_atomic(&q, |w| {
            write_npz(
                w,
                &[
                    ("frames", &frames),
                    ("scores", &scores),
                    ("descriptors", &desc),
                    ("meta", &meta),
                ],
                &q,
            )
        })
        .unwrap();
        let e = read_features(&q).unwrap_err().to_string();
        assert!(e.contains("mismatch.npz") && e.contains("scores"), "{e}");

        let r = dir.path().join("nometa.npz");
        write_atomic(&r, |w| write_npz(w, &[("frames", &frames)], &r)).unwrap();
        assert!(read_features(&r)
            .unwrap_err()
            .to_string()
            .contains("scores"));
    }
}
