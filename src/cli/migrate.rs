//! `groundidx migrate`

use groundidx::ledger::postgres::MigrateReport;
use groundidx::ledger::{Access, Ledger, SCHEMA_VERSION};
use groundidx::store::StorePaths;
use groundidx::{Error, Result};

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Create the ledger's schema, or upgrade it to this version of groundidx.
///
/// With --ledger, the shared PostgreSQL ledger (in --ledger-schema); without it, the store's
/// own SQLite ledger. Migrating twice, or from two hosts at once, is safe: the second finds
/// nothing to do. The first write (`ingest`) migrates too; servers and readers never do, and
/// refuse an older schema with a hint to run this.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Change nothing: exit 1 when an upgrade is due (for deploy scripts)
    #[arg(long)]
    pub check: bool,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let report = if cli.ledger.is_some() {
        shared(cli, args)?
    } else {
        local(cli, args)?
    };
    let due = report.from != report.to;
    if cli.json {
        output::json(&serde_json::json!({
            "backend": report.backend,
            "ledger": report.ledger,
            "from": report.from,
            "to": report.to,
            "upgraded": due && !args.check,
            "upgrade_due": due && args.check,
        }))?;
    } else if !cli.quiet {
        output::line(match (due, args.check) {
            (false, _) => format!("{} is at schema version {}", report.ledger, report.to),
            (true, true) => format!(
                "{} is at schema version {}; this groundidx would upgrade it to {}",
                report.ledger, report.from, report.to
            ),
            (true, false) => format!(
                "{} upgraded from schema version {} to {}",
                report.ledger, report.from, report.to
            ),
        })?;
    }
    Ok(if due && args.check {
        ExitCode::Failure
    } else {
        ExitCode::Success
    })
}

fn shared(cli: &Cli, args: &Args) -> Result<MigrateReport> {
    let url = cli.ledger.clone().unwrap_or_default();
    let ledger =
        groundidx::ledger::postgres::PgLedger::connect(&groundidx::ledger::postgres::PgOptions {
            url,
            schema: cli.ledger_schema.clone(),
            max_connections: 2,
            ca_file: cli.ledger_ca.clone(),
        })?;
    if args.check {
        let from = ledger.schema_version()?;
        if from > groundidx::ledger::postgres::PG_SCHEMA_VERSION {
            ledger.check_schema()?;
        }
        return Ok(MigrateReport {
            backend: "postgres",
            ledger: ledger.describe(),
            from,
            to: groundidx::ledger::postgres::PG_SCHEMA_VERSION,
        });
    }
    ledger.migrate()
}

fn local(cli: &Cli, args: &Args) -> Result<MigrateReport> {
    let dir = cli.store_dir();
    let path = StorePaths::new(&dir).ledger();
    let from = if path.exists() {
        Ledger::open(&path, Access::ReadOnly)?.schema_version()?
    } else {
        0
    };
    if !args.check {
        std::fs::create_dir_all(&dir)
            .map_err(|err| Error::io(format!("create store {}", dir.display()), err))?;
        Ledger::open(&path, Access::ReadWrite)?;
    }
    Ok(MigrateReport {
        backend: "sqlite",
        ledger: path.display().to_string(),
        from,
        to: SCHEMA_VERSION,
    })
}
