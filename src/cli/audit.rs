//! `groundidx audit` and `groundidx usage`

use groundidx::clock::parse_duration;
use groundidx::{Error, Result, clock};

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Filters for the audit and usage logs.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only entries from this long ago on, e.g. 1h, 30m, 7d
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,

    /// Only this client's entries
    #[arg(long, value_name = "ID")]
    pub client: Option<String>,
}

fn since_ms(args: &Args) -> Result<i64> {
    match &args.since {
        None => Ok(0),
        Some(text) => {
            let duration =
                parse_duration(text).map_err(|err| Error::Usage(format!("--since: {err}")))?;
            Ok(clock::now_ms() - duration.as_millis() as i64)
        }
    }
}

/// Print the tool calls agents made, one entry per call however often it was retried.
pub fn run_audit(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let rows = cli
        .call_ledger()?
        .audit_rows(since_ms(args)?, args.client.as_deref())?;
    if cli.json {
        output::json(&serde_json::json!({ "events": rows }))?;
        return Ok(ExitCode::Success);
    }
    if rows.is_empty() {
        output::line("no audit events")?;
    }
    for row in &rows {
        output::line(format!(
            "{}  {:<12} {:<11} {:<9} {:>3} hits  gen {:<4} {}  {}",
            clock::rfc3339(row.created_at),
            row.scope,
            row.tool,
            row.outcome,
            row.n_hits,
            row.index_generation,
            row.key,
            row.arguments
        ))?;
    }
    Ok(ExitCode::Success)
}

/// Print the units each client used per rate-limit window.
pub fn run_usage(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let rows = cli
        .call_ledger()?
        .usage_rows(since_ms(args)?, args.client.as_deref())?;
    let total: u64 = rows.iter().map(|r| r.units).sum();
    if cli.json {
        output::json(&serde_json::json!({ "usage": rows, "total_units": total }))?;
        return Ok(ExitCode::Success);
    }
    for row in &rows {
        output::line(format!(
            "{}  {:<12} {:>6} units / {} s",
            clock::rfc3339(row.window_start),
            row.client,
            row.units,
            row.window_seconds
        ))?;
    }
    output::line(format!("total {total} units"))?;
    Ok(ExitCode::Success)
}
