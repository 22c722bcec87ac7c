//! Provenance: what made each artifact, recorded in it and checked by every consumer, so that
//! staged, sharded and resumed work never mixes results made under other settings (issue 24).
//!
//! - A features file records [`FeatureProvenance`]: the SHA-256 of the image file's bytes and
//!   the [`ExtractSettings`] (model name and ONNX SHA-256, detector and its settings, the
//!   maximum image size), plus its content's [`FeaturesId`].
//! - A matches file (or hloc pair group) records [`PairProvenance`]: the [`FeaturesId`] of the
//!   two features it indexes and the pair settings.
//!
//! A result is reused (`descl extract --resume`, [`crate::io::writer::Writer::has_pair`]) only
//! when its recorded provenance equals what the current run would make ([`compare`]);
//! `descl sfm merge` refuses what differs ([`check`]). Both go through [`differences`], so every
//! message names the file and the differing field. Files written before provenance existed read
//! as unknown provenance: resumed runs redo them, merge refuses them.
//!
//! Features files read as one set (`descl match`, `descl pairs`, `descl sfm merge`) share one
//! [`SetIdentity`] ([`set_identity`], issue 44): features of two models or detector settings are
//! never matched or retrieved together, and flags that would extract them otherwise are refused
//! ([`refuse_extraction_flags`]).

use crate::error::{Error, Result};
use crate::features::FeatureMeta;
use crate::geometry::{Intrinsics, ModelKind};
use crate::matching::two_view::PairConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use crate::identity::{
    differences, ExtractSettings, FeatureProvenance, FeaturesId, SetIdentity,
};

/// What made one pair's matches: the features of its two sides (in the file's order) and the
/// pair settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairProvenance {
    pub a: FeaturesId,
    pub b: FeaturesId,
    pub config: PairConfig,
    /// The intrinsics of A and B the pair was verified with, where verification uses them (an
    /// essential matrix: its inliers and pose depend on them); None otherwise
    /// ([`PairProvenance::intrinsics_used`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intrinsics: Option<[Intrinsics; 2]>,
}

impl PairProvenance {
    /// The intrinsics a pair verified under `config` records: those of A and B when the
    /// geometry is an essential matrix, else None (the result does not depend on them).
    pub fn intrinsics_used(
        config: &PairConfig,
        a: Option<&Intrinsics>,
        b: Option<&Intrinsics>,
    ) -> Option<[Intrinsics; 2]> {
        match (config.geometry, a, b) {
            (Some(ModelKind::Essential), Some(a), Some(b)) => Some([*a, *b]),
            _ => None,
        }
    }

    /// The same provenance with A and B exchanged (a pair stored in the other order).
    pub fn swapped(&self) -> PairProvenance {
        PairProvenance {
            a: self.b.clone(),
            b: self.a.clone(),
            config: self.config.clone(),
            intrinsics: self.intrinsics.map(|[a, b]| [b, a]),
        }
    }
}

/// Whether a stored result can stand for what the current run would make.
#[derive(Debug, Clone, PartialEq)]
pub enum Reuse {
    /// Nothing stored (or unreadable): make it.
    Missing,
    /// Stored with the same provenance: reuse it.
    Same,
    /// Stored under other settings or without provenance: make it again (the reason names the
    /// file and the differing fields).
    Stale(String),
}

/// Whether the result in `file`, made with `recorded` (None: not recorded), can be reused by a
/// run that would make `expected`.
pub fn compare<T: Serialize + PartialEq>(file: &Path, recorded: Option<&T>, expected: &T) -> Reuse {
    match recorded {
        None => Reuse::Stale(format!(
            "{}: no provenance recorded (written by an older descl or another tool)",
            file.display()
        )),
        Some(r) if r == expected => Reuse::Same,
        Some(r) => {
            let mut d = differences(r, expected);
            if d.is_empty() {
                // Equal as JSON but not as values (a NaN setting): not provably the same.
                d.push("settings not comparable".into());
            }
            Reuse::Stale(format!(
                "{}: made under other settings ({})",
                file.display(),
                d.join("; ")
            ))
        }
    }
}

