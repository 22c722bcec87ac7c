//! A bound on the memory the images being extracted at once may take, whatever the number of
//! workers.
//!
//! An image's extraction holds its decoded pixels (8-bit, then 32-bit gray) and the detector's
//! scale space on the work image (at most `--max-image-size` on its longer side): SIFT's, with
//! its upsampled first octave, takes about [`DETECTION_BYTES_PER_PIXEL`] per work pixel. A
//! 65 KB PNG of 8190 × 8190 black pixels (within [`crate::image::MAX_IMAGE_PIXELS`]) takes
//! 2.7 GB, and every worker may hold one: a folder of them on a 16-core machine asked for
//! ~40 GB (hostile round of 4aa9455, F9). Each image now first takes its estimated bytes from a
//! [`MemoryBudget`] of the machine's available memory, and waits while the images in flight
//! hold it; an image larger than the whole budget runs alone.

use std::sync::{Condvar, Mutex};

/// Bytes per decoded pixel: its 8-bit sample and its 32-bit gray value
/// ([`crate::image::GrayImage`]).
pub const DECODED_BYTES_PER_PIXEL: u64 = 5;
/// Bytes per pixel of the work image that detection holds: SIFT's Gaussian and DoG layers of
/// the upsampled first octave and the octaves below. Measured as peak resident memory less the
/// process's own 60 MB (`/usr/bin/time -f %M`, `descl extract -m sift`): 2.69 GB for the 8190²
/// PNG (decoded 335 MB, 3200 × 3200 work image: 230 B per work pixel), 345 MB for a
/// 1536 × 1024 photograph (214 B); rounded up, as a bound.
pub const DETECTION_BYTES_PER_PIXEL: u64 = 240;
/// The share of the memory available when a run starts that the images in flight may take;
/// the rest is the describer's, the outputs' and other programs'.
pub const AVAILABLE_MEMORY_SHARE: f64 = 0.5;
/// Environment variable giving the budget in MiB instead (a machine whose other programs will
/// want more later, or a test).
pub const MEMORY_BUDGET_ENV: &str = "DESCL_MEMORY_BUDGET_MB";

/// The estimated bytes of extracting a `width` × `height` image whose work image is
/// `work_width` × `work_height`.
pub fn extraction_bytes(width: u32, height: u32, work_width: u32, work_height: u32) -> u64 {
    u64::from(width) * u64::from(height) * DECODED_BYTES_PER_PIXEL
        + u64::from(work_width) * u64::from(work_height) * DETECTION_BYTES_PER_PIXEL
}

/// Bytes that the images in flight may take together; takers wait for one another.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    taken: Mutex<u64>,
    freed: Condvar,
}

/// Bytes taken from a [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
pub struct Taken<'a> {
    budget: &'a MemoryBudget,
    bytes: u64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            taken: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// [`MEMORY_BUDGET_ENV`] when set, else [`AVAILABLE_MEMORY_SHARE`] of the memory available
    /// now (the lower of the kernel's `MemAvailable` and what the cgroup's `memory.max` leaves);
    /// unbounded where neither can be read.
    pub fn of_machine() -> MemoryBudget {
        let from_env = std::env::var(MEMORY_BUDGET_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|mib| mib.saturating_mul(1 << 20));
        let limit = from_env.unwrap_or_else(|| {
            available_bytes().map_or(u64::MAX, |b| (b as f64 * AVAILABLE_MEMORY_SHARE) as u64)
        });
        MemoryBudget::new(limit)
    }

    /// Takes `bytes`, waiting while other images hold so much that they would not fit; alone,
    /// an image takes what it needs, even more than the limit.
    pub fn take(&self, bytes: u64) -> Taken<'_> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        while *taken > 0 && taken.saturating_add(bytes) > self.limit {
            taken = self.freed.wait(taken).unwrap_or_else(|e| e.into_inner());
        }
        *taken = taken.saturating_add(bytes);
        Taken {
            budget: self,
            bytes,
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut taken = self.budget.taken.lock().unwrap_or_else(|e| e.into_inner());
        *taken = taken.saturating_sub(self.bytes);
        self.budget.freed.notify_all();
    }
}

/// The memory available now: `MemAvailable` of `/proc/meminfo`, less where the cgroup v2
/// limit (`memory.max` − `memory.current`) leaves less.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)?;
    let cgroup = |name: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/sys/fs/cgroup/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let left = match (cgroup("memory.max"), cgroup("memory.current")) {
        (Some(max), Some(current)) => Some(max.saturating_sub(current)),
        _ => None,
    };
    Some(left.map_or(available, |l| l.min(available)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Takers never hold more than the limit together, unless one alone does; each waits
    /// rather than fails.
    #[test]
    fn takers_stay_within_the_budget_and_a_large_one_runs_alone() {
        let budget = MemoryBudget::new(100);
        let (now, most) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for bytes in [60, 30, 30, 250, 40, 60, 10] {
                let (budget, now, most) = (&budget, &now, &most);
                s.spawn(move || {
                    let _taken = budget.take(bytes);
                    let held = now.fetch_add(bytes, Ordering::SeqCst) + bytes;
                    most.fetch_max(held, Ordering::SeqCst);
                    assert!(held <= 100 || held == bytes, "{held} bytes held at once");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    now.fetch_sub(bytes, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(*budget.taken.lock().unwrap(), 0);
        assert_eq!(most.load(Ordering::SeqCst), 250);
    }

    #[test]
    fn the_bomb_s_estimate_is_what_was_measured() {
        // 8190² decoded, shrunk to 3200²: within 5 % of the 2.69 GB measured
        // (DETECTION_BYTES_PER_PIXEL).
        let bytes = extraction_bytes(8190, 8190, 3200, 3200) as f64;
        assert!((bytes / 2.69e9 - 1.0).abs() < 0.05, "{bytes}");
        assert!(available_bytes().is_some_and(|b| b > 0));
    }
}
