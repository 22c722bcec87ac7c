//! Running `colmap mapper` on a database descl wrote, and reading the binary model it writes
//! (`cameras.bin`, `images.bin`, `points3D.bin`, COLMAP's documented binary format).

use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The `colmap` executable: `$DESCL_COLMAP` (when set and not empty, as `DESCL_PYTHON`) or
/// `colmap` on PATH.
pub fn colmap_exe() -> PathBuf {
    std::env::var_os("DESCL_COLMAP")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("colmap"))
}

/// Whether [`colmap_exe`] can be started (`colmap -h`).
pub fn colmap_available() -> bool {
    Command::new(colmap_exe()).arg("-h").output().is_ok()
}

/// Runs a colmap subcommand, turning failure into an error that carries its stderr tail.
pub fn run_colmap(args: &[&std::ffi::OsStr]) -> Result<()> {
    run_colmap_stdout(args).map(|_| ())
}

/// [`run_colmap`], returning what the subcommand printed to stdout (lossily decoded).
pub fn run_colmap_stdout(args: &[&std::ffi::OsStr]) -> Result<String> {
    let exe = colmap_exe();
    let out = Command::new(&exe).args(args).output().map_err(|e| {
        Error::io(&exe, std::io::Error::new(e.kind(), format!("cannot run colmap ({e}); install COLMAP (Debian: apt install colmap) or set DESCL_COLMAP")))
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        // The database it worked on, when it was given one (`--database_path DB`).
        let database = args
            .windows(2)
            .find(|w| w[0] == "--database_path")
            .map(|w| format!(" on the database {}", Path::new(w[1]).display()))
            .unwrap_or_default();
        return Err(Error::InvalidInput(format!(
            "colmap {} ({}) failed{database} ({}):\n{tail}",
            args.first()
                .map(|a| a.to_string_lossy())
                .unwrap_or_default(),
            exe.display(),
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Which incremental mapper maps a database: COLMAP's command line (`colmap mapper`,
/// [`colmap_exe`]) or pycolmap's (`crate::io::pycolmap`), same options, same model folders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mapper {
    /// `colmap mapper` ([`colmap_exe`]; Debian's COLMAP 3.8).
    #[default]
    Colmap,
    /// pycolmap's `incremental_mapping`, run by `$DESCL_PYTHON` or `python3`.
    Pycolmap,
}

impl Mapper {
    /// The mapper and its version for a report: "colmap" or "pycolmap 4.2.1". For pycolmap
    /// this imports it, so a Python without it is refused here, before any work.
    pub fn describe(self) -> Result<String> {
        match self {
            Mapper::Colmap => Ok("colmap".to_string()),
            Mapper::Pycolmap => Ok(format!("pycolmap {}", crate::io::pycolmap::version()?)),
        }
    }
}

/// Options passed to the mapper (`colmap mapper`, or pycolmap's with the same names).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MapperOptions {
    /// The mapper that runs.
    pub mapper: Mapper,
    /// `--Mapper.num_threads` (None: all cores).
    pub num_threads: Option<usize>,
    /// `--Mapper.ba_refine_principal_point 1`: COLMAP keeps the principal point at the image
    /// centre by default; a real camera's is a few pixels off, which biases rotations by
    /// about offset / focal radians.
    pub refine_principal_point: bool,
    /// `--Mapper.init_min_tri_angle` in degrees (None: COLMAP's default,
    /// [`COLMAP_INIT_MIN_TRI_ANGLE_DEG`]).
    pub init_min_tri_angle_deg: Option<f64>,
    /// `--Mapper.filter_max_reproj_error` in pixels: observations whose reprojection error
    /// exceeds it are dropped after each bundle adjustment (None: COLMAP's default,
    /// [`COLMAP_FILTER_MAX_REPROJ_ERROR_PX`]).
    pub filter_max_reproj_error_px: Option<f64>,
    /// `descl sfm`'s refinement of the kept 4 px model ([`crate::sfm::map`]): observations past
    /// 1 px dropped (scaled above 1536 px), one more bundle adjustment, points triangulated
    /// again. Off by default since 2026-11-28: on the three SfM validation scenes it made the
    /// default model's cameras worse (docs/BENCHMARKS.md, "Mapping policy").
    pub refine: bool,
    /// `--random_seed` of `colmap mapper` (None: COLMAP's default, 0). The mapper's sampling
    /// (initial pair, RANSAC) follows it; `descl bench sfm` gives each run its own seed so the
    /// spread over runs is the mapper's.
    pub random_seed: Option<u64>,
}

/// COLMAP's `Mapper.min_num_matches` (`IncrementalMapperController::Options`): the fewest
/// verified matches of an image pair that the mapper's correspondence graph takes in.
pub const COLMAP_MAPPER_MIN_NUM_MATCHES: usize = 15;

/// `--Mapper.num_threads` for all cores.
const COLMAP_ALL_THREADS: &str = "-1";

/// The file of a COLMAP binary model that lists its registered images: a folder holding it
/// is a model.
pub const MODEL_IMAGES_FILE: &str = "images.bin";

/// COLMAP's `Mapper.filter_max_reproj_error` (`IncrementalMapper::Options`, pixels): the
/// largest reprojection error an observation keeps after bundle adjustment.
pub const COLMAP_FILTER_MAX_REPROJ_ERROR_PX: f64 = 4.0;

impl MapperOptions {
    /// `--Mapper.num_threads`'s value.
    fn threads_arg(&self) -> String {
        self.num_threads
            .map(|n| n.to_string())
            .unwrap_or_else(|| COLMAP_ALL_THREADS.into())
    }

    /// `--Mapper.ba_refine_principal_point` / `--BundleAdjustment.refine_principal_point`'s
    /// value.
    fn refine_principal_point_arg(&self) -> &'static str {
        if self.refine_principal_point {
            "1"
        } else {
            "0"
        }
    }
}

/// Creates `dir` for a colmap command's models (`what` it does: "map", "triangulate"),
/// refusing one that holds a model already (itself, or a numbered model folder): the command
/// would write beside or over it, and the model read back could be the earlier run's.
pub(crate) fn refuse_earlier_models(dir: &Path, what: &str) -> Result<()> {
    let old = if dir.join(MODEL_IMAGES_FILE).is_file() {
        Some(dir.to_path_buf())
    } else {
        model_folders(dir)?.into_iter().next()
    };
    if let Some(old) = old {
        return Err(Error::InvalidInput(format!(
            "{}: holds a model of an earlier run; remove it or {what} into another folder",
            old.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// COLMAP's `Mapper.init_min_tri_angle` (`IncrementalMapper::Options`, degrees): the smallest
/// median triangulation angle of an initial image pair.
pub const COLMAP_INIT_MIN_TRI_ANGLE_DEG: f64 = 16.0;

/// What `colmap mapper` prints (and exits 1) when it found no initial pair it accepts
/// (`colmap/exe/sfm.cc`, COLMAP 3.8).
pub const COLMAP_NO_MODEL_MESSAGE: &str = "failed to create sparse model";

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

/// Runs `colmap mapper` (or pycolmap's, [`MapperOptions::mapper`]) and returns the largest model it produced (most registered images).
/// `output_dir` must hold no model yet: the mapper numbers its models from 0 and a folder left
/// by an earlier run would be read as this run's. [`Error::NoModel`] when the mapper made
/// none.
pub fn run_mapper(
    database: &Path,
    image_dir: &Path,
    output_dir: &Path,
    options: &MapperOptions,
) -> Result<Reconstruction> {
    if options.mapper == Mapper::Pycolmap {
        return crate::io::pycolmap::run_mapper(database, image_dir, output_dir, options);
    }
    refuse_earlier_models(output_dir, "map")?;
    let threads = options.threads_arg();
    let refine_pp = options.refine_principal_point_arg();
    let angle = options.init_min_tri_angle_deg.map(|a| a.to_string());
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "mapper".as_ref(),
        "--database_path".as_ref(),
        database.as_os_str(),
        "--image_path".as_ref(),
        image_dir.as_os_str(),
        "--output_path".as_ref(),
        output_dir.as_os_str(),
        "--Mapper.num_threads".as_ref(),
        threads.as_ref(),
        "--Mapper.ba_refine_principal_point".as_ref(),
        refine_pp.as_ref(),
    ];
    if let Some(a) = &angle {
        args.push("--Mapper.init_min_tri_angle".as_ref());
        args.push(a.as_ref());
    }
    let filter = options.filter_max_reproj_error_px.map(|f| f.to_string());
    if let Some(f) = &filter {
        args.push("--Mapper.filter_max_reproj_error".as_ref());
        args.push(f.as_ref());
    }
    let seed = options.random_seed.map(|k| k.to_string());
    if let Some(k) = &seed {
        args.push("--random_seed".as_ref());
        args.push(k.as_ref());
    }
    match run_colmap(&args) {
        Err(Error::InvalidInput(why)) if why.contains(COLMAP_NO_MODEL_MESSAGE) => {
            return Err(Error::NoModel(why))
        }
        other => other?,
    }
    largest_model(output_dir)?.ok_or_else(|| {
        Error::NoModel(format!(
            "colmap mapper registered no model in {}",
            output_dir.display()
        ))
    })
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

/// Runs `colmap point_triangulator` on the model in `input` into `output` (created; it must
/// hold no model): the model's cameras and poses are held fixed, its points kept, and every
/// track of the database's verified matches is triangulated, merged and completed again with
/// COLMAP's mapper defaults (`Mapper.filter_max_reproj_error` [`COLMAP_FILTER_MAX_REPROJ_ERROR_PX`],
/// `tri_*` thresholds), then its points bundle-adjusted with the poses and intrinsics constant
/// (COLMAP 3.8, `RunPointTriangulator`). Returns the model it wrote.
pub fn run_point_triangulator(
    database: &Path,
    image_dir: &Path,
    input: &Path,
    output: &Path,
    options: &MapperOptions,
) -> Result<Reconstruction> {
    refuse_earlier_models(output, "triangulate")?;
    let threads = options.threads_arg();
    run_colmap(&[
        "point_triangulator".as_ref(),
        "--database_path".as_ref(),
        database.as_os_str(),
        "--image_path".as_ref(),
        image_dir.as_os_str(),
        "--input_path".as_ref(),
        input.as_os_str(),
        "--output_path".as_ref(),
        output.as_os_str(),
        "--Mapper.num_threads".as_ref(),
        threads.as_ref(),
    ])?;
    read_model(output)
}

/// Runs `colmap point_filtering` on the model in `input` into `output` (created; it must hold
/// no model): every observation whose reprojection error exceeds `max_reproj_error_px` is
/// dropped, then points left with fewer than two observations or a triangulation angle under
/// COLMAP's 1.5° (its `min_tri_angle` default). Poses and cameras are unchanged.
pub fn run_point_filtering(
    input: &Path,
    output: &Path,
    max_reproj_error_px: f64,
) -> Result<Reconstruction> {
    refuse_earlier_models(output, "filter")?;
    let px = max_reproj_error_px.to_string();
    run_colmap(&[
        "point_filtering".as_ref(),
        "--input_path".as_ref(),
        input.as_os_str(),
        "--output_path".as_ref(),
        output.as_os_str(),
        "--max_reproj_error".as_ref(),
        px.as_ref(),
    ])?;
    read_model(output)
}

/// The line of COLMAP's "Bundle adjustment report" (COLMAP 3.8, `PrintSolverSummary`, on
/// stdout) that says how the solver ended, up to its value.
const BUNDLE_TERMINATION_LABEL: &str = "Termination :";

/// How a bundle adjustment's solver ended, as COLMAP reports it (Ceres' termination type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BundleTermination {
    /// "Convergence": a tolerance was met.
    Convergence,
    /// "No convergence": the iteration or time limit came first; the model is the last
    /// iterate, written all the same.
    NoConvergence,
    /// "Failure": the solver failed (COLMAP still writes the model and exits with success).
    Failure,
}

impl BundleTermination {
    /// The termination in COLMAP's bundle-adjustment report `stdout`; None when it holds no
    /// report (a COLMAP that prints none, or another text).
    pub fn from_report(stdout: &str) -> Option<BundleTermination> {
        let value = stdout
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix(BUNDLE_TERMINATION_LABEL))?;
        match value.trim() {
            "Convergence" => Some(BundleTermination::Convergence),
            "No convergence" => Some(BundleTermination::NoConvergence),
            "Failure" => Some(BundleTermination::Failure),
            _ => None,
        }
    }
}

/// A model written by [`run_bundle_adjuster`], and how its solver ended.
#[derive(Debug, Clone)]
pub struct Adjusted {
    /// The model it wrote.
    pub reconstruction: Reconstruction,
    /// How the solver ended, from COLMAP's report (None: no report found in its output).
    pub termination: Option<BundleTermination>,
}

/// Runs `colmap bundle_adjuster` on the model in `input` into `output` (created; it must hold
/// no model): one global bundle adjustment of every pose, point and camera (the principal
/// point only with `options.refine_principal_point`), with COLMAP's defaults otherwise.
/// COLMAP writes the model however its solver ended; [`Adjusted::termination`] says how.
pub fn run_bundle_adjuster(
    input: &Path,
    output: &Path,
    options: &MapperOptions,
) -> Result<Adjusted> {
    refuse_earlier_models(output, "bundle-adjust")?;
    let refine_pp = options.refine_principal_point_arg();
    let stdout = run_colmap_stdout(&[
        "bundle_adjuster".as_ref(),
        "--input_path".as_ref(),
        input.as_os_str(),
        "--output_path".as_ref(),
        output.as_os_str(),
        "--BundleAdjustment.refine_principal_point".as_ref(),
        refine_pp.as_ref(),
    ])?;
    Ok(Adjusted {
        reconstruction: read_model(output)?,
        termination: BundleTermination::from_report(&stdout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// COLMAP 3.8's report (as `colmap bundle_adjuster` prints it, iterations left out).
    fn report(termination: &str) -> String {
        format!(
            "Global bundle adjustment\n   0  3.655251e+02    0.00e+00\n\nBundle adjustment report\n\
             ------------------------\n    Residuals : 5256\n   Parameters : 2323\n\
             Iterations : 19\n  Termination : {termination}\n\nElapsed time: 0.001 [minutes]\n"
        )
    }

    #[test]
    fn the_bundle_adjustment_report_says_how_the_solver_ended() {
        let of = |t: &str| BundleTermination::from_report(&report(t));
        assert_eq!(of("Convergence"), Some(BundleTermination::Convergence));
        assert_eq!(of("No convergence"), Some(BundleTermination::NoConvergence));
        assert_eq!(of("Failure"), Some(BundleTermination::Failure));
        assert_eq!(of("Something else"), None);
        assert_eq!(BundleTermination::from_report("no report here"), None);
    }

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
