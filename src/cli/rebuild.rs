//! `groundidx rebuild`

use groundidx::Result;
use groundidx::store::Store;

use crate::cli::output;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// Make the index again from the ledger alone, without reading any document.
///
/// The new index replaces the old one in a single commit: searches see the old index until the
/// rebuild is done, and a rebuild that is interrupted leaves the old one in place.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(serde::Serialize)]
struct RebuildReport {
    generation: u64,
    chunks: u64,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let dir = cli.store_dir();
    if !dir.join("ledger.sqlite").exists() {
        return Err(groundidx::Error::NoStore { path: dir });
    }
    let (mut store, _caught_up) = Store::open(&dir, args.wait.lock_wait())?;
    let generation = store.rebuild()?;
    let chunks = store.ledger().counts()?.chunks;
    store.close()?;
    let report = RebuildReport {
        generation: generation.0,
        chunks,
    };
    if cli.json {
        output::json(&report)?;
    } else if !cli.quiet {
        output::line(format!(
            "rebuilt {} chunks at generation {}",
            report.chunks, report.generation
        ))?;
    }
    Ok(ExitCode::Success)
}
