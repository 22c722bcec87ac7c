//! COLMAP database output (SQLite, COLMAP 3.x schema) and the binary model COLMAP's mapper
//! writes back.
//!
//! descl writes its own matches and verified two-view geometries: COLMAP's matcher would
//! quantise learned float descriptors to uint8 and match those. The `CREATE TABLE` statements
//! are COLMAP's own (src/colmap/base/database.cc of COLMAP 3.8, the Debian package the tests
//! run), so `colmap mapper` reads the file as if COLMAP had written it.
//!
//! Coordinates: COLMAP puts the centre of the top-left pixel at (0.5, 0.5); descl (OpenCV) at
//! (0, 0). Keypoints are shifted by [`COLMAP_PIXEL_OFFSET`] on the way in.

use crate::describe::{BinaryDescriptor, Descriptors};
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::geometry::{invert3, mul3, transpose3, HomographyCheck, Mat3, ModelKind, Pose};
use crate::io::atomic::{remove_stale_temporaries, tmp_tag, OutputLock};
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};

/// pair_id = MAX_NUM_IMAGES · min(id) + max(id) (COLMAP `Database::ImagePairToPairId`).
pub const MAX_NUM_IMAGES: i64 = 2_147_483_647;
/// Added to descl (OpenCV) pixel coordinates to get COLMAP's.
pub const COLMAP_PIXEL_OFFSET: f32 = 0.5;
/// Float descriptors are stored as COLMAP-style uint8 rows (for COLMAP tools that want
/// descriptor rows; descl never lets COLMAP match them): u8 = clamp(128 + 512·v). 512 is
/// COLMAP's own scale for unit SIFT vectors (`FeatureDescriptorsToUnsignedByte`); the offset
/// keeps the sign of learned descriptors, which have negative components.
pub const DESCRIPTOR_U8_SCALE: f32 = 512.0;
pub const DESCRIPTOR_U8_OFFSET: f32 = 128.0;
/// Bytes of one binary descriptor row (the 256 bits, 32 bytes).
const BINARY_DESCRIPTOR_BYTES: usize = std::mem::size_of::<BinaryDescriptor>();
/// A homography whose determinant is not above this magnitude has no inverse to store for the
/// swapped pair (H is then written as zeros, like an absent model).
const SINGULAR_DET: f64 = 1e-300;

const CREATE_CAMERAS: &str = "CREATE TABLE IF NOT EXISTS cameras   (camera_id            INTEGER  PRIMARY KEY AUTOINCREMENT  NOT NULL,    model                INTEGER                             NOT NULL,    width                INTEGER                             NOT NULL,    height               INTEGER                             NOT NULL,    params               BLOB,    prior_focal_length   INTEGER                             NOT NULL);";
const CREATE_IMAGES: &str = "CREATE TABLE IF NOT EXISTS images   (image_id   INTEGER  PRIMARY KEY AUTOINCREMENT  NOT NULL,    name       TEXT                                NOT NULL UNIQUE,    camera_id  INTEGER                             NOT NULL,    prior_qw   REAL,    prior_qx   REAL,    prior_qy   REAL,    prior_qz   REAL,    prior_tx   REAL,    prior_ty   REAL,    prior_tz   REAL,CONSTRAINT image_id_check CHECK(image_id >= 0 and image_id < 2147483647),FOREIGN KEY(camera_id) REFERENCES cameras(camera_id));CREATE UNIQUE INDEX IF NOT EXISTS index_name ON images(name);";
const CREATE_KEYPOINTS: &str = "CREATE TABLE IF NOT EXISTS keypoints   (image_id  INTEGER  PRIMARY KEY  NOT NULL,    rows      INTEGER               NOT NULL,    cols      INTEGER               NOT NULL,    data      BLOB,FOREIGN KEY(image_id) REFERENCES images(image_id) ON DELETE CASCADE);";
const CREATE_DESCRIPTORS: &str = "CREATE TABLE IF NOT EXISTS descriptors   (image_id  INTEGER  PRIMARY KEY  NOT NULL,    rows      INTEGER               NOT NULL,    cols      INTEGER               NOT NULL,    data      BLOB,FOREIGN KEY(image_id) REFERENCES images(image_id) ON DELETE CASCADE);";
const CREATE_MATCHES: &str = "CREATE TABLE IF NOT EXISTS matches   (pair_id  INTEGER  PRIMARY KEY  NOT NULL,    rows     INTEGER               NOT NULL,    cols     INTEGER               NOT NULL,    data     BLOB);";
/// descl's first table beside COLMAP's: the SHA-256 of each image file the features were
/// extracted from (as their provenance records it), so that `descl sfm map` can hold an image
/// folder to the database (issue 55). COLMAP and pycolmap open a database with tables they do
/// not know, and a database without it (COLMAP's own, an older descl's) is checked by size only.
const CREATE_DESCL_IMAGE_SHA256: &str = "CREATE TABLE IF NOT EXISTS descl_image_sha256   (image_id      INTEGER  PRIMARY KEY  NOT NULL,    image_sha256  TEXT                  NOT NULL,FOREIGN KEY(image_id) REFERENCES images(image_id) ON DELETE CASCADE);";
/// descl's second table: the cameras whose parameters the user gave (`--camera-params`,
/// `--cameras-file`), which `descl sfm map` holds fixed as `descl sfm` does unless asked to refine
/// them. COLMAP's `prior_focal_length` cannot say it: an EXIF focal length sets it too.
const CREATE_DESCL_GIVEN_CAMERA: &str = "CREATE TABLE IF NOT EXISTS descl_given_camera   (camera_id  INTEGER  PRIMARY KEY  NOT NULL,FOREIGN KEY(camera_id) REFERENCES cameras(camera_id) ON DELETE CASCADE);";
const CREATE_TWO_VIEW_GEOMETRIES: &str = "CREATE TABLE IF NOT EXISTS two_view_geometries   (pair_id  INTEGER  PRIMARY KEY  NOT NULL,    rows     INTEGER               NOT NULL,    cols     INTEGER               NOT NULL,    data     BLOB,    config   INTEGER               NOT NULL,    F        BLOB,    E        BLOB,    H        BLOB,    qvec     BLOB,    tvec     BLOB);";

/// COLMAP camera models used here (`CameraModelId` in COLMAP's camera_models.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CameraModel {
    /// params f, cx, cy.
    SimplePinhole = 0,
    /// params fx, fy, cx, cy.
    Pinhole = 1,
    /// params f, cx, cy, k.
    SimpleRadial = 2,
}

