//! Matches files: one image pair's matches and verification as an `.npz` that `numpy.load`
//! opens without descl:
//!
//! | member | dtype, shape | content |
//! |---|---|---|
//! | `matches` | `<u4`, N×2 | index in A's features, index in B's features |
//! | `distances` | `<f4`, N | descriptor distance (L2, or Hamming bits) |
//! | `inliers` | `|u1`, N | 1 = geometric inlier (all 0 when verification found no model; absent without verification) |
//! | `model` | `<f8`, 3×3 | H, F or E mapping A to B (absent when none) |
//! | `meta` | `<U…`, scalar | JSON of [`MatchesMeta`] |
//!
//! The meta also carries what a COLMAP database needs beyond the arrays — the homography of the
//! planar check and the relative pose of an essential matrix — so that `descl sfm merge` builds
//! from matches files the database that `descl sfm` writes directly.

use crate::error::{Error, Result};
use crate::geometry::{HomographyCheck, ModelKind, Pose, Verification};
use crate::io::atomic::write_atomic;
use crate::io::npz::{read_npz_members, write_npz, NpyArray, NpyData};
use crate::matching::two_view::PairConfig;
use crate::matching::two_view::PairResult;
use crate::matching::Matches;
use crate::provenance::{FeaturesId, PairProvenance};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Provenance and summary of a matches file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchesMeta {
    /// The images (or features files) of side A and B.
    pub a: String,
    pub b: String,
    /// The images' names in the set ([`crate::names`]: `a/0000.jpg`), A then B; absent in files
    /// written before they were recorded (the sides are then known by the stems of `a` and `b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<[String; 2]>,
    /// Image sizes (for drawing).
    pub size_a: [u32; 2],
    pub size_b: [u32; 2],
    /// Descriptor model of the features.
    pub model: String,
    pub config: PairConfig,
    pub num_matches: usize,
    pub num_inliers: Option<usize>,
    pub geometry: Option<ModelKind>,
    /// Why there is no model (too few matches, RANSAC failure), if so.
    pub reason: Option<String>,
    /// The planar check's homography ([`PairConfig::planar_check`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homography: Option<HomographyCheck>,
    /// The relative pose of an essential matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pose: Option<Pose>,
    /// The identities of the features of A and B the indices point into (None in files written
    /// before they were recorded: resumed runs redo them, `descl sfm merge` refuses them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_a: Option<FeaturesId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_b: Option<FeaturesId>,
    /// The intrinsics of A and B the pair was verified with, where it used them (an essential
    /// matrix: [`PairProvenance::intrinsics_used`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intrinsics: Option<[crate::geometry::Intrinsics; 2]>,
}

impl MatchesMeta {
    /// The names of side A and B: the recorded ones, else (a file written before they were
    /// recorded) the file names of the paths it was made from.
    pub fn side_names(&self) -> [String; 2] {
        self.names.clone().unwrap_or_else(|| {
            [&self.a, &self.b].map(|p| crate::matching::pairs::file_names(&[p.into()]).remove(0))
        })
    }

    /// What made the matches, when the file records it.
    pub fn provenance(&self) -> Option<PairProvenance> {
        Some(PairProvenance {
            a: self.features_a.clone()?,
            b: self.features_b.clone()?,
            config: self.config.clone(),
            intrinsics: self.intrinsics,
        })
    }
}

/// The content of a matches file.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchesFile {
    pub pairs: Vec<[u32; 2]>,
    pub distances: Vec<f32>,
    pub inliers: Option<Vec<bool>>,
    pub model: Option<[[f64; 3]; 3]>,
    pub meta: MatchesMeta,
}

