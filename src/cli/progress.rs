//! The library's [`Progress`] drawn as an `indicatif` bar on stderr (hidden when asked or when
//! there is one item only).

use descl::progress::Progress;
use indicatif::{ProgressBar, ProgressStyle};

pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar on stderr; `visible: false` draws nothing (notes are still printed).
    pub fn new(visible: bool) -> Bar {
        let bar = if visible {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix:>10} [{bar:40}] {pos}/{len} {msg} {elapsed_precise} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Bar { bar }
    }
}

impl Progress for Bar {
    fn start(&self, stage: &str, len: u64) {
        self.bar.reset();
        self.bar.set_length(len);
        self.bar.set_prefix(stage.to_string());
        self.bar.set_message("");
    }
    fn set_length(&self, len: u64) {
        self.bar.set_length(len);
    }
    fn message(&self, msg: &str) {
        self.bar.set_message(msg.to_string());
    }
    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }
    fn note(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
