//! The registry of output formats: every command that produces features or matches hands them
//! to a [`Writer`] (`io::writer`) that [`open`] chooses by [`Format`]. Adding a format (an hloc
//! HDF5 file, say) is one module implementing [`Writer`] plus one [`Format`] variant here; the
//! formats import `io::writer`, never this registry (imports go one way).
//!
//! - [`Format::Npz`]: a folder of numpy-readable files, `<stem>.npz` per image
//!   ([`crate::io::features`]) and `<stemA>__<stemB>.npz` per pair ([`crate::io::matches`]);
//!   `crate::io::npz_folder`.
//! - [`Format::H5`]: hloc's `features.h5` + `matches.h5` (`crate::io::hloc`, cargo feature
//!   `h5`: a build without it names the feature in the error instead of linking libhdf5).
//! - [`ColmapWriter`]: a COLMAP database (cameras, images, keypoints, descriptors, matches,
//!   two-view geometries) for `colmap mapper`; it is opened by `descl sfm` with its camera
//!   settings rather than through [`open`].

use crate::error::{Error, Result};
use crate::geometry::{Intrinsics, ModelKind};
use crate::io::colmap::{CameraModel, Database, TwoViewConfig, TwoViewModels};
use crate::io::npz_folder::NpzFolder;
use crate::io::writer::{ImageRecord, PairRecord, StoredPair, Writer};
use crate::matching::two_view::PairResult;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// File formats of features and matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One `.npz` per image and per pair in a folder.
    #[default]
    Npz,
    /// hloc's `features.h5` and `matches.h5` in a folder (`crate::io::hloc`; cargo feature `h5`).
    H5,
}

impl Format {
    /// Every format, in the order the command line lists them.
    pub const ALL: &'static [Format] = &[Format::Npz, Format::H5];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Npz => "npz",
            Format::H5 => "h5",
        }
    }
}

/// The files [`Format::H5`] writes into its folder (none in a build without the feature `h5`,
/// where [`open`] refuses the format).
#[cfg(feature = "h5")]
pub const HLOC_FILES: [&str; 2] = [
    crate::io::hloc::FEATURES_FILE,
    crate::io::hloc::MATCHES_FILE,
];
#[cfg(not(feature = "h5"))]
pub const HLOC_FILES: [&str; 0] = [];

/// A writer of `format` into the folder `dir` (created if missing).
pub fn open(format: Format, dir: &Path) -> Result<Box<dyn Writer>> {
    // Said here once, rather than as the OS's "File exists" from inside the folder's creation.
    if dir.exists() && !dir.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{}: exists and is not a folder (the output is a folder of {} files)",
            dir.display(),
            match format {
                Format::Npz => ".npz",
                Format::H5 => "hloc's .h5",
            }
        )));
    }
    match format {
        Format::Npz => Ok(Box::new(NpzFolder::create(dir)?)),
        #[cfg(feature = "h5")]
        Format::H5 => Ok(Box::new(crate::io::hloc::HlocFolder::create(dir)?)),
        #[cfg(not(feature = "h5"))]
        Format::H5 => Err(Error::InvalidInput(format!(
            "{}: --format h5 (hloc's HDF5 files) needs descl built with the cargo feature `h5` \
             (in the repository: `cargo install --path . --features h5`, or scripts/demo; the \
             bundle of scripts/bundle-bullseye has it); this build leaves libhdf5 out \
             (Cargo.toml [features]). --format npz works here",
            dir.display()
        ))),
    }
}

/// Camera settings of a COLMAP database.
#[derive(Debug, Clone, PartialEq)]
pub struct ColmapOptions {
    pub camera_model: CameraModel,
    /// One camera shared by all images (same camera, same size) instead of one per image.
    pub single_camera: bool,
    /// Cameras the user knows (`--camera-params`, a cameras file): written as given, with
    /// their own model and distortion, and marked as a known focal length.
    pub known_cameras: crate::io::cameras::KnownCameras,
}