impl CameraModel {
    /// The model of COLMAP's model id, when it is one of these.
    pub fn from_id(id: i64) -> Option<Self> {
        [
            CameraModel::SimplePinhole,
            CameraModel::Pinhole,
            CameraModel::SimpleRadial,
        ]
        .into_iter()
        .find(|m| *m as i64 == id)
    }
    /// How many leading parameters are focal lengths (f, or fx and fy).
    pub fn focal_params(self) -> usize {
        match self {
            CameraModel::Pinhole => 2,
            CameraModel::SimplePinhole | CameraModel::SimpleRadial => 1,
        }
    }
    pub fn num_params(self) -> usize {
        match self {
            CameraModel::SimplePinhole => 3,
            CameraModel::Pinhole => 4,
            CameraModel::SimpleRadial => 4,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "SIMPLE_PINHOLE" => Ok(CameraModel::SimplePinhole),
            "PINHOLE" => Ok(CameraModel::Pinhole),
            "SIMPLE_RADIAL" => Ok(CameraModel::SimpleRadial),
            _ => Err(Error::InvalidInput(format!(
                "camera model {s:?}: use SIMPLE_PINHOLE, PINHOLE or SIMPLE_RADIAL"
            ))),
        }
    }
    /// COLMAP's name of the model (`--camera-model`).
    pub fn name(self) -> &'static str {
        match self {
            CameraModel::SimplePinhole => "SIMPLE_PINHOLE",
            CameraModel::Pinhole => "PINHOLE",
            CameraModel::SimpleRadial => "SIMPLE_RADIAL",
        }
    }
    /// Parameters holding exactly the intrinsics `k` (descl's pixels; the principal point
    /// moved by [`COLMAP_PIXEL_OFFSET`] into COLMAP's), no distortion. None when the model
    /// cannot hold them: fx ≠ fy in a model of one focal length.
    pub fn params_of(self, k: &crate::geometry::Intrinsics) -> Option<Vec<f64>> {
        let offset = f64::from(COLMAP_PIXEL_OFFSET);
        let (cx, cy) = (k.cx + offset, k.cy + offset);
        match self {
            CameraModel::Pinhole => Some(vec![k.fx, k.fy, cx, cy]),
            _ if k.fx != k.fy => None,
            CameraModel::SimplePinhole => Some(vec![k.fx, cx, cy]),
            CameraModel::SimpleRadial => Some(vec![k.fx, cx, cy, 0.0]),
        }
    }
    /// Parameters for focal `f` and an image of `width`×`height` (principal point at the
    /// centre in COLMAP's convention, no distortion).
    pub fn params(self, f: f64, width: u32, height: u32) -> Vec<f64> {
        let (cx, cy) = (width as f64 / 2.0, height as f64 / 2.0);
        match self {
            CameraModel::SimplePinhole => vec![f, cx, cy],
            CameraModel::Pinhole => vec![f, f, cx, cy],
            CameraModel::SimpleRadial => vec![f, cx, cy, 0.0],
        }
    }
}

/// COLMAP `TwoViewGeometry::ConfigurationType` (src/colmap/estimators/two_view_geometry.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwoViewConfig {
    Degenerate = 1,
    /// An essential matrix with known intrinsics.
    Calibrated = 2,
    /// A fundamental matrix.
    Uncalibrated = 3,
    /// A homography was the only model asked for.
    Planar = 4,
    /// F (or E) inliers nearly all fit one homography: a planar scene or a pure rotation. COLMAP's
    /// matchers write this label (telling planar from panoramic needs the relative pose, which
    /// they do not compute by default).
    PlanarOrPanoramic = 6,
}

/// COLMAP `TwoViewGeometryOptions::max_H_inlier_ratio`: a pair whose homography inliers exceed
/// this share of its F (or E) inliers is planar or panoramic.
pub const COLMAP_MAX_H_INLIER_RATIO: f64 = 0.8;

impl TwoViewConfig {
    /// COLMAP's label for a pair verified by `kind`, given a homography fitted to the same
    /// matches (`EstimateUncalibratedTwoViewGeometry` and `EstimateCalibratedTwoViewGeometry`:
    /// H/F, or H/E, inlier ratio above [`COLMAP_MAX_H_INLIER_RATIO`] → planar or panoramic).
    /// Without a homography fit, the model's own label.
    pub fn of(kind: ModelKind, check: Option<&HomographyCheck>) -> Self {
        let planar = check.is_some_and(|c| {
            c.model_inliers > 0
                && c.num_inliers as f64 / c.model_inliers as f64 > COLMAP_MAX_H_INLIER_RATIO
        });
        match kind {
            ModelKind::Homography => TwoViewConfig::Planar,
            _ if planar => TwoViewConfig::PlanarOrPanoramic,
            ModelKind::Essential => TwoViewConfig::Calibrated,
            ModelKind::Fundamental => TwoViewConfig::Uncalibrated,
        }
    }
}

/// The models of a verified pair (None where not estimated), in descl's pixel coordinates
/// (see [`COLMAP_PIXEL_OFFSET`]); `pose` is the relative pose of the essential matrix.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TwoViewModels<'a> {
    pub f: Option<&'a Mat3>,
    pub e: Option<&'a Mat3>,
    pub h: Option<&'a Mat3>,
    pub pose: Option<&'a Pose>,
}

/// pair_id of two image ids (order-independent).
pub fn pair_id(a: i64, b: i64) -> i64 {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    MAX_NUM_IMAGES * lo + hi
}

/// Inverse of [`pair_id`].
pub fn image_ids(pair: i64) -> (i64, i64) {
    (pair / MAX_NUM_IMAGES, pair % MAX_NUM_IMAGES)
}

