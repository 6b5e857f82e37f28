//! The command line: global arguments, the subcommands, and which store they act on.
//!
//! Each subcommand has its own file with its `Args` and a `run` that calls the library and
//! hands the result to `output`. Nothing here decides how indexing works.

mod agent_args;
mod audit;
mod completions;
mod config;
mod embed;
mod embed_args;
mod exit_code;
mod export;
mod extract_worker;
mod gc;
mod index_args;
mod ingest;
mod logging;
mod mcp;
mod migrate;
mod output;
mod progress;
mod rebuild;
mod search;
mod serve;
mod status;
mod style;
mod sync;
mod verify;

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use groundidx::ledger::postgres::{PgLedger, PgOptions};
use groundidx::store::LockWait;

pub use exit_code::ExitCode;
pub use logging::LogFormat;
pub use style::ColorChoice;

/// A content-addressed, idempotent indexer for documents that AI agents search.
///
/// groundidx walks folders of documents (Markdown, text, MDX, reStructuredText, AsciiDoc, HTML,
/// PDF, notebooks), splits each document into chunks with stable IDs, and keeps them in a SQLite ledger and a Tantivy index that stay consistent through
/// crashes. Running it again on the same documents writes no chunk.
///
/// Settings come from flags, then GROUNDIDX_* variables, then groundidx.toml, then the defaults
/// shown here; `groundidx config` shows which one each setting came from.
#[derive(Debug, Parser)]
#[command(name = "groundidx", version, max_term_width = 100)]
pub struct Cli {
    /// The store folder [default: `store` in groundidx.toml, else .groundidx in the current
    /// folder]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GROUNDIDX_STORE",
        value_name = "DIR"
    )]
    pub store: Option<PathBuf>,

    /// Print machine-readable JSON on stdout
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,

    /// Print nothing on success (errors and warnings still go to stderr)
    #[arg(long, short, global = true, help_heading = "Global options")]
    pub quiet: bool,

    /// More log detail on stderr: -v for what each run does, -vv and -vvv for debugging
    #[arg(long, short, global = true, help_heading = "Global options", action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// How stderr logs look: text for people, json (one object per line) for log shippers
    #[arg(long, global = true, help_heading = "Global options", value_enum, value_name = "FORMAT", env = "GROUNDIDX_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// When to colour output; auto colours a terminal unless NO_COLOR is set
    #[arg(long, global = true, help_heading = "Global options", value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// The configuration file [default: groundidx.toml in the current folder, if present]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GROUNDIDX_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// A shared ledger in PostgreSQL (postgres://user@host/db): several hosts then share one
    /// corpus, one set of idempotency keys, one audit log and one rate limit, and every host's
    /// --store is a replica of it [default: `ledger` in groundidx.toml; none: the store's own
    /// SQLite ledger]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GROUNDIDX_LEDGER",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub ledger: Option<String>,

    /// The PostgreSQL schema that holds the shared ledger's tables
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GROUNDIDX_LEDGER_SCHEMA",
        value_name = "NAME",
        default_value = "groundidx"
    )]
    pub ledger_schema: String,

    /// The CA that signed the shared ledger's server certificate (PEM): TLS is then required
    /// and the certificate checked against it and the host name. Without it, `sslmode` in the
    /// URL decides, without checking the certificate (as libpq does) [default: `ledger_ca` in
    /// groundidx.toml]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GROUNDIDX_LEDGER_CA",
        value_name = "FILE"
    )]
    pub ledger_ca: Option<PathBuf>,

    /// How long a writer's lease on the shared ledger lasts unless renewed (every third of it);
    /// a writer killed mid-run holds the lease this long
    #[arg(long, global = true, help_heading = "Global options", value_name = "DURATION", default_value = "30s", value_parser = parse_lease_ttl)]
    pub lease_ttl: Duration,

    #[command(subcommand)]
    pub command: Command,
}

fn parse_lease_ttl(text: &str) -> std::result::Result<Duration, String> {
    let ttl = groundidx::clock::parse_duration(text)?;
    if ttl < Duration::from_secs(1) {
        return Err("a lease lasts at least 1s".into());
    }
    Ok(ttl)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Index folders: add new and changed documents, drop deleted ones
    Ingest(ingest::Args),
    /// Search the index
    Search(search::Args),
    /// Embed the chunks that have no vector under the model yet
    Embed(embed::Args),
    /// Show what the store holds and how fresh it is
    Status(status::Args),
    /// Check that the index holds exactly the ledger's chunks, each once (exit 0 / 1)
    Verify(verify::Args),
    /// Make the index again from the ledger alone
    Rebuild(rebuild::Args),
    /// Print every chunk as one JSON object per line
    Export(export::Args),
    /// Serve the search tools to an agent over MCP on stdin/stdout
    Mcp(mcp::Args),
    /// Serve the search tools over HTTP (MCP at /mcp, JSON at /v1/tools/...)
    Serve(serve::Args),
    /// Show the tool calls agents made, once per call however often retried
    Audit(audit::Args),
    /// Show the units each client used per rate-limit window
    Usage(audit::Args),
    /// Delete expired idempotency keys and the vectors search no longer uses
    ///
    /// In the store: the idempotency keys past their TTL (--key-ttl when the call was made), the
    /// vectors of embedding models search used before the active one, and the vectors of chunks
    /// no document holds any more. It takes no lock: the index holds none of them.
    ///
    /// With --ledger, in the shared ledger instead: its expired keys and the quota counters of
    /// rate-limit windows that ended over a day ago; its change log up to the slowest replica (a
    /// replica silent for --log-retention no longer holds it back, and copies a whole snapshot
    /// when it is back); and the vectors of replaced models, under the writer lease (--wait),
    /// which every replica drops at its next sync. A replica's store is refused without its
    /// --ledger.
    ///
    /// Kept: every document, chunk and index entry, the keys still within their TTL, the active
    /// model's vectors of current chunks, and every audit and usage row (`groundidx audit` and
    /// `groundidx usage` show the same history after gc). Until gc, a removed chunk's vector
    /// stays, so text that comes back is not embedded again.
    Gc(gc::Args),
    /// Print a shell completion script
    Completions(completions::CompletionArgs),
    /// Print the man page
    Man(completions::ManArgs),
    /// Show the effective settings and where each came from (flag, environment, file, default)
    Config(config::Args),
    /// Create the ledger's schema or upgrade it to this version (the store's, or --ledger's)
    Migrate(migrate::Args),
    /// Bring this host's replica of the shared ledger (--ledger) and its index up to date
    Sync(sync::Args),
    /// Read one file on stdin in a child process with limits (started by ingest, not by hand)
    #[command(hide = true)]
    ExtractWorker(extract_worker::Args),
}

