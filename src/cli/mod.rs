//! The `descl` command line: one file per subcommand.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// `println!` that returns the write error instead of panicking: `descl ... --json | head`
/// closes the pipe early, which is the reader's choice, not a failure ([`main`] ends quietly).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod args;
mod bench;
mod extract;
mod matches;
mod models;
mod pairs;
mod progress;
mod sfm;

#[derive(Parser)]
#[command(
    name = "descl",
    version,
    about = "Learned local features: extract, match, export to COLMAP, benchmark"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Detect keypoints and compute descriptors; writes one .npz features file per image.
    Extract(extract::Args),
    /// Match image pairs (images or .npz features files), verify geometry, draw matches.
    Match(matches::Args),
    /// Choose the pairs of a set (exhaustive, sequential, retrieval) and write a pairs file.
    Pairs(pairs::Args),
    /// Extract, match and verify a folder of images into a COLMAP database (and reconstruct).
    Sfm(sfm::Args),
    /// Run benchmarks (HPatches, Oxford, UBC PhotoTour, relative pose, speed).
    Bench(Box<bench::Args>),
    /// List the models in models/.
    Models(models::Args),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Extract(a) => extract::run(a),
        Command::Match(a) => matches::run(a),
        Command::Pairs(a) => pairs::run(a),
        Command::Sfm(a) => sfm::run(a),
        Command::Bench(a) => bench::run(*a),
        Command::Models(a) => models::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): what it wanted was written.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        // A usage error found past parsing (a flag that the inputs make meaningless) ends as
        // clap ends its own (exit code 2).
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(usage) => usage.exit(),
            Err(e) => fail(&e),
        },
    }
}

fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", message(e));
    ExitCode::FAILURE
}

/// A usage error (clap's, exit code 2) telling `e`: flags the inputs make meaningless.
fn usage_error(e: impl std::fmt::Display) -> anyhow::Error {
    clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{e}\n")).into()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, each told once: the library's errors already include their
/// source (`path: cause`), which anyhow's `{:#}` would print again after them.
fn message(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}