fn f32_blob(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A 3×3 matrix as COLMAP stores one: 9 f64, **row-major** (`Database::WriteTwoViewGeometry`
/// writes the transpose of the column-major Eigen matrix).
fn mat3_blob(m: &Mat3) -> Vec<u8> {
    m.iter().flatten().flat_map(|x| x.to_le_bytes()).collect()
}

fn f64_blob(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// T: descl pixel → COLMAP pixel (x + 0.5), and its inverse.
fn pixel_shift(sign: f64) -> Mat3 {
    let o = sign * COLMAP_PIXEL_OFFSET as f64;
    [[1.0, 0.0, o], [0.0, 1.0, o], [0.0, 0.0, 1.0]]
}

/// F in COLMAP pixels: x_c = T x, so x_bᵀ F x_a = x_bcᵀ (T⁻ᵀ F T⁻¹) x_ac.
fn fundamental_to_colmap(f: &Mat3) -> Mat3 {
    let t_inv = pixel_shift(-1.0);
    mul3(&transpose3(&t_inv), &mul3(f, &t_inv))
}

/// H in COLMAP pixels: x_bc = T H T⁻¹ x_ac.
fn homography_to_colmap(h: &Mat3) -> Mat3 {
    mul3(&pixel_shift(1.0), &mul3(h, &pixel_shift(-1.0)))
}

/// A rotation matrix as COLMAP's quaternion (w, x, y, z) (Shepperd's method: the largest of
/// the four squared components first, for accuracy).
fn quaternion_wxyz(r: &Mat3) -> [f64; 4] {
    let tr = r[0][0] + r[1][1] + r[2][2];
    let q = if tr > r[0][0].max(r[1][1]).max(r[2][2]) {
        let s = 2.0 * (1.0 + tr).sqrt();
        [
            s / 4.0,
            (r[2][1] - r[1][2]) / s,
            (r[0][2] - r[2][0]) / s,
            (r[1][0] - r[0][1]) / s,
        ]
    } else if r[0][0] >= r[1][1] && r[0][0] >= r[2][2] {
        let s = 2.0 * (1.0 + r[0][0] - r[1][1] - r[2][2]).sqrt();
        [
            (r[2][1] - r[1][2]) / s,
            s / 4.0,
            (r[0][1] + r[1][0]) / s,
            (r[0][2] + r[2][0]) / s,
        ]
    } else if r[1][1] >= r[2][2] {
        let s = 2.0 * (1.0 + r[1][1] - r[0][0] - r[2][2]).sqrt();
        [
            (r[0][2] - r[2][0]) / s,
            (r[0][1] + r[1][0]) / s,
            s / 4.0,
            (r[1][2] + r[2][1]) / s,
        ]
    } else {
        let s = 2.0 * (1.0 + r[2][2] - r[0][0] - r[1][1]).sqrt();
        [
            (r[1][0] - r[0][1]) / s,
            (r[0][2] + r[2][0]) / s,
            (r[1][2] + r[2][1]) / s,
            s / 4.0,
        ]
    };
    // COLMAP keeps w ≥ 0 (q and −q are one rotation).
    if q[0] < 0.0 {
        q.map(|v| -v)
    } else {
        q
    }
}

/// Descriptor rows as COLMAP-style bytes: float → u8 (see [`DESCRIPTOR_U8_SCALE`]),
/// binary → the [`BINARY_DESCRIPTOR_BYTES`] bytes of the 256 bits.
pub fn descriptor_bytes(d: &Descriptors) -> (usize, Vec<u8>) {
    match d {
        Descriptors::Float(m) => (
            m.ncols(),
            m.iter()
                .map(|&v| {
                    (DESCRIPTOR_U8_OFFSET + DESCRIPTOR_U8_SCALE * v)
                        .round()
                        .clamp(0.0, 255.0) as u8
                })
                .collect(),
        ),
        Descriptors::Binary(b) => (
            BINARY_DESCRIPTOR_BYTES,
            b.iter()
                .flat_map(|w| w.iter().flat_map(|x| x.to_le_bytes()))
                .collect(),
        ),
    }
}

/// A COLMAP database being written. Everything goes into a temporary file beside the target
/// inside one transaction; [`Database::finish`] commits and renames it into place, so the
/// database appears complete or not at all.
pub struct Database {
    conn: Connection,
    tmp: tempfile::TempPath,
    path: PathBuf,
    /// The lock held while writing (released when the database is finished or dropped).
    lock: OutputLock,
}

/// The error for an existing database without `--overwrite`.
fn refuse_existing(path: &Path, overwrite: bool) -> Result<()> {
    if path.exists() && !overwrite {
        return Err(Error::InvalidInput(format!(
            "{}: database already exists (pass --overwrite to replace it)",
            path.display()
        )));
    }
    Ok(())
}

impl Database {
    /// Starts a new database at `path`. An existing file is refused unless `overwrite`.
    pub fn create(path: &Path, overwrite: bool) -> Result<Self> {
        refuse_existing(path, overwrite)?;
        crate::io::atomic::check_not_a_picture(path)?;
        crate::io::atomic::check_not_another_kind(path, crate::io::atomic::OutputKind::Database)?;
        let lock = OutputLock::acquire(path, "choose another --database")?;
        // Checked again under the lock: a run that finished meanwhile wrote the file.
        refuse_existing(path, overwrite)?;
        remove_stale_temporaries(path);
        let tmp = crate::io::atomic::temp_beside(path, &tmp_tag(path), ".db")?.into_temp_path();
        let db_err = |e: rusqlite::Error| Error::Database {
            path: path.into(),
            reason: e.to_string(),
        };
        let conn = Connection::open(&tmp).map_err(db_err)?;
        for sql in [
            CREATE_CAMERAS,
            CREATE_IMAGES,
            CREATE_KEYPOINTS,
            CREATE_DESCRIPTORS,
            CREATE_MATCHES,
            CREATE_TWO_VIEW_GEOMETRIES,
            CREATE_DESCL_IMAGE_SHA256,
            CREATE_DESCL_GIVEN_CAMERA,
        ] {
            conn.execute_batch(sql).map_err(db_err)?;
        }
        conn.execute_batch("BEGIN").map_err(db_err)?;
        Ok(Database {
            conn,
            tmp,
            path: path.into(),
            lock,
        })
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        Error::Database {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// Adds a camera; returns its id. `prior_focal` says the focal length is known (EXIF, flag).
    pub fn add_camera(
        &self,
        model: CameraModel,
        width: u32,
        height: u32,
        params: &[f64],
        prior_focal: bool,
    ) -> Result<i64> {
        // COLMAP's mapper divides by the size (a 0×0 camera made it hang).
        if width == 0 || height == 0 || params.iter().any(|p| !p.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "{}: a camera of {width}×{height} pixels with parameters {params:?}: sizes must be positive and parameters finite",
                self.path.display()
            )));
        }
        if params.len() != model.num_params() {
            return Err(Error::InvalidInput(format!(
                "{model:?} takes {} parameters, got {}",
                model.num_params(),
                params.len()
            )));
        }
        let blob: Vec<u8> = params.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.conn
            .execute(
                "INSERT INTO cameras(model, width, height, params, prior_focal_length) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![model as i64, width, height, blob, prior_focal as i64],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Adds an image (name relative to the image folder given to `colmap mapper`); returns its id.
    pub fn add_image(&self, name: &str, camera_id: i64) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO images(name, camera_id) VALUES (?1, ?2)",
                params![name, camera_id],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records the SHA-256 of the file image `image_id` was extracted from (its features'
    /// provenance), which [`check_image_folder`] holds `descl sfm map`'s folder to.
    pub fn record_image_sha256(&self, image_id: i64, sha256: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO descl_image_sha256(image_id, image_sha256) VALUES (?1, ?2)",
                params![image_id, sha256],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records that camera `camera_id` holds parameters the user gave, which `descl sfm map`
    /// holds fixed ([`given_cameras`]).
    pub fn record_given_camera(&self, camera_id: i64) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO descl_given_camera(camera_id) VALUES (?1)",
                params![camera_id],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Keypoints as N×6 f32 (x, y, a11, a12, a21, a22), x and y in COLMAP pixel convention.
    pub fn add_keypoints(&self, image_id: i64, frames: &[Frame]) -> Result<()> {
        let blob = f32_blob(frames.iter().flat_map(|f| {
            let mut r = f.to_row();
            r[0] += COLMAP_PIXEL_OFFSET;
            r[1] += COLMAP_PIXEL_OFFSET;
            r
        }));
        self.conn
            .execute(
                "INSERT INTO keypoints(image_id, rows, cols, data) VALUES (?1, ?2, 6, ?3)",
                params![image_id, frames.len() as i64, blob],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn add_descriptors(&self, image_id: i64, d: &Descriptors) -> Result<()> {
        let (cols, blob) = descriptor_bytes(d);
        self.conn
            .execute(
                "INSERT INTO descriptors(image_id, rows, cols, data) VALUES (?1, ?2, ?3, ?4)",
                params![image_id, d.len() as i64, cols as i64, blob],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Index pairs as COLMAP wants them: the first column belongs to the smaller image id.
    fn pair_blob(id1: i64, id2: i64, pairs: &[[u32; 2]]) -> Vec<u8> {
        let swap = id1 > id2;
        pairs
            .iter()
            .flat_map(|p| if swap { [p[1], p[0]] } else { *p })
            .flat_map(|x| x.to_le_bytes())
            .collect()
    }

    /// Raw (unverified) matches between images `id1` and `id2`: `pairs[k] = [idx in id1, idx in id2]`.
    pub fn add_matches(&self, id1: i64, id2: i64, pairs: &[[u32; 2]]) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO matches(pair_id, rows, cols, data) VALUES (?1, ?2, 2, ?3)",
                params![
                    pair_id(id1, id2),
                    pairs.len() as i64,
                    Self::pair_blob(id1, id2, pairs)
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Verified inlier matches and the models (zero matrices where not estimated, as COLMAP
    /// writes them; the relative pose NULL unless known, as COLMAP's matchers leave it). Models
    /// relate image `id1` to `id2` as given, in descl pixels; they are stored in COLMAP's
    /// pixels, oriented from the smaller image id to the larger.
    pub fn add_two_view_geometry(
        &self,
        id1: i64,
        id2: i64,
        inliers: &[[u32; 2]],
        config: TwoViewConfig,
        models: &TwoViewModels,
    ) -> Result<()> {
        let TwoViewModels { f, e, h, pose } = *models;
        let zero = [[0.0; 3]; 3];
        // COLMAP's models map the smaller id to the larger: transpose F/E, invert H and the
        // pose otherwise.
        let swap = id1 > id2;
        let fe = |m: Option<Mat3>| {
            let m = m.unwrap_or(zero);
            mat3_blob(&if swap { transpose3(&m) } else { m })
        };
        let hb = match h.map(homography_to_colmap) {
            Some(h) if swap => mat3_blob(&invert3(&h, SINGULAR_DET).unwrap_or(zero)),
            Some(h) => mat3_blob(&h),
            None => mat3_blob(&zero),
        };
        // x_B = R x_A + t; swapped: x_A = Rᵀ x_B − Rᵀ t.
        let (qvec, tvec) = match pose {
            Some(p) => {
                let (r, t) = if swap {
                    let rt = transpose3(&p.r);
                    let t =
                        std::array::from_fn(|i| -(0..3).map(|k| rt[i][k] * p.t[k]).sum::<f64>());
                    (rt, t)
                } else {
                    (p.r, p.t)
                };
                (Some(f64_blob(&quaternion_wxyz(&r))), Some(f64_blob(&t)))
            }
            None => (None, None),
        };
        self.conn
            .execute(
                "INSERT INTO two_view_geometries(pair_id, rows, cols, data, config, F, E, H, qvec, tvec) \
                 VALUES (?1, ?2, 2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    pair_id(id1, id2),
                    inliers.len() as i64,
                    Self::pair_blob(id1, id2, inliers),
                    config as i64,
                    fe(f.map(fundamental_to_colmap)),
                    fe(e.copied()),
                    hb,
                    qvec,
                    tvec
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Commits and moves the database into place.
    pub fn finish(self) -> Result<PathBuf> {
        let Database {
            conn,
            tmp,
            path,
            lock,
        } = self;
        let db_err = |e: rusqlite::Error| Error::Database {
            path: path.clone(),
            reason: e.to_string(),
        };
        conn.execute_batch("COMMIT").map_err(db_err)?;
        conn.close().map_err(|(_, e)| db_err(e))?;
        tmp.persist(&path).map_err(|e| Error::io(&path, e.error))?;
        drop(lock);
        Ok(path)
    }
}

/// One image of an existing COLMAP database with its keypoints as descl frames.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredImage {
    pub image_id: i64,
    pub name: String,
    pub frames: Vec<Frame>,
}

/// An SQLite error of the database at `path`.
fn database_error(path: &Path, e: rusqlite::Error) -> Error {
    Error::Database {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// The first six columns of a query's row, each of its type.
fn six_columns<A, B, C, D, E, F>(r: &rusqlite::Row<'_>) -> rusqlite::Result<(A, B, C, D, E, F)>
where
    A: rusqlite::types::FromSql,
    B: rusqlite::types::FromSql,
    C: rusqlite::types::FromSql,
    D: rusqlite::types::FromSql,
    E: rusqlite::types::FromSql,
    F: rusqlite::types::FromSql,
{
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

/// An existing COLMAP database, opened read-only.
fn open_read_only(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(Error::format(path, "not a COLMAP database file"));
    }
    Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| database_error(path, e))
}

/// Reads every image's keypoints from a COLMAP database (descl's or COLMAP's own), as frames
/// in descl's pixel convention (the [`COLMAP_PIXEL_OFFSET`] removed). Keypoints must have 6
/// columns (x, y, a11, a12, a21, a22: COLMAP's affine shape, as both descl and COLMAP's SIFT
/// extractor store them). The shape is returned as stored: descl stores `m·σ·R` (its frames),
/// COLMAP's SIFT extractor `σ·R`, so a caller rescales by the magnification it needs.
pub fn read_keypoints(path: &Path) -> Result<Vec<StoredImage>> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare(
            "SELECT images.image_id, images.name, keypoints.rows, keypoints.cols, keypoints.data \
             FROM images JOIN keypoints ON images.image_id = keypoints.image_id \
             ORDER BY images.image_id",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Option<Vec<u8>>>(4)?,
            ))
        })
        .map_err(db_err)?;
    let mut images = Vec::new();
    for row in rows {
        let (image_id, name, n, cols, data) = row.map_err(db_err)?;
        let data = data.unwrap_or_default();
        if cols != 6 {
            return Err(Error::format(
                path,
                format!("image {name}: keypoints have {cols} columns (need 6: x, y, affine shape)"),
            ));
        }
        if n < 0 || data.len() != n as usize * 6 * 4 {
            return Err(Error::format(
                path,
                format!(
                    "image {name}: keypoint blob of {} bytes for {n} rows",
                    data.len()
                ),
            ));
        }
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let frames = values
            .chunks_exact(6)
            .map(|r| {
                Frame::from_row([
                    r[0] - COLMAP_PIXEL_OFFSET,
                    r[1] - COLMAP_PIXEL_OFFSET,
                    r[2],
                    r[3],
                    r[4],
                    r[5],
                ])
            })
            .collect();
        images.push(StoredImage {
            image_id,
            name,
            frames,
        });
    }
    Ok(images)
}

/// How far outside its image (COLMAP's pixels, 0..=width) a stored keypoint may lie: a
/// detector's sub-pixel refinement moves a keypoint at the border by less than a pixel.
pub const KEYPOINT_MARGIN_PX: f32 = 1.0;
/// The column counts of COLMAP's keypoints table: x, y; with scale and orientation; with the
/// affine shape.
const KEYPOINT_COLUMNS: [i64; 3] = [2, 4, 6];

/// Refuses, before mapping, keypoints of the database at `path` that no mapper can use: a
/// blob whose length is not its rows × columns of 4-byte floats, a value that is not finite,
/// or a position outside its image (by more than [`KEYPOINT_MARGIN_PX`]). One image of
/// infinite or 1e30 keypoints sent pycolmap's mapper into a search that did not end, and one
/// NaN keypoint gave a model of "mean reprojection error NaN px" with exit 0 (hostile round
/// of c29952d, H4); a truncated blob, a raw traceback.
pub fn check_database_keypoints(path: &Path) -> Result<()> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare(
            "SELECT images.name, cameras.width, cameras.height, keypoints.rows, keypoints.cols, \
             keypoints.data FROM images JOIN keypoints ON images.image_id = keypoints.image_id \
             LEFT JOIN cameras ON images.camera_id = cameras.camera_id ORDER BY images.image_id",
        )
        .map_err(db_err)?;
    type Raw = (String, Option<i64>, Option<i64>, i64, i64, Option<Vec<u8>>);
    let rows = stmt.query_map([], six_columns).map_err(db_err)?;
    let refuse = |name: &str, why: String| {
        Err(Error::format(
            path,
            format!("image {name}: {why}; correct or remove its keypoints before mapping"),
        ))
    };
    for row in rows {
        let (name, width, height, n, cols, data): Raw = row.map_err(db_err)?;
        let data = data.unwrap_or_default();
        if !KEYPOINT_COLUMNS.contains(&cols) {
            return refuse(
                &name,
                format!("keypoints of {cols} columns (COLMAP's have 2, 4 or 6)"),
            );
        }
        if n < 0 || data.len() as u64 != n as u64 * cols as u64 * 4 {
            return refuse(
                &name,
                format!(
                    "a keypoints blob of {} bytes for {n} rows of {cols} floats",
                    data.len()
                ),
            );
        }
        // An image without its camera row is named as such by the image folder's check.
        let (Some(w), Some(h)) = (width, height) else {
            continue;
        };
        let (w, h) = (w as f32, h as f32);
        let inside =
            |v: f32, side: f32| (-KEYPOINT_MARGIN_PX..=side + KEYPOINT_MARGIN_PX).contains(&v);
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        for (k, kp) in values.chunks_exact(cols as usize).enumerate() {
            if let Some(v) = kp.iter().find(|v| !v.is_finite()) {
                return refuse(
                    &name,
                    format!("keypoint {k} holds {v}, not a finite number"),
                );
            }
            if !inside(kp[0], w) || !inside(kp[1], h) {
                return refuse(
                    &name,
                    format!(
                        "keypoint {k} at ({}, {}) lies outside its {w}×{h} image",
                        kp[0], kp[1]
                    ),
                );
            }
        }
    }
    Ok(())
}

/// The tables of a COLMAP database that index keypoints by pairs of images: raw matches, and
/// the verified inliers the mappers read.
const PAIR_TABLES: [&str; 2] = ["matches", "two_view_geometries"];

/// Refuses, before mapping, pairs of the database at `path` that index keypoints no image
/// has: a pair of an image without a row (or with itself, or a pair id not COLMAP's), a blob whose length is not its
/// rows × 2 four-byte indices, a table of other than 2 columns, or an index past its image's
/// keypoints. COLMAP and pycolmap read the inlier indices without bounds checks (hostile round
/// of 3fe5bfb, F3).
pub fn check_database_matches(path: &Path) -> Result<()> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut counts = std::collections::HashMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT images.image_id, images.name, COALESCE(keypoints.rows, 0) FROM images \
                 LEFT JOIN keypoints ON images.image_id = keypoints.image_id",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(db_err)?;
        for row in rows {
            let (id, name, n) = row.map_err(db_err)?;
            counts.insert(id, (name, n.max(0) as u64));
        }
    }
    for table in PAIR_TABLES {
        let mut stmt = conn
            .prepare(&format!("SELECT pair_id, rows, cols, data FROM {table}"))
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<Vec<u8>>>(3)?,
                ))
            })
            .map_err(db_err)?;
        for row in rows {
            let (pair, n, cols, data) = row.map_err(db_err)?;
            let (a, b) = image_ids(pair);
            let refuse = |why: String| {
                Err(Error::format(
                    path,
                    format!(
                        "{table} row of pair_id {pair} (images {a} and {b}): {why}; remove the row or match the pair again before mapping"
                    ),
                ))
            };
            let (Some((name_a, kp_a)), Some((name_b, kp_b))) = (counts.get(&a), counts.get(&b))
            else {
                return refuse("an image without a row in the images table".into());
            };
            if a == b {
                return refuse(format!("the pair of {name_a} with itself"));
            }
            // COLMAP's pair id puts the smaller image id first: a reversed one is a second row
            // of the same pair, which pycolmap refuses with a traceback and COLMAP maps
            // (hostile round of 9628fb4, M-3).
            if a > b {
                return refuse(format!(
                    "a pair id with the image ids out of order (COLMAP's is {} for {name_b} and {name_a})",
                    pair_id(a, b)
                ));
            }
            let data = data.unwrap_or_default();
            if n == 0 {
                continue;
            }
            if cols != 2 {
                return refuse(format!("{cols} columns (COLMAP's have 2)"));
            }
            if n < 0 || data.len() as u64 != n as u64 * 2 * 4 {
                return refuse(format!(
                    "a blob of {} bytes for {n} rows of 2 indices",
                    data.len()
                ));
            }
            for (k, m) in data.chunks_exact(8).enumerate() {
                let i = u32::from_le_bytes([m[0], m[1], m[2], m[3]]) as u64;
                let j = u32::from_le_bytes([m[4], m[5], m[6], m[7]]) as u64;
                if i >= *kp_a || j >= *kp_b {
                    return refuse(format!(
                        "match {k} indexes keypoint {i} of {name_a} ({kp_a} keypoints) and {j} of {name_b} ({kp_b})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The image names (paths relative to the image folder) of a COLMAP database's `images`
/// table, in id order (a file that is not such a database is an error naming it).
pub fn image_names(path: &Path) -> Result<Vec<String>> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare("SELECT name FROM images ORDER BY image_id")
        .map_err(db_err)?;
    let names = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(db_err)?;
    names
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(db_err)
}

/// Each image of a COLMAP database's `images` table with its camera's width and height, in id
/// order (a file that is not such a database is an error naming it).
pub fn image_sizes(path: &Path) -> Result<Vec<(String, u32, u32)>> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare(
            "SELECT images.name, cameras.width, cameras.height, images.camera_id FROM images \
             LEFT JOIN cameras ON images.camera_id = cameras.camera_id ORDER BY images.image_id",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, i64>(3)?,
            ))
        })
        .map_err(db_err)?;
    let mut out = Vec::new();
    for row in rows {
        let (name, w, h, camera) = row.map_err(db_err)?;
        // An image whose camera is not in the table (an edited database) stops every mapper
        // with a traceback or an abort: named here instead (issue 55).
        let (Some(w), Some(h)) = (w, h) else {
            return Err(Error::format(
                path,
                format!("image {name} refers to camera {camera}, which the database does not hold"),
            ));
        };
        let size = |v: i64| {
            u32::try_from(v).map_err(|_| {
                Error::format(
                    path,
                    format!("image {name}: camera size {w}×{h} is not a size"),
                )
            })
        };
        out.push((name.clone(), size(w)?, size(h)?));
    }
    Ok(out)
}

/// The SHA-256 each image's file had at extraction, by image name, as descl records them
/// (`descl_image_sha256`); empty for a database without that table (COLMAP's own, an older
/// descl's) and without an entry for an image whose features recorded no hash.
pub fn image_sha256s(path: &Path) -> Result<std::collections::HashMap<String, String>> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut out = std::collections::HashMap::new();
    if !has_table(&conn, path, "descl_image_sha256")? {
        return Ok(out);
    }
    let mut stmt = conn
        .prepare(
            "SELECT images.name, descl_image_sha256.image_sha256 FROM descl_image_sha256 \
             JOIN images ON images.image_id = descl_image_sha256.image_id",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .map_err(db_err)?;
    for row in rows {
        let (name, sha) = row.map_err(db_err)?;
        out.insert(name, sha);
    }
    Ok(out)
}

/// Whether a table of this name is in the database (descl's own tables are absent from
/// COLMAP's databases and older descl's).
fn has_table(conn: &Connection, path: &Path, table: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get::<_, i64>(0),
        )
        .map_err(|e| database_error(path, e))?
        > 0)
}

/// The database's cameras: how many there are, and how many hold parameters the user gave
/// (`descl_given_camera`; none in a database COLMAP made).
pub fn given_cameras(path: &Path) -> Result<GivenCameras> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let count = |sql: &str| -> Result<usize> {
        conn.query_row(sql, [], |row| row.get::<_, i64>(0))
            .map(|n| n.max(0) as usize)
            .map_err(db_err)
    };
    let total = count("SELECT COUNT(*) FROM cameras")?;
    let given = if has_table(&conn, path, "descl_given_camera")? {
        count(
            "SELECT COUNT(*) FROM descl_given_camera \
             JOIN cameras ON cameras.camera_id = descl_given_camera.camera_id",
        )?
    } else {
        0
    };
    Ok(GivenCameras { total, given })
}

/// [`given_cameras`]' count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenCameras {
    pub total: usize,
    pub given: usize,
}

impl GivenCameras {
    /// Every camera's parameters were given (and there is one).
    pub fn all(&self) -> bool {
        self.total > 0 && self.given == self.total
    }
}

/// What [`check_image_folder`] checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFolderCheck {
    /// The database's images, all found at their cameras' sizes.
    pub images: usize,
    /// Those without a recorded SHA-256 (a database COLMAP made, an older descl's, a deleted
    /// row), checked by name and size only.
    pub by_size_only: Vec<String>,
}

/// Checks, before mapping, that the folder `images` holds the database's images as they were
/// extracted: each image file there, at its camera's width and height (read from the file's
/// header), and with the SHA-256 its features recorded where the database holds one (descl's
/// databases do: [`Database::record_image_sha256`]). The mapper colours the points from these
/// files, and other pictures under the same names, or the same pictures resized, would colour
/// them wrongly with exit 0. Says which images had no hash to check.
pub fn check_image_folder(path: &Path, images: &Path) -> Result<ImageFolderCheck> {
    let sizes = image_sizes(path)?;
    let recorded = image_sha256s(path)?;
    let mut by_size_only = Vec::new();
    for (name, w, h) in &sizes {
        let file = images.join(name);
        if !file.is_file() {
            return Err(Error::InvalidInput(format!(
                "{}: the database's image {name} is not in this folder ({} images listed in {}); give the folder the database was made from",
                images.display(),
                sizes.len(),
                path.display()
            )));
        }
        let got = ::image::image_dimensions(&file).map_err(|e| Error::Image {
            path: file.clone(),
            reason: e.to_string(),
        })?;
        if got != (*w, *h) {
            return Err(Error::InvalidInput(format!(
                "{}: {}×{} pixels, but the database {} records {name} at {w}×{h}: not the image its features were extracted from; give the folder the database was made from",
                file.display(),
                got.0,
                got.1,
                path.display()
            )));
        }
        if let Some(want) = recorded.get(name) {
            if crate::provenance::image_sha256(&file)? != *want {
                return Err(Error::InvalidInput(format!(
                    "{}: not the picture the database {} was extracted from (the file's SHA-256 differs from the one recorded for {name}); give the folder the database was made from",
                    file.display(),
                    path.display()
                )));
            }
        } else {
            by_size_only.push(name.clone());
        }
    }
    Ok(ImageFolderCheck {
        images: sizes.len(),
        by_size_only,
    })
}

/// The images of a COLMAP database (descl's or COLMAP's own) that have a verified pair of at
/// least `min_inliers` inliers (`two_view_geometries.rows`): the most a reconstruction of it
/// can register (COLMAP's mapper builds its correspondence graph from those pairs alone).
pub fn count_registrable_images(path: &Path, min_inliers: usize) -> Result<usize> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare("SELECT pair_id FROM two_view_geometries WHERE rows >= ?1")
        .map_err(db_err)?;
    let pairs = stmt
        .query_map([min_inliers as i64], |row| row.get::<_, i64>(0))
        .map_err(db_err)?;
    let mut images = std::collections::HashSet::new();
    for pair in pairs {
        let (a, b) = image_ids(pair.map_err(db_err)?);
        images.insert(a);
        images.insert(b);
    }
    Ok(images.len())
}