/// How long a writer waits for the store's lock.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = WAIT_HEADING)]
pub struct WaitArgs {
    /// Wait up to this many seconds for another writer to finish, then exit 75
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub wait: u64,

    /// Exit 75 at once if another writer holds the store
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,
}

/// The help heading of `WaitArgs`.
pub const WAIT_HEADING: &str = "Waiting for other writers";

impl WaitArgs {
    pub fn lock_wait(&self) -> LockWait {
        if self.no_wait {
            LockWait::NoWait
        } else {
            LockWait::Wait(Duration::from_secs(self.wait))
        }
    }
}

impl Cli {
    /// The store folder: `--store`, else `GROUNDIDX_STORE`, else the configuration file's
    /// `store` (put in by `config::apply`), else `.groundidx/`.
    pub fn store_dir(&self) -> PathBuf {
        self.store
            .clone()
            .unwrap_or_else(|| PathBuf::from(".groundidx"))
    }

    /// The shared ledger `--ledger` names, connected and checked (`migrate`: created or
    /// upgraded, as the first writer does); `None` without `--ledger`.
    pub fn shared_ledger(
        &self,
        migrate: bool,
        max_connections: usize,
    ) -> groundidx::Result<Option<PgLedger>> {
        let Some(url) = &self.ledger else {
            return Ok(None);
        };
        let options = PgOptions {
            url: url.clone(),
            schema: self.ledger_schema.clone(),
            max_connections,
            ca_file: self.ledger_ca.clone(),
        };
        PgLedger::open(&options, migrate).map(Some)
    }

    /// The ledger that holds the agent path's calls, for reading: the shared one `--ledger`
    /// names, else the store's own (on a replica, the calls it spooled while the shared ledger
    /// was away).
    pub fn call_ledger(
        &self,
    ) -> groundidx::Result<Box<dyn groundidx::agent::recorder::CallLedger>> {
        groundidx::agent::recorder::call_ledger(
            &self.store_dir(),
            self.shared_ledger(false, 2)?,
            groundidx::ledger::Access::ReadOnly,
        )
    }

    /// Where a writer writes: the shared ledger `--ledger` names (created or upgraded, as the
    /// first writer does) under a lease of `--lease-ttl`, or `None` for the store's own ledger.
    pub fn shared_writing(&self) -> groundidx::Result<Option<groundidx::store::SharedWriting>> {
        Ok(self
            .shared_ledger(true, 4)?
            .map(|ledger| groundidx::store::SharedWriting {
                ledger,
                lease_ttl: self.lease_ttl,
            }))
    }
}

/// Parses the command line, sets up logs and colour, layers in the configuration file, runs
/// the command and returns its exit status; errors are printed here.
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    style::init(cli.color);
    logging::init(cli.verbose, cli.log_format);
    let result = config::apply(&mut cli, &matches).and_then(|settings| run(&cli, &settings));
    match result {
        Ok(code) => code,
        // A reader that stopped reading (`export | head`) is done with us: end quietly, as a
        // successful command, like ripgrep does.
        Err(error) if output::is_closed_pipe(&error) => ExitCode::Success,
        Err(error) => {
            output::error(&error);
            ExitCode::of(&error)
        }
    }
}

fn run(cli: &Cli, settings: &[config::Setting]) -> groundidx::Result<ExitCode> {
    match &cli.command {
        Command::Ingest(args) => ingest::run(cli, args),
        Command::Search(args) => search::run(cli, args),
        Command::Embed(args) => embed::run(cli, args),
        Command::Status(args) => status::run(cli, args),
        Command::Verify(args) => verify::run(cli, args),
        Command::Rebuild(args) => rebuild::run(cli, args),
        Command::Export(args) => export::run(cli, args),
        Command::Mcp(args) => mcp::run(cli, args),
        Command::Serve(args) => serve::run(cli, args),
        Command::Audit(args) => audit::run_audit(cli, args),
        Command::Usage(args) => audit::run_usage(cli, args),
        Command::Gc(args) => gc::run(cli, args),
        Command::Completions(args) => completions::run_completions(args),
        Command::Man(args) => completions::run_man(args),
        Command::Config(_) => config::run(cli, settings),
        Command::Migrate(args) => migrate::run(cli, args),
        Command::Sync(args) => sync::run(cli, args),
        Command::ExtractWorker(args) => extract_worker::run(args),
    }
}
