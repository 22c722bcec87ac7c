//! Atomic file writes: output appears complete or not at all, never partially written.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// First characters of every temporary file descl writes beside an output.
pub const TMP_PREFIX: &str = ".descl-tmp-";

/// The folder a file at `path` goes into (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new temporary file in `path`'s folder (so that renaming it onto `path` is atomic), named
/// [`TMP_PREFIX`] + `tag` + random characters + `suffix`. Created with mode 0666 less the user's
/// umask, as any other program's output (tempfile's own default, 0600, would make every output
/// private). Errors name `path`.
pub(crate) fn temp_beside(path: &Path, tag: &str, suffix: &str) -> Result<tempfile::NamedTempFile> {
    check_replaceable(path)?;
    let prefix = format!("{TMP_PREFIX}{tag}");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(suffix);
    #[cfg(unix)]
    builder.permissions(output_permissions());
    builder
        .tempfile_in(parent_dir(path))
        .map_err(|e| Error::io(path, e))
}

/// Writes a file atomically: `write` fills a temporary file in the destination's folder, which
/// is renamed over `path` only once `write` succeeded and the data is flushed. On any error no
/// file appears at `path` (an existing file is left untouched).
pub fn write_atomic<F>(path: &Path, write: F) -> Result<()>
where
    F: FnOnce(&mut std::io::BufWriter<&mut std::fs::File>) -> Result<()>,
{
    let mut tmp = temp_beside(path, &tmp_tag(path), "")?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        write(&mut w)?;
        w.flush().map_err(|e| Error::io(path, e))?;
    }
    tmp.as_file().sync_all().map_err(|e| Error::io(path, e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// Mode of a new output file before the umask: read and write for everyone (the umask takes
/// away what the user wants taken away).
#[cfg(unix)]
pub const OUTPUT_MODE: u32 = 0o666;

#[cfg(unix)]
fn output_permissions() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(OUTPUT_MODE)
}

/// Where `path` is or would be: its longest existing ancestor canonicalised (links resolved)
/// and the rest appended, so that an output not written yet compares with the folders it must
/// stay out of.
pub fn resolved_path(path: &Path) -> std::path::PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for base in absolute.ancestors() {
        if let Ok(real) = base.canonicalize() {
            let rest = absolute.strip_prefix(base).unwrap_or(Path::new(""));
            return real.join(rest);
        }
    }
    absolute
}

/// Refuses an output path that holds something other than a regular file: a link, a device
/// (`/dev/null`), a FIFO or a socket. An output is written beside its path and renamed onto
/// it, which replaces the link or the device itself, not what it leads to: as root, `--json
/// /dev/null` turned the system's /dev/null into a file, and a link to a database escaped the
/// lock of the database it points to (issue 55). A FIFO would also block the content checks
/// that open an existing output. Nothing there, or a regular file, passes.
pub fn check_replaceable(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let kind = meta.file_type();
    let what = if kind.is_symlink() {
        let to = std::fs::read_link(path)
            .map(|t| format!(" to {}", t.display()))
            .unwrap_or_default();
        format!("a link{to}: descl replaces an output whole and would replace the link, not write through it; give the path of the file itself")
    } else if kind.is_file() || kind.is_dir() {
        return Ok(());
    } else {
        "not a regular file (a device, FIFO or socket): descl writes each output as a regular file, renamed into place, so give a file path".to_string()
    };
    Err(Error::InvalidInput(format!("{}: {what}", path.display())))
}

/// The kinds of output that [`check_writable`] guards, each replacing only an earlier file of
/// its own kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// A pairs list (`descl pairs --out`): replaces a pairs list ([`is_earlier_text_output`]).
    PairsList,
    /// A JSON report (`descl bench --json`): replaces a report of descl's.
    JsonReport,
    /// A Markdown report (`descl bench --md`): replaces a report of descl's.
    MarkdownReport,
    /// A matches `.npz` (`descl match A B --out`): replaces a matches file, or a file of no
    /// kind descl knows that is empty.
    Matches,
    /// A COLMAP database: replaces a SQLite file, or an empty file.
    Database,
    /// A features `.npz` (`descl extract`): replaces a features file, or an empty file; never
    /// a user's numpy archive or another file of that name (issue 55).
    Features,
}

impl OutputKind {
    fn name(self) -> &'static str {
        match self {
            OutputKind::PairsList => "pairs list",
            OutputKind::JsonReport => "JSON report",
            OutputKind::MarkdownReport => "Markdown report",
            OutputKind::Matches => "matches file",
            OutputKind::Database => "database",
            OutputKind::Features => "features file",
        }
    }
}

/// Checks before any work that a file of `kind` can be written at `path` (its folder exists
/// and takes a new file), so a run does not fail at its last step with some outputs already
/// written; and that it would replace nothing of another kind: a picture
/// ([`check_not_a_picture`]), nor a features file, a COLMAP database or an HDF5 file of
/// another kind ([`check_not_another_kind`]).
pub fn check_writable(path: &Path, kind: OutputKind) -> Result<()> {
    if !matches!(kind, OutputKind::Matches | OutputKind::Features) {
        check_not_named_as_npz(path, kind.name())?;
    }
    check_writable_picture(path)?;
    check_not_a_picture(path)?;
    check_not_another_kind(path, kind)
}

