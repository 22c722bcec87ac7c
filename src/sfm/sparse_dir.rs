//! The output folder of a mapping, checked before any work (`descl sfm --reconstruct`, `descl
//! sfm map`): where the models go by default, what may already be there, and that COLMAP runs.
//! Apart from [`crate::sfm::map`] because the command line calls these checks before
//! extracting anything.

use super::mapper::{colmap_available, colmap_exe, MapperOptions};
use crate::error::{Error, Result};
use crate::io::colmap_model::{entries_not_the_mappers, model_folders};
use std::path::{Path, PathBuf};

/// The folder of [`map`]'s models when none is given: `<database stem>-sparse` beside the
/// database (`scene.db` → `scene-sparse`).
pub fn default_sparse_dir(database: &Path) -> PathBuf {
    let stem = database
        .file_stem()
        .map_or("colmap".into(), |s| s.to_string_lossy());
    database.with_file_name(format!("{stem}-sparse"))
}

/// Checks, before any work, what `descl sfm IMAGES` writes: a run must not fail at its end for
/// its output or its mapper. The database must be new (or `overwrite`) and writable; with a
/// reconstruction into `sparse` mapped as `options` say, that folder must take the models
/// ([`check_sparse_dir`]) and COLMAP must run where the mapping needs it
/// ([`MapperOptions::needs_colmap`]).
pub fn check_outputs(
    database: &Path,
    sparse: Option<&Path>,
    overwrite: bool,
    options: &MapperOptions,
) -> Result<()> {
    // First what no flag allows (a features file, a picture, a link there), then --overwrite.
    crate::io::atomic::check_writable(database, crate::io::atomic::OutputKind::Database)?;
    if database.exists() && !overwrite {
        return Err(Error::InvalidInput(format!(
            "{}: database already exists (pass --overwrite to replace it)",
            database.display()
        )));
    }
    let Some(sparse) = sparse else {
        return Ok(());
    };
    crate::io::atomic::check_distinct_outputs(&[
        ("--database", database),
        ("--sparse-dir", sparse),
    ])?;
    check_sparse_dir(sparse, overwrite)?;
    require_colmap(options, "--reconstruct")
}

/// That `colmap` ([`crate::sfm::mapper::colmap_exe`]) starts, checked before any work by
/// the commands that map (`what`: "--reconstruct", "descl sfm map") when the mapping needs it
/// ([`MapperOptions::needs_colmap`]).
pub fn require_colmap(options: &MapperOptions, what: &str) -> Result<()> {
    if options.needs_colmap() && !colmap_available() {
        return Err(Error::InvalidInput(format!(
            "{what}: cannot run `{}`; install COLMAP (Debian: apt install colmap) or set DESCL_COLMAP to its executable",
            colmap_exe().display()
        )));
    }
    Ok(())
}

/// A models' folder that does not exist yet must be one descl can make: its nearest existing
/// ancestor a folder that takes a new folder (a probe made and removed at once). `--sparse-dir
/// FILE/sp` or `/proc/x` failed only after the extraction and matching, with the database
/// written (hostile round of 564787c, M1).
fn check_can_create(out: &Path) -> Result<()> {
    let absolute = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    let Some(base) = absolute.ancestors().skip(1).find(|a| a.exists()) else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Error::InvalidInput(format!(
            "{}: the models' folder cannot be made there: {why}; choose another folder",
            out.display()
        )))
    };
    if !base.is_dir() {
        return refuse(format!("{} is not a folder", base.display()));
    }
    let probe = base.join(format!(".descl-probe-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&probe) {
        return refuse(format!("{}: {e}", base.display()));
    }
    // Removing the empty probe cannot lose anything; a failure leaves an empty folder.
    let _ = std::fs::remove_dir(&probe);
    Ok(())
}

/// Whether `out` can take [`map`]'s models, checked by `descl sfm` before any extraction and
/// by [`map`] itself: a folder or nothing yet (not a file), holding no entry named as the
/// mapper names its models (0, 1, …) other than, with `overwrite`, earlier models (numbered
/// folders with `images.bin` holding only the mapper's files, which [`map`] then removes).
pub fn check_sparse_dir(out: &Path, overwrite: bool) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{}: not a folder (the mapper's models go into a folder)",
            out.display()
        )));
    }
    if !out.exists() {
        return check_can_create(out);
    }
    let models = model_folders(out)?;
    for taken in numbered_entries(out)? {
        let model = models.contains(&taken);
        if model && overwrite {
            let foreign = entries_not_the_mappers(&taken)?;
            if foreign.is_empty() {
                continue;
            }
            return Err(Error::InvalidInput(format!(
                "{}: this earlier model also holds {}, which no mapper writes and which --overwrite would remove with the model. Move {} out, or map into another folder",
                taken.display(),
                crate::io::plan::listing(&foreign),
                if foreign.len() == 1 { "it" } else { "them" },
            )));
        }
        return Err(Error::InvalidInput(if model {
            format!(
                "{}: holds a model of an earlier run; pass --overwrite to replace it, remove it or map into another folder",
                taken.display()
            )
        } else {
            format!(
                "{}: named as the mapper names its models, but not one; remove it or map into another folder",
                taken.display()
            )
        }));
    }
    Ok(())
}

/// Entries of `dir` named as `colmap mapper` names its models (a number), model or not.
fn numbered_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}
