//! Image names in a set, as hloc names them: the path of an image relative to the image folder,
//! components joined by `/` (`a/0000.jpg`), so that a pairs file, `features.h5`, `matches.h5`, a
//! COLMAP database (`images.name`, which COLMAP resolves under its `--image_path`) and descl's
//! own `.npz` folder all say the same thing of the same image, and hloc's readers
//! (`get_keypoints(path, name)`, `get_matches(path, name0, name1)`) find what descl wrote.
//!
//! A folder is read the way hloc's `extract_features.ImageDataset` reads one
//! (`glob.glob(root/**/*.jpg, recursive=True)`, then `relative_to(root).as_posix()`, sorted):
//! recursively, skipping hidden files and folders (names starting with `.`, which Python's
//! `glob` skips too: `.git`, `.thumbnails`, descl's own `.descl-tmp-…` temporaries), sorted by
//! the name as a string. An image given as a file is named by its file name.
//!
//! Names are text (hloc's and COLMAP's files hold text): a component that is not UTF-8 is an
//! error naming the path, never a lossy name that two images could share. Names read back
//! from files (a features file's recorded name, a `features.h5` group) are checked by
//! [`check_name`] before they name an output file, so that no name leaves its output folder.

use crate::error::{Error, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Separates the folders of a name (hloc's `as_posix()`, COLMAP's image names).
pub const NAME_SEPARATOR: char = '/';

/// The deepest folder nesting read below an image folder: far beyond any dataset layout
/// (hloc's Aachen: `db/1000.jpg`, `query/night/nexus5x/IMG_….jpg`, 3 levels), and a bound on a
/// link cycle the loop check below might not see (a bind mount).
pub const MAX_FOLDER_DEPTH: usize = 32;

/// One input of a set: the file that is read and the image's name in the set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetInput {
    /// The image's name (see the module doc); the first field, so inputs sort by name.
    pub name: String,
    /// The file read: an image, a features file, or `FILE.h5/NAME` for an image of a
    /// `features.h5`.
    pub path: PathBuf,
}

impl SetInput {
    /// An input with a name already known (checked by [`check_name`]).
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>) -> Result<SetInput> {
        let (name, path) = (name.into(), path.into());
        check_name(&name).map_err(|why| {
            Error::InvalidInput(format!("{}: image name {name:?}: {why}", path.display()))
        })?;
        Ok(SetInput { name, path })
    }

    /// An image given as a file: named by its file name.
    pub fn file(path: &Path) -> Result<SetInput> {
        let name = path
            .file_name()
            .ok_or_else(|| Error::InvalidInput(format!("{}: not a file name", path.display())))?
            .to_str()
            .ok_or_else(|| not_utf8(path))?;
        SetInput::new(name, path)
    }

    /// The inputs of `paths`, each named by its file name.
    pub fn files(paths: &[PathBuf]) -> Result<Vec<SetInput>> {
        paths.iter().map(|p| SetInput::file(p)).collect()
    }
}

fn not_utf8(path: &Path) -> Error {
    Error::InvalidInput(format!(
        "{}: the name is not UTF-8; rename it (outputs name images by their names, as text)",
        path.display()
    ))
}

/// Whether `name` can name an image: not empty, components separated by [`NAME_SEPARATOR`],
/// none empty, `.` or `..` (a name never leaves its output folder), no NUL and no `\` (a
/// Windows separator hloc would read as a folder). The reason otherwise.
pub fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.contains('\0') || name.contains('\\') {
        return Err("contains NUL or a backslash");
    }
    if name
        .split(NAME_SEPARATOR)
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(
            "a folder part is empty, `.` or `..` (names are relative paths under the image folder)",
        );
    }
    Ok(())
}

/// `path`'s name under `root` (a descendant of it): its components joined by `/`.
pub fn relative_name(root: &Path, path: &Path) -> Result<String> {
    let rel = path.strip_prefix(root).map_err(|_| {
        Error::InvalidInput(format!(
            "{}: not inside the image folder {}",
            path.display(),
            root.display()
        ))
    })?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| c.as_os_str().to_str().ok_or_else(|| not_utf8(path)))
        .collect::<Result<_>>()?;
    let name = parts.join("/");
    check_name(&name).map_err(|why| {
        Error::InvalidInput(format!("{}: image name {name:?}: {why}", path.display()))
    })?;
    Ok(name)
}

