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
use crate::geometry::invert3;
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

/// COLMAP `TwoViewGeometry::ConfigurationType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwoViewConfig {
    Degenerate = 1,
    Calibrated = 2,
    Uncalibrated = 3,
    Planar = 4,
}

/// The models of a verified pair (None where not estimated).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TwoViewModels<'a> {
    pub f: Option<&'a [[f64; 3]; 3]>,
    pub e: Option<&'a [[f64; 3]; 3]>,
    pub h: Option<&'a [[f64; 3]; 3]>,
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

/// A 3×3 matrix as COLMAP stores Eigen::Matrix3d: 9 f64, column-major.
fn mat3_blob(m: &[[f64; 3]; 3]) -> Vec<u8> {
    (0..3)
        .flat_map(|c| (0..3).map(move |r| m[r][c]))
        .flat_map(|x| x.to_le_bytes())
        .collect()
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
    lock: DatabaseLock,
}

/// Suffix of the lock file beside a database being written.
pub const LOCK_SUFFIX: &str = ".lock";
/// The tag of a database's temporary files: `<database file name>-`, so that they read
/// `.descl-tmp-<database file name>-…db` (`io::atomic::TMP_PREFIX`).
fn tmp_tag(db: &Path) -> String {
    format!("{}-", db.file_name().unwrap_or_default().to_string_lossy())
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

/// An exclusive lock on `<database>.lock` (an OS file lock: released by the kernel when the
/// process dies, so a killed run never blocks the next one).
struct DatabaseLock {
    file: std::fs::File,
    path: PathBuf,
}

impl DatabaseLock {
    fn acquire(db: &Path) -> Result<DatabaseLock> {
        let mut name = db.file_name().unwrap_or_default().to_os_string();
        name.push(LOCK_SUFFIX);
        let path = db.with_file_name(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(DatabaseLock { file, path }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::InvalidInput(format!(
                "{}: another descl run is writing this database (lock {}); wait for it or choose another --database",
                db.display(),
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
        }
    }

    /// Removes the lock file, then releases the lock.
    fn release(self) {
        // Best effort: a lock file left behind is harmless (the lock is the kernel's).
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Temporary databases of earlier runs on `db` that were killed before finishing. Only called
/// with the lock held, so none of them belongs to a live run.
fn remove_stale_temporaries(dir: &Path, db: &Path) {
    let prefix = format!("{}{}", crate::io::atomic::TMP_PREFIX, tmp_tag(db));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Database {
    /// Starts a new database at `path`. An existing file is refused unless `overwrite`.
    pub fn create(path: &Path, overwrite: bool) -> Result<Self> {
        refuse_existing(path, overwrite)?;
        let lock = DatabaseLock::acquire(path)?;
        // Checked again under the lock: a run that finished meanwhile wrote the file.
        refuse_existing(path, overwrite)?;
        remove_stale_temporaries(crate::io::atomic::parent_dir(path), path);
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
    /// writes them). Models relate image `id1` to `id2` as given.
    pub fn add_two_view_geometry(
        &self,
        id1: i64,
        id2: i64,
        inliers: &[[u32; 2]],
        config: TwoViewConfig,
        models: &TwoViewModels,
    ) -> Result<()> {
        let TwoViewModels { f, e, h } = *models;
        let zero = [[0.0; 3]; 3];
        // COLMAP's models map the smaller id to the larger: transpose F/E, invert H otherwise.
        let swap = id1 > id2;
        let fe = |m: Option<&[[f64; 3]; 3]>| {
            let m = m.copied().unwrap_or(zero);
            if swap {
                mat3_blob(&[0, 1, 2].map(|r| [0, 1, 2].map(|c| m[c][r])))
            } else {
                mat3_blob(&m)
            }
        };
        let hb = match h {
            Some(h) if swap => mat3_blob(&invert3(h, SINGULAR_DET).unwrap_or(zero)),
            Some(h) => mat3_blob(h),
            None => mat3_blob(&zero),
        };
        let qvec: Vec<u8> = [1.0f64, 0.0, 0.0, 0.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let tvec: Vec<u8> = [0.0f64; 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        self.conn
            .execute(
                "INSERT INTO two_view_geometries(pair_id, rows, cols, data, config, F, E, H, qvec, tvec) \
                 VALUES (?1, ?2, 2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    pair_id(id1, id2),
                    inliers.len() as i64,
                    Self::pair_blob(id1, id2, inliers),
                    config as i64,
                    fe(f),
                    fe(e),
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
        lock.release();
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

/// Reads every image's keypoints from a COLMAP database (descl's or COLMAP's own), as frames
/// in descl's pixel convention (the [`COLMAP_PIXEL_OFFSET`] removed). Keypoints must have 6
/// columns (x, y, a11, a12, a21, a22: COLMAP's affine shape, as both descl and COLMAP's SIFT
/// extractor store them). The shape is returned as stored: descl stores `m·σ·R` (its frames),
/// COLMAP's SIFT extractor `σ·R`, so a caller rescales by the magnification it needs.
pub fn read_keypoints(path: &Path) -> Result<Vec<StoredImage>> {
    let db_err = |e: rusqlite::Error| Error::Database {
        path: path.into(),
        reason: e.to_string(),
    };
    if !path.is_file() {
        return Err(Error::format(path, "not a COLMAP database file"));
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(db_err)?;
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

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

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
}