/// The median over the database's cameras of each camera's longest image side, pixels (the
/// upper one of an even count; 0 for a database without cameras): what
/// [`crate::sfm::refine_filter_px`] scales the mapping's refinement filter by. The median, so that
/// one large image does not set the filter for a set of small ones.
pub fn median_camera_side(path: &Path) -> Result<u32> {
    let conn = open_read_only(path)?;
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let mut stmt = conn
        .prepare("SELECT MAX(width, height) FROM cameras")
        .map_err(db_err)?;
    let mut sides = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .map_err(db_err)?
        .collect::<rusqlite::Result<Vec<i64>>>()
        .map_err(db_err)?;
    sides.sort_unstable();
    let side = sides.get(sides.len() / 2).copied().unwrap_or(0);
    u32::try_from(side.max(0))
        .map_err(|_| Error::format(path, "a camera's width or height does not fit 32 bits"))
}

/// The cameras of the database at `path` whose focal length is not known
/// (`prior_focal_length = 0`) and of a model [`set_unknown_focal_priors`] changes.
pub fn count_unknown_focal_cameras(path: &Path) -> Result<usize> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare("SELECT model FROM cameras WHERE prior_focal_length = 0")
        .map_err(db_err)?;
    let models = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .map_err(db_err)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_err)?;
    Ok(models
        .into_iter()
        .filter(|&m| CameraModel::from_id(m).is_some())
        .count())
}

