//! pycolmap's incremental mapper (PyPI `pycolmap`, COLMAP ≥ 3.12 inside) as `descl sfm
//! --mapper pycolmap`: the same database, the same options and the same model folders as
//! `colmap mapper`, from a Python that imports pycolmap.
//!
//! Why: Debian's `colmap` is 3.8. On forward motion without EXIF (opensfm_lund, 29 street
//! frames) its mapper makes no model from the default model's database nor the former sfm
//! default's, and from the distilled student's a folded one: 24 frames whose centres go
//! backwards 15 times in 23 steps, focal 890 px with radial k 0.30. pycolmap 4.2.1 maps the
//! same databases to the street in 7 of 9 runs (3 seeds each; never folded, focal 748–779 px),
//! the models agreeing to 0.02–0.11 % of the extent
//! (`docs/bench/sfm-lund-mappers-2026-11-28.json`). Its model folders are COLMAP's binary
//! format, which COLMAP 3.8's tools and [`crate::io::colmap_model::read_model`] read, so
//! `descl sfm --refine` (COLMAP 3.8's bundle adjuster and triangulator) runs unchanged.
//!
//! pycolmap migrates a database it opens to its own schema (rigs and frames tables): it maps a
//! snapshot in a hidden folder of the output folder, removed when the run ends, so the
//! migration never reaches the user's database. (The refinement's COLMAP 3.8 tools open that
//! database as `colmap mapper` does, which may set its journal mode and `user_version`; its
//! rows are unchanged.)

use super::{refuse_earlier_models, Mapper, MapperOptions};
use crate::error::{Error, Result};
use crate::io::colmap_model::{largest_model, Reconstruction};
use std::path::{Path, PathBuf};

/// The environment variable naming the Python that runs pycolmap (default: `python3` on PATH).
pub const PYTHON_ENV: &str = "DESCL_PYTHON";

/// The first characters of the line [`MAPPER_SCRIPT`] prints its result on (stdout may hold
/// other lines: pycolmap's own).
const RESULT_PREFIX: &str = "DESCL_PYCOLMAP_RESULT ";

/// What the mapper script exits with when pycolmap cannot be imported.
const NO_PYCOLMAP_EXIT: i32 = 3;

/// First characters of the hidden folder holding the database snapshot pycolmap maps.
const SNAPSHOT_PREFIX: &str = ".descl-tmp-pycolmap-";

/// The mapper, run as `python -c MAPPER_SCRIPT DB IMAGES OUT THREADS REFINE_PP ANGLE FILTER
/// SEED HOLD PREFIX NO_PYCOLMAP` (HOLD 1: focal lengths and distortion held) (an empty ANGLE or FILTER: pycolmap's default; SEED:
/// `random_seed`, 0 as `colmap mapper`'s default when not given). Prints `PREFIX {"version"}`
/// ([`RESULT_PREFIX`]) when the mapping ends, or exits NO_PYCOLMAP ([`NO_PYCOLMAP_EXIT`]).
const MAPPER_SCRIPT: &str = r#"
import json, sys
db, images, out, threads, refine_pp, angle, filt, seed, hold, prefix, no_pycolmap = sys.argv[1:12]
try:
    import pycolmap
except Exception as e:
    print("cannot import pycolmap: %s" % e, file=sys.stderr)
    sys.exit(int(no_pycolmap))
opts = pycolmap.IncrementalPipelineOptions()
opts.num_threads = int(threads)
opts.ba_refine_principal_point = refine_pp == "1"
if hold == "1":
    opts.ba_refine_focal_length = False
    opts.ba_refine_extra_params = False
if angle:
    opts.mapper.init_min_tri_angle = float(angle)
if filt:
    opts.mapper.filter_max_reproj_error = float(filt)
opts.random_seed = int(seed)
pycolmap.set_random_seed(int(seed))
pycolmap.incremental_mapping(db, images, out, options=opts)
print(prefix + json.dumps({"version": pycolmap.__version__}))
"#;

