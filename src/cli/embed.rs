//! `groundidx embed`: embed every chunk that has no vector under the configured model (or, with
//! none, the model the store's vectors came from), alone
//! (the same work `ingest --embed-model` does after its lexical part).

use groundidx::ingest::Interrupt;
use groundidx::ingest::embed::{self, EmbedReport};
use groundidx::store::Store;
use groundidx::{Error, Result};

use crate::cli::embed_args::EmbedArgs;
use crate::cli::output;
use crate::cli::progress::Bar;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// Embed the chunks that have no vector under the model yet.
///
/// With no model given, the model the store's vectors came from, found again by its fingerprint
/// (an error names its folder or server when it is gone or changed).
///
/// Each passage is embedded once per model, ever: chunks are named by their content, so
/// unchanged, renamed or shared passages keep their vector. A run ended by a signal or a kill
/// keeps every page it committed; the next run embeds only what is missing. A new model's
/// vectors are used by search once they cover every chunk; until then the old model's are.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub embed: EmbedArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let configured = args.embed.model_config()?;
    let interrupt = Interrupt::default();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(signal, interrupt.flag(), signal as usize)
            .map_err(|err| Error::io(format!("handle signal {signal}"), err))?;
    }
    let (mut store, _) = Store::open_writer(
        &cli.store_dir(),
        args.wait.lock_wait(),
        groundidx::store::StoreConfig::default(),
        cli.shared_writing()?.as_ref(),
    )?;
    // No model given: the one the store's vectors came from, found again by its fingerprint.
    let model = match configured {
        Some(model) => model,
        None => match groundidx::store::recorded_model(store.ledger())? {
            Some((model, _)) => model,
            None => {
                return Err(Error::Usage(
                    "no embedding model\nhint: pass --embed-model DIR (a sentence-transformers folder), \
                     or set embed_model in groundidx.toml"
                        .into(),
                ));
            }
        },
    };
    let bar = Bar::new(cli.quiet || cli.json);
    let result = embed::embed_missing(&mut store, &model, &interrupt, &bar);
    bar.finish();
    let report = result?;
    store.close()?;
    if cli.json {
        output::json(&report)?;
    } else if !cli.quiet {
        print_embedding(&report)?;
    }
    Ok(ExitCode::Success)
}

/// The text lines of an embedding report, shared with `ingest`.
pub fn print_embedding(report: &EmbedReport) -> Result<()> {
    output::line(format!(
        "embedding  {} passages embedded; {} of {} chunks have a vector ({}){}",
        report.embedded,
        report.vectors,
        report.chunks,
        &report.model[..12],
        if report.active {
            ""
        } else {
            "; search keeps the previous model until this one covers every chunk"
        }
    ))
}