/// [`compare`] for consumers that must refuse rather than redo (`descl sfm merge`): an error
/// naming `file` and the difference unless the provenance is the same.
pub fn check<T: Serialize + PartialEq>(
    file: &Path,
    recorded: Option<&T>,
    expected: &T,
) -> Result<()> {
    match compare(file, recorded, expected) {
        Reuse::Same => Ok(()),
        Reuse::Stale(why) => Err(Error::InvalidInput(why)),
        Reuse::Missing => Err(Error::InvalidInput(format!(
            "{}: not found",
            file.display()
        ))),
    }
}

/// The one identity of a set of features files (issue 44): the check of every command that
/// reads features files as a set (`descl match A B`, `descl match --images`, `descl pairs`,
/// `descl sfm merge`). With the set's extract plan (`plan`: its file and settings), every file
/// must record the plan's settings; without one, every file must have been made as the first
/// was (every setting compared with the first file that records them). None for no files. The
/// error names the file, the plan or file it disagrees with, and what differs.
pub fn set_identity<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a FeatureMeta)>,
    plan: Option<(&Path, &ExtractSettings)>,
) -> Result<Option<SetIdentity>> {
    if let Some((plan_file, settings)) = plan {
        for (file, meta) in files {
            let recorded = meta.provenance.as_ref().map(|p| &p.settings);
            check(file, recorded, settings).map_err(|e| {
                Error::InvalidInput(format!("{e}; compared with {}", plan_file.display()))
            })?;
        }
        return Ok(Some(SetIdentity::of_settings(settings)));
    }
    // The first file, and the first that records every setting.
    let mut first: Option<(&Path, SetIdentity)> = None;
    let mut full: Option<(&Path, SetIdentity)> = None;
    for (file, meta) in files {
        let made = SetIdentity::of(meta);
        let reference = match (&made.settings, &full) {
            (Some(_), Some(r)) => Some(r),
            _ => first.as_ref(),
        };
        if let Some((reference_file, reference)) = reference {
            made.check_same(&file.display(), reference, &reference_file.display())?;
        }
        if full.is_none() && made.settings.is_some() {
            full = Some((file, made.clone()));
        }
        if first.is_none() {
            first = Some((file, made));
        }
    }
    Ok(full.or(first).map(|(_, made)| made))
}

/// Refuses extraction flags given where every input is features already extracted (the set
/// made as `made`): they would change nothing, silently (issue 44). `given` names the flags as
/// the command line spells them; the error names them and the features' model.
pub fn refuse_extraction_flags(given: &[&str], made: &SetIdentity) -> Result<()> {
    let (flags, which, it) = match given {
        [] => return Ok(()),
        [flag] => (flag.to_string(), "the flag", "it"),
        _ => (given.join(", "), "these flags", "them"),
    };
    Err(Error::InvalidInput(format!(
        "{flags}: every input is features already extracted with `{}` (detector {}), which {which} would not change: drop {it}, or give the images to extract with {it}",
        made.model, made.detector
    )))
}

/// SHA-256 of an image file's bytes, lowercase hex. Regular files only (a FIFO or a device
/// would block or never end; the image reader refuses them too).
pub fn image_sha256(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidInput(format!(
            "{}: not a regular file",
            path.display()
        )));
    }
    crate::model::card::sha256_file(path)
}

/// What [`check_image`] found at an image's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageCheck {
    /// The image the features were extracted from (its SHA-256 is the one they record).
    Same,
    /// A file, but the features record no image hash to hold it to (written by an older descl
    /// or another tool, or extracted from an image in memory).
    NotRecorded,
    /// No file there.
    Missing,
}

impl ImageCheck {
    /// Whether there is an image to read.
    pub fn found(self) -> bool {
        self != ImageCheck::Missing
    }
}

