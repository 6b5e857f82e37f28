//! `groundidx verify`

use groundidx::Result;
use groundidx::store::StoreReader;
use groundidx::verify;

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Check that the index holds exactly the ledger's chunk IDs, each once.
///
/// Exit 0 when they are identical, 1 otherwise. A lag that the next writer's replay heals is
/// reported apart from a real difference. Takes no lock and writes nothing.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(cli: &Cli, _args: &Args) -> Result<ExitCode> {
    let reader = StoreReader::open(&cli.store_dir())?;
    let report = verify::verify(&reader)?;
    if cli.json {
        output::json(&report)?;
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
        ] {
            for id in ids {
                output::line(format!("{what}: {id}"))?;
            }
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
        if report.identical {
            output::line("ok: identical")?;
        } else if report.lag_only || report.vectors.as_ref().is_some_and(|v| v.lag_only) {
            output::line("index lags the ledger; the next ingest or `groundidx rebuild` heals it")?;
        } else {
            output::line("differs\nhint: run `groundidx rebuild`")?;
        }
    }
    Ok(if report.identical {
        ExitCode::Success
    } else {
        ExitCode::Failure
    })
}
