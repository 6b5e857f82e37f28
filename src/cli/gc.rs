//! `groundidx gc`

use groundidx::{Result, agent, clock, store};

use crate::cli::output;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// `gc`'s arguments; what it deletes and keeps is said on `Command::Gc`, which `gc --help` shows.
///
/// Without --ledger gc takes no lock, so the lock wait is worded for the shared ledger's lease,
/// the only thing it waits for.
#[derive(Debug, clap::Args)]
#[command(
    mut_arg("wait", |arg| arg.help(
        "With --ledger: wait up to this many seconds for the writer lease before removing \
         vectors, then exit 75 (without --ledger gc waits for nothing)"
    )),
    mut_arg("no_wait", |arg| arg.help(
        "With --ledger: exit 75 at once if another host holds the writer lease"
    )),
)]
pub struct Args {
    /// With --ledger: how long a silent replica holds the shared log back (1h, 7d)
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_retention)]
    pub log_retention: std::time::Duration,

    #[command(flatten)]
    pub wait: WaitArgs,
}

fn parse_retention(text: &str) -> std::result::Result<std::time::Duration, String> {
    groundidx::clock::parse_duration(text)
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let shared = cli.shared_ledger(false, 2)?;
    // Keys expire by the shared ledger's clock when there is one.
    let removed = agent::recorder::call_ledger(
        &cli.store_dir(),
        shared.clone(),
        groundidx::ledger::Access::ReadWrite,
    )?
    .prune_keys(clock::now_ms())?;
    if let Some(shared) = shared {
        // The log goes below the slowest active replica.
        let floor = shared.prune_log(args.log_retention.as_secs())?;
        let replaced = store::gc_shared_vectors(&shared, args.wait.lock_wait(), cli.lease_ttl)?;
        if cli.json {
            output::json(&serde_json::json!({
                "keys_removed": removed,
                "log_floor": floor,
                "vectors_removed": {
                    "replaced_models": replaced,
                },
            }))?;
        } else if !cli.quiet {
            output::line(format!("removed {removed} expired keys"))?;
            output::line(format!("pruned the shared log up to position {floor}"))?;
            output::line(format!("removed {replaced} vectors of replaced models"))?;
        }
        return Ok(ExitCode::Success);
    }
    let vectors = agent::gc_vectors(&cli.store_dir())?;
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
