//! pycolmap's incremental mapper (PyPI `pycolmap`, COLMAP ≥ 3.12 inside) as `descl sfm
//! --mapper pycolmap`: the same database, the same options and the same model folders as
//! `colmap mapper`, from a Python that imports pycolmap.
//!
//! Why: Debian's `colmap` is 3.8. On forward motion without EXIF (opensfm_lund, 29 street
//! frames) its mapper makes no model from three of four feature sets, and from the fourth a
//! folded one: 24 frames whose centres go backwards 15 times in 23 steps, focal 890 px with
//! radial k 0.30. pycolmap 4.2.1 maps each of the four databases to the whole street (29/29,
//! no step backwards, focal 752–763 px), the models agreeing to 0.02–0.11 % of the extent
//! (`docs/bench/sfm-lund-mappers-2026-11-28.json`). Its model folders are COLMAP's binary
//! format, which COLMAP 3.8's tools and [`crate::io::colmap_model::read_model`] read, so
//! `descl sfm`'s refinement (COLMAP 3.8's bundle adjuster and triangulator) runs unchanged.
//!
//! pycolmap migrates a database it opens to its own schema, which COLMAP 3.8 cannot read: it
//! maps a snapshot in a hidden folder of the output folder, removed when the run ends; the
//! user's database is never written.

use crate::error::{Error, Result};
use crate::io::colmap_model::{MapperOptions, Reconstruction};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the Python that runs pycolmap (default: `python3` on PATH).
pub const PYTHON_ENV: &str = "DESCL_PYTHON";

/// The first characters of the line [`MAPPER_SCRIPT`] prints its result on (stdout may hold
/// other lines: pycolmap's own).
const RESULT_PREFIX: &str = "DESCL_PYCOLMAP_RESULT ";

/// What the mapper script exits with when pycolmap cannot be imported.
const NO_PYCOLMAP_EXIT: i32 = 3;

/// COLMAP's `IncrementalPipeline` option `min_model_size`: a model of fewer images than this
/// (or than [`MIN_MODEL_FRACTION`] of the registrable images, whichever is less) is discarded
/// when another was made.
pub const COLMAP_MIN_MODEL_SIZE: usize = 10;
/// The share of the images COLMAP's `min_model_size` rule caps it at.
pub const MIN_MODEL_FRACTION: f64 = 0.8;

/// The fewest images a pycolmap model must hold to count as a model of a database of
/// `registrable` images: COLMAP's `min_model_size` rule. pycolmap keeps a first model of
/// any size: on opensfm_lund some seeds return an initial pair that nothing else joined (2
/// of 29 images), which would stop `sfm::map`'s fallbacks and be reported as the
/// reconstruction.
pub fn min_model_images(registrable: usize) -> usize {
    let fraction = (MIN_MODEL_FRACTION * registrable as f64).floor() as usize;
    COLMAP_MIN_MODEL_SIZE.min(fraction).max(2)
}

/// First characters of the hidden folder holding the database snapshot pycolmap maps.
const SNAPSHOT_PREFIX: &str = ".descl-tmp-pycolmap-";

/// The mapper, run as `python -c MAPPER_SCRIPT DB IMAGES OUT THREADS REFINE_PP ANGLE FILTER
/// SEED` (an empty ANGLE or FILTER: pycolmap's default; SEED: `random_seed`, 0 as `colmap
/// mapper`'s default when not given). Prints `RESULT_PREFIX {"version", "models": {id: images}}`.
const MAPPER_SCRIPT: &str = r#"
import json, sys
try:
    import pycolmap
except Exception as e:
    print("cannot import pycolmap: %s" % e, file=sys.stderr)
    sys.exit(3)
db, images, out, threads, refine_pp, angle, filt, seed = sys.argv[1:9]
opts = pycolmap.IncrementalPipelineOptions()
opts.num_threads = int(threads)
opts.ba_refine_principal_point = refine_pp == "1"
if angle:
    opts.mapper.init_min_tri_angle = float(angle)
if filt:
    opts.mapper.filter_max_reproj_error = float(filt)
opts.random_seed = int(seed)
pycolmap.set_random_seed(int(seed))
recs = pycolmap.incremental_mapping(db, images, out, options=opts)
print("DESCL_PYCOLMAP_RESULT " + json.dumps({
    "version": pycolmap.__version__,
    "models": {str(k): r.num_reg_images() for k, r in recs.items()},
}))
"#;