/// pycolmap's global mapper (GLOMAP inside pycolmap 4: rotation averaging, then global
/// positioning, then one bundle adjustment), run as [`MAPPER_SCRIPT`] with the same command
/// line. It has no initial pair, so ANGLE and FILTER are not its settings and are not passed;
/// pycolmap 4.2.1's `global_mapping` returns its models, which are written where the
/// incremental mapper writes its own (`OUT/N`) when it did not write them itself.
const GLOBAL_MAPPER_SCRIPT: &str = r#"
import json, os, sys
db, images, out, threads, refine_pp, angle, filt, seed, hold, prefix, no_pycolmap = sys.argv[1:12]
try:
    import pycolmap
except Exception as e:
    print("cannot import pycolmap: %s" % e, file=sys.stderr)
    sys.exit(int(no_pycolmap))
opts = pycolmap.GlobalPipelineOptions()
opts.num_threads = int(threads)
opts.random_seed = int(seed)
opts.mapper.bundle_adjustment.refine_principal_point = refine_pp == "1"
if hold == "1":
    opts.mapper.bundle_adjustment.refine_focal_length = False
    opts.mapper.bundle_adjustment.refine_extra_params = False
pycolmap.set_random_seed(int(seed))
models = pycolmap.global_mapping(db, images, out, options=opts)
for k, model in models.items():
    folder = os.path.join(out, str(k))
    if not os.path.isfile(os.path.join(folder, "images.bin")):
        os.makedirs(folder, exist_ok=True)
        model.write(folder)
print(prefix + json.dumps({"version": pycolmap.__version__}))
"#;

