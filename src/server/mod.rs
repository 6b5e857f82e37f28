//! The agent tool's servers: MCP over stdio, and MCP Streamable HTTP plus a JSON API.
//!
//! It calls the synchronous core (`agent`) on blocking threads, writes the ledger only through
//! `agent` (and through `ingest` under the writer lock for `serve --reindex`), and reloads the index in the background so a running server
//! picks up each new generation within a fraction of a second.

mod batch;
mod connections;
mod http;
mod mcp;
mod metrics;
mod resources;
mod stdio;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

use crate::agent::{Agent, AgentConfig};
use crate::error::{Error, Result};
use crate::ingest::{IngestConfig, IngestReport, NoProgress, ingest};
use crate::ledger::postgres::PgLedger;
use crate::store::{LockWait, OtherLedger, Store, StoreConfig, hostname, sync_replica};

pub use connections::{ConnectionLimits, DEFAULT_MAX_CONNECTIONS, MIN_MAX_CONNECTIONS};
pub use http::MAX_BODY_BYTES;

/// The caller identity keys and quotas belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scope(pub String);

/// The model that embeds a server's queries: the one loaded before it started, and the one it
/// was configured with, which it chooses again by whenever another model becomes active.
#[derive(Clone, Default)]
pub struct QueryEmbedding {
    pub loaded: Option<Arc<dyn crate::embed::Embedder>>,
    pub configured: Option<crate::embed::ModelConfig>,
    /// Why none is loaded, when the store's model could not be.
    pub problem: Option<crate::search::ModelProblem>,
}

/// How often a server looks for a new index commit.
const RELOAD_EVERY: Duration = Duration::from_millis(250);

/// How often a server on a shared ledger copies what other hosts published into its replica.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// A server on a shared ledger: its store is a replica of it, kept in step every second, and
/// keyed calls are recorded in it for every host.
#[derive(Clone, Debug)]
pub struct SharedServing {
    pub ledger: PgLedger,
    /// How the replica's index is built from its replica.
    pub store: StoreConfig,
}

/// Brings the replica up to the shared ledger before serving, and opens the agent path on it.
fn open_agent(
    store_dir: &Path,
    config: AgentConfig,
    shared: Option<&SharedServing>,
) -> Result<Agent> {
    let Some(shared) = shared else {
        // A replica served alone would record keyed calls where no other host sees them.
        let ledger = crate::store::StorePaths::new(store_dir).ledger();
        if ledger.exists()
            && crate::ledger::Ledger::open(&ledger, crate::ledger::Access::ReadOnly)?
                .replica_state()?
                .is_some()
        {
            return Err(Error::Usage(format!(
                "the store at {} is a replica of a shared ledger; serving it without that ledger would record calls no other host sees\nhint: pass the same --ledger postgres://…",
                store_dir.display()
            )));
        }
        return Agent::open(store_dir, config, None);
    };
    sync_replica(
        store_dir,
        LockWait::Wait(Duration::from_secs(60)),
        shared.store.clone(),
        &shared.ledger,
        OtherLedger::Refuse,
    )?;
    let served_by = format!("{}/{}", hostname(), std::process::id());
    Agent::open(store_dir, config, Some((shared.ledger.clone(), served_by)))
}

/// Keeps the replica in step with the shared ledger: one sync step a second (skipped while
/// another process of this host writes the store; an error is logged and tried again).
fn spawn_syncer(store_dir: PathBuf, shared: SharedServing, agent: Arc<Agent>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SYNC_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (dir, shared, agent) = (store_dir.clone(), shared.clone(), agent.clone());
            let synced = tokio::task::spawn_blocking(move || {
                let synced = sync_replica(
                    &dir,
                    LockWait::NoWait,
                    shared.store,
                    &shared.ledger,
                    OtherLedger::Refuse,
                );
                // A sync that reached the ledger ends a read-only spell within a second.
                match &synced {
                    Ok(_) => agent.note_ledger(Ok(())),
                    Err(err) => agent.note_ledger(Err(err)),
                }
                synced
            })
            .await;
            match synced {
                Ok(Ok(_) | Err(Error::LockBusy { .. })) => {}
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "could not sync the replica; trying again");
                }
                Err(err) => tracing::warn!(error = %err, "the replica's sync step failed"),
            }
        }
    });
}

/// A re-ingest the server runs on an interval, for deployments without cron.
#[derive(Clone, Debug)]
pub struct Reindex {
    pub roots: Vec<PathBuf>,
    pub every: Duration,
    pub ingest: IngestConfig,
    /// The shared ledger each run publishes to, when there is one.
    pub shared: Option<crate::store::SharedWriting>,
}

/// Settings of `groundidx serve`.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Re-ingest these folders on an interval, through the same writer lock as any ingest.
    pub reindex: Option<Reindex>,
    pub listen: SocketAddr,
    pub agent: AgentConfig,
    pub client_id: String,
    /// Bearer token to client id.
    pub tokens: HashMap<String, String>,
    /// Extra allowed origins beyond the loopback ones.
    pub allowed_origins: Vec<String>,
    /// The shared ledger, when the store is a replica of one.
    pub shared: Option<SharedServing>,
    /// How many connections, and how long each may take to send a request.
    pub limits: ConnectionLimits,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| Error::io("start the async runtime", err))
}