/// The images of `dir` and of its folders, recursively (see the module doc), named by their
/// paths under `dir` and sorted by name; `keep` says which files are images. An error names
/// the folder when it has none, and a folder too deep or a name that is not UTF-8.
pub fn folder_inputs(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<Vec<SetInput>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    walk(dir, dir, 0, keep, &mut seen, &mut out)?;
    out.sort();
    check_distinct_files(&out)?;
    Ok(out)
}

/// Refuses two inputs that are one file (a link to an image of the set, two links to one file,
/// or two hard links: one device and inode), naming both: as two images, the picture would be
/// matched with itself, pairs of identical keypoints whose degenerate geometry passes as a
/// result, and counted twice.
pub fn check_distinct_files(inputs: &[SetInput]) -> Result<()> {
    let mut files: std::collections::HashMap<FileIdentity, &Path> =
        std::collections::HashMap::new();
    for i in inputs {
        let Some(id) = file_identity(&i.path) else {
            continue;
        };
        if let Some(first) = files.insert(id, &i.path) {
            return Err(Error::InvalidInput(format!(
                "{} and {}: one file (a link or a hard link), which the set would take as two images and match with itself; remove the link, or copy the file if two images are meant",
                first.display(),
                i.path.display()
            )));
        }
    }
    Ok(())
}

/// What makes a file itself, links followed: its device and inode (a hard link shares them).
#[cfg(unix)]
type FileIdentity = (u64, u64);
#[cfg(not(unix))]
type FileIdentity = PathBuf;

#[cfg(unix)]
fn file_identity(path: &Path) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_identity(path: &Path) -> Option<FileIdentity> {
    std::fs::canonicalize(path).ok()
}

fn walk(
    root: &Path,
    dir: &Path,
    depth: usize,
    keep: &dyn Fn(&Path) -> bool,
    seen: &mut HashSet<PathBuf>,
    out: &mut Vec<SetInput>,
) -> Result<()> {
    // A folder reached twice (a link to a parent) is read once.
    let real = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    if !seen.insert(real) {
        return Ok(());
    }
    if depth > MAX_FOLDER_DEPTH {
        return Err(Error::InvalidInput(format!(
            "{}: more than {MAX_FOLDER_DEPTH} folders deep below {}",
            dir.display(),
            root.display()
        )));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<_>>()?;
    entries.sort();
    for p in entries {
        let hidden = p
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().first() == Some(&b'.'));
        if hidden {
            continue;
        }
        if p.is_dir() {
            walk(root, &p, depth + 1, keep, seen, out)?;
        } else if p.is_file() && keep(&p) {
            out.push(SetInput {
                name: relative_name(root, &p)?,
                path: p,
            });
        } else if keep(&p) && !p.exists() && p.is_symlink() {
            // A link to a missing file would otherwise leave its image out without a word.
            let target = std::fs::read_link(&p).map_err(|e| Error::io(&p, e))?;
            return Err(Error::InvalidInput(format!(
                "{}: a link to {}, which does not exist; restore it or remove the link",
                p.display(),
                target.display()
            )));
        }
    }
    Ok(())
}

/// Refuses two inputs of one name (two `x.png` from different folders given as files would
/// overwrite each other's features in any output keyed by name), naming both files.
pub fn check_unique(inputs: &[SetInput]) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, &Path> = std::collections::HashMap::new();
    for i in inputs {
        if let Some(first) = seen.insert(&i.name, &i.path) {
            return Err(Error::InvalidInput(format!(
                "{} and {}: two inputs named {:?}; outputs name images by name, so give them different names or process the folders separately",
                first.display(),
                i.path.display(),
                i.name
            )));
        }
    }
    Ok(())
}

