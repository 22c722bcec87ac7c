//! Which image pairs to match in a set: exhaustive, sequential window, a pairs file, retrieval
//! ([`crate::retrieval`]), or a union of these (sequential with retrieval is COLMAP's
//! sequential matching with loop closure).

use crate::describe::Descriptors;
use crate::error::{Error, Result};
use crate::names::name_stem;
use crate::retrieval::{retrieval_pairs, RetrievalConfig};
use std::path::{Path, PathBuf};

/// Largest pairs file read: hloc's published pair lists (Aachen's `pairs-db-covis20`, 134 000
/// lines; its NetVLAD top-50 query pairs) are a few MB, and an exhaustive list of 3 000 images
/// (4.5 M lines of about 50 bytes) is about 225 MB: 256 MiB holds those, while `/dev/zero` or a
/// wrong huge file fails at once instead of filling memory.
pub const MAX_PAIRS_FILE_BYTES: u64 = 256 << 20;

/// How to choose pairs among `n` images (indices into the image list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairMode {
    /// All n(n−1)/2 pairs.
    Exhaustive,
    /// Each image with the next `w` (video / ordered captures).
    Sequential(usize),
    /// Pairs listed in a text file, one `nameA nameB` per line (hloc / COLMAP
    /// `matches_importer` format); a line starting with `#` is a comment ([`read_pairs`]).
    File(std::path::PathBuf),
    /// Each image with its `k` most similar images by ASMK over its own descriptors
    /// ([`crate::retrieval`]).
    Retrieval(usize),
    /// The pairs of every mode listed.
    Union(Vec<PairMode>),
}

impl PairMode {
    /// How the pairs are chosen, as a match plan records it ([`crate::io::plan::MatchPlan`]'s
    /// `selection`): a shard of another selection into the same folder is refused. A pairs
    /// file is recorded by the SHA-256 of its bytes, not its path: the shards of one run may
    /// read it from other paths, and an edited file is another selection. It is read as
    /// [`read_pairs`] reads it (a regular file of at most [`MAX_PAIRS_FILE_BYTES`]).
    pub fn selection(&self) -> Result<serde_json::Value> {
        Ok(match self {
            PairMode::Exhaustive => serde_json::json!("exhaustive"),
            PairMode::Sequential(w) => serde_json::json!({ "sequential": w }),
            PairMode::File(path) => {
                let text = crate::io::bounded::read_text(path, MAX_PAIRS_FILE_BYTES, "pairs file")?;
                serde_json::json!({
                    "pairs_file_sha256": crate::identity::sha256_bytes(text.as_bytes())
                })
            }
            PairMode::Retrieval(k) => serde_json::json!({ "retrieval": k }),
            PairMode::Union(modes) => serde_json::json!({
                "union": modes.iter().map(PairMode::selection).collect::<Result<Vec<_>>>()?
            }),
        })
    }

    /// Whether the pairs depend on the images' descriptors (retrieval).
    pub fn needs_features(&self) -> bool {
        match self {
            PairMode::Retrieval(_) => true,
            PairMode::Union(modes) => modes.iter().any(PairMode::needs_features),
            _ => false,
        }
    }
}

/// Image `i`'s descriptors, for pair modes that need them.
pub type DescriptorSource<'a> = &'a (dyn Fn(usize) -> Result<Descriptors> + Sync);