impl MatchesFile {
    /// The file of one matched pair (A and B recorded by their input paths).
    pub fn from_pair(pair: &crate::io::writer::PairRecord<'_>) -> MatchesFile {
        let (r, fa, fb) = (pair.result, pair.a.features, pair.b.features);
        let v = r.verification.as_ref();
        MatchesFile {
            pairs: r.matches.pairs.clone(),
            distances: r.matches.distances.clone(),
            inliers: v.map(|v| v.inliers.clone()),
            model: v.and_then(|v| v.model),
            meta: MatchesMeta {
                a: pair.a.path.display().to_string(),
                b: pair.b.path.display().to_string(),
                names: Some([pair.a.name.to_string(), pair.b.name.to_string()]),
                size_a: [fa.meta.image_width, fa.meta.image_height],
                size_b: [fb.meta.image_width, fb.meta.image_height],
                model: fa.meta.model.clone(),
                config: pair.config.clone(),
                num_matches: r.matches.len(),
                num_inliers: v.map(|v| v.num_inliers),
                geometry: v.map(|v| v.kind),
                reason: v.and_then(|v| v.reason.clone()),
                homography: v.and_then(|v| v.homography),
                pose: v.and_then(|v| v.pose),
                features_a: Some(fa.id()),
                features_b: Some(fb.id()),
                intrinsics: PairProvenance::intrinsics_used(
                    pair.config,
                    pair.a.known_intrinsics(),
                    pair.b.known_intrinsics(),
                ),
            },
        }
    }

    /// The pair's matches and verification as [`crate::matching::two_view::match_pair`]
    /// returned them (the inverse of [`MatchesFile::from_pair`]).
    pub fn to_result(&self) -> PairResult {
        let m = &self.meta;
        let verification = match (m.geometry, &self.inliers) {
            (Some(kind), Some(inliers)) => Some(Verification {
                kind,
                model: self.model,
                inliers: inliers.clone(),
                num_inliers: m.num_inliers.unwrap_or(0),
                reason: m.reason.clone(),
                pose: m.pose,
                homography: m.homography,
            }),
            _ => None,
        };
        PairResult {
            matches: Matches {
                pairs: self.pairs.clone(),
                distances: self.distances.clone(),
            },
            verification,
            seconds: Default::default(),
        }
    }
}

/// Writes a matches file atomically.
pub fn write_matches(path: &Path, m: &MatchesFile) -> Result<()> {
    let n = m.pairs.len();
    if m.distances.len() != n || m.inliers.as_ref().is_some_and(|i| i.len() != n) {
        return Err(Error::InvalidInput(format!(
            "{}: matches, distances and inliers differ in number",
            path.display()
        )));
    }
    let mut arrays: Vec<(&str, NpyArray)> = vec![
        (
            "matches",
            NpyArray {
                shape: vec![n, 2],
                data: NpyData::U32(m.pairs.iter().flatten().copied().collect()),
            },
        ),
        (
            "distances",
            NpyArray {
                shape: vec![n],
                data: NpyData::F32(m.distances.clone()),
            },
        ),
    ];
    if let Some(inl) = &m.inliers {
        arrays.push((
            "inliers",
            NpyArray {
                shape: vec![n],
                data: NpyData::U8(inl.iter().map(|&b| b as u8).collect()),
            },
        ));
    }
    if let Some(model) = &m.model {
        arrays.push((
            "model",
            NpyArray {
                shape: vec![3, 3],
                data: NpyData::F64(model.iter().flatten().copied().collect()),
            },
        ));
    }
    let meta = serde_json::to_string(&m.meta)
        .map_err(|e| Error::format(path, format!("cannot serialise meta: {e}")))?;
    arrays.push(("meta", NpyArray::unicode_scalar(&meta)));
    let refs: Vec<(&str, &NpyArray)> = arrays.iter().map(|(k, v)| (*k, v)).collect();
    write_atomic(path, |w| write_npz(w, &refs, path))
}

