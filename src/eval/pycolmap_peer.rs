//! pycolmap's own SIFT pipeline as a same-run peer of `descl bench sfm`
//! ([`crate::eval::reconstruction::Peer`]): `extract_features`, `match_exhaustive`, then
//! `incremental_mapping` or `global_mapping`, run as a user of `pip install pycolmap` runs
//! them, in a Python subprocess (`$DESCL_PYTHON` or `python3`, as `descl sfm --mapper
//! pycolmap`).
//!
//! Why: Debian's COLMAP 3.8 is not what a user picks today; pycolmap 4 is, and it beat
//! `descl sfm` on every held-out scene tried (issue 54). Its results vary with the seed, so the
//! seed of each run is set (`random_seed` and `set_random_seed`) and recorded, and its stages
//! are timed inside the script, where they run, so that Python's start-up counts in no stage.

use crate::error::{Error, Result};
use crate::eval::reconstruction::StageSeconds;
use crate::io::colmap_model::{largest_model, Reconstruction};
use crate::sfm::mapper::pycolmap::{python_exe, PYTHON_ENV};
use std::path::Path;

/// The first characters of the line [`PIPELINE_SCRIPT`] prints its result on (stdout may
/// hold other lines: pycolmap's own).
const RESULT_PREFIX: &str = "DESCL_PYCOLMAP_PEER ";

/// What the script exits with when pycolmap cannot be imported.
const NO_PYCOLMAP_EXIT: i32 = 3;

/// The pipeline, run as `python -c PIPELINE_SCRIPT IMAGES DIR MAX_FEATURES SEED MAPPER PREFIX
/// NO_PYCOLMAP` (MAPPER `incremental` or `global`): the database is `DIR/database.db`, the
/// models `DIR/sparse/N`. Every option is pycolmap's default except the CPU device, the
/// feature cap (COLMAP's default, 8192, unless the bench asks for another) and the seed.
/// Prints `PREFIX {"version", "extract", "match", "map"}` (seconds) when the mapping ends.
const PIPELINE_SCRIPT: &str = r#"
import json, os, sys, time
images, work, max_features, seed, mapper, prefix, no_pycolmap = sys.argv[1:8]
try:
    import pycolmap
except Exception as e:
    print("cannot import pycolmap: %s" % e, file=sys.stderr)
    sys.exit(int(no_pycolmap))
db = os.path.join(work, "database.db")
out = os.path.join(work, "sparse")
os.makedirs(out)
pycolmap.set_random_seed(int(seed))
t = time.perf_counter()
extraction = pycolmap.FeatureExtractionOptions()
extraction.sift.max_num_features = int(max_features)
pycolmap.extract_features(db, images, extraction_options=extraction, device=pycolmap.Device.cpu)
extract = time.perf_counter() - t
t = time.perf_counter()
pycolmap.match_exhaustive(db, device=pycolmap.Device.cpu)
match = time.perf_counter() - t
t = time.perf_counter()
if mapper == "global":
    opts = pycolmap.GlobalPipelineOptions()
    opts.random_seed = int(seed)
    models = pycolmap.global_mapping(db, images, out, options=opts)
else:
    opts = pycolmap.IncrementalPipelineOptions()
    opts.random_seed = int(seed)
    models = pycolmap.incremental_mapping(db, images, out, options=opts)
mapped = time.perf_counter() - t
if not os.listdir(out):
    for i, m in models.items():
        d = os.path.join(out, str(i))
        os.makedirs(d)
        m.write(d)
print(prefix + json.dumps({"version": pycolmap.__version__, "extract": extract, "match": match, "map": mapped}))
"#;

/// One run of pycolmap's pipeline on `images` in `dir` (which holds nothing of an earlier
/// run): its largest model and each stage's wall seconds. [`Error::NoModel`] when the mapper
/// made none.
pub fn run(
    images: &Path,
    dir: &Path,
    max_features: usize,
    seed: u64,
    global: bool,
) -> Result<(Reconstruction, StageSeconds)> {
    let exe = python_exe();
    let mapper = if global { "global" } else { "incremental" };
    let out = crate::sfm::mapper::mapper_command(&exe)
        .arg("-c")
        .arg(PIPELINE_SCRIPT)
        .arg(images)
        .arg(dir)
        .args([&max_features.to_string(), &seed.to_string(), mapper])
        .arg(RESULT_PREFIX)
        .arg(NO_PYCOLMAP_EXIT.to_string())
        .output()
        .map_err(|e| {
            Error::InvalidInput(format!(
                "sfm pycolmap peer: cannot run {} ({e}); set {PYTHON_ENV} to a Python with pycolmap (pip install pycolmap)",
                exe.display()
            ))
        })?;
    let tail = || crate::sfm::mapper::stderr_tail(&out.stderr);
    if out.status.code() == Some(NO_PYCOLMAP_EXIT) {
        return Err(Error::InvalidInput(format!(
            "sfm pycolmap peer: {} cannot import pycolmap (pip install pycolmap, or set {PYTHON_ENV}): {}",
            exe.display(),
            tail()
        )));
    }
    if !out.status.success() {
        return Err(Error::InvalidInput(format!(
            "pycolmap {mapper} pipeline failed on {} ({}):\n{}",
            images.display(),
            out.status,
            tail()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "pycolmap {mapper} pipeline: {} printed no result line",
                exe.display()
            ))
        })?;
    let secs = |k: &str| result[k].as_f64().unwrap_or(f64::NAN);
    let stages = StageSeconds {
        extract: secs("extract"),
        matching: secs("match"),
        map: secs("map"),
    };
    let model = largest_model(&dir.join("sparse"))?.ok_or_else(|| {
        Error::NoModel(format!(
            "pycolmap {mapper} mapper made no model of {}",
            images.display()
        ))
    })?;
    Ok((model, stages))
}

/// pycolmap's version, or why the pycolmap peers cannot run (checked before the suite).
pub fn version() -> Result<String> {
    crate::sfm::mapper::pycolmap::version()
}
