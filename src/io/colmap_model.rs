//! Reading the binary model a mapper writes (`cameras.bin`, `images.bin`, `points3D.bin`,
//! COLMAP's documented binary format) and finding the model folders of a mapper's output.
//! A file format only: the processes that write models are [`crate::sfm::mapper`]'s.

use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One registered image of a reconstruction: world-to-camera pose x_cam = R(q)·X + t.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegisteredImage {
    pub image_id: u32,
    pub camera_id: u32,
    pub name: String,
    /// Quaternion (w, x, y, z).
    pub qvec: [f64; 4],
    pub tvec: [f64; 3],
}

impl RegisteredImage {
    /// World-to-camera rotation.
    pub fn rotation(&self) -> [[f64; 3]; 3] {
        let [w, x, y, z] = self.qvec;
        let n = (w * w + x * x + y * y + z * z).sqrt();
        let (w, x, y, z) = (w / n, x / n, y / n, z / n);
        [
            [
                1.0 - 2.0 * (y * y + z * z),
                2.0 * (x * y - w * z),
                2.0 * (x * z + w * y),
            ],
            [
                2.0 * (x * y + w * z),
                1.0 - 2.0 * (x * x + z * z),
                2.0 * (y * z - w * x),
            ],
            [
                2.0 * (x * z - w * y),
                2.0 * (y * z + w * x),
                1.0 - 2.0 * (x * x + y * y),
            ],
        ]
    }
    /// Camera centre in world coordinates: C = −Rᵀ t.
    pub fn centre(&self) -> [f64; 3] {
        let r = self.rotation();
        [0, 1, 2]
            .map(|i| -(r[0][i] * self.tvec[0] + r[1][i] * self.tvec[1] + r[2][i] * self.tvec[2]))
    }
}

/// What a reconstruction contains, as `descl sfm --reconstruct` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Reconstruction {
    pub path: PathBuf,
    pub images: Vec<RegisteredImage>,
    pub num_points: usize,
    /// Mean over 3-D points of their mean reprojection error, pixels (COLMAP's
    /// `ComputeMeanReprojectionError`, as printed by `colmap model_analyzer`).
    pub mean_reprojection_error: f64,
    pub mean_track_length: f64,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .data
            .get(self.pos..self.pos + n)
            .ok_or_else(|| Error::format(self.path, format!("truncated at byte {}", self.pos)))?;
        self.pos += n;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn name(&mut self) -> Result<String> {
        let rest = &self.data[self.pos.min(self.data.len())..];
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| Error::format(self.path, "unterminated image name"))?;
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }
    /// A count that must fit in the remaining bytes at `min_bytes` per element.
    fn count(&mut self, min_bytes: usize) -> Result<usize> {
        let n = self.u64()? as usize;
        if n.saturating_mul(min_bytes) > self.data.len().saturating_sub(self.pos) {
            return Err(Error::format(
                self.path,
                format!("count {n} exceeds the file size"),
            ));
        }
        Ok(n)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// One 3-D point of a reconstruction with its track: the observations `(image_id,
/// point2D_idx)` that COLMAP triangulated it from. `point2D_idx` indexes the image's keypoints
/// in the database (the keypoints blob row), so a track leads back to each view's own detected
/// frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Point3D {
    pub id: u64,
    pub xyz: [f64; 3],
    /// Mean reprojection error over the track, pixels.
    pub error: f64,
    pub track: Vec<(u32, u32)>,
}

/// Bytes of one `points3D.bin` record before its track: id u64, xyz 3×f64, rgb 3×u8, error f64.
const POINT3D_FIXED_BYTES: usize = 8 + 24 + 3 + 8;
/// Bytes of one track element: image_id u32, point2D_idx u32.
const TRACK_ELEMENT_BYTES: usize = 8;
/// Bytes of one `images.bin` 2-D point: x, y f64, point3D_id i64.
const POINT2D_BYTES: usize = 24;

/// Smallest squared norm of a registered image's quaternion: COLMAP writes unit quaternions,
/// and [`RegisteredImage::rotation`] divides by the norm, so one near zero holds no rotation.
const MIN_QUATERNION_NORM_SQUARED: f64 = 1e-12;

/// Refuses a pose COLMAP never writes: a value that is NaN or infinite, or a quaternion of
/// norm zero. Read as given, such a pose turns every centre and rotation error computed from
/// it into NaN, and a NaN in a median or a mean reads as a number.
fn check_pose(path: &Path, name: &str, qvec: &[f64; 4], tvec: &[f64; 3]) -> Result<()> {
    let bad = |what: String| {
        Err(Error::format(
            path,
            format!("image {name:?}: {what}, not a camera pose"),
        ))
    };
    if !qvec.iter().chain(tvec).all(|v| v.is_finite()) {
        return bad(format!(
            "its pose holds a value that is not finite (quaternion {qvec:?}, translation {tvec:?})"
        ));
    }
    if qvec.iter().map(|v| v * v).sum::<f64>() < MIN_QUATERNION_NORM_SQUARED {
        return bad(format!("its quaternion {qvec:?} has norm zero"));
    }
    Ok(())
}

