//! Deterministic shares of a set's work, for running one command as many processes on a
//! cluster (a Slurm job array, a Kubernetes Indexed Job) without a scheduler of descl's own.
//!
//! Shard `i` of `N` owns the items `k` with `k mod N = i` of the set's ordered list (images in
//! sorted order for extraction, pairs in [`crate::matching::pairs::make_pairs`]'s order for
//! matching). Round-robin rather than contiguous blocks: exhaustive pairs of early images
//! cluster at the start of the list, and neighbouring images tend to be alike in size. Every
//! shard computes the same list, so the shares are disjoint and together cover it, with no
//! coordination between processes.

use crate::error::{Error, Result};

/// The variable Slurm sets to a job-array task's index (`sbatch --array=0-(N-1)`).
pub const SLURM_INDEX_ENV: &str = "SLURM_ARRAY_TASK_ID";
/// The variable Kubernetes sets to an Indexed Job pod's index (`completionMode: Indexed`).
pub const KUBERNETES_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// One share of a set's work: shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Default for Shard {
    /// All the work.
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// `I/N` with 0 ≤ I < N; `I` may be `slurm` or `k8s` to read the index from
    /// [`SLURM_INDEX_ENV`] or [`KUBERNETES_INDEX_ENV`].
    pub fn parse(spec: &str) -> Result<Shard> {
        Shard::parse_with(spec, |var| std::env::var(var).ok())
    }

    /// [`Shard::parse`] with the environment given as a lookup (for tests).
    pub fn parse_with(spec: &str, env: impl Fn(&str) -> Option<String>) -> Result<Shard> {
        let bad = |why: String| Error::InvalidInput(format!("--shard {spec:?}: {why}"));
        let (i, n) = spec
            .split_once('/')
            .ok_or_else(|| bad("expected I/N, e.g. 0/4, slurm/4 or k8s/4".into()))?;
        let count: usize = n
            .trim()
            .parse()
            .map_err(|_| bad(format!("{n:?} is not a number of shards")))?;
        if count == 0 {
            return Err(bad("the number of shards must be at least 1".into()));
        }
        let index_text = match i.trim() {
            "slurm" => {
                env(SLURM_INDEX_ENV).ok_or_else(|| bad(format!("{SLURM_INDEX_ENV} is not set")))?
            }
            "k8s" => env(KUBERNETES_INDEX_ENV)
                .ok_or_else(|| bad(format!("{KUBERNETES_INDEX_ENV} is not set")))?,
            other => other.to_string(),
        };
        let index: usize = index_text
            .trim()
            .parse()
            .map_err(|_| bad(format!("shard index {index_text:?} is not a number")))?;
        if index >= count {
            return Err(bad(format!(
                "shard index {index} is not below the {count} shards (indices start at 0)"
            )));
        }
        Ok(Shard { index, count })
    }

    /// Whether item `k` of the ordered list is this shard's.
    pub fn owns(&self, k: usize) -> bool {
        k % self.count == self.index
    }

    /// This shard's items of `items`, in order.
    pub fn select<T: Clone>(&self, items: &[T]) -> Vec<T> {
        items
            .iter()
            .enumerate()
            .filter(|(k, _)| self.owns(*k))
            .map(|(_, x)| x.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            SLURM_INDEX_ENV => Some("2".into()),
            _ => None,
        }
    }

    #[test]
    fn shards_partition_the_list() {
        let items: Vec<usize> = (0..10).collect();
        let mut all: Vec<usize> = (0..3)
            .flat_map(|i| Shard { index: i, count: 3 }.select(&items))
            .collect();
        all.sort_unstable();
        assert_eq!(all, items);
        assert_eq!(Shard { index: 1, count: 3 }.select(&items), vec![1, 4, 7]);
        assert_eq!(Shard::default().select(&items), items);
    }

    #[test]
    fn specs_and_their_errors() {
        assert_eq!(
            Shard::parse_with("1/4", env).unwrap(),
            Shard { index: 1, count: 4 }
        );
        assert_eq!(
            Shard::parse_with("slurm/3", env).unwrap(),
            Shard { index: 2, count: 3 }
        );
        for (spec, why) in [
            ("4/4", "not below the 4 shards"),
            ("0/0", "at least 1"),
            ("k8s/2", "JOB_COMPLETION_INDEX is not set"),
            ("slurm/2", "not below the 2 shards"),
            ("x/2", "not a number"),
            ("3", "expected I/N"),
        ] {
            let e = Shard::parse_with(spec, env).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(spec), "{spec}: {e}");
        }
    }
}