/// Reads a matches file, checking dtypes, shapes and agreement on N.
pub fn read_matches(path: &Path) -> Result<MatchesFile> {
    let bad = |r: String| Error::format(path, r);
    // Only the members of a matches file: anything else in the archive is never decompressed.
    let arrays = read_npz_members(path, Some(&crate::io::atomic::MATCHES_MEMBERS))?;
    let get = |name: &str| arrays.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let need = |name: &str| {
        get(name).ok_or_else(|| bad(format!("not a descl matches file: no `{name}` array")))
    };
    let pairs = match (need("matches")?.shape.as_slice(), &need("matches")?.data) {
        ([_, 2], NpyData::U32(v)) => v.chunks_exact(2).map(|c| [c[0], c[1]]).collect::<Vec<_>>(),
        (s, _) => {
            return Err(bad(format!(
                "`matches` must be uint32 N×2, has shape {s:?}"
            )))
        }
    };
    let n = pairs.len();
    let distances = match (
        need("distances")?.shape.as_slice(),
        &need("distances")?.data,
    ) {
        ([m], NpyData::F32(v)) if *m == n => v.clone(),
        (s, _) => {
            return Err(bad(format!(
                "`distances` must be float32 [{n}], has shape {s:?}"
            )))
        }
    };
    let inliers = match get("inliers") {
        None => None,
        Some(a) => match (a.shape.as_slice(), &a.data) {
            ([m], NpyData::U8(v)) if *m == n => Some(v.iter().map(|&b| b != 0).collect()),
            (s, _) => {
                return Err(bad(format!(
                    "`inliers` must be uint8 [{n}], has shape {s:?}"
                )))
            }
        },
    };
    let model = match get("model") {
        None => None,
        Some(a) => match (a.shape.as_slice(), &a.data) {
            ([3, 3], NpyData::F64(v)) => {
                Some([[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]])
            }
            (s, _) => return Err(bad(format!("`model` must be float64 3×3, has shape {s:?}"))),
        },
    };
    let meta = parse_meta(path, need("meta")?)?;
    let file = MatchesFile {
        pairs,
        distances,
        inliers,
        model,
        meta,
    };
    check_rows(path, &file)?;
    Ok(file)
}

/// The arrays of a matches file held to its own `meta` (issue 44): as many rows as
/// `num_matches`, as many inliers as `num_inliers`, and every index within the keypoints of the
/// features it records. A file edited or cut by another tool is an error naming it, not
/// matches into other features.
fn check_rows(path: &Path, m: &MatchesFile) -> Result<()> {
    let bad = |r: String| Err(Error::format(path, r));
    let n = m.pairs.len();
    if n != m.meta.num_matches {
        return bad(format!(
            "{n} matches, but its meta records num_matches {}",
            m.meta.num_matches
        ));
    }
    let inliers = m.inliers.as_ref().map(|i| i.iter().filter(|&&b| b).count());
    if let (Some(found), Some(recorded)) = (inliers, m.meta.num_inliers) {
        if found != recorded {
            return bad(format!(
                "{found} inliers, but its meta records num_inliers {recorded}"
            ));
        }
    }
    for (side, id) in [(0, &m.meta.features_a), (1, &m.meta.features_b)] {
        let Some(id) = id else { continue };
        if let Some(p) = m.pairs.iter().find(|p| p[side] as usize >= id.keypoints) {
            return bad(format!(
                "match {p:?} beyond the {} keypoints of side {} that its meta records",
                id.keypoints,
                ["A", "B"][side]
            ));
        }
    }
    Ok(())
}

/// The `meta` member of a matches file.
fn parse_meta(path: &Path, meta: &NpyArray) -> Result<MatchesMeta> {
    match &meta.data {
        NpyData::Unicode { values, .. } if values.len() == 1 => serde_json::from_str(&values[0])
            .map_err(|e| Error::format(path, format!("`meta` is not valid matches metadata: {e}"))),
        _ => Err(Error::format(path, "`meta` must be a unicode scalar")),
    }
}

