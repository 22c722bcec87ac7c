//! The mappers that turn a COLMAP database into models, behind one interface ([`Mapper`]):
//! COLMAP 3.8's command line ([`colmap::ColmapMapper`]), pycolmap's incremental mapper
//! ([`pycolmap::PycolmapMapper`]) and its global mapper ([`pycolmap::PycolmapGlobalMapper`]).
//! Why one trait: [`crate::sfm::map`]'s policy (fallbacks,
//! the `min_model_size` rule, refinement), `descl bench sfm` and the command line choose a
//! mapper once ([`MapperKind::mapper`]) and never match on it again, so another engine is one
//! more implementation. The processes live here, not in `io/`, which keeps the file formats
//! ([`crate::io::colmap_model`] reads the models every mapper writes).

pub mod colmap;
pub mod pycolmap;

use crate::error::{Error, Result};
use crate::io::colmap_model::{model_folders, Reconstruction, MODEL_IMAGES_FILE};
use serde::Serialize;
use std::path::Path;

pub use colmap::{
    colmap_available, colmap_exe, run_bundle_adjuster, run_colmap, run_colmap_stdout,
    run_point_filtering, run_point_triangulator, Adjusted, BundleTermination,
    COLMAP_NO_MODEL_MESSAGE,
};

/// Lines of a mapper's stderr a failure message quotes (its end, where the error is).
const STDERR_TAIL_LINES: usize = 15;

/// The last [`STDERR_TAIL_LINES`] lines a failed mapper process wrote on stderr, or, when it
/// wrote none, a sentence saying so (the message ended in an empty reason, issue 55).
pub fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().rev().take(STDERR_TAIL_LINES).collect();
    let tail = lines.into_iter().rev().collect::<Vec<_>>().join("\n");
    if tail.trim().is_empty() {
        "(it wrote nothing on stderr: a crash, a kill or a wrapper that hid the reason)".into()
    } else {
        tail
    }
}

/// A mapper's process (`colmap`, or a Python running pycolmap) that ends with descl: on Linux
/// the kernel kills it when the thread that started it dies (`PR_SET_PDEATHSIG`), so a descl
/// killed with SIGKILL leaves no mapper running on into a staging folder (issue 55). The
/// command is always run to completion by that thread (`output`), which outlives it otherwise.
pub fn mapper_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    #[allow(unused_mut)]
    let mut cmd = std::process::Command::new(program);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid, _exit), allocating nothing.
        let parent = std::process::id() as libc::pid_t;
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // descl died between the fork and the prctl: the signal would never come.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd
}

/// One way of mapping a database into COLMAP's model folders (`0/`, `1/`, … each holding
/// `cameras.bin`, `images.bin`, `points3D.bin`), with [`MapperOptions`]' settings.
pub trait Mapper: Sync {
    /// The mapper's name in reports and on the command line (`--mapper`): "colmap",
    /// "pycolmap".
    fn name(&self) -> &'static str;

    /// The mapper and its version for a report ("colmap", "pycolmap 4.2.1"), checking that it
    /// can run: called before any work, so a missing mapper is refused first.
    fn describe(&self) -> Result<String>;

    /// Maps `database` (images under `image_dir`) into `output_dir`, which must hold no model
    /// yet ([`refuse_earlier_models`]), and returns the largest model it made.
    /// [`Error::NoModel`] when it made none (a failed initialisation), any other error as it is.
    fn run(
        &self,
        database: &Path,
        image_dir: &Path,
        output_dir: &Path,
        options: &MapperOptions,
    ) -> Result<Reconstruction>;

    /// What a user whose database this mapper could not map may try instead (appended to
    /// [`crate::sfm::map`]'s no-model error); empty when there is nothing to say.
    fn no_model_hint(&self) -> &'static str {
        ""
    }
}

/// Which mapper maps a database, as a value: what `--mapper` chooses, what options and reports
/// carry (`"mapper": "colmap"` in JSON). [`MapperKind::mapper`] is the one place it becomes a
/// [`Mapper`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapperKind {
    /// `colmap mapper` ([`colmap::colmap_exe`]; Debian's COLMAP 3.8).
    #[default]
    Colmap,
    /// pycolmap's `incremental_mapping`, run by `$DESCL_PYTHON` or `python3`.
    Pycolmap,
    /// pycolmap's `global_mapping` (GLOMAP), run as [`MapperKind::Pycolmap`].
    PycolmapGlobal,
}

