//! Bounded reads of input files: the one way descl reads a file a user names (a pairs file, an
//! intrinsics file, a model card, an `.npz` archive, a dataset's text files).
//!
//! Two rules, so that no input hangs a run or takes unbounded memory:
//! - **regular files only**: a FIFO blocks its `open` until a writer comes (forever, on a
//!   cluster node), a device such as `/dev/zero` never ends, a folder is not a file. The file is
//!   opened non-blocking and its type checked on the open handle (`fstat`), so a FIFO is refused
//!   at once and nothing can be swapped in between the check and the read.
//! - **a size limit per kind of file**, named by the caller's constant (with the reason for its
//!   number): the size the file system reports is checked before reading, and the bytes actually
//!   read are counted again (a file may grow while it is read).

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// What [`open_regular`] says of anything that is not a regular file.
pub const NOT_REGULAR: &str = "not a regular file (a folder, device or FIFO)";

/// Opens `path` for reading if it is a regular file (following symbolic links); a folder, a
/// device or a FIFO is [`Error::Format`] naming it, at once.
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer. Regular files
    // ignore the flag.
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::format(path, NOT_REGULAR));
    }
    Ok(file)
}

/// The bytes of the regular file `path`, refused (naming the file, `what` it is and `limit`)
/// when it holds more than `limit` bytes.
pub fn read_bytes(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let file = open_regular(path)?;
    let too_large = |len: u64| {
        Error::format(
            path,
            format!("{what} too large: {len} bytes, the limit is {limit}"),
        )
    };
    let declared = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if declared > limit {
        return Err(too_large(declared));
    }
    let mut bytes = Vec::with_capacity(declared as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The byte-order mark some editors (Windows') put at the start of a UTF-8 file.
pub const UTF8_BOM: char = '\u{feff}';

/// [`read_bytes`] of a UTF-8 text file, without a leading [`UTF8_BOM`]: it is no part of the
/// text (a pairs file's or a cameras file's first name; hostile round of c29952d, L1).
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String> {
    let mut text = String::from_utf8(read_bytes(path, limit, what)?).map_err(|e| {
        Error::format(
            path,
            format!(
                "{what} is not UTF-8 text: invalid byte at offset {}",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    if text.starts_with(UTF8_BOM) {
        text.drain(..UTF8_BOM.len_utf8());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "a.png b.png\n").unwrap();
        assert_eq!(read_text(&p, 12, "pairs file").unwrap(), "a.png b.png\n");
        let e = read_text(&p, 11, "pairs file").unwrap_err().to_string();
        assert!(
            e.contains("a.txt") && e.contains("too large: 12 bytes") && e.contains("limit is 11"),
            "{e}"
        );
        // A sparse file far beyond the limit is refused from its size, not read.
        let big = dir.path().join("big.txt");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let e = read_bytes(&big, 1 << 20, "pairs file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("big.txt") && e.contains("1099511627776 bytes"),
            "{e}"
        );
        for special in [dir.path(), Path::new("/dev/zero")] {
            let e = read_text(special, 1 << 20, "pairs file")
                .unwrap_err()
                .to_string();
            assert!(e.contains(NOT_REGULAR), "{e}");
        }
        std::fs::write(&p, b"caf\xe9\n").unwrap();
        let e = read_text(&p, 100, "pairs file").unwrap_err().to_string();
        assert!(e.contains("UTF-8") && e.contains("offset 3"), "{e}");
        let e = read_text(&dir.path().join("none"), 100, "pairs file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("none"), "{e}");
    }

    #[test]
    #[cfg(unix)]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pairs.txt");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Without a writer, a blocking open would never return.
        let e = read_text(&fifo, 100, "pairs file").unwrap_err().to_string();
        assert!(e.contains("pairs.txt") && e.contains(NOT_REGULAR), "{e}");
    }
}