/// Refuses an output of another kind (`what`: a database, a list, a match picture) named
/// `*.npz`: in a features folder it would be read as one of its features files (`descl pairs
/// FEATS --out FEATS/x.npz` poisoned the folder for the next run, issue 55).
pub fn check_not_named_as_npz(path: &Path, what: &str) -> Result<()> {
    let npz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npz"));
    if npz {
        return Err(Error::InvalidInput(format!(
            "{}: a {what} named as a features or matches file (.npz); descl reads every .npz of a folder as one, so give the {what} another extension",
            path.display()
        )));
    }
    Ok(())
}

/// The array names of a numpy archive, as far as they can be read (none in the format core
/// without the `full` feature, which reads no `.npz`).
#[cfg(feature = "full")]
fn npz_members(path: &Path) -> Vec<String> {
    crate::io::npz::npz_member_names(path).unwrap_or_default()
}

#[cfg(not(feature = "full"))]
fn npz_members(_path: &Path) -> Vec<String> {
    Vec::new()
}

/// The arrays of descl's matches file ([`crate::io::matches`]); `inliers` and `model` only
/// where the pair was verified.
#[cfg_attr(not(feature = "full"), allow(dead_code))]
pub(crate) const MATCHES_MEMBERS: [&str; 5] = ["matches", "distances", "inliers", "model", "meta"];
/// The arrays every matches file of descl's holds, verified or not (`--geometry none`, too
/// few inliers): what tells it from an archive of another tool's with a `matches` array
/// (SuperGlue's `*_matches.npz`; hostile round of c29952d, H2, and its regression F10 of the
/// next round, which took descl's own unverified pairs for another tool's).
const MATCHES_ALWAYS: [&str; 3] = ["matches", "distances", "meta"];
/// The arrays of descl's features file ([`crate::io::features`]).
pub(crate) const FEATURES_MEMBERS: [&str; 4] = ["frames", "scores", "descriptors", "meta"];

/// Whether an archive of `members` holds every array of `wanted`.
fn has_all(members: &[String], wanted: &[&str]) -> bool {
    wanted.iter().all(|w| members.iter().any(|m| m == w))
}

/// Refuses to replace an existing file that is not an earlier output of `kind`: a features
/// file replaced by matches or a pairs list, a 15 MB COLMAP database by a pairs list, a
/// features.h5 by a report, a user's notes by a database — each exited 0 before (issue 55).
/// Recognised by content: SQLite's and HDF5's signatures, a numpy archive's member names.
pub fn check_not_another_kind(path: &Path, kind: OutputKind) -> Result<()> {
    use std::io::Read;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    if !meta.is_file() || meta.len() == 0 {
        return Ok(());
    }
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| Error::io(path, e))?;
    let head = &head[..n];
    let found = if head.starts_with(b"SQLite format 3\0") {
        Some(("SQLite database", kind == OutputKind::Database))
    } else if head.starts_with(b"\x89HDF\r\n\x1a\n") {
        Some(("HDF5 file (hloc's features or matches?)", false))
    } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        let members = npz_members(path);
        if members.is_empty() {
            // An archive cut short (a killed writer of another tool, a full disk): where a
            // features or matches file goes, most likely one, and made again as before.
            Some((
                "unreadable zip archive",
                matches!(kind, OutputKind::Features | OutputKind::Matches),
            ))
        } else if has_all(&members, &MATCHES_ALWAYS) {
            Some(("matches file", kind == OutputKind::Matches))
        } else if has_all(&members, &FEATURES_MEMBERS) {
            Some(("features file", kind == OutputKind::Features))
        } else {
            Some(("zip / numpy archive", false))
        }
    } else {
        None
    };
    let refused = match found {
        Some((what, false)) => Some(what),
        Some((_, true)) => None,
        // A file of no binary kind descl knows: a list or report replaces only an earlier one
        // (a rerun's), never the user's notes, a camera file or another command's report
        // (issue 55); a matches file or a database replaces only its own kind.
        None if is_earlier_text_output(path, kind) => None,
        None => Some("file that is no earlier output of this kind"),
    };
    match refused {
        Some(what) => Err(Error::InvalidInput(format!(
            "{}: an existing {what}; descl writes no {} over it, so choose another output path (or remove the file)",
            path.display(),
            kind.name()
        ))),
        None => Ok(()),
    }
}

/// How much of an existing text file is read to tell whether it is an earlier output of
/// descl's ([`is_earlier_text_output`]): a pairs list of millions of lines is judged by its
/// first ones.
const TEXT_SNIFF_BYTES: u64 = 64 * 1024;

/// The line a Markdown report of `descl bench` starts with (`BenchReport::markdown`).
pub const MARKDOWN_REPORT_START: &str = "Machine: ";
/// The key every JSON report of `descl bench` holds (`BenchReport`).
pub const JSON_REPORT_KEY: &str = "\"descl_version\"";