/// A COLMAP database being written (in a temporary file until [`Writer::finish`]).
pub struct ColmapWriter {
    database: Database,
    options: ColmapOptions,
    /// The camera every image shares under `single_camera`: its id, its size and the image
    /// that gave it.
    shared_camera: Option<SharedCamera>,
    image_ids: HashMap<String, i64>,
    /// The intrinsics each image's camera holds, and whether its focal length is known.
    cameras: HashMap<String, (Intrinsics, bool)>,
}

/// The one camera of a `single_camera` database.
struct SharedCamera {
    id: i64,
    size: (u32, u32),
    first_image: String,
    /// What the camera holds: intrinsics, focal length known.
    holds: (Intrinsics, bool),
}

impl ColmapWriter {
    /// Starts the database at `path` (which must not exist unless `overwrite`).
    pub fn create(path: &Path, overwrite: bool, options: ColmapOptions) -> Result<ColmapWriter> {
        Ok(ColmapWriter {
            database: Database::create(path, overwrite)?,
            options,
            shared_camera: None,
            image_ids: HashMap::new(),
            cameras: HashMap::new(),
        })
    }

    /// The database id of an image added before.
    pub fn image_id(&self, name: &str) -> Option<i64> {
        self.image_ids.get(name).copied()
    }

    fn id(&self, name: &str) -> Result<i64> {
        self.image_id(name).ok_or_else(|| {
            Error::InvalidInput(format!("{name}: pair of an image not in the database"))
        })
    }

    /// Refuses a pair verified with an essential matrix (stored CALIBRATED) unless both
    /// images' cameras hold, as known, exactly the intrinsics `used` to verify it (issue 44):
    /// a merged pair's recorded ones, or a pair of this run's known intrinsics (under
    /// `--single-camera` the shared camera holds the first image's, which another image's
    /// EXIF can contradict).
    fn check_calibrated(
        &self,
        (a, b): (&str, &str),
        result: &PairResult,
        used: Option<[Intrinsics; 2]>,
    ) -> Result<()> {
        let essential = result
            .verification
            .as_ref()
            .is_some_and(|v| v.kind == ModelKind::Essential && v.model.is_some());
        if !essential {
            return Ok(());
        }
        let used = used.ok_or_else(|| {
            Error::InvalidInput(format!(
                "{a} – {b}: verified with an essential matrix, but without recorded intrinsics"
            ))
        })?;
        for (name, k) in [a, b].into_iter().zip(used) {
            match self.cameras.get(name) {
                Some((held, true)) if *held == k => {}
                Some((held, known)) => {
                    return Err(Error::InvalidInput(format!(
                        "{name}: the pair {a} – {b} was verified with intrinsics {k}, but its camera holds {held}{}",
                        if *known { "" } else { " (a guessed focal length)" }
                    )))
                }
                None => return Err(Error::InvalidInput(format!(
                    "{name}: pair of an image not in the database"
                ))),
            }
        }
        Ok(())
    }

    /// Stores the matches of images `a` and `b` (added before) and, when verified with a model,
    /// their two-view geometry labelled as COLMAP labels it.
    pub fn add_result(&mut self, a: &str, b: &str, r: &PairResult) -> Result<()> {
        let (id1, id2) = (self.id(a)?, self.id(b)?);
        self.database.add_matches(id1, id2, &r.matches.pairs)?;
        let inliers = r.inlier_pairs();
        let Some(v) = &r.verification else {
            return Ok(());
        };
        // A model exists only with at least `PairConfig::min_inliers` inliers: the pair is
        // then a verified two-view geometry.
        let Some(model) = &v.model else {
            return Ok(());
        };
        let h = v.homography.as_ref();
        let config = TwoViewConfig::of(v.kind, h);
        let models = TwoViewModels {
            f: (v.kind == ModelKind::Fundamental).then_some(model),
            e: (v.kind == ModelKind::Essential).then_some(model),
            h: match v.kind {
                ModelKind::Homography => Some(model),
                _ => h.map(|h| &h.model),
            },
            pose: v.pose.as_ref(),
        };
        self.database
            .add_two_view_geometry(id1, id2, &inliers, config, &models)?;
        Ok(())
    }
}

