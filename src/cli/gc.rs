//! `groundidx gc`

use groundidx::{Result, clock, keys};

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Delete expired idempotency keys, the vectors of embedding models search no longer uses, and
/// the vectors of chunks no document holds any more.
///
/// Audit and usage rows stay, so a very late retry is still neither logged nor counted twice.
/// Without gc a vector is kept forever, so text that comes back is never embedded again.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    if let Some(shared) = cli.shared_ledger(false, 2)? {
        // Keys expire by the database's clock; the log goes below the slowest active replica.
        let removed = shared.prune_keys()?;
        let floor = shared.prune_log(groundidx::store::LOG_RETENTION_SECS)?;
        if cli.json {
            output::json(&serde_json::json!({
                "keys_removed": removed,
                "log_floor": floor,
            }))?;
        } else if !cli.quiet {
            output::line(format!("removed {removed} expired keys"))?;
            output::line(format!("pruned the shared log up to position {floor}"))?;
        }
        return Ok(ExitCode::Success);
    }
    let removed = keys::gc(&cli.store_dir(), clock::now_ms())?;
    let vectors = keys::gc_vectors(&cli.store_dir())?;
    if cli.json {
        output::json(&serde_json::json!({
            "keys_removed": removed,
            "vectors_removed": {
                "replaced_models": vectors.other_models,
                "removed_chunks": vectors.orphans,
            },
        }))?;
    } else if !cli.quiet {
        output::line(format!("removed {removed} expired keys"))?;
        output::line(format!(
            "removed {} vectors of replaced models, {} of removed chunks",
            vectors.other_models, vectors.orphans
        ))?;
    }
    Ok(ExitCode::Success)
}