/// The file names (without folder) of `paths`: the names that pair lists and databases use.
pub fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// The pairs `(i, j)`, i < j, sorted, for `names` (image file names as listed in the folder);
/// `descriptors` serves the modes that need them ([`PairMode::needs_features`]).
pub fn make_pairs(
    mode: &PairMode,
    names: &[String],
    descriptors: Option<DescriptorSource<'_>>,
) -> Result<Vec<(usize, usize)>> {
    let n = names.len();
    match mode {
        PairMode::Retrieval(k) => {
            let load = descriptors.ok_or_else(|| {
                Error::InvalidInput("retrieval pairs need the images' features".into())
            })?;
            retrieval_pairs(n, load, &RetrievalConfig::with_neighbours(*k))
        }
        PairMode::Union(modes) => {
            let mut all = Vec::new();
            for m in modes {
                all.extend(make_pairs(m, names, descriptors)?);
            }
            all.sort_unstable();
            all.dedup();
            Ok(all)
        }
        PairMode::Exhaustive => Ok((0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .collect()),
        PairMode::Sequential(w) => {
            if *w == 0 {
                return Err(Error::InvalidInput(
                    "sequential window must be at least 1".into(),
                ));
            }
            Ok((0..n)
                .flat_map(|i| (i + 1..n.min((i + 1).saturating_add(*w))).map(move |j| (i, j)))
                .collect())
        }
        PairMode::File(path) => read_pairs(path, names),
    }
}

/// Whether `name` can be written in a pairs file so that hloc (`parse_retrieval`: `q, r =
/// line.split()`), COLMAP's `matches_importer` (lines starting with `#` are comments) and descl
/// read it back as the same name: not empty, no whitespace, not starting with `#`.
pub fn pairs_file_name_ok(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('#') && !name.contains(char::is_whitespace)
}

/// Refuses, before any work, a set with a name that a pairs file cannot hold
/// ([`pairs_file_name_ok`]): the file must read back as the same names in descl, hloc and
/// COLMAP.
pub fn check_pairs_file_names(names: &[String]) -> Result<()> {
    match names.iter().find(|n| !pairs_file_name_ok(n)) {
        Some(bad) => Err(Error::InvalidInput(format!(
            "image {bad:?}: a pairs file cannot hold a name with whitespace or a leading `#` (hloc splits each line on whitespace, COLMAP skips lines starting with `#`); rename the image"
        ))),
        None => Ok(()),
    }
}

/// Writes `pairs` (indices into `names`) as a pairs file at `path`, atomically: `nameA nameB`
/// per line, as [`read_pairs`], hloc and COLMAP read it. The names must have passed
/// [`check_pairs_file_names`].
pub fn write_pairs_file(path: &Path, names: &[String], pairs: &[(usize, usize)]) -> Result<()> {
    let text: String = pairs
        .iter()
        .map(|&(i, j)| format!("{} {}\n", names[i], names[j]))
        .collect();
    crate::io::atomic::write_bytes_atomic(path, text.as_bytes())
}

/// The input called `name`: the one of that name, else, when one of the two is a features file
/// (`.npz`), the one of the same stem (a pairs file names images; the inputs may be their
/// features files, and a matches file names features files). Another image of the same stem
/// (`a.png` for `a.jpg`) is not the same image.
pub fn find_input(names: &[String], name: &str) -> Option<usize> {
    let is_npz = |s: &str| {
        Path::new(s)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
    };
    let exact = names.iter().position(|n| n == name);
    exact.or_else(|| {
        names
            .iter()
            .position(|n| (is_npz(n) || is_npz(name)) && name_stem(n) == name_stem(name))
    })
}

/// Reads a pairs file: `nameA nameB` per line, separated by whitespace (hloc's
/// `parse_retrieval`); a word starting with `#` starts a comment to the end of the line (a
/// whole-line comment is COLMAP's `matches_importer`'s), while a `#` inside a word belongs to
/// the name (hloc has no comments: `a.png IMG#2.png` names `IMG#2.png`, never `IMG`). Names
/// find inputs by [`find_input`]; `descl pairs` never writes a name starting with `#`
/// ([`pairs_file_name_ok`]).
fn read_pairs(path: &Path, names: &[String]) -> Result<Vec<(usize, usize)>> {
    // Without a byte-order mark, as Windows editors save UTF-8 (io::bounded::read_text).
    let text = crate::io::bounded::read_text(path, MAX_PAIRS_FILE_BYTES, "pairs file")?;
    let index = |name: &str, line: usize| -> Result<usize> {
        find_input(names, name).ok_or_else(|| {
            // A name of the set by its stem alone ("0000" for "0000.jpg"): named, as a pairs
            // file names each image in full.
            let hint = names
                .iter()
                .find(|n| name_stem(n) == name_stem(name))
                .map(|n| format!(" (the set has {n:?}: a pairs file names each image in full)"))
                .unwrap_or_default();
            Error::format(
                path,
                format!(
                    "line {line}: image {name:?} is not among the {} images{hint}",
                    names.len()
                ),
            )
        })
    };
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line
            .split_whitespace()
            .take_while(|w| !w.starts_with('#'))
            .collect();
        if parts.is_empty() {
            continue;
        }
        let line = line.trim();
        let [a, b] = parts[..] else {
            return Err(Error::format(
                path,
                format!("line {}: expected two image names, got {line:?}", k + 1),
            ));
        };
        let (i, j) = (index(a, k + 1)?, index(b, k + 1)?);
        if i == j {
            return Err(Error::format(
                path,
                format!("line {}: an image paired with itself", k + 1),
            ));
        }
        out.push((i.min(j), i.max(j)));
    }
    // A retrieval script that wrote nothing gave an empty database with exit 0 (hostile
    // round of 4aa9455, F11).
    if out.is_empty() {
        return Err(Error::format(
            path,
            "no pairs (the file is empty or holds only comments), so nothing would be matched; give a pairs file with `nameA nameB` lines, or choose the pairs another way (--exhaustive, --sequential, --retrieval)",
        ));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i}.jpg")).collect()
    }

    #[test]
    fn exhaustive_and_sequential() {
        assert_eq!(
            make_pairs(&PairMode::Exhaustive, &names(4), None)
                .unwrap()
                .len(),
            6
        );
        assert_eq!(
            make_pairs(&PairMode::Sequential(2), &names(4), None).unwrap(),
            vec![(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]
        );
        assert!(make_pairs(&PairMode::Sequential(0), &names(4), None).is_err());
        // A window near 2^64 is every later image (it overflowed).
        assert_eq!(
            make_pairs(&PairMode::Sequential(usize::MAX), &names(4), None).unwrap(),
            make_pairs(&PairMode::Exhaustive, &names(4), None).unwrap()
        );
        assert!(make_pairs(&PairMode::Retrieval(2), &names(4), None).is_err());
        let union = PairMode::Union(vec![PairMode::Sequential(1), PairMode::Sequential(2)]);
        assert_eq!(
            make_pairs(&union, &names(4), None).unwrap(),
            make_pairs(&PairMode::Sequential(2), &names(4), None).unwrap()
        );
    }

    #[test]
    fn pairs_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pairs.txt");
        std::fs::write(
            &p,
            "# comment\n2.jpg 0.jpg\n0.jpg 2.jpg\n\n1.jpg 3.jpg # x\n",
        )
        .unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &names(4), None).unwrap(),
            vec![(0, 2), (1, 3)]
        );
        std::fs::write(&p, "0.jpg 9.jpg\n").unwrap();
        let e = make_pairs(&PairMode::File(p.clone()), &names(4), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pairs.txt") && e.contains("9.jpg"), "{e}");
        // Image names find their features files by stem.
        let npz: Vec<String> = (0..4).map(|i| format!("{i}.npz")).collect();
        std::fs::write(&p, "1.jpg 3.jpg\n").unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &npz, None).unwrap(),
            vec![(1, 3)]
        );
        std::fs::write(&p, "0.jpg\n").unwrap();
        assert!(make_pairs(&PairMode::File(p.clone()), &names(4), None).is_err());
        // Issue 55 (third round, low): a UTF-8 byte-order mark was read as part of the first
        // name; a stem alone is refused naming the image it may mean.
        std::fs::write(&p, "\u{feff}0.jpg 1.jpg\r\n").unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &names(4), None).unwrap(),
            vec![(0, 1)]
        );
        std::fs::write(&p, "0 1.jpg\n").unwrap();
        let e = make_pairs(&PairMode::File(p.clone()), &names(4), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the set has \"0.jpg\""), "{e}");
    }

    #[test]
    fn a_hash_inside_a_line_is_part_of_a_name() {
        // Issue 24: `a.png IMG#2.png` matched IMG.png (the `#` cut the name).
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pairs.txt");
        let set: Vec<String> = ["a.png", "IMG.png", "IMG#2.png"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        std::fs::write(&p, "# a comment line\n  # another\na.png IMG#2.png\n").unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &set, None).unwrap(),
            vec![(0, 2)]
        );
        // A word starting with `#` ends the line; a name cut short is an error, never another
        // image.
        std::fs::write(&p, "a.png IMG.png # note\n").unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &set, None).unwrap(),
            vec![(0, 1)]
        );
        std::fs::write(&p, "a.png #IMG.png\n").unwrap();
        let e = make_pairs(&PairMode::File(p.clone()), &set, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("two image names"), "{e}");
        // Another image of the same stem is not the named one; its features file is.
        std::fs::write(&p, "a.jpg IMG.png\n").unwrap();
        assert!(make_pairs(&PairMode::File(p.clone()), &set, None).is_err());
        let npz: Vec<String> = vec!["a.npz".into(), "IMG.npz".into()];
        assert_eq!(
            make_pairs(&PairMode::File(p), &npz, None).unwrap(),
            vec![(0, 1)]
        );
    }

    #[test]
    fn nested_names_in_pairs_files() {
        // hloc's names are paths under the image folder; a features file `a/0000.npz` is the
        // image `a/0000.jpg`'s, and `b/0000.jpg` is another image.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pairs.txt");
        let set: Vec<String> = ["a/0000.jpg", "a/0001.jpg", "b/0000.jpg"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        std::fs::write(&p, "b/0000.jpg a/0000.jpg\na/0000.jpg a/0001.jpg\n").unwrap();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &set, None).unwrap(),
            vec![(0, 1), (0, 2)]
        );
        let npz: Vec<String> = ["a/0000.npz", "a/0001.npz", "b/0000.npz"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            make_pairs(&PairMode::File(p.clone()), &npz, None).unwrap(),
            vec![(0, 1), (0, 2)]
        );
        std::fs::write(&p, "0000.jpg a/0001.jpg\n").unwrap();
        assert!(make_pairs(&PairMode::File(p), &set, None).is_err());
        assert!(pairs_file_name_ok("a/0000.jpg"));
        assert!(pairs_file_name_ok("a#1.png"));
        assert!(!pairs_file_name_ok("#a.png"));
        assert!(!pairs_file_name_ok("a b.png"));
    }
}
