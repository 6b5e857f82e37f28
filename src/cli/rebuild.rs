//! `groundidx rebuild`

use groundidx::Result;
use groundidx::store::Store;

use crate::cli::index_args::{INDEX_HEADING, IdFieldArgs};
use crate::cli::output;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// Make the index again from the ledger alone, without reading any document.
///
/// The new index is built in a new folder and swapped in once committed: searches see the old
/// index until the rebuild is done, a rebuild that is interrupted leaves the old one in place,
/// and an index that is missing, damaged or of an older schema is made again.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten, next_help_heading = INDEX_HEADING)]
    pub id_fields: IdFieldArgs,

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
    groundidx::store::StorePaths::new(&dir).existing_ledger()?;
    let (store, generation) =
        Store::open_writer_to_rebuild(&dir, args.wait.lock_wait(), args.id_fields.store_config())?;
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