/// A consistent copy of the database at `path` in the new file `copy` (SQLite's
/// `VACUUM INTO` from a read-only connection: committed content only, whatever journal or
/// write-ahead log lies beside the original, and a writable file whatever its mode).
pub fn snapshot(path: &Path, copy: &Path) -> Result<()> {
    let conn = open_read_only(path)?;
    let target = copy
        .to_str()
        .ok_or_else(|| Error::InvalidInput(format!("{}: not a UTF-8 path", copy.display())))?;
    conn.execute("VACUUM INTO ?1", [target])
        .map_err(|e| database_error(copy, e))?;
    Ok(())
}

/// One row of a COLMAP database's `cameras` table, its parameters decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct CameraRow {
    pub camera_id: i64,
    /// COLMAP's model id ([`CameraModel`] names three of them).
    pub model: i64,
    pub width: i64,
    pub height: i64,
    /// The parameters in the model's order, COLMAP's pixel convention.
    pub params: Vec<f64>,
    /// Whether the focal length is known (`prior_focal_length`: EXIF or given), not guessed.
    pub prior_focal_length: bool,
}

/// Every camera of the database at `path`, in id order; a parameter blob that is not whole
/// doubles is an error naming the camera.
pub fn camera_rows(path: &Path) -> Result<Vec<CameraRow>> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    let conn = open_read_only(path)?;
    let mut stmt = conn
        .prepare(
            "SELECT camera_id, model, width, height, params, prior_focal_length FROM cameras \
             ORDER BY camera_id",
        )
        .map_err(db_err)?;
    type Raw = (i64, i64, i64, i64, Option<Vec<u8>>, i64);
    let rows: Vec<Raw> = stmt
        .query_map([], six_columns)
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?;
    rows.into_iter()
        .map(|(camera_id, model, width, height, blob, prior)| {
            let blob = blob.unwrap_or_default();
            if blob.len() % 8 != 0 {
                return Err(Error::format(
                    path,
                    format!(
                        "camera {camera_id}: {} parameter bytes, not whole 8-byte numbers",
                        blob.len()
                    ),
                ));
            }
            let params = blob
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect();
            Ok(CameraRow {
                camera_id,
                model,
                width,
                height,
                params,
                prior_focal_length: prior != 0,
            })
        })
        .collect()
}

