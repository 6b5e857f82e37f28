//! `groundidx status`

use groundidx::Result;
use groundidx::status;

use crate::cli::output;
use crate::cli::style;
use crate::cli::{Cli, ExitCode};

/// Show documents, chunks, generations and the last finished ingest. Takes no lock.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Exit 1 when the last finished ingest is older than this (e.g. 2h), or there was none:
    /// for monitoring
    #[arg(long, value_name = "DURATION", value_parser = parse_max_age)]
    pub max_age: Option<std::time::Duration>,
}

fn parse_max_age(text: &str) -> std::result::Result<std::time::Duration, String> {
    groundidx::clock::parse_duration(text)
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let dir = cli.store_dir();
    let report = status::status(&dir)?;
    let shared = match cli.shared_ledger(false, 2)? {
        Some(ledger) => Some(status::shared_status(&dir, &ledger)?),
        None => None,
    };
    let stale = args.max_age.map(|max_age| {
        let newest_allowed = groundidx::clock::now_ms() - max_age.as_millis() as i64;
        report
            .last_ingest_ms
            .is_none_or(|last| last < newest_allowed)
    });
    let code = if stale == Some(true) {
        tracing::error!(
            "the last finished ingest ({}) is older than --max-age",
            report.last_ingest.as_deref().unwrap_or("never")
        );
        ExitCode::Failure
    } else {
        ExitCode::Success
    };
    if cli.json {
        let mut value = serde_json::to_value(&report).unwrap_or_default();
        if let Some(shared) = &shared {
            value["shared"] = serde_json::to_value(shared).unwrap_or_default();
        }
        output::json(&value)?;
        return Ok(code);
    }
    if cli.quiet {
        return Ok(code);
    }
    let lag = match report.index_generation {
        Some(index) if index < report.generation => {
            format!(" (index at {index}: behind, the next ingest replays it)")
        }
        Some(_) => String::new(),
        None => " (the index cannot be used: run `groundidx rebuild`)".to_string(),
    };
    for (name, value) in [
        ("store", dir.display().to_string()),
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
        output::line(format!("{name:<12} {}", style::visible(&value)))?;
    }
    if let Some(problem) = &report.index_problem {
        output::line(format!("{:<12} {problem}", "index"))?;
    }
    if let Some(shared) = &shared {
        print_shared(shared)?;
    }
    if report.semantic.degraded() {
        output::line(format!(
            "{:<12} {}",
            "search",
            style::visible(&report.semantic.warning(report.mode))
        ))?;
    }
    for model in &report.models {
        let place = model
            .description
            .get("path")
            .or_else(|| model.description.get("url"))
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        output::line(format!(
            "{:<12} {} {}: {} of {} chunks embedded{}",
            "model",
            &model.model[..12],
            style::visible(place),
            model.vectors,
            model.chunks,
            if model.active {
                " (search uses it)"
            } else {
                ""
            }
        ))?;
    }
    Ok(code)
}

/// The shared ledger's lines of `status --ledger`.
fn print_shared(shared: &status::SharedStatus) -> Result<()> {
    let replica = match shared.replica_log_seq {
        Some(seq) if seq >= shared.log_seq => format!("at log position {seq}, in step"),
        Some(seq) => format!(
            "at log position {seq}, {} behind (`groundidx sync`, or a server, catches up)",
            shared.log_seq - seq
        ),
        None => "none in this store yet (`groundidx sync` makes it)".into(),
    };
    let writer = match &shared.writer.holder {
        Some(holder) if shared.writer.expires_in_ms > 0 => format!(
            "{holder}, epoch {}, {} s left",
            shared.writer.epoch,
            (shared.writer.expires_in_ms + 999) / 1000
        ),
        _ => format!("none (last epoch {})", shared.writer.epoch),
    };
    for (name, value) in [
        ("shared", shared.ledger.clone()),
        (
            "  log",
            format!(
                "generation {}, position {} (kept from {})",
                shared.generation, shared.log_seq, shared.log_floor_seq
            ),
        ),
        ("  replica", replica),
        ("  writer", writer),
        (
            "  calls",
            format!(
                "{} audit events, {} usage units, {} keys",
                shared.counts.audit_events,
                shared.counts.usage_units,
                shared.counts.idempotency_keys
            ),
        ),
    ] {
        output::line(format!("{name:<12} {}", style::visible(&value)))?;
    }
    for consumer in &shared.consumers {
        output::line(format!(
            "{:<12} {} {} at position {} ({}, seen {} s ago)",
            "  host",
            style::visible(&consumer.host),
            style::visible(&consumer.store_dir),
            consumer.applied_seq,
            consumer.state,
            consumer.seen_seconds_ago
        ))?;
    }
    Ok(())
}