/// Reads only the metadata of a matches file (its arrays are never decompressed).
pub fn read_matches_meta(path: &Path) -> Result<MatchesMeta> {
    let arrays = read_npz_members(path, Some(&["meta"]))?;
    let meta = arrays
        .iter()
        .find(|(k, _)| k == "meta")
        .map(|(_, v)| v)
        .ok_or_else(|| Error::format(path, "not a descl matches file: no `meta` array"))?;
    parse_meta(path, meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MatchesFile {
        MatchesFile {
            pairs: vec![[0, 3], [2, 1], [5, 0]],
            distances: vec![0.1, 0.25, 0.5],
            inliers: Some(vec![true, false, true]),
            model: Some([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.5]]),
            meta: MatchesMeta {
                a: "a.jpg".into(),
                b: "b.jpg".into(),
                names: Some(["a.jpg".into(), "sub/b.jpg".into()]),
                size_a: [640, 480],
                size_b: [800, 600],
                model: "m".into(),
                config: PairConfig::default(),
                num_matches: 3,
                num_inliers: Some(2),
                geometry: Some(ModelKind::Fundamental),
                reason: None,
                homography: Some(HomographyCheck {
                    // Values whose shortest decimal form needs all 17 digits.
                    model: [
                        [1.0 / 3.0, 0.1 + 0.2, 2.5e-7 / 3.0],
                        [0.0, 1.0, -1.0],
                        [0.0, 0.0, 1.0],
                    ],
                    num_inliers: 2,
                    model_inliers: 2,
                    threshold_px: 4.0,
                }),
                pose: None,
                features_a: None,
                features_b: None,
                intrinsics: None,
            },
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.npz");
        let m = sample();
        write_matches(&p, &m).unwrap();
        assert_eq!(read_matches(&p).unwrap(), m);
        let r = m.to_result();
        let v = r.verification.as_ref().unwrap();
        assert_eq!(r.inlier_pairs(), vec![[0, 3], [5, 0]]);
        assert_eq!((v.homography, v.model), (m.meta.homography, m.model));
        let none = MatchesFile {
            inliers: None,
            model: None,
            ..sample()
        };
        write_matches(&p, &none).unwrap();
        assert_eq!(read_matches(&p).unwrap(), none);
    }

    #[test]
    fn rows_that_disagree_with_the_meta_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.npz");
        let id = |keypoints| FeaturesId {
            keypoints,
            sha256: "x".into(),
        };
        let fine = MatchesFile {
            meta: MatchesMeta {
                features_a: Some(id(6)),
                features_b: Some(id(4)),
                ..sample().meta
            },
            ..sample()
        };
        write_matches(&p, &fine).unwrap();
        assert_eq!(read_matches(&p).unwrap(), fine);
        let mut rows = fine.clone();
        rows.meta.num_matches = 2;
        let mut inliers = fine.clone();
        inliers.meta.num_inliers = Some(3);
        let mut beyond_a = fine.clone();
        beyond_a.meta.features_a = Some(id(5));
        let mut beyond_b = fine.clone();
        beyond_b.meta.features_b = Some(id(3));
        for (bad, what) in [
            (rows, "num_matches 2"),
            (inliers, "num_inliers 3"),
            (beyond_a, "5 keypoints of side A"),
            (beyond_b, "3 keypoints of side B"),
        ] {
            write_matches(&p, &bad).unwrap();
            let e = read_matches(&p).unwrap_err().to_string();
            assert!(e.contains("m.npz") && e.contains(what), "{what}: {e}");
        }
    }

    #[test]
    fn truncated_and_foreign_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.npz");
        write_matches(&p, &sample()).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        let e = read_matches(&p).unwrap_err().to_string();
        assert!(e.contains("m.npz"), "{e}");
        std::fs::write(&p, b"not a zip").unwrap();
        assert!(read_matches(&p).unwrap_err().to_string().contains("m.npz"));
    }
}
