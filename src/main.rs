//! The `groundidx` binary: parse the command line, run it, exit with its status.

mod cli;

/// mimalloc, not the system's allocator: it gives back what an ingest frees (see `Cargo.toml`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main().into()
}
