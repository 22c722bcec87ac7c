//! Progress of long library work, reported through a small trait so that the library stays
//! free of terminal code: the `descl` binary implements it with `indicatif` bars, tests and
//! library users pass [`Silent`] (or their own implementation, e.g. a Python callback).

/// Receives the progress of one stage at a time. Every method has a do-nothing default, and
/// implementations must be `Sync`: stages report from rayon worker threads.
pub trait Progress: Sync {
    /// A stage begins: `stage` names it ("extract", "match", …) and `len` counts its steps
    /// (0 when unknown yet).
    fn start(&self, _stage: &str, _len: u64) {}
    /// The total of the current stage becomes known or changes.
    fn set_length(&self, _len: u64) {}
    /// A short description of what the stage works on now (a sequence, a scene).
    fn message(&self, _msg: &str) {}
    /// `n` more steps of the current stage are done.
    fn inc(&self, _n: u64) {}
    /// Something for the user (a warning, a skipped input) that must not be hidden by a bar.
    fn note(&self, _line: &str) {}
    /// The current stage is over.
    fn finish(&self) {}
    /// Whether the receiver asked the work to stop (e.g. Python's KeyboardInterrupt): stages
    /// that check it report the items not started yet as not done instead of doing them.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {}
