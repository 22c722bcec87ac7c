//! The scratch folders `descl bench sfm` builds its databases and models in, under the system's
//! temporary folder. A folder is removed when its run ends, but a killed run (SIGKILL, a
//! cluster's time limit) never gets there and used to leave ~19 MB per scene behind (issue 57).
//! Each folder's name therefore carries its process id, and the next run removes the folders
//! whose process is gone before it makes its own.

use crate::error::{Error, Result};
use std::path::Path;

/// The start of every scratch folder's name: `descl-bench-sfm-<pid>-<random>`.
pub const SFM_SCRATCH_PREFIX: &str = "descl-bench-sfm-";

/// Where Linux lists running processes by id.
const PROC: &str = "/proc";

/// A fresh scratch folder in `tmp`, removed when dropped, after removing the scratch folders of
/// runs that no longer exist. Folders of a live process, and names without a process id, stay.
pub fn sfm_scratch_folder(tmp: &Path) -> Result<tempfile::TempDir> {
    remove_stale(tmp);
    tempfile::Builder::new()
        .prefix(&format!("{SFM_SCRATCH_PREFIX}{}-", std::process::id()))
        .tempdir_in(tmp)
        .map_err(|e| Error::io(tmp, e))
}

/// The process id in a scratch folder's name, if it is one.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(SFM_SCRATCH_PREFIX)?;
    let (pid, random) = rest.split_once('-')?;
    (!random.is_empty()).then_some(())?;
    pid.parse().ok()
}

/// Removes the scratch folders in `tmp` whose process is gone. Best effort: a folder that cannot
/// be read or removed (another user's) is left as it is.
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && !Path::new(PROC).join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_process_id() {
        assert_eq!(owner("descl-bench-sfm-123-abC9"), Some(123));
        assert_eq!(owner("descl-bench-sfm-abC9x"), None);
        assert_eq!(owner("descl-bench-sfm-123-"), None);
        assert_eq!(owner("other-123-abc"), None);
    }

    /// A killed run's folder (its process gone) is removed by the next run; a live process's
    /// folder, and a folder without a process id, stay.
    #[test]
    fn the_next_run_removes_a_killed_runs_folder() {
        let tmp = tempfile::tempdir().unwrap();
        // A process id that is gone: a child that has exited and been waited for.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let killed = tmp
            .path()
            .join(format!("{SFM_SCRATCH_PREFIX}{dead}-x1y2z3"));
        std::fs::create_dir_all(killed.join("sparse/0")).unwrap();
        std::fs::write(killed.join("database.db"), vec![0u8; 4096]).unwrap();
        let live = tmp
            .path()
            .join(format!("{SFM_SCRATCH_PREFIX}{}-a1b2c3", std::process::id()));
        std::fs::create_dir(&live).unwrap();
        let old_style = tmp.path().join(format!("{SFM_SCRATCH_PREFIX}q7r8s9"));
        std::fs::create_dir(&old_style).unwrap();

        let fresh = sfm_scratch_folder(tmp.path()).unwrap();
        assert!(!killed.exists(), "the killed run's folder is still there");
        assert!(live.is_dir() && old_style.is_dir());
        assert_eq!(
            owner(&fresh.path().file_name().unwrap().to_string_lossy()),
            Some(std::process::id())
        );
        let kept = fresh.path().to_path_buf();
        drop(fresh);
        assert!(!kept.exists());
    }
}