/// The one check of an image read again after its features were extracted (its EXIF for the
/// cameras, a picture drawn on it, a database's camera): `image` (where it is now) must be the
/// file whose SHA-256 the features of `features` (their file, named in errors) record in
/// `meta`. A file of other content is [`Error::ImageReplaced`], naming both files and both
/// hashes; an absent one is [`ImageCheck::Missing`], for the caller to refuse
/// ([`require_image`]) or do without.
pub fn check_image(image: &Path, features: &Path, meta: &FeatureMeta) -> Result<ImageCheck> {
    match std::fs::metadata(image) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ImageCheck::Missing),
        Err(e) => return Err(Error::io(image, e)),
        Ok(_) => {}
    }
    let Some(recorded) = meta
        .provenance
        .as_ref()
        .and_then(|p| p.image_sha256.as_ref())
    else {
        return Ok(ImageCheck::NotRecorded);
    };
    let actual = image_sha256(image)?;
    if actual.eq_ignore_ascii_case(recorded) {
        Ok(ImageCheck::Same)
    } else {
        Err(Error::ImageReplaced {
            image: image.to_path_buf(),
            features: features.to_path_buf(),
            actual,
            recorded: recorded.clone(),
        })
    }
}

/// [`check_image`] for a reader that cannot do without the image (a picture drawn on it): an
/// absent one is [`Error::ImageMissing`].
pub fn require_image(image: &Path, features: &Path, meta: &FeatureMeta) -> Result<()> {
    match check_image(image, features, meta)? {
        ImageCheck::Missing => Err(Error::ImageMissing {
            image: image.to_path_buf(),
            features: features.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::DetectorConfig;
    use crate::io::features::tests::features;

    #[test]
    fn identity_follows_keypoints_and_descriptors_only() {
        let f = features(false, 5);
        let id = FeaturesId::of(&f);
        assert_eq!(id.keypoints, 5);
        assert_eq!(id, FeaturesId::of(&f.clone()));
        let mut g = f.clone();
        g.scores[0] = 9.0;
        g.frames[1].a = [[3.0, 0.0], [0.0, 3.0]];
        g.meta.image = "elsewhere.png".into();
        assert_eq!(FeaturesId::of(&g), id, "shape and scores are not indexed");
        g.frames[1].x += 0.5;
        assert_ne!(FeaturesId::of(&g), id);
        assert_ne!(FeaturesId::of(&features(false, 4)), id);
        assert_ne!(FeaturesId::of(&features(true, 5)), id);
    }

    #[test]
    fn differences_name_the_field() {
        let s = ExtractSettings {
            model: "m".into(),
            model_sha256: None,
            detector: DetectorConfig::default(),
            max_image_size: 3200,
        };
        let p = FeatureProvenance {
            image_sha256: Some("aa".into()),
            settings: s.clone(),
        };
        let mut q = p.clone();
        q.settings.detector.max_keypoints = 500;
        q.settings.model = "rootsift".into();
        let d = differences(&p, &q);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            d[0], "settings.detector.max_keypoints 0, wanted 500",
            "{d:?}"
        );
        assert_eq!(d[1], "settings.model \"m\", wanted \"rootsift\"", "{d:?}");
        // An f32 setting reads as the user typed it, not as its f64 widening.
        let mut t = p.clone();
        t.settings.detector.contrast_threshold = 0.02;
        let d = differences(&t, &p);
        assert_eq!(
            d,
            ["settings.detector.contrast_threshold 0.02, wanted 0.04"],
            "{d:?}"
        );
        let file = Path::new("x.npz");
        assert_eq!(compare(file, Some(&p), &p), Reuse::Same);
        let Reuse::Stale(why) = compare(file, Some(&p), &q) else {
            panic!("not stale")
        };
        assert!(
            why.contains("x.npz") && why.contains("max_keypoints"),
            "{why}"
        );
        let Reuse::Stale(why) = compare(file, None, &q) else {
            panic!("not stale")
        };
        assert!(
            why.contains("x.npz") && why.contains("no provenance"),
            "{why}"
        );
        assert!(check(file, Some(&p), &q).is_err());
        assert!(check(file, Some(&p), &p).is_ok());
    }

    #[test]
    fn an_image_read_again_is_the_one_its_features_record() {
        let dir = tempfile::tempdir().unwrap();
        let (image, file) = (dir.path().join("a.png"), dir.path().join("a.npz"));
        std::fs::write(&image, b"abc").unwrap();
        let mut meta = features(false, 5).meta;
        assert_eq!(
            check_image(&image, &file, &meta).unwrap(),
            ImageCheck::NotRecorded
        );
        let settings = ExtractSettings {
            model: "m".into(),
            model_sha256: None,
            detector: DetectorConfig::default(),
            max_image_size: 0,
        };
        meta.provenance = Some(FeatureProvenance {
            image_sha256: Some(image_sha256(&image).unwrap()),
            settings,
        });
        assert_eq!(check_image(&image, &file, &meta).unwrap(), ImageCheck::Same);
        require_image(&image, &file, &meta).unwrap();
        std::fs::write(&image, b"abd").unwrap();
        let e = check_image(&image, &file, &meta).unwrap_err();
        assert!(matches!(e, Error::ImageReplaced { .. }), "{e}");
        let e = e.to_string();
        for part in [
            image.display().to_string(),
            file.display().to_string(),
            image_sha256(&image).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
        ] {
            assert!(e.contains(&part), "{part:?} not in {e}");
        }
        let gone = dir.path().join("gone.png");
        assert_eq!(
            check_image(&gone, &file, &meta).unwrap(),
            ImageCheck::Missing
        );
        let e = require_image(&gone, &file, &meta).unwrap_err().to_string();
        assert!(e.contains("gone.png") && e.contains("a.npz"), "{e}");
    }

    #[test]
    fn one_set_identity_names_two_files_that_disagree() {
        let settings = ExtractSettings {
            model: "m".into(),
            model_sha256: None,
            detector: DetectorConfig::default(),
            max_image_size: 3200,
        };
        let meta = |s: Option<&ExtractSettings>| FeatureMeta {
            provenance: s.map(|s| FeatureProvenance {
                image_sha256: None,
                settings: s.clone(),
            }),
            ..crate::io::features::tests::meta()
        };
        let mut budget = settings.clone();
        budget.detector.max_keypoints = 500;
        let (old, a, b) = (meta(None), meta(Some(&settings)), meta(Some(&budget)));
        let p = |n: &str| Path::new(n).to_path_buf();
        let (po, pa, pb) = (p("old.npz"), p("a.npz"), p("b.npz"));
        // One setting (a file without provenance agrees by model and detector): its identity.
        let made = set_identity([(po.as_path(), &old), (pa.as_path(), &a)], None).unwrap();
        assert_eq!(made, Some(SetIdentity::of(&a)));
        assert_eq!(set_identity([], None).unwrap(), None);
        // Two settings, also past a file without them: both files and the field named.
        let e = set_identity(
            [(po.as_path(), &old), (pa.as_path(), &a), (pb.as_path(), &b)],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("b.npz") && e.contains("a.npz") && e.contains("max_keypoints 500"),
            "{e}"
        );
        let mut other = old.clone();
        other.model = "rootsift".into();
        let e = set_identity([(pa.as_path(), &a), (po.as_path(), &other)], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`m`") && e.contains("`rootsift`"), "{e}");
        // A plan: every file holds its settings.
        let plan = p("plan.json");
        let e = set_identity([(pb.as_path(), &b)], Some((plan.as_path(), &settings)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.npz") && e.contains("plan.json"), "{e}");
        // Flags given for features: each named, with the model.
        let made = SetIdentity::of_settings(&settings);
        assert!(refuse_extraction_flags(&[], &made).is_ok());
        let e = refuse_extraction_flags(&["-m/--model", "--preset"], &made)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("-m/--model, --preset") && e.contains("already extracted with `m`"),
            "{e}"
        );
    }

    #[test]
    fn image_hash_reads_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.png");
        std::fs::write(&f, b"abc").unwrap();
        // FIPS 180-2's test vector.
        assert_eq!(
            image_sha256(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let e = image_sha256(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = image_sha256(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero"), "{e}");
    }
}
