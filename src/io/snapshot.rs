//! The files a run reads, as they were when it began reading them.
//!
//! A set is read file by file, some files more than once (retrieval reads every image's
//! descriptors for the codebook, then again for the aggregation), while another run may be
//! writing into the same folder. Every writer of descl replaces a file by renaming a complete
//! one over it, so no single read is torn; a *set* read across such a replacement is, though:
//! some files of the earlier extraction, some of the later one, a mix that no extraction made
//! and that no check of the plan, done before the reads, can see (issue 55's seed 630840: a
//! `pairs --retrieval` beside an `extract` of other settings wrote pairs chosen from such a
//! mix). An output that records no identity of what it was made from (a pairs file) must
//! therefore check, once its work is done, that nothing it read changed meanwhile.
//!
//! A [`Snapshot`] is taken *before* the first read, so a replacement at any moment between the
//! snapshot and [`Snapshot::check_unchanged`] is seen: a rename gives the path another inode,
//! a write in place another length or modification time.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// What tells a file's content apart without reading it: the file (device, inode), its length
/// and its last modification (seconds and nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

/// The stamp of `path` (following links, as the reads do), or None when nothing is there.
fn stamp(path: &Path) -> Result<Option<Stamp>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Stamp::of(&m))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

impl Stamp {
    #[cfg(unix)]
    fn of(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }

    #[cfg(not(unix))]
    fn of(m: &std::fs::Metadata) -> Stamp {
        let since = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .unwrap_or_default();
        Stamp {
            dev: 0,
            ino: 0,
            len: m.len(),
            mtime: (since.as_secs() as i64, i64::from(since.subsec_nanos())),
        }
    }
}

/// The stamps of the files a run is about to read (a file that is not there yet, such as a
/// plan, is recorded as absent: its appearance is a change too).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    files: Vec<(PathBuf, Option<Stamp>)>,
}

impl Snapshot {
    /// The stamps of `paths`, each once.
    pub fn take(paths: impl IntoIterator<Item = PathBuf>) -> Result<Snapshot> {
        let mut files: Vec<PathBuf> = paths.into_iter().collect();
        files.sort();
        files.dedup();
        let files = files
            .into_iter()
            .map(|p| stamp(&p).map(|s| (p, s)))
            .collect::<Result<_>>()?;
        Ok(Snapshot { files })
    }

    /// Refused, naming the first file that changed and `folder`, when any file of the
    /// snapshot was replaced, written, removed or created since it was taken.
    pub fn check_unchanged(&self, folder: &Path) -> Result<()> {
        self.changed(folder, "so nothing was written")
    }

    /// [`Snapshot::check_unchanged`] for a run whose outputs were written as it went (`descl
    /// match --images`): each records the features it was made from, so the next run redoes
    /// those the change made stale, but this one must not report success (hostile round of
    /// 9628fb4, H-1: a match re-reading features files as an extraction replaced them exited
    /// 0 with pairs of two sets).
    pub fn check_unchanged_after_writing(&self, folder: &Path) -> Result<()> {
        self.changed(
            folder,
            "the outputs written meanwhile record the features they were made from, and the next run redoes those made stale",
        )
    }

    fn changed(&self, folder: &Path, outputs: &str) -> Result<()> {
        for (path, then) in &self.files {
            if stamp(path)? != *then {
                return Err(Error::InvalidInput(format!(
                    "{}: changed while descl read the set of {} (another run writing into the folder?); what was read mixes two states of the set, {outputs}. Run again once the other run is done",
                    path.display(),
                    folder.display()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_sees_every_kind_of_change_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, plan) = (
            dir.path().join("a.npz"),
            dir.path().join("b.npz"),
            dir.path().join("plan.json"),
        );
        std::fs::write(&a, b"first").unwrap();
        std::fs::write(&b, b"second").unwrap();
        let take = || Snapshot::take([a.clone(), b.clone(), plan.clone(), a.clone()]).unwrap();
        // Unchanged (and read: reading is no change).
        let snapshot = take();
        assert_eq!(std::fs::read(&a).unwrap(), b"first");
        snapshot.check_unchanged(dir.path()).unwrap();
        // Replaced by a rename, as descl's writers replace a file: same length, same content.
        let snapshot = take();
        let other = dir.path().join("other");
        std::fs::write(&other, b"first").unwrap();
        std::fs::rename(&other, &a).unwrap();
        let err = snapshot
            .check_unchanged(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.npz") && err.contains("changed while"),
            "{err}"
        );
        // Written in place, to another length.
        let snapshot = take();
        std::fs::write(&b, b"second, longer").unwrap();
        let err = snapshot
            .check_unchanged(dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("b.npz"), "{err}");
        // A file that was absent appears; a file that was there goes.
        let snapshot = take();
        std::fs::write(&plan, b"{}").unwrap();
        assert!(snapshot.check_unchanged(dir.path()).is_err());
        let snapshot = take();
        std::fs::remove_file(&plan).unwrap();
        assert!(snapshot.check_unchanged(dir.path()).is_err());
    }
}
