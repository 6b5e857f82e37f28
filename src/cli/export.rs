//! `groundidx export`

use std::io::Write;

use groundidx::store;
use groundidx::{Error, Result, export};

use crate::cli::{Cli, ExitCode};

/// Print every chunk as one JSON object per line: chunk_id, paths, sources, heading, lines, pages
/// (for a PDF), text.
///
/// Read from the ledger alone, in chunk ID order; for an embedding pipeline or a backup.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    let ledger = store::open_ledger(&cli.store_dir())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    export::export(&ledger, |chunk| {
        serde_json::to_writer(&mut out, chunk)
            .map_err(|err| Error::io("write to stdout", err.into()))?;
        out.write_all(b"\n")
            .map_err(|err| Error::io("write to stdout", err))
    })?;
    out.flush()
        .map_err(|err| Error::io("write to stdout", err))?;
    Ok(ExitCode::Success)
}
