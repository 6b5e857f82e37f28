//! `groundidx gc`

use groundidx::{Result, clock, keys};

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Delete expired idempotency keys, and nothing else: audit and usage rows stay, so a very late
/// retry is still neither logged nor counted twice.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    let removed = keys::gc(&cli.store_dir(), clock::now_ms())?;
    if cli.json {
        output::json(&serde_json::json!({ "keys_removed": removed }))?;
    } else if !cli.quiet {
        output::line(format!("removed {removed} expired keys"))?;
    }
    Ok(ExitCode::Success)
}
