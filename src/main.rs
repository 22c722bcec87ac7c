use std::process::ExitCode;

fn main() -> ExitCode {
    descl_cli::main()
}

#[path = "cli/mod.rs"]
mod descl_cli;
