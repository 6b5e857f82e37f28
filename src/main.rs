//! The `groundidx` binary: parse the command line, run it, exit with its status.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main().into()
}