/// A name without the extension of its file, folders kept (`a/0000.jpg` → `a/0000`): how an
/// image and its features file `a/0000.npz` are known as one.
pub fn name_stem(name: &str) -> &str {
    let file_start = name.rfind(NAME_SEPARATOR).map_or(0, |k| k + 1);
    match name[file_start..].rfind('.') {
        // A leading dot is part of the stem (`.hidden` has no extension), as in `Path::file_stem`.
        Some(dot) if dot > 0 => &name[..file_start + dot],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(p: &Path) -> bool {
        crate::image::has_image_extension(p)
    }

    #[test]
    fn names_are_posix_paths_under_the_folder_sorted_as_strings() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "top.jpg",
            "a/0001.jpg",
            "a/0000.jpg",
            "a-c.jpg",
            "b/deep/er/x.PNG",
            "a/notes.txt",
            ".hidden.jpg",
            ".git/y.jpg",
            "a/.descl-tmp-1.jpg",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"x").unwrap();
        }
        let got = folder_inputs(root, &images).unwrap();
        let names: Vec<&str> = got.iter().map(|i| i.name.as_str()).collect();
        // As Python sorts strings (hloc: `sorted(set(paths))`): `-` (0x2d) before `/` (0x2f).
        assert_eq!(
            names,
            [
                "a-c.jpg",
                "a/0000.jpg",
                "a/0001.jpg",
                "b/deep/er/x.PNG",
                "top.jpg"
            ]
        );
        assert!(got.iter().all(|i| i.path == root.join(&i.name)));
    }

    #[cfg(unix)]
    #[test]
    fn a_link_cycle_is_read_once_and_non_utf8_names_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("a")).unwrap();
        std::fs::write(root.join("a/x.jpg"), b"x").unwrap();
        std::os::unix::fs::symlink(root, root.join("a/loop")).unwrap();
        let got = folder_inputs(root, &images).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        let bad = root.join(std::ffi::OsStr::from_bytes(b"b\xff"));
        std::fs::create_dir(&bad).unwrap();
        std::fs::write(bad.join("y.jpg"), b"x").unwrap();
        let e = folder_inputs(root, &images).unwrap_err().to_string();
        assert!(e.contains("not UTF-8") && e.contains("y.jpg"), "{e}");
    }

    /// The hostile review of 2026-11-28: a link to a missing image left it out of the set,
    /// exit 0. Refused naming the link and its target; a dangling link of another kind (not
    /// an input) is still no concern of the set.
    #[cfg(unix)]
    #[test]
    fn a_link_to_a_missing_image_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("x.jpg"), b"x").unwrap();
        std::os::unix::fs::symlink(root.join("gone.jpg"), root.join("y.jpg")).unwrap();
        std::os::unix::fs::symlink(root.join("gone.txt"), root.join("notes.txt")).unwrap();
        let e = folder_inputs(root, &images).unwrap_err().to_string();
        assert!(
            e.contains("y.jpg") && e.contains("gone.jpg") && e.contains("does not exist"),
            "{e}"
        );
        std::fs::remove_file(root.join("y.jpg")).unwrap();
        assert_eq!(folder_inputs(root, &images).unwrap().len(), 1);
    }

    #[test]
    fn names_from_files_are_checked_and_unique() {
        for bad in [
            "",
            "../x.jpg",
            "a//b.jpg",
            "/abs.jpg",
            "a/./b.jpg",
            "a\\b.jpg",
            "x\0",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
            assert!(SetInput::new(bad, "f.npz").is_err(), "{bad:?}");
        }
        assert!(check_name("a/0000.jpg").is_ok());
        let two = SetInput::files(&[PathBuf::from("d1/x.png"), PathBuf::from("d2/x.png")]).unwrap();
        let e = check_unique(&two).unwrap_err().to_string();
        assert!(e.contains("d1/x.png") && e.contains("d2/x.png"), "{e}");
        assert_eq!(name_stem("a/0000.jpg"), "a/0000");
        assert_eq!(name_stem("a.b/c"), "a.b/c");
        assert_eq!(name_stem("x.tar.gz"), "x.tar");
        assert_eq!(name_stem("d/.hidden"), "d/.hidden");
    }
}
