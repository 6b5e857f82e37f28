//! `groundidx sync`

use groundidx::Result;
use groundidx::store::{OtherLedger, StoreConfig, sync_replica};

use crate::cli::output;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// Bring this host's replica of the shared ledger (--ledger) and its index up to date.
///
/// Copies what other hosts published since the replica's position (or a whole snapshot for a new
/// store, or one the shared log no longer reaches), applies it to the index, and records the
/// host's position in the shared ledger. `serve` and `mcp` do this every second by themselves.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Make the store a replica of --ledger even if it copies another shared ledger: its
    /// content is replaced by a copy of this one (without it, such a store is refused)
    #[arg(long)]
    pub rebind: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let Some(shared) = cli.shared_ledger(false, 2)? else {
        return Err(groundidx::Error::Usage(
            "sync copies a shared ledger into this store: pass --ledger postgres://… (or set ledger in groundidx.toml)".into(),
        ));
    };
    let report = sync_replica(
        &cli.store_dir(),
        args.wait.lock_wait(),
        StoreConfig::default(),
        &shared,
        if args.rebind {
            OtherLedger::Rebind
        } else {
            OtherLedger::Refuse
        },
    )?;
    if cli.json {
        output::json(&report)?;
    } else if !cli.quiet {
        output::line(format!(
            "replica at generation {} (shared log position {}, {})",
            report.generation,
            report.log_seq,
            match report.replica {
                groundidx::store::ReplicaSync::InStep => "already in step",
                groundidx::store::ReplicaSync::Pulled => "changes copied",
                groundidx::store::ReplicaSync::Bootstrapped => "copied whole",
            }
        ))?;
    }
    Ok(ExitCode::Success)
}
