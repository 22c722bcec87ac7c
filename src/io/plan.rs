//! Run plans: what a whole run — all its shards — is meant to produce, recorded beside its
//! outputs so that `descl sfm merge` can tell a complete set from an incomplete one (a shard
//! that never ran, or was killed, leaves no trace otherwise).
//!
//! - `descl extract` writes [`EXTRACT_PLAN_FILE`] into `--out`: the names of every image of the
//!   run (the sorted set, before `--shard` takes its share) and the [`ExtractSettings`].
//! - `descl match --images … --out-dir` writes [`MATCH_PLAN_FILE`] into `--out-dir`: the inputs,
//!   every pair of the run (before `--shard`), and the pair settings.
//!
//! Every shard computes the same plan, so shards writing it at once (atomically) agree; a
//! later run into the same folder replaces it with its own.

use crate::error::{Error, Result};
use crate::io::atomic::write_bytes_atomic;
use crate::matching::two_view::PairConfig;
use crate::provenance::ExtractSettings;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

/// The plan of `descl extract` in its output folder.
pub const EXTRACT_PLAN_FILE: &str = "descl-extract-plan.json";
/// The plan of `descl match --out-dir` in its output folder.
pub const MATCH_PLAN_FILE: &str = "descl-match-plan.json";
/// The largest plan read (a pair list of about 2.5 million pairs).
pub const MAX_PLAN_BYTES: u64 = 256 << 20;

/// What `descl extract` is meant to produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractPlan {
    /// File names of every image of the run, sorted.
    pub images: Vec<String>,
    pub settings: ExtractSettings,
}

/// What `descl match --images … --out-dir` is meant to produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchPlan {
    /// File names of the inputs (images or features files).
    pub inputs: Vec<String>,
    /// Every pair of the run, by input name, in the order the shards share them.
    pub pairs: Vec<[String; 2]>,
    pub config: PairConfig,
}

/// How many items a message names before `…`.
pub const SHOWN_IN_MESSAGES: usize = 5;

/// The first [`SHOWN_IN_MESSAGES`] of `items`, comma-separated, and `, …` when there are more.
pub fn listing<S: std::fmt::Display>(items: impl IntoIterator<Item = S>) -> String {
    let mut items = items.into_iter();
    let shown: Vec<String> = items
        .by_ref()
        .take(SHOWN_IN_MESSAGES)
        .map(|s| s.to_string())
        .collect();
    let more = if items.next().is_some() { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}

impl ExtractPlan {
    /// Holds the features files present in `dir` (their images' names and files) to the plan:
    /// a file of an image the plan does not list is another run's and refused, naming it;
    /// returns the plan's images that have no file (an extract shard not run yet). What
    /// `descl match --images` and `descl sfm merge` both check.
    pub fn missing<'a>(
        &self,
        dir: &Path,
        present: impl IntoIterator<Item = (&'a str, &'a Path)>,
    ) -> Result<Vec<String>> {
        let listed: HashSet<&str> = self.images.iter().map(String::as_str).collect();
        let mut have = HashSet::new();
        for (name, file) in present {
            if !listed.contains(name) {
                return Err(Error::InvalidInput(not_in_plan(file, name, dir)));
            }
            have.insert(name);
        }
        Ok(self
            .images
            .iter()
            .filter(|n| !have.contains(n.as_str()))
            .cloned()
            .collect())
    }
}

/// The message refusing the features file `file` of image `name` that the extract plan of
/// `dir` does not list: a file another run left in the folder (the image moved or gone, or a
/// run of other images into the same folder).
fn not_in_plan(file: &Path, name: &str, dir: &Path) -> String {
    format!(
        "{}: features of {name}, which {} does not list: another run's (a run of other images \
         into this folder replaced the plan, or the image was moved or removed). Extract the \
         whole set in one command (--resume reuses the features already there), or delete the \
         file",
        file.display(),
        dir.join(EXTRACT_PLAN_FILE).display()
    )
}

/// Writes `plan` as `dir/file` atomically.
pub fn write_plan<T: Serialize>(dir: &Path, file: &str, plan: &T) -> Result<()> {
    let path = dir.join(file);
    let json = serde_json::to_vec(plan)
        .map_err(|e| Error::format(&path, format!("cannot serialise the plan: {e}")))?;
    write_bytes_atomic(&path, &json)
}

/// The plan `dir/file`, or None when there is none.
pub fn read_plan<T: DeserializeOwned>(dir: &Path, file: &str) -> Result<Option<T>> {
    let path = dir.join(file);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    if !meta.is_file() {
        return Err(Error::format(&path, "a run plan must be a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_PLAN_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::io(&path, e))?;
    if bytes.len() as u64 > MAX_PLAN_BYTES {
        return Err(Error::format(
            &path,
            format!("larger than {MAX_PLAN_BYTES} bytes"),
        ));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::format(&path, format!("not a descl run plan: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_bad_ones_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_plan::<MatchPlan>(dir.path(), MATCH_PLAN_FILE).unwrap(),
            None
        );
        let plan = MatchPlan {
            inputs: vec!["a.npz".into(), "b.npz".into()],
            pairs: vec![["a.npz".into(), "b.npz".into()]],
            config: PairConfig::default(),
        };
        write_plan(dir.path(), MATCH_PLAN_FILE, &plan).unwrap();
        assert_eq!(
            read_plan::<MatchPlan>(dir.path(), MATCH_PLAN_FILE).unwrap(),
            Some(plan)
        );
        std::fs::write(dir.path().join(EXTRACT_PLAN_FILE), b"{").unwrap();
        let e = read_plan::<ExtractPlan>(dir.path(), EXTRACT_PLAN_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains(EXTRACT_PLAN_FILE), "{e}");
    }
}
