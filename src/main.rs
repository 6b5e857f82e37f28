//! The `groundidx` binary: parse the command line, run it, exit with its status.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    cli::run(&cli).into()
}