/// Reads a binary COLMAP model folder (images.bin and points3D.bin); a registered image whose
/// pose is not finite, or whose quaternion is zero, is refused naming the file and the image.
pub fn read_model(dir: &Path) -> Result<Reconstruction> {
    let images_path = dir.join(MODEL_IMAGES_FILE);
    let data = read_file(&images_path)?;
    let mut r = Reader {
        data: &data,
        pos: 0,
        path: &images_path,
    };
    let n = r.count(64)?;
    let mut images = Vec::with_capacity(n);
    for _ in 0..n {
        let image_id = r.u32()?;
        let qvec = [r.f64()?, r.f64()?, r.f64()?, r.f64()?];
        let tvec = [r.f64()?, r.f64()?, r.f64()?];
        let camera_id = r.u32()?;
        let name = r.name()?;
        let n2d = r.count(POINT2D_BYTES)?;
        r.take(n2d * POINT2D_BYTES)?;
        check_pose(&images_path, &name, &qvec, &tvec)?;
        images.push(RegisteredImage {
            image_id,
            camera_id,
            name,
            qvec,
            tvec,
        });
    }
    let points = read_points(dir)?;
    let n_points = points.len();
    let err_sum: f64 = points.iter().map(|p| p.error).sum();
    let track_sum: usize = points.iter().map(|p| p.track.len()).sum();
    images.sort_by_key(|i| i.image_id);
    Ok(Reconstruction {
        path: dir.into(),
        images,
        num_points: n_points,
        mean_reprojection_error: if n_points > 0 {
            err_sum / n_points as f64
        } else {
            f64::NAN
        },
        mean_track_length: if n_points > 0 {
            track_sum as f64 / n_points as f64
        } else {
            0.0
        },
    })
}

/// Reads `points3D.bin` of a binary COLMAP model folder: every 3-D point with its track.
pub fn read_points(dir: &Path) -> Result<Vec<Point3D>> {
    let points_path = dir.join("points3D.bin");
    let data = read_file(&points_path)?;
    let mut r = Reader {
        data: &data,
        pos: 0,
        path: &points_path,
    };
    let n_points = r.count(POINT3D_FIXED_BYTES + TRACK_ELEMENT_BYTES)?;
    let mut points = Vec::with_capacity(n_points);
    for _ in 0..n_points {
        let id = r.u64()?;
        let xyz = [r.f64()?, r.f64()?, r.f64()?];
        r.take(3)?; // rgb
        let error = r.f64()?;
        let len = r.count(TRACK_ELEMENT_BYTES)?;
        let mut track = Vec::with_capacity(len);
        for _ in 0..len {
            track.push((r.u32()?, r.u32()?));
        }
        points.push(Point3D {
            id,
            xyz,
            error,
            track,
        });
    }
    Ok(points)
}

/// The file of a COLMAP binary model that lists its registered images: a folder holding it
/// is a model.
pub const MODEL_IMAGES_FILE: &str = "images.bin";

/// The files a mapper writes into a model folder: COLMAP 3.8's binary model and project file,
/// and COLMAP 4's (pycolmap) rigs and frames beside them. `--overwrite` removes a model folder
/// holding only these, and refuses one holding anything else (a user's notes, undistorted
/// pictures), which it would delete unseen.
pub const MAPPER_MODEL_FILES: [&str; 6] = [
    "cameras.bin",
    MODEL_IMAGES_FILE,
    "points3D.bin",
    "frames.bin",
    "rigs.bin",
    "project.ini",
];

/// The entries of the model folder `model` that no mapper writes ([`MAPPER_MODEL_FILES`]),
/// sorted.
pub fn entries_not_the_mappers(model: &Path) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(model).map_err(|e| Error::io(model, e))? {
        let entry = entry.map_err(|e| Error::io(model, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let file = entry
            .file_type()
            .map_err(|e| Error::io(entry.path(), e))?
            .is_file();
        if !(file && MAPPER_MODEL_FILES.contains(&name.as_str())) {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

/// The model folders (`N/images.bin`, `N` a number as `colmap mapper` names them) in `dir`,
/// in numeric order; none when `dir` does not exist. Other folders are not models (and `descl
/// sfm --overwrite` leaves them alone). A folder that exists but cannot be read is an error,
/// not "no model": the mapper's runner would otherwise read it as a failed reconstruction (and
/// `sfm::map` would map again).
pub fn model_folders(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let p = entry.map_err(|e| Error::io(dir, e))?.path();
        let Some(n) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let images = p.join(MODEL_IMAGES_FILE);
        match std::fs::metadata(&images) {
            Ok(m) if m.is_file() => found.push((n, p)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&images, e)),
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// The model of `dir` with the most registered images (the first in numeric order on a tie):
/// `dir` itself when it holds `images.bin`, else the largest of its [`model_folders`]; None
/// when there is none.
pub fn largest_model(dir: &Path) -> Result<Option<Reconstruction>> {
    if dir.join(MODEL_IMAGES_FILE).is_file() {
        return read_model(dir).map(Some);
    }
    let mut best: Option<Reconstruction> = None;
    for p in model_folders(dir)? {
        let m = read_model(&p)?;
        if best
            .as_ref()
            .is_none_or(|b| m.images.len() > b.images.len())
        {
            best = Some(m);
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_folders_lists_numbered_models_sorted_and_refuses_an_unlistable_path() {
        let dir = tempfile::tempdir().unwrap();
        // Missing folder: no model yet.
        assert!(model_folders(&dir.path().join("absent"))
            .unwrap()
            .is_empty());
        for d in ["10", "0", "2", "9", "backup"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        // Only numbered folders holding images.bin are models, in numeric order; "2" is an
        // empty folder and "backup" no mapper's name.
        for d in ["10", "0", "9", "backup"] {
            std::fs::write(dir.path().join(d).join("images.bin"), b"").unwrap();
        }
        let found = model_folders(dir.path()).unwrap();
        assert_eq!(
            found,
            vec![
                dir.path().join("0"),
                dir.path().join("9"),
                dir.path().join("10")
            ]
        );
        // A path that exists but is no folder is an I/O error naming it, not "no model".
        let file = dir.path().join("0").join("images.bin");
        let err = model_folders(&file).unwrap_err().to_string();
        assert!(err.contains(&file.display().to_string()), "{err}");
    }
}