/// The Python that runs pycolmap: `$DESCL_PYTHON` (when set and not empty) or `python3` on
/// PATH.
pub fn python_exe() -> PathBuf {
    std::env::var_os(PYTHON_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// An error for a Python that cannot be started, naming it and how to choose another.
fn cannot_run(exe: &Path, e: std::io::Error) -> Error {
    Error::InvalidInput(format!(
        "pycolmap's mapper: cannot run {} ({e}); set {PYTHON_ENV} to a Python with pycolmap (pip install pycolmap), or map with COLMAP 3.8 (--mapper colmap; descl bench sfm: --sfm-mapper colmap)",
        exe.display()
    ))
}

/// Whether `v` reads as a version: digits and dots, at least one digit first (`4.2.1`,
/// `3.13.0.dev0` allowed by the dots and letters after the first number).
fn looks_like_version(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+')
}

/// pycolmap's version as [`python_exe`] imports it, or why it cannot (for the check before
/// any work).
pub fn version() -> Result<String> {
    let exe = python_exe();
    let out = crate::sfm::mapper::mapper_command(&exe)
        .args(["-c", "import pycolmap; print(pycolmap.__version__)"])
        .output()
        .map_err(|e| cannot_run(&exe, e))?;
    if !out.status.success() {
        return Err(Error::InvalidInput(format!(
            "pycolmap's mapper: {} cannot import pycolmap (pip install pycolmap, or set {PYTHON_ENV} to a Python that has it, or map with COLMAP 3.8: --mapper colmap; descl bench sfm: --sfm-mapper colmap): {}",
            exe.display(),
            last_line(&out.stderr)
        )));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !looks_like_version(&version) {
        return Err(Error::InvalidInput(format!(
            "--mapper pycolmap: {} printed {version:?} for pycolmap's version",
            exe.display()
        )));
    }
    Ok(version)
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

/// pycolmap's incremental mapper (`pycolmap.incremental_mapping`), run by [`python_exe`] on a
/// snapshot of the database.
#[derive(Debug, Clone, Copy, Default)]
pub struct PycolmapMapper;

impl Mapper for PycolmapMapper {
    fn name(&self) -> &'static str {
        "pycolmap"
    }

    /// "pycolmap 4.2.1": this imports pycolmap, so a Python without it is refused here.
    fn describe(&self) -> Result<String> {
        Ok(format!("pycolmap {}", version()?))
    }

    /// Maps a snapshot of `database` into `output_dir` (which must hold no model) and returns
    /// its largest model. [`Error::NoModel`] when it made none.
    fn run(
        &self,
        database: &Path,
        image_dir: &Path,
        output_dir: &Path,
        options: &MapperOptions,
    ) -> Result<Reconstruction> {
        let script = Script {
            name: self.name(),
            text: MAPPER_SCRIPT,
        };
        script.run(database, image_dir, output_dir, options)
    }
}

/// pycolmap's global mapper (`pycolmap.global_mapping`, [`GLOBAL_MAPPER_SCRIPT`]), run as
/// [`PycolmapMapper`] is: on a snapshot of the database, by [`python_exe`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PycolmapGlobalMapper;

impl Mapper for PycolmapGlobalMapper {
    fn name(&self) -> &'static str {
        "pycolmap-global"
    }

    /// "pycolmap-global 4.2.1": this imports pycolmap, so a Python without it is refused here.
    fn describe(&self) -> Result<String> {
        Ok(format!("{} {}", self.name(), version()?))
    }

    fn run(
        &self,
        database: &Path,
        image_dir: &Path,
        output_dir: &Path,
        options: &MapperOptions,
    ) -> Result<Reconstruction> {
        let script = Script {
            name: self.name(),
            text: GLOBAL_MAPPER_SCRIPT,
        };
        script.run(database, image_dir, output_dir, options)
    }
}

/// THREADS REFINE_PP ANGLE FILTER SEED HOLD of [`MAPPER_SCRIPT`]'s command line.
fn script_options(options: &MapperOptions) -> [String; 6] {
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
    let hold = if options.hold_intrinsics { "1" } else { "0" };
    [
        threads,
        refine_pp.to_string(),
        angle,
        filter,
        seed,
        hold.to_string(),
    ]
}

/// A mapper script of pycolmap's and the mapper's name for messages.
struct Script {
    name: &'static str,
    text: &'static str,
}

impl Script {
    /// Runs the script on a snapshot of `database` into `output_dir` (which must hold no model)
    /// and returns its largest model. [`Error::NoModel`] when it made none.
    fn run(
        &self,
        database: &Path,
        image_dir: &Path,
        output_dir: &Path,
        options: &MapperOptions,
    ) -> Result<Reconstruction> {
        refuse_earlier_models(output_dir, "map")?;
        let staging = crate::io::atomic::staging_dir(output_dir, SNAPSHOT_PREFIX)?;
        let copy = staging.path().join("database.db");
        crate::io::colmap::snapshot(database, &copy)?;
        let exe = python_exe();
        let out = crate::sfm::mapper::mapper_command(&exe)
            .arg("-c")
            .arg(self.text)
            .arg(&copy)
            .arg(image_dir)
            .arg(output_dir)
            .args(script_options(options))
            .arg(RESULT_PREFIX)
            .arg(NO_PYCOLMAP_EXIT.to_string())
            .output()
            .map_err(|e| cannot_run(&exe, e))?;
        drop(staging);
        let version = self.result_version(&out, &exe)?;
        largest_model(output_dir)?.ok_or_else(|| {
            Error::NoModel(format!(
                "{} {version} mapper made no model of {}",
                self.name,
                database.display()
            ))
        })
    }

    /// The pycolmap version the script printed on its result line, or why it failed: no
    /// pycolmap, a crash (its stderr's end), no result line.
    fn result_version(&self, out: &std::process::Output, exe: &Path) -> Result<String> {
        if out.status.code() == Some(NO_PYCOLMAP_EXIT) {
            return Err(Error::InvalidInput(format!(
                "--mapper {}: {} cannot import pycolmap (pip install pycolmap, or set {PYTHON_ENV}, or map with COLMAP 3.8: --mapper colmap; descl bench sfm: --sfm-mapper colmap): {}",
                self.name,
                exe.display(),
                last_line(&out.stderr)
            )));
        }
        if !out.status.success() {
            return Err(Error::InvalidInput(format!(
                "{} mapper failed ({}):\n{}",
                self.name,
                out.status,
                super::stderr_tail(&out.stderr)
            )));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(RESULT_PREFIX))
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .and_then(|v| v["version"].as_str().map(String::from))
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{} mapper: {} printed no result line",
                    self.name,
                    exe.display()
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_version_is_digits_and_dots() {
        assert!(super::looks_like_version("4.2.1"));
        assert!(super::looks_like_version("3.13.0.dev0"));
        assert!(!super::looks_like_version("garbage -c import pycolmap"));
        assert!(!super::looks_like_version(""));
    }
}