/// Whether the existing file `path` reads as an earlier text output of `kind`: a pairs list
/// (lines of two names, hloc's format, comments and blank lines allowed), a JSON report of
/// descl's (an object with [`JSON_REPORT_KEY`]) or a Markdown one (starting with
/// [`MARKDOWN_REPORT_START`]). Judged by the first [`TEXT_SNIFF_BYTES`].
fn is_earlier_text_output(path: &Path, kind: OutputKind) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|f| f.take(TEXT_SNIFF_BYTES).read_to_end(&mut head))
        .is_ok();
    let whole = std::fs::metadata(path).is_ok_and(|m| m.len() == head.len() as u64);
    // A character or line cut at the sniff's end is no evidence against the file.
    let text = match std::str::from_utf8(&head) {
        Ok(t) => t,
        Err(e) if !whole && e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    let text = text.trim_start_matches(crate::io::bounded::UTF8_BOM);
    match kind {
        _ if !read => false,
        OutputKind::PairsList => {
            let complete = match text.rfind('\n') {
                Some(end) if !whole => &text[..end],
                _ => text,
            };
            complete.lines().all(|line| {
                let words = line.split('#').next().unwrap_or_default();
                matches!(words.split_whitespace().count(), 0 | 2)
            })
        }
        // The report's first keys, as `BenchReport` writes them: a JSON that merely holds the
        // key, or a notes file starting "Machine:", is not one (hostile round of 3fe5bfb, F6).
        OutputKind::JsonReport => {
            let starts =
                |t: &str, prefix: &str| t.trim_start().strip_prefix(prefix).map(str::to_owned);
            starts(text, "{")
                .and_then(|t| starts(&t, JSON_REPORT_KEY))
                .is_some_and(|t| {
                    text.contains("\"command\": \"descl bench") && t.trim_start().starts_with(':')
                })
        }
        OutputKind::MarkdownReport => {
            let mut lines = text.lines();
            lines
                .next()
                .is_some_and(|l| l.starts_with(MARKDOWN_REPORT_START) && l.contains("; descl "))
                && lines.next().is_some_and(|l| l.starts_with("Protocol: "))
        }
        _ => false,
    }
}

/// [`check_writable`] for an output that is itself a picture (`descl match --viz`), which may
/// replace an earlier picture of its own; that it is none of the command's input pictures is
/// [`check_not_an_input`]'s to check.
pub fn check_writable_picture(path: &Path) -> Result<()> {
    check_replaceable(path)?;
    if path.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{}: is a folder, not a file name",
            path.display()
        )));
    }
    check_not_a_plan(path)?;
    temp_beside(path, "", "").map(drop)
}

/// The kind of picture a file's first bytes say it is (JPEG, PNG, GIF, TIFF, WebP, BMP with
/// its size field matching the file's, PNM `P1`–`P7` followed by a size), or None.
pub(crate) fn picture_kind(path: &Path) -> Option<&'static str> {
    use std::io::Read;
    let mut head = [0u8; 16];
    // Only a regular file is opened: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let n = file.read(&mut head).ok()?;
    let head = &head[..n];
    let starts = |sig: &[u8]| head.starts_with(sig);
    if starts(&[0xFF, 0xD8, 0xFF]) {
        Some("JPEG")
    } else if starts(b"\x89PNG\r\n\x1a\n") {
        Some("PNG")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some("GIF")
    } else if starts(b"II*\0") || starts(b"MM\0*") {
        Some("TIFF")
    } else if starts(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        Some("WebP")
    } else if starts(b"BM")
        && head
            .get(2..6)
            .is_some_and(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as u64 == len)
    {
        Some("BMP")
    } else if head.len() >= 4
        && head[0] == b'P'
        && (b'1'..=b'7').contains(&head[1])
        && head[2].is_ascii_whitespace()
        && head[3..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(u8::is_ascii_digit)
    {
        Some("PNM")
    } else {
        None
    }
}

/// Refuses to replace a picture with an output that is none (a pairs list, matches, a
/// database, a report): a picture at an output path is almost surely one of the user's
/// images, read by the command through a features file or not read at all, and `--overwrite`
/// or a rerun would destroy it with exit 0 (issue 55).
pub fn check_not_a_picture(path: &Path) -> Result<()> {
    if let Some(kind) = picture_kind(path) {
        return Err(Error::InvalidInput(format!(
            "{}: an existing {kind} picture; descl writes no list, matches, database or report over a picture, so choose another output path",
            path.display()
        )));
    }
    Ok(())
}

/// The plan of `descl extract` in its output folder (`io::plan`). Defined here, with the
/// writes that refuse to land on it, so that the atomic writes import no format.
pub const EXTRACT_PLAN_FILE: &str = "descl-extract-plan.json";
/// The plan of `descl match --out-dir` in its output folder (`io::plan`).
pub const MATCH_PLAN_FILE: &str = "descl-match-plan.json";

/// Refuses an output named as a run plan (`descl-extract-plan.json`, `descl-match-plan.json`):
/// a pairs file or matches written there would replace the plan of the folder's set, and the
/// next run would check the set against a file that is no plan.
fn check_not_a_plan(path: &Path) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str());
    if let Some(plan) = [EXTRACT_PLAN_FILE, MATCH_PLAN_FILE]
        .into_iter()
        .find(|p| name == Some(*p))
    {
        return Err(Error::InvalidInput(format!(
            "{}: {plan} is the name of the run plan that descl keeps beside a set's outputs; writing there would replace it, so choose another output name",
            path.display()
        )));
    }
    Ok(())
}

