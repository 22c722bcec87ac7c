//! Atomic file writes: output appears complete or not at all, never partially written.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Writes a file atomically: `write` fills a temporary file in the destination's folder, which
/// is renamed over `path` only once `write` succeeded and the data is flushed. On any error no
/// file appears at `path` (an existing file is left untouched).
pub fn write_atomic<F>(path: &Path, write: F) -> Result<()>
where
    F: FnOnce(&mut std::io::BufWriter<&mut std::fs::File>) -> Result<()>,
{
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".descl-tmp-")
        .tempfile_in(dir)
        .map_err(|e| Error::io(path, e))?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        write(&mut w)?;
        w.flush().map_err(|e| Error::io(path, e))?;
    }
    tmp.as_file().sync_all().map_err(|e| Error::io(path, e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// [`write_atomic`] for bytes already in memory.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes).map_err(|e| Error::io(path, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_write_leaves_no_file() {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::io("tmp", e))
            .unwrap();
        let target = dir.path().join("out.bin");
        let r = write_atomic(&target, |w| {
            w.write_all(b"partial").map_err(|e| Error::io("x", e))?;
            Err(Error::InvalidInput("boom".into()))
        });
        assert!(r.is_err());
        assert!(!target.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temporary file left behind"
        );
        write_bytes_atomic(&target, b"ok").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"ok");
    }

    #[test]
    fn unwritable_folder_is_an_error_naming_the_file() {
        let target = Path::new("/nonexistent-descl-dir/out.npz");
        let e = write_bytes_atomic(target, b"x").unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent-descl-dir/out.npz"),
            "{e}"
        );
    }
}
