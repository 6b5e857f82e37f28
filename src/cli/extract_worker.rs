//! `groundidx extract-worker FORMAT` (hidden): the child process `extract::isolate` starts to
//! read one file of a format whose parser is a third party's. It limits its own memory and CPU
//! time, reads the file from stdin and writes its extraction as JSON to stdout; the parent
//! turns every way it can end into a result for the file.

use groundidx::extract::Limits;
use groundidx::extract::isolate::{self, WorkerLimits};
use groundidx::format::Format;

use super::ExitCode;

/// The settings the parent passes; none has a default, so a worker never runs under limits
/// its parent did not choose.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The format of the bytes on stdin (pdf, …)
    #[arg(value_parser = parse_format)]
    pub format: Format,
    /// The most memory (bytes) this process may map
    #[arg(long)]
    pub max_memory: u64,
    /// How long the file may take (milliseconds)
    #[arg(long)]
    pub time_ms: u64,
    /// The deepest nesting followed
    #[arg(long)]
    pub max_depth: usize,
    /// The most bytes of text written
    #[arg(long)]
    pub max_text_bytes: usize,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::parse(name).ok_or_else(|| format!("unknown format {name:?}"))
}

impl Args {
    fn limits(&self) -> Limits {
        WorkerLimits {
            max_memory: self.max_memory,
            time_ms: self.time_ms,
            max_depth: self.max_depth,
            max_text_bytes: self.max_text_bytes,
        }
        .limits()
    }
}

pub fn run(args: &Args) -> groundidx::Result<ExitCode> {
    match isolate::worker_main(args.format, &args.limits()) {
        Ok(()) => Ok(ExitCode::Success),
        Err(err) => Err(groundidx::Error::io(
            format!("extract-worker {}", args.format),
            err,
        )),
    }
}
