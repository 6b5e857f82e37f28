//! `groundidx serve`

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use groundidx::ingest::{IngestConfig, Interrupt};
use groundidx::server::{self, HttpConfig, Reindex};
use groundidx::{Error, Result};

use crate::cli::agent_args::AgentArgs;
use crate::cli::index_args::IndexArgs;
use crate::cli::{Cli, ExitCode, output};

/// Serve the search tools over HTTP: MCP Streamable HTTP at /mcp, a JSON API at
/// /v1/tools/{search_docs,get_chunk}, and /health.
///
/// Binds 127.0.0.1 unless told otherwise; any other address needs --tokens. Browsers from other
/// origins are refused (403). The server picks up each new ingest without a restart.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also allow requests from this Origin (e.g. https://app.example.com); repeatable
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,

    /// Re-ingest this folder on an interval (--every), through the same writer lock as any
    /// ingest: a tick that finds the store busy is skipped; repeatable
    #[arg(long, value_name = "DIR")]
    pub reindex: Vec<PathBuf>,

    /// How often to re-ingest the --reindex folders, e.g. 10m
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_every, requires = "reindex")]
    pub every: std::time::Duration,

    // Flattened groups last: the heading of each holds for every argument after it.
    #[command(flatten)]
    pub http: HttpArgs,

    #[command(flatten)]
    pub connections: ConnectionArgs,

    #[command(flatten)]
    pub agent: AgentArgs,

    #[command(flatten, next_help_heading = "What --reindex indexes")]
    pub index: IndexArgs,

    #[command(flatten)]
    pub embed: crate::cli::embed_args::EmbedArgs,
}

/// Where the server listens and who may call it.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Listening")]
pub struct HttpArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed on stderr)
    #[arg(
        long,
        value_name = "ADDR",
        env = "GROUNDIDX_LISTEN",
        default_value = "127.0.0.1:7878"
    )]
    pub listen: SocketAddr,

    /// TOML file mapping bearer tokens to client ids: [tokens] "TOKEN" = "client-id"
    #[arg(long, value_name = "FILE", env = "GROUNDIDX_TOKENS")]
    pub tokens: Option<PathBuf>,
}

/// How many connections the server keeps open and how long each may take. The defaults suit a
/// server on the open network; slow clients past them are closed, not waited for.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Connections")]
pub struct ConnectionArgs {
    /// Connections open at once (also lowered to fit the open-file limit). At most a quarter
    /// are connections that have not completed a request with a valid token (any request
    /// without --tokens); past that the oldest of them is closed, so slow or silent sockets
    /// cannot keep /health or authenticated clients out
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_CONNECTIONS, value_parser = parse_max_connections)]
    pub max_connections: usize,

    /// A new connection must send its request's headers within this, and a kept-alive one
    /// each later request's headers from its first byte, or it is closed
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout)]
    pub header_timeout: std::time::Duration,

    /// A kept-alive connection with no request in progress is closed after this
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    pub idle_timeout: std::time::Duration,

    /// A request's body must arrive in full within this after its headers, or it gets 408
    /// and the connection is closed
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_timeout)]
    pub body_timeout: std::time::Duration,
}

impl ConnectionArgs {
    fn limits(&self) -> server::ConnectionLimits {
        server::ConnectionLimits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            body_timeout: self.body_timeout,
        }
    }
}

fn parse_max_connections(text: &str) -> std::result::Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of connections"))?;
    if n < server::MIN_MAX_CONNECTIONS {
        return Err(format!(
            "--max-connections must be at least {}: a quarter for new connections, the rest in reserve",
            server::MIN_MAX_CONNECTIONS
        ));
    }
    Ok(n)
}

fn parse_timeout(text: &str) -> std::result::Result<std::time::Duration, String> {
    let timeout = groundidx::clock::parse_duration(text)?;
    if timeout.is_zero() {
        return Err("a timeout must be at least 1s".into());
    }
    Ok(timeout)
}