fn spawn_reloader(agent: Arc<Agent>) {
    let follower = agent.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let agent = follower.clone();
            // The query model follows the vector index the reloads bring in (a new active
            // model), on a loop of its own: loading a model takes seconds.
            let _ = tokio::task::spawn_blocking(move || agent.follow_active_model()).await;
        }
    });
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        loop {
            tick.tick().await;
            let agent = agent.clone();
            // A failed reload keeps the previous commit; the next tick tries again.
            let _ = tokio::task::spawn_blocking(move || agent.reload()).await;
        }
    });
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Serves MCP over stdin/stdout until stdin closes. Nothing but JSON-RPC goes to stdout.
pub fn serve_stdio(
    store_dir: &Path,
    config: AgentConfig,
    client_id: &str,
    query: QueryEmbedding,
    shared: Option<SharedServing>,
) -> Result<()> {
    let agent = Arc::new(
        open_agent(store_dir, config, shared.as_ref())?.with_configured_model(query.configured),
    );
    agent.set_query_model(query.loaded, query.problem);
    runtime()?.block_on(async move {
        spawn_reloader(agent.clone());
        if let Some(shared) = shared {
            spawn_syncer(store_dir.to_path_buf(), shared, agent.clone());
        }
        let handler = mcp::Handler {
            agent,
            default_scope: Scope(client_id.to_string()),
            metrics: None,
        };
        let service = handler
            .serve(stdio::LineTransport::new(
                tokio::io::stdin(),
                tokio::io::stdout(),
            ))
            .await
            .map_err(|err| {
                Error::io(
                    "start MCP over stdio",
                    std::io::Error::other(err.to_string()),
                )
            })?;
        service.waiting().await.map_err(|err| {
            Error::io(
                "serve MCP over stdio",
                std::io::Error::other(err.to_string()),
            )
        })?;
        Ok(())
    })
}

/// One scheduled re-ingest. `Ok(None)` when another writer holds the store: that run is
/// skipped, not queued, exactly as `ingest --no-wait` would.
pub(crate) fn reindex_once(store_dir: &Path, reindex: &Reindex) -> Result<Option<IngestReport>> {
    let opened = Store::open_writer(
        store_dir,
        LockWait::NoWait,
        reindex.ingest.store.clone(),
        reindex.shared.as_ref(),
    );
    let (mut store, _) = match opened {
        Ok(opened) => opened,
        // Another writer, here or (with a shared ledger) on another host: skip this tick.
        Err(Error::LockBusy { .. } | Error::LeaseBusy { .. }) => return Ok(None),
        Err(other) => return Err(other),
    };
    let report = ingest(&mut store, &reindex.roots, &reindex.ingest, &NoProgress)?;
    store.close()?;
    Ok(Some(report))
}

fn spawn_reindexer(
    store_dir: PathBuf,
    reindex: Reindex,
    on_reindex: Arc<dyn Fn(Result<Option<IngestReport>>) + Send + Sync>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(reindex.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick fires at once; the server already ingested before it started.
        tick.tick().await;
        loop {
            tick.tick().await;
            let (store_dir, reindex) = (store_dir.clone(), reindex.clone());
            let outcome = tokio::task::spawn_blocking(move || reindex_once(&store_dir, &reindex))
                .await
                .unwrap_or_else(|err| {
                    Err(Error::io("reindex", std::io::Error::other(err.to_string())))
                });
            on_reindex(outcome);
        }
    });
}

/// Serves HTTP until Ctrl-C or SIGTERM. `on_listen` is told the bound address; `on_reindex`
/// each scheduled re-ingest's outcome (the library prints nothing itself).
pub fn serve_http(
    store_dir: &Path,
    config: &HttpConfig,
    on_listen: impl FnOnce(SocketAddr),
    on_reindex: Arc<dyn Fn(Result<Option<IngestReport>>) + Send + Sync>,
    query: QueryEmbedding,
) -> Result<()> {
    if !config.listen.ip().is_loopback() && config.tokens.is_empty() {
        return Err(Error::Usage(format!(
            "refusing to serve {} without authentication\nhint: pass --tokens FILE, or listen on 127.0.0.1",
            config.listen
        )));
    }
    if let Some(reindex) = &config.reindex {
        // Ingest once before serving, so a new store exists and the first answers are fresh.
        match reindex_once(store_dir, reindex) {
            // A signal during this run ends the server before it serves.
            Err(error @ Error::Interrupted { .. }) => return Err(error),
            outcome => on_reindex(outcome),
        }
    }
    let agent = Arc::new(
        open_agent(store_dir, config.agent, config.shared.as_ref())?
            .with_configured_model(query.configured),
    );
    agent.set_query_model(query.loaded, query.problem);
    if let Some(reindex) = &config.reindex
        && reindex.ingest.interrupt.signal().is_some()
    {
        // The signal came after the first run's last safe point, before the server's own
        // handler: it still ends the server, as one while serving would.
        return Ok(());
    }
    let mut allowed_origins = vec![
        "http://localhost:*".to_string(),
        "http://127.0.0.1:*".to_string(),
        "http://[::1]:*".to_string(),
    ];
    allowed_origins.extend(config.allowed_origins.iter().cloned());
    let allowed_hosts = if config.listen.ip().is_loopback() {
        vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ]
    } else {
        // Behind a non-loopback bind the operator chose to be reachable; tokens guard it.
        Vec::new()
    };
    let state = Arc::new(http::HttpState {
        agent: agent.clone(),
        tokens: config.tokens.clone(),
        default_scope: Scope(config.client_id.clone()),
        allowed_origins,
        allowed_hosts,
        metrics: Arc::new(metrics::Metrics::default()),
        body_timeout: config.limits.body_timeout,
    });
    runtime()?.block_on(async move {
        if let Some(shared) = &config.shared {
            spawn_syncer(store_dir.to_path_buf(), shared.clone(), agent.clone());
        }
        spawn_reloader(agent);
        if let Some(reindex) = &config.reindex {
            spawn_reindexer(store_dir.to_path_buf(), reindex.clone(), on_reindex);
        }
        http::serve(state, config.listen, config.limits, on_listen)
            .await
            .map_err(|err| Error::io(format!("serve http on {}", config.listen), err))
    })
}