/// Starts every camera of the database at `path` whose focal length is not known
/// (`prior_focal_length = 0`: no EXIF, no flag) from `factor` · max(width, height) instead of
/// the focal length it holds, and returns how many cameras changed. Only the models descl
/// writes ([`CameraModel`]) are changed (both focal lengths of PINHOLE); cameras of other
/// models stay as they are. Meant for a copy ([`crate::sfm::map`]'s focal-prior fallback): the
/// database a user was given keeps its priors.
pub fn set_unknown_focal_priors(path: &Path, factor: f64) -> Result<usize> {
    let db_err = |e: rusqlite::Error| database_error(path, e);
    if !path.is_file() {
        return Err(Error::format(path, "not a COLMAP database file"));
    }
    let mut conn = Connection::open(path).map_err(db_err)?;
    let tx = conn.transaction().map_err(db_err)?;
    type CameraRow = (i64, i64, i64, i64, Option<Vec<u8>>);
    let cameras: Vec<CameraRow> = {
        let mut stmt = tx
            .prepare(
                "SELECT camera_id, model, width, height, params FROM cameras \
                 WHERE prior_focal_length = 0",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    let mut changed = 0;
    for (id, model, width, height, blob) in cameras {
        let Some(focal_params) = CameraModel::from_id(model).map(CameraModel::focal_params) else {
            continue;
        };
        let blob = blob.unwrap_or_default();
        let mut params: Vec<f64> = blob
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        if params.len() < focal_params || blob.len() % 8 != 0 || width <= 0 || height <= 0 {
            return Err(Error::format(
                path,
                format!(
                    "camera {id}: {} parameter bytes for a {width}×{height} camera of model {model}",
                    blob.len()
                ),
            ));
        }
        params[..focal_params].fill(factor * width.max(height) as f64);
        tx.execute(
            "UPDATE cameras SET params = ?1 WHERE camera_id = ?2",
            params![f64_blob(&params), id],
        )
        .map_err(db_err)?;
        changed += 1;
    }
    tx.commit().map_err(db_err)?;
    Ok(changed)
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn matrices_are_stored_row_major() {
        let m = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]];
        let back: Vec<f64> = mat3_blob(&m)
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(back, (1..=9).map(f64::from).collect::<Vec<_>>());
    }

    #[test]
    fn quaternion_of_known_rotations() {
        // 90° about z: (cos 45°, 0, 0, sin 45°).
        let rz = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]];
        let q = quaternion_wxyz(&rz);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        for (a, b) in q.iter().zip([h, 0.0, 0.0, h]) {
            assert!((a - b).abs() < 1e-12, "{q:?}");
        }
        // 180° about x (trace −1, the branch without w): (0, 1, 0, 0).
        let rx = [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]];
        assert_eq!(quaternion_wxyz(&rx), [0.0, 1.0, 0.0, 0.0]);
    }

    /// The models in COLMAP's pixels hold for the shifted points: F's epipolar constraint and
    /// H's mapping, on points made to satisfy them in descl's pixels.
    #[test]
    fn models_move_to_colmap_pixels() {
        let h = [[1.1, 0.05, 12.0], [-0.02, 0.95, -7.0], [1e-4, -2e-4, 1.0]];
        let apply = |m: &Mat3, p: [f64; 2]| {
            let v: [f64; 3] = std::array::from_fn(|r| m[r][0] * p[0] + m[r][1] * p[1] + m[r][2]);
            [v[0] / v[2], v[1] / v[2]]
        };
        let hc = homography_to_colmap(&h);
        let o = COLMAP_PIXEL_OFFSET as f64;
        for p in [[10.0, 20.0], [300.5, 40.25], [1000.0, 700.0]] {
            let q = apply(&h, p);
            let qc = apply(&hc, [p[0] + o, p[1] + o]);
            assert!((qc[0] - (q[0] + o)).abs() < 1e-9 && (qc[1] - (q[1] + o)).abs() < 1e-9);
        }
        // F = [e']x H: x_b = α·H x_a + β·e' satisfies x_bᵀ F x_a = 0 for any α, β.
        let e = [50.0, 30.0, 1.0];
        let ex = [[0.0, -e[2], e[1]], [e[2], 0.0, -e[0]], [-e[1], e[0], 0.0]];
        let f = mul3(&ex, &h);
        let fc = fundamental_to_colmap(&f);
        let epi = |m: &Mat3, a: [f64; 2], b: [f64; 2]| -> f64 {
            let la: [f64; 3] = std::array::from_fn(|r| m[r][0] * a[0] + m[r][1] * a[1] + m[r][2]);
            let n = la[0].hypot(la[1]);
            (b[0] * la[0] + b[1] * la[1] + la[2]) / n
        };
        for (a, (al, be)) in [([5.0, 7.0], (1.0, 0.5)), ([400.0, -40.0], (2.0, -1.5))] {
            let ha: [f64; 3] = std::array::from_fn(|r| h[r][0] * a[0] + h[r][1] * a[1] + h[r][2]);
            let x: [f64; 3] = std::array::from_fn(|r| al * ha[r] + be * e[r]);
            let b = [x[0] / x[2], x[1] / x[2]];
            let (ac, bc) = ([a[0] + o, a[1] + o], [b[0] + o, b[1] + o]);
            assert!(epi(&f, a, b).abs() < 1e-9);
            assert!(epi(&fc, ac, bc).abs() < 1e-9, "{}", epi(&fc, ac, bc));
            // The unconverted F is off by a fraction of a pixel for the shifted points.
            assert!(epi(&f, ac, bc).abs() > 1e-3, "{}", epi(&f, ac, bc));
        }
    }

    #[test]
    fn two_view_labels_follow_colmap() {
        use ModelKind::*;
        let check = |h: usize, own: usize| HomographyCheck {
            model: [[0.0; 3]; 3],
            num_inliers: h,
            model_inliers: own,
            threshold_px: 4.0,
        };
        let of = |k, h, own| TwoViewConfig::of(k, Some(&check(h, own)));
        assert_eq!(
            TwoViewConfig::of(Fundamental, None),
            TwoViewConfig::Uncalibrated
        );
        assert_eq!(of(Fundamental, 80, 100), TwoViewConfig::Uncalibrated);
        assert_eq!(of(Fundamental, 81, 100), TwoViewConfig::PlanarOrPanoramic);
        assert_eq!(of(Essential, 40, 100), TwoViewConfig::Calibrated);
        assert_eq!(of(Essential, 95, 100), TwoViewConfig::PlanarOrPanoramic);
        assert_eq!(of(Fundamental, 0, 0), TwoViewConfig::Uncalibrated);
        assert_eq!(TwoViewConfig::of(Homography, None), TwoViewConfig::Planar);
    }

    #[test]
    fn pair_id_matches_colmap_formula() {
        assert_eq!(pair_id(1, 2), 2147483647 + 2);
        assert_eq!(pair_id(7, 3), 3 * 2147483647 + 7);
        assert_eq!(image_ids(pair_id(7, 3)), (3, 7));
    }

    #[test]
    fn keypoints_read_back_as_written_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.db");
        let db = Database::create(&path, false).unwrap();
        let cam = db
            .add_camera(
                CameraModel::SimplePinhole,
                100,
                80,
                &[90.0, 50.0, 40.0],
                false,
            )
            .unwrap();
        // A 0×0 camera (COLMAP's mapper hung on it) or a non-finite focal is refused.
        for (w, h, f) in [(0, 0, 90.0), (100, 0, 90.0), (100, 80, f64::NAN)] {
            let e = db
                .add_camera(CameraModel::SimplePinhole, w, h, &[f, 50.0, 40.0], false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("k.db") && e.contains("must be positive"), "{e}");
        }
        let frames = vec![
            Frame::from_row([3.0, 4.5, 6.0, -1.0, 1.0, 6.0]),
            Frame::from_row([99.25, 0.0, -2.0, 0.0, 0.0, 2.0]),
        ];
        let id = db.add_image("a/b.jpg", cam).unwrap();
        db.add_keypoints(id, &frames).unwrap();
        let empty = db.add_image("c.jpg", cam).unwrap();
        db.add_keypoints(empty, &[]).unwrap();
        db.finish().unwrap();
        let images = read_keypoints(&path).unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(
            (images[0].image_id, images[0].name.as_str()),
            (id, "a/b.jpg")
        );
        assert_eq!(images[0].frames, frames);
        assert!(images[1].frames.is_empty());
        let err = read_keypoints(&dir.path().join("missing.db"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.db"), "{err}");
    }

    #[test]
    fn unknown_focal_priors_are_reset_and_known_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let db = Database::create(&path, false).unwrap();
        let model = CameraModel::SimpleRadial;
        let unknown = db
            .add_camera(model, 1024, 768, &model.params(1228.8, 1024, 768), false)
            .unwrap();
        let known = db
            .add_camera(model, 1024, 768, &model.params(700.0, 1024, 768), true)
            .unwrap();
        let pinhole = CameraModel::Pinhole;
        let both = db
            .add_camera(pinhole, 600, 800, &pinhole.params(960.0, 600, 800), false)
            .unwrap();
        db.finish().unwrap();
        assert_eq!(set_unknown_focal_priors(&path, 0.85).unwrap(), 2);
        let conn = Connection::open(&path).unwrap();
        let params = |id: i64| -> Vec<f64> {
            let b: Vec<u8> = conn
                .query_row(
                    "SELECT params FROM cameras WHERE camera_id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .unwrap();
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        // 0.85 · 1024 = 870.4; principal point and distortion untouched.
        assert_eq!(params(unknown), [870.4, 512.0, 384.0, 0.0]);
        assert_eq!(params(known), [700.0, 512.0, 384.0, 0.0]);
        // PINHOLE: both focal lengths, from the long side (0.85 · 800).
        assert_eq!(params(both), [0.85 * 800.0, 0.85 * 800.0, 300.0, 400.0]);
        let err = set_unknown_focal_priors(&dir.path().join("none.db"), 0.85).unwrap_err();
        assert!(err.to_string().contains("none.db"), "{err}");
        // Each camera's longest side: 1024, 1024, 800; the median 1024.
        assert_eq!(median_camera_side(&path).unwrap(), 1024);
    }

    #[test]
    fn the_median_camera_side_is_over_every_camera_and_zero_without_cameras() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let db = Database::create(&path, false).unwrap();
        db.finish().unwrap();
        assert_eq!(median_camera_side(&path).unwrap(), 0);
        let path = dir.path().join("t.db");
        let db = Database::create(&path, false).unwrap();
        let model = CameraModel::SimpleRadial;
        // One large image among small ones does not set it: 640, 1536, 6144 → 1536.
        for (w, h) in [(1536, 1024), (4096, 6144), (640, 480)] {
            db.add_camera(model, w, h, &model.params(1000.0, w, h), false)
                .unwrap();
        }
        db.finish().unwrap();
        assert_eq!(median_camera_side(&path).unwrap(), 1536);
    }
}
