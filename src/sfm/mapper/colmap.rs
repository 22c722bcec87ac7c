//! COLMAP 3.8's command line as a [`Mapper`] (`colmap mapper`) and the COLMAP tools
//! [`crate::sfm::map`]'s refinement runs on a finished model (`point_filtering`,
//! `bundle_adjuster`, `point_triangulator`): processes, each writing a model folder that
//! [`crate::io::colmap_model`] reads back.

use super::{refuse_earlier_models, Mapper, MapperOptions};
use crate::error::{Error, Result};
use crate::io::colmap_model::{largest_model, read_model, Reconstruction};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `colmap` executable: `$DESCL_COLMAP` or `colmap` on PATH.
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
    let out = crate::sfm::mapper::mapper_command(&exe).args(args).output().map_err(|e| {
        Error::io(&exe, std::io::Error::new(e.kind(), format!("cannot run colmap ({e}); install COLMAP (Debian: apt install colmap) or set DESCL_COLMAP")))
    })?;
    if !out.status.success() {
        let tail = super::stderr_tail(&out.stderr);
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

/// `--Mapper.num_threads` for all cores.
const COLMAP_ALL_THREADS: &str = "-1";

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

/// What `colmap mapper` prints (and exits 1) when it found no initial pair it accepts
/// (`colmap/exe/sfm.cc`, COLMAP 3.8).
pub const COLMAP_NO_MODEL_MESSAGE: &str = "failed to create sparse model";

/// `colmap mapper` ([`colmap_exe`]), COLMAP 3.8 on Debian 11 and 12.
#[derive(Debug, Clone, Copy, Default)]
pub struct ColmapMapper;

impl Mapper for ColmapMapper {
    fn name(&self) -> &'static str {
        "colmap"
    }

    fn describe(&self) -> Result<String> {
        Ok(self.name().to_string())
    }

    fn no_model_hint(&self) -> &'static str {
        // COLMAP 3.8's mapper fails where pycolmap's maps (forward motion without EXIF,
        // super::pycolmap): name the way out.
        "; pycolmap's newer mapper may map it: --mapper pycolmap (pip install pycolmap)"
    }

    fn run(
        &self,
        database: &Path,
        image_dir: &Path,
        output_dir: &Path,
        options: &MapperOptions,
    ) -> Result<Reconstruction> {
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
        if options.hold_intrinsics {
            for flag in [
                "--Mapper.ba_refine_focal_length",
                "--Mapper.ba_refine_extra_params",
            ] {
                args.push(flag.as_ref());
                args.push("0".as_ref());
            }
        }
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
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "bundle_adjuster".as_ref(),
        "--input_path".as_ref(),
        input.as_os_str(),
        "--output_path".as_ref(),
        output.as_os_str(),
        "--BundleAdjustment.refine_principal_point".as_ref(),
        refine_pp.as_ref(),
    ];
    if options.hold_intrinsics {
        for flag in [
            "--BundleAdjustment.refine_focal_length",
            "--BundleAdjustment.refine_extra_params",
        ] {
            args.push(flag.as_ref());
            args.push("0".as_ref());
        }
    }
    let stdout = run_colmap_stdout(&args)?;
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
}