impl MapperKind {
    /// The mapper this kind names.
    pub fn mapper(self) -> &'static dyn Mapper {
        match self {
            MapperKind::Colmap => &colmap::ColmapMapper,
            MapperKind::Pycolmap => &pycolmap::PycolmapMapper,
            MapperKind::PycolmapGlobal => &pycolmap::PycolmapGlobalMapper,
        }
    }

    /// [`Mapper::describe`] of [`MapperKind::mapper`].
    pub fn describe(self) -> Result<String> {
        self.mapper().describe()
    }

    /// [`Mapper::name`] of [`MapperKind::mapper`].
    pub fn name(self) -> &'static str {
        self.mapper().name()
    }
}

/// Options passed to the mapper (`colmap mapper`, or pycolmap's with the same names).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MapperOptions {
    /// The mapper that runs.
    pub mapper: MapperKind,
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
    /// Hold every camera's focal length and distortion as the database gives them
    /// (`--Mapper.ba_refine_focal_length 0 --Mapper.ba_refine_extra_params 0`, and the same
    /// in the refinement's bundle adjustment; the principal point is held unless
    /// [`MapperOptions::refine_principal_point`]): cameras the user calibrated
    /// (`descl sfm --camera-params`, `--cameras-file`, `descl sfm map --hold-intrinsics`).
    pub hold_intrinsics: bool,
}

impl MapperOptions {
    /// Whether the mapping runs the `colmap` executable: COLMAP 3.8's mapper, or the
    /// refinement (`point_filtering`, `bundle_adjuster`, `point_triangulator`) after any mapper.
    /// pycolmap's mappers alone need only the Python.
    pub fn needs_colmap(&self) -> bool {
        self.mapper == MapperKind::Colmap || self.refine
    }
}

/// COLMAP's `Mapper.min_num_matches` (`IncrementalMapperController::Options`): the fewest
/// verified matches of an image pair that the mapper's correspondence graph takes in.
pub const COLMAP_MAPPER_MIN_NUM_MATCHES: usize = 15;

/// COLMAP's `Mapper.filter_max_reproj_error` (`IncrementalMapper::Options`, pixels): the
/// largest reprojection error an observation keeps after bundle adjustment.
pub const COLMAP_FILTER_MAX_REPROJ_ERROR_PX: f64 = 4.0;

/// COLMAP's `Mapper.init_min_tri_angle` (`IncrementalMapper::Options`, degrees): the smallest
/// median triangulation angle of an initial image pair.
pub const COLMAP_INIT_MIN_TRI_ANGLE_DEG: f64 = 16.0;

/// Runs the mapper of `options` ([`MapperOptions::mapper`]) and returns the largest model it
/// produced (most registered images). `output_dir` must hold no model yet: the mapper numbers
/// its models from 0 and a folder left by an earlier run would be read as this run's.
/// [`Error::NoModel`] when the mapper made none.
pub fn run_mapper(
    database: &Path,
    image_dir: &Path,
    output_dir: &Path,
    options: &MapperOptions,
) -> Result<Reconstruction> {
    options
        .mapper
        .mapper()
        .run(database, image_dir, output_dir, options)
}

/// Creates `dir` for a command's models (`what` it does: "map", "triangulate"), refusing one
/// that holds a model already (itself, or a numbered model folder): the command would write
/// beside or over it, and the model read back could be the earlier run's.
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

#[cfg(test)]
mod tests {
    /// A mapper that wrote nothing on stderr is said to have (the message used to end in
    /// "failed (exit status: 1):" and nothing); otherwise the last lines are quoted, in order.
    #[test]
    fn a_failure_quotes_the_end_of_stderr_or_says_there_was_none() {
        assert!(super::stderr_tail(b"").contains("wrote nothing on stderr"));
        assert!(super::stderr_tail(b"\n  \n").contains("wrote nothing on stderr"));
        let lines: Vec<String> = (0..20).map(|i| format!("line {i}")).collect();
        let tail = super::stderr_tail(lines.join("\n").as_bytes());
        assert_eq!(tail, lines[20 - super::STDERR_TAIL_LINES..].join("\n"));
    }
}