impl Writer for ColmapWriter {
    fn add_image(&mut self, image: &ImageRecord<'_>) -> Result<Option<PathBuf>> {
        let f = image.features;
        let (w, h) = (f.meta.image_width, f.meta.image_height);
        let k = image
            .intrinsics
            .copied()
            .unwrap_or_else(|| Intrinsics::default_prior(w, h));
        let known = self
            .options
            .known_cameras
            .camera_of(image.name, w, h)?
            .cloned();
        let model = known
            .as_ref()
            .map_or(self.options.camera_model, |c| c.model);
        // A known camera is what the image's pairs are verified with, and a measured focal
        // length for the mapper.
        let (k, focal_known) = match &known {
            Some(c) => (c.intrinsics(), true),
            None => (k, image.focal_known),
        };
        let (camera_id, holds) = match &self.shared_camera {
            // A COLMAP camera has one size (COLMAP's own extractor refuses a single camera
            // over images of different sizes): another size would put this image's keypoints
            // outside its camera.
            Some(shared) if self.options.single_camera => {
                if shared.size != (w, h) {
                    return Err(Error::InvalidInput(format!(
                        "{}: {w}×{h} pixels, but one camera for all images (--single-camera) \
                         is {}×{} ({}); a COLMAP camera has one size: give images of one size \
                         or leave out --single-camera",
                        image.name, shared.size.0, shared.size.1, shared.first_image
                    )));
                }
                (shared.id, shared.holds)
            }
            _ => {
                // Exactly the intrinsics the image's pairs may be verified with: a CALIBRATED
                // pair beside a camera holding others would be wrong (issue 44).
                let params = match &known {
                    Some(c) => Some(c.params.clone()),
                    None => model.params_of(&k),
                };
                let params = params.ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "{}: intrinsics fx,fy,cx,cy = {},{},{},{}, but the camera model {} has one \
                         focal length: give --camera-model PINHOLE",
                        image.name,
                        k.fx,
                        k.fy,
                        k.cx,
                        k.cy,
                        model.name()
                    ))
                })?;
                let id = self
                    .database
                    .add_camera(model, w, h, &params, focal_known)?;
                if known.is_some() {
                    self.database.record_given_camera(id)?;
                }
                let holds = (k, focal_known);
                self.shared_camera = Some(SharedCamera {
                    id,
                    size: (w, h),
                    first_image: image.name.to_string(),
                    holds,
                });
                (id, holds)
            }
        };
        self.cameras.insert(image.name.to_string(), holds);
        let image_id = self.database.add_image(image.name, camera_id)?;
        if let Some(sha) = f
            .meta
            .provenance
            .as_ref()
            .and_then(|p| p.image_sha256.as_deref())
        {
            self.database.record_image_sha256(image_id, sha)?;
        }
        self.database.add_keypoints(image_id, &f.frames)?;
        self.database.add_descriptors(image_id, &f.descriptors)?;
        self.image_ids.insert(image.name.to_string(), image_id);
        Ok(None)
    }

    fn add_pair(&mut self, pair: &PairRecord<'_>) -> Result<Option<PathBuf>> {
        let used = pair
            .a
            .known_intrinsics()
            .zip(pair.b.known_intrinsics())
            .map(|(ka, kb)| [*ka, *kb]);
        self.check_calibrated((pair.a.name, pair.b.name), pair.result, used)?;
        self.add_result(pair.a.name, pair.b.name, pair.result)?;
        Ok(None)
    }

    fn add_stored_pair(&mut self, pair: &StoredPair<'_>) -> Result<()> {
        self.check_calibrated((pair.a, pair.b), pair.result, pair.intrinsics)?;
        self.add_result(pair.a, pair.b, pair.result)
    }

    fn finish(self: Box<Self>) -> Result<PathBuf> {
        self.database.finish()
    }
}
