//! `groundidx ingest DIR…`

use std::path::PathBuf;

use groundidx::ingest::{self, DEFAULT_BATCH_FILES, IngestConfig, IngestReport, Interrupt};
use groundidx::{Error, Result};

use crate::cli::embed_args::EmbedArgs;
use crate::cli::index_args::{INDEX_HEADING, IndexArgs};
use crate::cli::output;
use crate::cli::progress::Bar;
use crate::cli::{Cli, ExitCode, WaitArgs};

/// Index folders of Markdown (.md, .markdown) and text (.txt).
///
/// Unchanged files (same size, mtime and inode) are not read again; changed files replace only
/// the chunks that changed; files gone from a folder leave the index, but only after a walk
/// that could read everything under them. Exit 3 when some path could not be read, 75 when
/// another writer holds the store.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folders to ingest; each one is a root, and a run never touches documents of other roots
    /// [default: `roots` in groundidx.toml]
    #[arg(value_name = "DIR")]
    pub roots: Vec<PathBuf>,

    /// Read and hash every file, ignoring the stat cache
    #[arg(long)]
    pub rehash: bool,

    /// Allow a run to remove more than half of a folder's documents
    #[arg(long)]
    pub allow_mass_delete: bool,

    /// Files per committed batch
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH_FILES, hide = true)]
    pub batch_files: usize,

    /// Keep running: ingest again whenever files change (after changes settle for --settle)
    #[arg(long)]
    pub watch: bool,

    /// With --watch, how long changes must stop before a run starts (1s, 5s, 1m)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_settle, requires = "watch")]
    pub settle: std::time::Duration,

    // Flattened groups last: the heading of each holds for every argument after it.
    #[command(flatten, next_help_heading = INDEX_HEADING)]
    pub index: IndexArgs,

    #[command(flatten)]
    pub embed: EmbedArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

fn parse_settle(text: &str) -> std::result::Result<std::time::Duration, String> {
    groundidx::clock::parse_duration(text)
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    if args.roots.is_empty() {
        return Err(Error::Usage(
            "no folders to ingest\nhint: name them (groundidx ingest docs/), or list them as \
             roots = [\"docs\"] in groundidx.toml"
                .into(),
        ));
    }
    let interrupt = Interrupt::default();
    // SIGINT and SIGTERM set a flag the run checks at its safe points, so it ends between
    // batches, says how far it got, and leaves a store the next run continues.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(signal, interrupt.flag(), signal as usize)
            .map_err(|err| Error::io(format!("handle signal {signal}"), err))?;
    }
    let config = IngestConfig {
        interrupt: interrupt.clone(),
        rehash: args.rehash,
        allow_mass_delete: args.allow_mass_delete,
        batch_files: args.batch_files,
        embed: args.embed.model_config()?,
        ..args.index.ingest_config()?
    };
    // Check the folders before waiting for a lock or creating a store.
    for dir in &args.roots {
        ingest::canonical_root(dir)?;
    }
    let shared = cli.shared_writing()?;
    if args.watch {
        return watch(cli, args, config, &interrupt, shared);
    }
    // The folders are walked while the store opens, once it is this run's alone.
    let (mut store, walks) = ingest::open_walking(
        &cli.store_dir(),
        args.wait.lock_wait(),
        shared.as_ref(),
        &args.roots,
        &config,
    )?;
    let bar = Bar::new(cli.quiet || cli.json);
    let result = ingest::ingest_walked(&mut store, walks, &config, &bar);
    bar.finish();
    let report = result?;
    store.close()?;
    print_report(cli, &report)?;
    Ok(if report.held_back() {
        ExitCode::HeldBack
    } else {
        ExitCode::Success
    })
}

/// `ingest --watch`: a run now, then one per settled burst of changes, until killed.
fn watch(
    cli: &Cli,
    args: &Args,
    config: IngestConfig,
    interrupt: &Interrupt,
    shared: Option<groundidx::store::SharedWriting>,
) -> Result<ExitCode> {
    let watch_config = groundidx::ingest::watch::WatchConfig {
        shared,
        roots: args.roots.clone(),
        ingest: config,
        wait: args.wait.lock_wait(),
        settle: args.settle,
    };
    groundidx::ingest::watch::watch(&cli.store_dir(), &watch_config, |outcome| {
        match outcome.and_then(|report| print_report(cli, &report)) {
            Ok(()) => true,
            // An interrupted run ends the watch, with the error that says how far it got.
            Err(error @ Error::Interrupted { .. }) => {
                output::error(&error);
                false
            }
            // A failed run is reported and the watch goes on: the next change may fix it.
            Err(error) => {
                output::error(&error);
                true
            }
        }
    })?;
    Ok(match interrupt.signal() {
        Some(signal) => {
            output::notice(&format!(
                "the watch ended on signal {signal}; every committed batch is kept"
            ));
            ExitCode::of_signal(signal)
        }
        None => ExitCode::Success,
    })
}

fn print_report(cli: &Cli, report: &IngestReport) -> Result<()> {
    if cli.json {
        return output::json(report);
    }
    // Under --quiet, a warning is worth a cron mail only when it changed the exit status.
    if !cli.quiet || report.held_back() {
        for warning in &report.warnings {
            output::warning(&warning.path, &warning.message);
        }
    }
    if cli.quiet {
        return Ok(());
    }
    let d = &report.documents;
    output::line(format!(
        "documents  {} added, {} changed, {} removed, {} renamed, {} unchanged, {} skipped",
        d.added, d.changed, d.removed, d.renamed, d.unchanged, d.skipped
    ))?;
    if !report.skipped_by_extension.is_empty() {
        // Files of other formats: counted, never left out silently.
        output::line(format!(
            "not read   {}",
            report.skipped_by_extension.describe()
        ))?;
    }
    if d.rechunked > 0 {
        // The migration of documents an older groundidx chunked (an older recipe, or chunk IDs
        // of whitespace-folded text), once per recipe: said, not done silently.
        output::line(format!(
            "documents  {} chunked again: an older groundidx chunked them",
            d.rechunked
        ))?;
    }
    output::line(format!(
        "chunks     {} added, {} removed",
        report.chunks.added, report.chunks.removed
    ))?;
    if let Some(embedding) = &report.embedding {
        crate::cli::embed::print_embedding(embedding)?;
    }
    output::line(format!(
        "generation {} in {} ms",
        report.generation, report.duration_ms
    ))
}