/// The Python that runs pycolmap: `$DESCL_PYTHON` or `python3` on PATH.
pub fn python_exe() -> PathBuf {
    std::env::var_os(PYTHON_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// pycolmap's version as [`python_exe`] imports it, or why it cannot (for the check before
/// any work).
pub fn version() -> Result<String> {
    let exe = python_exe();
    let out = Command::new(&exe)
        .args(["-c", "import pycolmap; print(pycolmap.__version__)"])
        .output()
        .map_err(|e| Error::io(&exe, e))?;
    if !out.status.success() {
        return Err(Error::InvalidInput(format!(
            "--mapper pycolmap: {} cannot import pycolmap (pip install pycolmap, or set {PYTHON_ENV} to a Python that has it): {}",
            exe.display(),
            last_line(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Runs pycolmap's incremental mapper on a snapshot of `database` into `output_dir` (which
/// must hold no model) and returns its largest model and pycolmap's version.
/// [`Error::NoModel`] when it made none, or none of [`min_model_images`].
pub fn run_mapper(
    database: &Path,
    image_dir: &Path,
    output_dir: &Path,
    options: &MapperOptions,
) -> Result<(Reconstruction, String)> {
    crate::io::colmap_model::refuse_earlier_models(output_dir, "map")?;
    let staging = crate::io::atomic::staging_dir(output_dir, SNAPSHOT_PREFIX)?;
    let copy = staging.path().join("database.db");
    crate::io::colmap::snapshot(database, &copy)?;
    let threads = options.num_threads.map_or(-1, |n| n as i64).to_string();
    let refine_pp = if options.refine_principal_point {
        "1"
    } else {
        "0"
    };
    let angle = options
        .init_min_tri_angle_deg
        .map(|a| a.to_string())
        .unwrap_or_default();
    let filter = options
        .filter_max_reproj_error_px
        .map(|f| f.to_string())
        .unwrap_or_default();
    let seed = options.random_seed.unwrap_or(0).to_string();
    let exe = python_exe();
    let out = Command::new(&exe)
        .arg("-c")
        .arg(MAPPER_SCRIPT)
        .arg(&copy)
        .arg(image_dir)
        .arg(output_dir)
        .args([&threads, refine_pp, &angle, &filter, &seed])
        .output()
        .map_err(|e| Error::io(&exe, e))?;
    drop(staging);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(NO_PYCOLMAP_EXIT) {
        return Err(Error::InvalidInput(format!(
            "--mapper pycolmap: {} cannot import pycolmap (pip install pycolmap, or set {PYTHON_ENV}): {}",
            exe.display(),
            last_line(&out.stderr)
        )));
    }
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(Error::InvalidInput(format!(
            "pycolmap mapper failed ({}):\n{}",
            out.status,
            tail.join("\n")
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let version = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .and_then(|v| v["version"].as_str().map(String::from))
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "pycolmap mapper: {} printed no result line",
                exe.display()
            ))
        })?;
    let model = crate::io::colmap_model::largest_model(output_dir)?.ok_or_else(|| {
        Error::NoModel(format!(
            "pycolmap {version} mapper made no model of {}",
            database.display()
        ))
    })?;
    let registrable = crate::io::colmap::count_registrable_images(
        database,
        crate::io::colmap_model::COLMAP_MAPPER_MIN_NUM_MATCHES,
    )?;
    let least = min_model_images(registrable);
    if model.images.len() < least {
        return Err(Error::NoModel(format!(
            "pycolmap {version} mapper's largest model of {} holds {} of its {registrable} registrable images, fewer than {least} (COLMAP's min_model_size rule)",
            database.display(),
            model.images.len()
        )));
    }
    Ok((model, version))
}

#[cfg(test)]
mod tests {
    /// COLMAP's rule by hand: 10 images, or ⌊0.8 · N⌋ of a smaller set, never under a pair.
    #[test]
    fn a_model_needs_ten_images_or_four_fifths_of_a_small_set() {
        assert_eq!(super::min_model_images(29), 10);
        assert_eq!(super::min_model_images(12), 9);
        assert_eq!(super::min_model_images(4), 3);
        assert_eq!(super::min_model_images(2), 2);
    }
}
