//! The library's progress trait (`descl::progress::Progress`) answered by a Python object, so
//! `Extractor.extract_many` reports through the same calls the command line's bars receive.
//!
//! The object may have any of the trait's methods, `start(stage, total)`, `set_length(total)`,
//! `message(text)`, `inc(n)`, `note(line)`, `finish()` (missing ones do nothing, as the trait's
//! defaults), or be a plain callable, called as `callback(done, total)` after every step.
//! `descl._progress.default_progress()` gives a tqdm bar when tqdm is installed, else a counter
//! on stderr.
//!
//! The library calls these from the thread that runs the work, with the GIL released; each call
//! takes the GIL for its duration. An exception raised by the object, or a pending Ctrl-C
//! (`KeyboardInterrupt`, checked at every step), cancels the rest of the work: it is kept and
//! raised when the library call returns.

use descl::progress::Progress;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

pub struct PyProgress {
    target: Py<PyAny>,
    /// A plain callable rather than an object with the trait's methods.
    callable: bool,
    done: AtomicU64,
    total: AtomicU64,
    cancelled: AtomicBool,
    error: Mutex<Option<PyErr>>,
}

impl PyProgress {
    pub fn new(target: &Bound<'_, PyAny>) -> PyResult<PyProgress> {
        let has_methods = ["start", "inc", "finish"]
            .iter()
            .any(|m| target.hasattr(*m).unwrap_or(false));
        let callable = !has_methods && target.is_callable();
        if !has_methods && !callable {
            return Err(crate::errors::value_error(format!(
                "progress: expected True, False, a callable (done, total) or an object with \
                 start/inc/finish methods, got {}",
                target.get_type().name()?
            )));
        }
        Ok(PyProgress {
            target: target.clone().unbind(),
            callable,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            error: Mutex::new(None),
        })
    }

    /// The exception that cancelled the work, if any (taken: raised once).
    pub fn take_error(&self) -> Option<PyErr> {
        self.error.lock().ok().and_then(|mut e| e.take())
    }

    fn fail(&self, e: PyErr) {
        self.cancelled.store(true, Ordering::Relaxed);
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }

    /// Calls `method(*args)` on the object if it has the method (and nothing was raised yet).
    fn call<A>(&self, method: &str, args: A)
    where
        A: for<'py> pyo3::call::PyCallArgs<'py>,
    {
        if self.callable || self.cancelled() {
            return;
        }
        Python::attach(|py| {
            let target = self.target.bind(py);
            if !target.hasattr(method).unwrap_or(false) {
                return;
            }
            if let Err(e) = target.call_method1(method, args) {
                self.fail(e);
            }
        });
    }
}

impl Progress for PyProgress {
    /// Whether the work should stop (an exception in the object, or Ctrl-C).
    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
    fn start(&self, stage: &str, len: u64) {
        self.total.store(len, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.call("start", (stage, len));
    }
    fn set_length(&self, len: u64) {
        self.total.store(len, Ordering::Relaxed);
        self.call("set_length", (len,));
    }
    fn message(&self, msg: &str) {
        self.call("message", (msg,));
    }
    fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if self.cancelled() {
            return;
        }
        Python::attach(|py| {
            if let Err(e) = py.check_signals() {
                self.fail(e);
                return;
            }
            if self.callable {
                let total = self.total.load(Ordering::Relaxed);
                if let Err(e) = self.target.bind(py).call1((done, total)) {
                    self.fail(e);
                }
            }
        });
        self.call("inc", (n,));
    }
    fn note(&self, line: &str) {
        self.call("note", (line,));
    }
    fn finish(&self) {
        // Called even after a cancellation, so a bar is closed.
        if self.callable {
            return;
        }
        Python::attach(|py| {
            let target = self.target.bind(py);
            if target.hasattr("finish").unwrap_or(false) {
                if let Err(e) = target.call_method0("finish") {
                    self.fail(e);
                }
            }
        });
    }
}
