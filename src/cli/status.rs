//! `groundidx status`

use groundidx::Result;
use groundidx::status;
use groundidx::store::StoreReader;

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Show documents, chunks, generations and the last finished ingest. Takes no lock.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    let reader = StoreReader::open(&cli.store_dir())?;
    let report = status::status(&reader)?;
    if cli.json {
        output::json(&report)?;
        return Ok(ExitCode::Success);
    }
    let lag = if report.index_generation < report.generation {
        format!(
            " (index at {}: behind, the next ingest replays it)",
            report.index_generation
        )
    } else {
        String::new()
    };
    for (name, value) in [
        ("store", reader.paths().dir.display().to_string()),
        ("documents", report.documents.to_string()),
        ("sources", report.sources.to_string()),
        ("chunks", report.chunks.to_string()),
        ("generation", format!("{}{lag}", report.generation)),
        (
            "last ingest",
            report.last_ingest.clone().unwrap_or_else(|| "never".into()),
        ),
        ("audit events", report.audit_events.to_string()),
        ("usage units", report.usage_units.to_string()),
        ("keys", report.idempotency_keys.to_string()),
    ] {
        output::line(format!("{name:<12} {value}"))?;
    }
    Ok(ExitCode::Success)
}