fn parse_every(text: &str) -> std::result::Result<std::time::Duration, String> {
    let every = groundidx::clock::parse_duration(text)?;
    if every.is_zero() {
        return Err("--every must be at least 1s".into());
    }
    Ok(every)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: HashMap<String, String>,
}

fn read_tokens(path: &PathBuf) -> Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        Error::Usage(format!("cannot read tokens file {}: {err}", path.display()))
    })?;
    let file: TokenFile = toml::from_str(&text).map_err(|err| {
        Error::Usage(format!(
            "tokens file {} is not valid: {}\nhint: write [tokens] then lines \"TOKEN\" = \"client-id\"",
            path.display(),
            err.message()
        ))
    })?;
    if file.tokens.keys().any(|t| t.len() < 16) {
        return Err(Error::Usage(format!(
            "tokens file {}: every token needs at least 16 characters",
            path.display()
        )));
    }
    Ok(file.tokens)
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let interrupt = Interrupt::default();
    if !args.reindex.is_empty() {
        // As in `ingest`: SIGINT and SIGTERM end a reindex run at its next safe point, so a
        // signal during the first run (before the server listens) or during a tick's run ends
        // it between batches instead of killing the process mid-run.
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_usize(signal, interrupt.flag(), signal as usize)
                .map_err(|err| Error::io(format!("handle signal {signal}"), err))?;
        }
    }
    let tokens = match &args.http.tokens {
        Some(path) => read_tokens(path)?,
        None => HashMap::new(),
    };
    let embed_config = args.embed.model_config()?;
    let ingest_config = args.index.ingest_config()?;
    // A server with --reindex writes: like `ingest`, it may create or upgrade the schema.
    let shared = cli
        .shared_ledger(!args.reindex.is_empty(), 16)?
        .map(|ledger| groundidx::server::SharedServing {
            ledger,
            store: args.index.id_fields.store_config(),
        });
    let shared_writing = shared
        .as_ref()
        .map(|shared| groundidx::store::SharedWriting {
            ledger: shared.ledger.clone(),
            lease_ttl: cli.lease_ttl,
        });
    let config = HttpConfig {
        shared,
        listen: args.http.listen,
        agent: args.agent.config(),
        client_id: args.agent.client_id.clone(),
        tokens,
        allowed_origins: args.allow_origin.clone(),
        limits: args.connections.limits(),
        reindex: (!args.reindex.is_empty()).then(|| Reindex {
            shared: shared_writing,
            roots: args.reindex.clone(),
            every: args.every,
            ingest: IngestConfig {
                interrupt: interrupt.clone(),
                embed: embed_config.clone(),
                ..ingest_config
            },
        }),
    };
    for dir in &args.reindex {
        groundidx::ingest::canonical_root(dir)?;
    }
    let quiet = cli.quiet;
    let on_reindex = Arc::new(
        move |outcome: Result<Option<groundidx::ingest::IngestReport>>| match outcome {
            Ok(Some(report)) if !quiet => output::notice(&format!(
                "reindex: generation {}, {} chunks added, {} removed, {} warnings, {} ms",
                report.generation,
                report.chunks.added,
                report.chunks.removed,
                report.warnings.len(),
                report.duration_ms
            )),
            Ok(Some(_)) => {}
            Ok(None) => {
                if !quiet {
                    output::notice(
                        "reindex: another writer holds the store; skipped until the next tick",
                    );
                }
            }
            Err(error) => tracing::error!("reindex failed: {error}"),
        },
    );
    let loaded = crate::cli::embed_args::load_query_model(&cli.store_dir(), &args.embed)?;
    crate::cli::embed_args::print_query_model(&loaded);
    let query = server::QueryEmbedding {
        loaded: loaded.model,
        configured: args.embed.model_config()?,
        problem: loaded.problem,
    };
    server::serve_http(
        &cli.store_dir(),
        &config,
        |addr| output::notice(&format!("listening on http://{addr}")),
        on_reindex,
        query,
    )?;
    Ok(ExitCode::Success)
}
