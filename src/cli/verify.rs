//! `groundidx verify`

use groundidx::Result;
use groundidx::store::StoreReader;
use groundidx::verify;

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Check that the index holds exactly the ledger's chunk IDs, each once, and that every chunk's
/// text hashes to its ID.
///
/// Exit 0 when they are identical, 1 otherwise. A chunk whose stored text does not hash to its
/// ID is named; chunks an older groundidx made (IDs of whitespace-folded text) are counted, and
/// the next ingest of their folders chunks them again. A lag that the next writer's replay heals is
/// reported apart from a real difference. Takes no lock and writes nothing. With --ledger, the
/// store's replica is also compared with the shared ledger (a lag the next sync heals is told
/// apart there too).
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    let reader = StoreReader::open(&cli.store_dir())?;
    let report = verify::verify(&reader)?;
    let replica = match cli.shared_ledger(false, 2)? {
        Some(shared) => Some(verify::verify_replica(&reader, &shared)?),
        None => None,
    };
    let identical = report.identical && replica.as_ref().is_none_or(|r| r.identical);
    if cli.json {
        let mut value = serde_json::to_value(&report).unwrap_or_default();
        if let Some(replica) = &replica {
            value["replica"] = serde_json::to_value(replica).unwrap_or_default();
            value["identical"] = identical.into();
        }
        output::json(&value)?;
    } else {
        output::line(format!(
            "ledger  {} chunks at generation {}",
            report.ledger_chunks, report.ledger_generation
        ))?;
        output::line(format!(
            "index   {} chunks at generation {}",
            report.index_chunks, report.index_generation
        ))?;
        for (what, ids) in [
            ("missing from index", &report.missing_from_index),
            ("extra in index", &report.extra_in_index),
            ("duplicated in index", &report.duplicated_in_index),
            (
                "text does not hash to its ID in the ledger",
                &report.altered_in_ledger,
            ),
            (
                "no document references it in the ledger",
                &report.unreferenced_in_ledger,
            ),
        ] {
            for id in ids {
                output::line(format!("{what}: {id}"))?;
            }
        }
        if report.broken_links_in_ledger > 0 {
            output::line(format!(
                "ledger  {} entries of documents' chunk lists are missing or name a document or chunk it lacks",
                report.broken_links_in_ledger
            ))?;
        }
        if report.outdated_in_ledger > 0 {
            output::line(format!(
                "ledger  {} chunks made by an older groundidx (IDs of whitespace-folded text): their text may be another variant of what the files hold\nhint: run `groundidx ingest` on their folders; it chunks their documents again",
                report.outdated_in_ledger
            ))?;
        }
        if let Some(vectors) = &report.vectors {
            output::line(format!(
                "vectors {} in the ledger, {} in the vector index (model {})",
                vectors.ledger_vectors,
                vectors.index_vectors,
                &vectors.model[..12]
            ))?;
            if let Some(problem) = &vectors.problem {
                output::line(format!("vector index: {problem}"))?;
            }
            for (what, ids) in [
                ("missing from the vector index", &vectors.missing_from_index),
                ("extra in the vector index", &vectors.extra_in_index),
                (
                    "duplicated in the vector index",
                    &vectors.duplicated_in_index,
                ),
            ] {
                for id in ids {
                    output::line(format!("{what}: {id}"))?;
                }
            }
        }
        if let Some(replica) = &replica {
            output::line(format!(
                "shared  generation {}, log position {} (this replica's: {})",
                replica.ledger_generation, replica.ledger_log_seq, replica.replica_log_seq
            ))?;
            for (what, ids) in [
                ("missing from the replica", &replica.missing_from_replica),
                ("extra in the replica", &replica.extra_in_replica),
            ] {
                for id in ids {
                    output::line(format!("{what}: {id}"))?;
                }
            }
            if replica.lag_only {
                output::line("the replica lags the shared ledger; its next sync heals it")?;
            } else if !replica.identical {
                output::line(
                    "the replica differs from the shared ledger\nhint: remove the store folder and run `groundidx --ledger … sync`",
                )?;
            }
        }
        if identical {
            output::line("ok: identical")?;
        } else if report.identical {
            // Only the replica differs; said above.
        } else if report.lag_only || report.vectors.as_ref().is_some_and(|v| v.lag_only) {
            output::line("index lags the ledger; the next ingest or `groundidx rebuild` heals it")?;
        } else if !report.altered_in_ledger.is_empty()
            || report.broken_links_in_ledger > 0
            || !report.unreferenced_in_ledger.is_empty()
        {
            // `rebuild` makes the index from the ledger: it cannot mend the ledger's text.
            output::line(
                "differs: the ledger was altered outside groundidx\nhint: make the store again (move its folder away, then `groundidx ingest` its folders)",
            )?;
        } else if report.outdated_in_ledger > 0 {
            output::line("differs")?;
        } else {
            output::line("differs\nhint: run `groundidx rebuild`")?;
        }
    }
    Ok(if identical {
        ExitCode::Success
    } else {
        ExitCode::Failure
    })
}