/// Refuses to write `output` when it is one of the command's `inputs` (the same file, by
/// device and inode, whatever the path): the run would destroy what it reads, and exit 0 over
/// it. An `output` that does not exist yet is no input.
pub fn check_not_an_input<P: AsRef<Path>>(
    output: &Path,
    inputs: impl IntoIterator<Item = P>,
) -> Result<()> {
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    for input in inputs {
        let input = input.as_ref();
        if std::fs::metadata(input).is_ok_and(|m| same_file(&m, &out)) {
            return Err(Error::InvalidInput(format!(
                "{}: is an input of this command ({}); writing it would destroy it, so choose another output path",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Refuses one command's outputs (`(flag, path)`) when two of them name one file, by path
/// (resolved as [`resolved_path`] resolves it) or, where both exist, by device and inode: the
/// second written would replace the first, and the run would exit 0 with one of them lost
/// (`match --out X --viz X`, `bench --json X --md X`: hostile round of 3fe5bfb, F5).
pub fn check_distinct_outputs(outputs: &[(&str, &Path)]) -> Result<()> {
    for (k, (flag_a, a)) in outputs.iter().enumerate() {
        for (flag_b, b) in &outputs[k + 1..] {
            let same_path = resolved_path(a) == resolved_path(b);
            let same_inode = matches!(
                (std::fs::metadata(a), std::fs::metadata(b)),
                (Ok(ma), Ok(mb)) if same_file(&ma, &mb)
            );
            if same_path || same_inode {
                return Err(Error::InvalidInput(format!(
                    "{flag_a} {} and {flag_b} {} name one file: the second output would replace the first, so give each its own path",
                    a.display(),
                    b.display()
                )));
            }
        }
    }
    Ok(())
}

fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// A new staging folder inside `dir`, named `prefix` + random characters: a run builds its
/// outputs there and renames them into place once complete. Errors name `dir`.
#[cfg(feature = "full")]
pub(crate) fn staging_dir(dir: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .map_err(|e| Error::io(dir, e))
}

/// Removes what a killed run left in `dir` under `prefix` (its [`staging_dir`] folders, or a
/// file of that name). Call it only under the lock such runs hold, so that no live run's
/// staging is taken. A failed removal is an error naming the path: the run would otherwise
/// go on beside a half-removed folder.
#[cfg(feature = "full")]
pub(crate) fn remove_stale_staging(dir: &Path, prefix: &str) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        // `DirEntry::file_type` does not follow links (and needs no second stat): a link
        // named so is removed, never followed.
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// [`write_atomic`] for bytes already in memory.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes).map_err(|e| Error::io(path, e)))
}

/// Suffix of the lock file beside an output being written by one run (a COLMAP database, an
/// HDF5 file): `<output>.lock`.
pub const LOCK_SUFFIX: &str = ".lock";

/// The most bytes of an output's file name that its temporaries' names repeat ([`tmp_tag`]):
/// with [`TMP_PREFIX`], the random characters and a suffix, a temporary's name stays under
/// the 255 bytes a file name may have, also for the longest output names (pair files of two
/// long image names).
const TMP_TAG_MAX_BYTES: usize = 100;

/// The most bytes of an extension that a shortened [`tmp_tag`] keeps.
const TMP_TAG_MAX_EXTENSION_BYTES: usize = 16;

#[cfg_attr(not(feature = "full"), allow(dead_code))] // used by the full toolkit's writers
/// The tag of an output's temporary files: `<file name>-`, so that they read
/// `.descl-tmp-<file name>-…` ([`TMP_PREFIX`]): a temporary names what it was to become, and a
/// run cleaning up after a killed one removes only the temporaries of its own outputs
/// ([`remove_stale_temporaries`], [`FolderLock`]). A name longer than [`TMP_TAG_MAX_BYTES`] is
/// cut short before its extension, which stays (`<start of the name>.npz-`), so the kind of
/// the output is known from every temporary's name. The temporary itself does not end with
/// the extension: a listing of `*.npz` files does not take it for an output.
pub(crate) fn tmp_tag(target: &Path) -> String {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    if name.len() <= TMP_TAG_MAX_BYTES {
        return format!("{name}-");
    }
    let ext = target
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .filter(|e| e.len() <= TMP_TAG_MAX_EXTENSION_BYTES + 1)
        .unwrap_or_default();
    let mut end = TMP_TAG_MAX_BYTES - ext.len();
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ext}-", &name[..end])
}

#[cfg_attr(not(feature = "full"), allow(dead_code))] // used by the full toolkit's writers
/// Whether `name` is the name of a temporary that [`write_atomic`] makes for a target named
/// `target_name`.
pub(crate) fn is_temporary_of(name: &str, target_name: &str) -> bool {
    name.strip_prefix(TMP_PREFIX)
        .is_some_and(|rest| rest.starts_with(&tmp_tag(Path::new(target_name))))
}

#[cfg_attr(not(feature = "full"), allow(dead_code))] // used by the full toolkit's writers
/// Whether `name` is the name of a temporary that [`write_atomic`] makes for a target whose
/// name ends with `.<extension>` (whatever its length: see [`tmp_tag`]).
pub(crate) fn is_temporary_with_extension(name: &str, extension: &str) -> bool {
    name.strip_prefix(TMP_PREFIX)
        .and_then(|rest| rest.rsplit_once('-'))
        .and_then(|(tag, _random)| tag.rsplit_once('.'))
        .is_some_and(|(_, ext)| ext == extension)
}

/// An exclusive lock on `<output>.lock`, for outputs that one run builds over time in a
/// temporary file (an OS file lock: released by the kernel when the process dies, so a killed
/// run never blocks the next one).
pub(crate) struct OutputLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

/// Opens (creating it if need be, never truncating: another run may hold it) a lock file.
#[cfg_attr(not(feature = "full"), allow(dead_code))]
fn open_lock_file(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

#[cfg_attr(not(feature = "full"), allow(dead_code))]
impl OutputLock {
    /// Takes the lock of `target`, or says that another run holds it (`hint`: what to do
    /// instead, e.g. "choose another --database").
    pub(crate) fn acquire(target: &Path, hint: &str) -> Result<OutputLock> {
        let (file, path) = take_lock(target, hint, false)?;
        Ok(OutputLock { file, path })
    }
}

/// The lock of `target` (`<target>.lock`), taken exclusively or `shared`, with its path; an
/// error naming `target` while another run holds it the other way (`hint`: what to do
/// instead).
#[cfg_attr(not(feature = "full"), allow(dead_code))]
fn take_lock(target: &Path, hint: &str, shared: bool) -> Result<(std::fs::File, PathBuf)> {
    let path = lock_path(target);
    for _ in 0..LOCK_TRIES {
        let file = open_lock_file(&path)?;
        let taken = match shared {
            true => file.try_lock_shared(),
            false => file.try_lock(),
        };
        match taken {
            // The holder removes the file as it leaves: a lock on the removed file, opened
            // just before, would lock nothing, and the next run would take a new one.
            Ok(()) if is_current(&file, &path) => return Ok((file, path)),
            Ok(()) => continue,
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::InvalidInput(format!(
                    "{}: another descl run is writing or reading this file (lock {}); wait for it or {hint}",
                    target.display(),
                    path.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
    }
    Err(lock_replaced(&path))
}

/// The lock file of `target`: `<target>.lock` beside it ([`OutputLock`], [`ReadLock`]).
fn lock_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(LOCK_SUFFIX);
    target.with_file_name(name)
}

/// A shared lock on `<input>.lock`, held by a run that reads `input` for a long time (`sfm
/// map` reads its database while the mapper runs): the [`OutputLock`] of a run that would
/// replace the file (`sfm merge --overwrite`, `sfm --overwrite`) is refused while any reader
/// holds it, and a reader is refused while a writer does; readers share it. Without it a
/// merge replaced the database under a running map, and both exited 0 with the model beside
/// the database of another one (issue 55). The last holder to leave removes the lock file, as
/// [`FolderLock`]'s does.
#[cfg_attr(not(feature = "full"), allow(dead_code))]
pub(crate) struct ReadLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

#[cfg_attr(not(feature = "full"), allow(dead_code))]
impl ReadLock {
    /// Shares the lock of `input` with its other readers, or says that a run writing it holds
    /// it (`hint`: what to do instead).
    pub(crate) fn share(input: &Path, hint: &str) -> Result<ReadLock> {
        let (file, path) = take_lock(input, hint, true)?;
        Ok(ReadLock { file, path })
    }
}

impl Drop for ReadLock {
    /// The last reader to leave (the one that can take the lock exclusively) removes the file.
    fn drop(&mut self) {
        if self.file.try_lock().is_ok() {
            // Best effort: a lock file left behind is harmless (the lock is the kernel's).
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

impl Drop for OutputLock {
    /// Removes the lock file, then releases the lock (also when the run failed: only a killed
    /// process leaves the file behind, and its lock is gone with it).
    fn drop(&mut self) {
        // Best effort: a lock file left behind is harmless (the lock is the kernel's).
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

#[cfg_attr(not(feature = "full"), allow(dead_code))] // used by the full toolkit's writers
/// Temporary files of earlier runs on `target` that were killed before finishing. Only called
/// with `target`'s [`OutputLock`] held, so none of them belongs to a live run.
pub(crate) fn remove_stale_temporaries(target: &Path) {
    let prefix = format!("{TMP_PREFIX}{}", tmp_tag(target));
    let Ok(entries) = std::fs::read_dir(parent_dir(target)) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Name of the lock file inside an output folder that several runs may write into at once
/// (npz shards of one folder, [`FolderLock`]).
pub const FOLDER_LOCK_FILE: &str = ".descl.lock";

/// How often [`OutputLock::acquire`] and [`FolderLock::share`] open the lock file again when
/// another run removed it between the open and the lock (each retry means that a run ended
/// meanwhile; reaching the limit means something keeps replacing the file).
#[cfg_attr(not(feature = "full"), allow(dead_code))]
const LOCK_TRIES: usize = 100;

/// The error of a lock file replaced [`LOCK_TRIES`] times while descl took it.
#[cfg_attr(not(feature = "full"), allow(dead_code))]
fn lock_replaced(path: &Path) -> Error {
    Error::InvalidInput(format!(
        "{}: the lock file was replaced {LOCK_TRIES} times while descl took it; is something else removing it?",
        path.display()
    ))
}

/// A shared lock on an output folder that runs write into side by side (npz shards run in
/// parallel, each writing its own files), held by each writing run for its whole life.
///
/// Shards cannot take an exclusive lock as a COLMAP database's run does ([`OutputLock`]), yet
/// a killed run's temporaries must go: a run that finds no other run holding the lock cleans
/// up alone, under the lock taken exclusively, and then shares it. A temporary is therefore
/// removed only when no live run can own it, and stale ones wait for the first run that has
/// the folder to itself. The lock file is removed by the last run to leave (the one that can
/// take it exclusively at the end); a run that opened the file just before it went sees that
/// the path names another file now and opens it again.
#[cfg(feature = "full")]
#[derive(Debug)]
pub(crate) struct FolderLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

#[cfg(feature = "full")]
impl FolderLock {
    /// Shares the lock of the folder `dir` with the other runs writing into it; when no other
    /// run holds it, `clean` runs first, alone (removing what killed runs left).
    pub(crate) fn share(dir: &Path, clean: impl Fn() -> Result<()>) -> Result<FolderLock> {
        let path = dir.join(FOLDER_LOCK_FILE);
        for _ in 0..LOCK_TRIES {
            let file = open_lock_file(&path)?;
            match file.try_lock() {
                Ok(()) if is_current(&file, &path) => clean()?,
                Ok(()) => continue,
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
            // Shared (from exclusive, or waiting for a run that is cleaning up to finish).
            file.lock_shared().map_err(|e| Error::io(&path, e))?;
            // The last run to leave removes the file under its exclusive lock; a lock on the
            // removed file would lock nothing.
            if is_current(&file, &path) {
                return Ok(FolderLock { file, path });
            }
        }
        Err(lock_replaced(&path))
    }
}

/// Whether `file` is still the file at `path` (not removed or replaced since it was opened).
#[cfg_attr(not(feature = "full"), allow(dead_code))]
fn is_current(file: &std::fs::File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => same_file(&a, &b) || cfg!(not(unix)),
        _ => false,
    }
}

#[cfg(feature = "full")]
impl Drop for FolderLock {
    /// The last run to leave (the one that can take the lock exclusively) removes the lock
    /// file; a failed attempt gives up the shared lock on Linux, which is being released anyway.
    fn drop(&mut self) {
        if self.file.try_lock().is_ok() {
            // Best effort: a lock file left behind is harmless (the lock is the kernel's).
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// Name of the lock file that serialises, for a moment, the runs joining one output folder
/// while each checks the others' claims and makes its own ([`RunClaim::join`]).
pub const CLAIMS_LOCK_FILE: &str = ".descl-claims.lock";
/// First characters of a run's claim on an output folder: `.descl-run-<plan key>.lock`.
pub const RUN_CLAIM_PREFIX: &str = ".descl-run-";

/// An exclusive lock held for a moment (waiting for it, unlike [`OutputLock`]): the file is
/// removed by its holder as it leaves, so a waiter woken on the removed file opens it again.
#[cfg(feature = "full")]
struct ShortLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

#[cfg(feature = "full")]
impl ShortLock {
    fn wait(path: &Path) -> Result<ShortLock> {
        for _ in 0..LOCK_TRIES {
            let file = open_lock_file(path)?;
            file.lock().map_err(|e| Error::io(path, e))?;
            if is_current(&file, path) {
                return Ok(ShortLock {
                    file,
                    path: path.to_path_buf(),
                });
            }
        }
        Err(lock_replaced(path))
    }
}

#[cfg(feature = "full")]
impl Drop for ShortLock {
    fn drop(&mut self) {
        // Best effort, as for the other locks: a file left behind is harmless.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// A run's claim on an output folder that runs share (npz folders): a lock file named by the
/// key of the run's plan, held shared by every run of that plan (the shards of one run) for
/// their whole life. A run of another plan (other settings, other images) joining while one
/// is held is refused before it writes anything: both would write their files and plans side
/// by side, and the folder would hold a mix with one run's results gone while both exit 0
/// (issue 55). Checking the others' claims and making one's own happen under
/// [`CLAIMS_LOCK_FILE`], so two runs of different plans started together cannot both pass.
/// The last holder to leave removes the file.
#[cfg(feature = "full")]
#[derive(Debug)]
pub struct RunClaim {
    file: std::fs::File,
    path: std::path::PathBuf,
}

#[cfg(feature = "full")]
impl RunClaim {
    /// Claims `dir` for the run whose plan has the key `key` (hex), described to other runs
    /// as `what` (its command and settings); refused, naming the folder, the other run and the
    /// way out, while a run of another key holds a claim there.
    pub fn join(dir: &Path, key: &str, what: &str) -> Result<RunClaim> {
        let _serial = ShortLock::wait(&dir.join(CLAIMS_LOCK_FILE))?;
        let own = format!("{RUN_CLAIM_PREFIX}{key}{LOCK_SUFFIX}");
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let name = entry.map_err(|e| Error::io(dir, e))?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(RUN_CLAIM_PREFIX) && name.ends_with(LOCK_SUFFIX) && name != own {
                check_other_claim(dir, &dir.join(name.as_ref()))?;
            }
        }
        let path = dir.join(own);
        for _ in 0..LOCK_TRIES {
            let file = open_lock_file(&path)?;
            file.lock_shared().map_err(|e| Error::io(&path, e))?;
            if !is_current(&file, &path) {
                continue;
            }
            // Every run of this key writes the same bytes.
            #[cfg(unix)]
            {
                use std::os::unix::fs::FileExt;
                file.write_all_at(what.as_bytes(), 0)
                    .map_err(|e| Error::io(&path, e))?;
            }
            return Ok(RunClaim { file, path });
        }
        Err(lock_replaced(&path))
    }
}

/// The claim `path` of another plan: refused while a live run holds it, removed when its run
/// is gone (killed). Called under [`CLAIMS_LOCK_FILE`].
#[cfg(feature = "full")]
fn check_other_claim(dir: &Path, path: &Path) -> Result<()> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    };
    match file.try_lock() {
        Ok(()) => {
            // No live run holds it: a killed run's, or one that has just left.
            let _ = std::fs::remove_file(path);
            let _ = file.unlock();
            Ok(())
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let what = std::fs::read_to_string(path).unwrap_or_default();
            Err(Error::InvalidInput(format!(
                "{}: another descl run with other settings or images is writing into this folder ({}); two runs of different plans in one folder would leave a mix of their files. Wait for it to finish, or write into another folder",
                dir.display(),
                what.trim()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

#[cfg(feature = "full")]
impl Drop for RunClaim {
    /// The last holder (the one that can take the lock exclusively) removes the claim.
    fn drop(&mut self) {
        if self.file.try_lock().is_ok() {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// Removes, in `dir` and the folders below it down to `max_depth` (links not followed,
/// hidden folders skipped), the files that `stale` says a killed run left ([`TMP_PREFIX`]
/// names of its outputs). Call it only under a lock that no live writer of such files holds
/// ([`FolderLock::share`]'s `clean`). A folder that cannot be read, or a failed removal, is an
/// error naming it.
#[cfg(feature = "full")]
pub(crate) fn remove_stale_temporaries_below(
    dir: &Path,
    max_depth: usize,
    stale: &dyn Fn(&str) -> bool,
) -> Result<()> {
    fn walk(
        dir: &Path,
        depth: usize,
        max_depth: usize,
        stale: &dyn Fn(&str) -> bool,
    ) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            // `DirEntry::file_type` does not follow links.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !name.starts_with('.') && depth < max_depth {
                    walk(&path, depth + 1, max_depth, stale)?;
                }
            } else if kind.is_file() && name.starts_with(TMP_PREFIX) && stale(&name) {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            }
        }
        Ok(())
    }
    walk(dir, 0, max_depth, stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_that_is_an_input_is_refused_by_any_path() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("a.npz");
        std::fs::write(&input, b"features").unwrap();
        let other = dir.path().join("b.npz");
        std::fs::write(&other, b"other").unwrap();
        // The same file by another spelling of its path.
        let again = dir.path().join(".").join("a.npz");
        let err = check_not_an_input(&again, [&other, &input])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.npz") && err.contains("an input"), "{err}");
        assert!(check_not_an_input(&other, [&input]).is_ok());
        assert!(check_not_an_input(&dir.path().join("new.npz"), [&input]).is_ok());
        assert_eq!(std::fs::read(&input).unwrap(), b"features");
    }

    /// Hostile round of 4aa9455, F14: `pairs --out` and `bench --json/--md` replaced the
    /// user's notes, a camera file or another command's report. A text output now replaces
    /// only an earlier one of its kind.
    #[test]
    fn a_text_output_replaces_only_an_earlier_one_of_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let pairs = file(
            "pairs.txt",
            "\u{feff}a.jpg b.jpg\n# comment\n\nc.jpg  d.jpg # x\n",
        );
        let notes = file("notes.txt", "my important notes\n");
        let camera = file(
            "0000.jpg.camera",
            "2759.48 0 1520.69\n0 2764.16 1006.81\n0 0 1\n",
        );
        let json = file(
            "r.json",
            "{\n  \"descl_version\": \"0.1\",\n  \"command\": \"descl bench\"}",
        );
        let other_json = file("p.json", "{\"precious\": 1}");
        let md = file(
            "r.md",
            "Machine: x (2 logical CPUs, linux); descl 0.1.\nProtocol: dog top-2048 by response\n",
        );
        let readme = file("README.md", "# descl\n\nMachine: not at the start\n");
        // Hostile round of 3fe5bfb, F6: a notes file starting "Machine:", a JSON of another
        // program's with the key.
        let machine_notes = file("m.md", "Machine: my laptop; descl works\nremember to...\n");
        let keyed_json = file("k.json", "{\"descl_version\": 1, \"mine\": true}");
        let ok = |p: &Path, kind| check_not_another_kind(p, kind).is_ok();
        assert!(ok(&pairs, OutputKind::PairsList));
        for p in [&notes, &camera, &json, &md] {
            assert!(!ok(p, OutputKind::PairsList), "{}", p.display());
        }
        assert!(ok(&json, OutputKind::JsonReport));
        assert!(!ok(&other_json, OutputKind::JsonReport));
        assert!(!ok(&pairs, OutputKind::JsonReport));
        assert!(ok(&md, OutputKind::MarkdownReport));
        assert!(!ok(&readme, OutputKind::MarkdownReport));
        assert!(!ok(&machine_notes, OutputKind::MarkdownReport));
        assert!(!ok(&keyed_json, OutputKind::JsonReport));
        let err = check_not_another_kind(&notes, OutputKind::PairsList)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("notes.txt") && err.contains("pairs list"),
            "{err}"
        );
        // Judged by its first lines: a long pairs list cut mid-line (and mid-character) by
        // the sniff is still one.
        let long: String = (0..20_000)
            .map(|i| format!("é{i}.jpg b{i}.jpg\n"))
            .collect();
        assert!(long.len() as u64 > TEXT_SNIFF_BYTES);
        assert!(ok(&file("long.txt", &long), OutputKind::PairsList));
        // An empty file is replaced by any kind.
        assert!(ok(&file("empty", ""), OutputKind::MarkdownReport));
    }

    #[test]
    fn a_path_not_written_yet_resolves_through_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("data");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let real = real.canonicalize().unwrap();
        // Two levels below the link, neither existing yet.
        assert_eq!(
            resolved_path(&link.join("new/report.json")),
            real.join("new/report.json")
        );
        assert_eq!(resolved_path(&link.join("..").join("data")), real);
    }

    /// Runs taking one output's lock over and over never hold it at once: a run that opened
    /// the lock file just before the holder removed it (its last act) must not count the lock
    /// on the removed file as the output's.
    #[test]
    fn an_output_lock_is_held_by_one_run_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.db");
        let holders = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..3000 {
                        if let Ok(lock) = OutputLock::acquire(&target, "wait") {
                            let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::yield_now();
                            holders.fetch_sub(1, Ordering::SeqCst);
                            drop(lock);
                        }
                    }
                });
            }
        });
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "two runs held the lock at once"
        );
    }

    #[cfg(feature = "full")]
    #[test]
    fn stale_staging_is_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let prefix = ".descl-tmp-x-";
        let stale_dir = staging_dir(d, prefix).unwrap().keep();
        std::fs::write(stale_dir.join("inside"), b"1").unwrap();
        std::fs::write(d.join(format!("{prefix}file")), b"").unwrap();
        // A link of the prefix's name to a folder outside: the link goes, the folder stays.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path(), d.join(format!("{prefix}link"))).unwrap();
        std::fs::write(d.join("other"), b"").unwrap();
        std::fs::create_dir(d.join(".descl-tmp-y-dir")).unwrap();
        remove_stale_staging(d, prefix).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".descl-tmp-y-dir", "other"]);
        assert!(outside.path().join("keep").exists());
        // A folder that cannot be read is an error naming it.
        let gone = d.join("gone");
        let err = remove_stale_staging(&gone, prefix).unwrap_err().to_string();
        assert!(err.contains("gone"), "{err}");
    }

    /// The first run into a folder cleans up alone; a run beside it does not; the last to
    /// leave removes the lock file, and the next run alone cleans up again.
    #[cfg(feature = "full")]
    #[test]
    fn a_folder_lock_cleans_up_only_for_a_run_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cleaned = std::cell::Cell::new(0);
        let clean = || {
            cleaned.set(cleaned.get() + 1);
            Ok(())
        };
        let lock_file = dir.path().join(FOLDER_LOCK_FILE);
        let first = FolderLock::share(dir.path(), clean).unwrap();
        assert_eq!(cleaned.get(), 1);
        let second = FolderLock::share(dir.path(), clean).unwrap();
        assert_eq!(cleaned.get(), 1, "cleaned up beside a live run");
        drop(first);
        assert!(lock_file.exists(), "lock file removed under a live run");
        drop(second);
        assert!(!lock_file.exists(), "the last run left its lock file");
        let _third = FolderLock::share(dir.path(), clean).unwrap();
        assert_eq!(cleaned.get(), 2);
        // A failed clean-up is the run's error.
        drop(_third);
        let err =
            FolderLock::share(dir.path(), || Err(Error::InvalidInput("boom".into()))).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }

    /// Temporaries name their target, a long name cut short before its kept extension, and
    /// never end with the target's extension.
    #[test]
    fn temporaries_name_their_target_within_a_file_name() {
        assert_eq!(tmp_tag(Path::new("d/0000.npz")), "0000.npz-");
        let long = format!("{}.npz", "é".repeat(120));
        let tag = tmp_tag(Path::new(&long));
        assert!(
            tag.len() <= TMP_TAG_MAX_BYTES + 1 && tag.ends_with(".npz-"),
            "{tag}"
        );
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join(&long);
        write_bytes_atomic(&target, b"x").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        let t = temp_beside(&target, &tmp_tag(&target), "").unwrap();
        let name = t.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.ends_with(".npz"), "{name}");
        assert!(is_temporary_with_extension(&name, "npz"), "{name}");
        assert!(!is_temporary_with_extension(&name, "json"), "{name}");
        assert!(is_temporary_of(".descl-tmp-plan.json-a1B2c3", "plan.json"));
        assert!(!is_temporary_of(
            ".descl-tmp-plan.json-a1B2c3",
            "other.json"
        ));
        assert!(!is_temporary_with_extension(".descl-tmp-a1B2c3", "npz"));
        assert!(!is_temporary_with_extension("x.npz-a1B2c3", "npz"));
    }

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

    /// This process's umask, from /proc (reading it with umask(2) would change it meanwhile).
    #[cfg(target_os = "linux")]
    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let v = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .unwrap()
            .trim();
        u32::from_str_radix(v, 8).unwrap()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn outputs_get_the_users_umask_not_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.bin");
        write_bytes_atomic(&target, b"x").unwrap();
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, OUTPUT_MODE & !umask(), "mode {mode:o}");
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
