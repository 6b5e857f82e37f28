//! Keyed tool calls: the agent path's only writes, made safe to retry.
//!
//! A call is validated, fingerprinted (`blake3` of the canonical JSON of the tool name and the
//! arguments as received), looked up by `(scope, key)`, executed read-only, and recorded with
//! its audit event and usage unit in one transaction, which calls arriving together share
//! (`group_commit`). A repeat with the same key and arguments gets the first answer's bytes and
//! writes nothing; other arguments are refused and write nothing; a call over the quota is
//! refused and writes nothing. This module is synchronous; `server` calls it from blocking
//! tasks.

mod canonical;
pub mod cursor;
mod group_commit;
pub mod recorder;
pub mod tools;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Value, json};

use self::tools::{ArgumentError, ToolAnswer, ToolRequest};
use crate::agent::cursor::CursorKey;
use crate::error::{Error, Result};
use crate::ids;
use crate::ledger::postgres::PgLedger;
use crate::ledger::{Access, KeyLookup, KeyRecord, Ledger, NewCall, RecordOutcome};
use crate::store::{StorePaths, StoreReader};
use recorder::{LocalCalls, Recorded, Recorder, SharedCalls};

pub use canonical::canonical_json;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// How long a key's answer is kept by default.
pub(crate) const DEFAULT_TTL_MS: i64 = 7 * DAY_MS;
/// The shortest TTL allowed: a retry a day later must still be recognised.
pub const MIN_TTL_MS: i64 = DAY_MS;
/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// A per-client quota: `units` calls per `window_secs`-second window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub units: u64,
    pub window_secs: u64,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            units: 600,
            window_secs: 60,
        }
    }
}

impl std::str::FromStr for RateLimit {
    type Err = String;

    /// `600/60s`, `100/1m`, `5000/1h`.
    fn from_str(s: &str) -> Result<RateLimit, String> {
        let (units, window) = s
            .split_once('/')
            .ok_or_else(|| format!("rate limit {s:?} is not UNITS/WINDOW, e.g. 600/60s"))?;
        let units: u64 = units
            .trim()
            .parse()
            .map_err(|_| format!("rate limit {s:?}: {units:?} is not a whole number"))?;
        let window = crate::clock::parse_duration(window)?;
        if units == 0 || window.as_secs() == 0 {
            return Err(format!(
                "rate limit {s:?} must allow at least 1 unit per 1 s"
            ));
        }
        Ok(RateLimit {
            units,
            window_secs: window.as_secs(),
        })
    }
}

/// How keyed calls behave.
#[derive(Clone, Copy, Debug)]
pub struct AgentConfig {
    pub ttl_ms: i64,
    pub rate_limit: RateLimit,
    /// How long a call waits for the ledger's write lock before answering `busy`.
    pub busy_timeout_ms: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            ttl_ms: DEFAULT_TTL_MS,
            rate_limit: RateLimit::default(),
            busy_timeout_ms: 5_000,
        }
    }
}

/// A caller's idempotency key as a transport hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallKey {
    /// A ready key: `_meta["groundidx/idempotencyKey"]` or the `Idempotency-Key` header.
    Direct(String),
    /// `_meta["groundidx/runId"]` and `_meta["groundidx/step"]`, each itself a valid key.
    RunStep { run_id: String, step: String },
}

impl From<&str> for CallKey {
    fn from(key: &str) -> CallKey {
        CallKey::Direct(key.to_string())
    }
}

impl From<String> for CallKey {
    fn from(key: String) -> CallKey {
        CallKey::Direct(key)
    }
}

impl CallKey {
    /// The key as the ledger stores it, validated.
    ///
    /// A direct key is stored as given. A run and step are stored as the JSON array
    /// `["RUN", "STEP"]`, with a space after the comma: JSON quoting splits the text into its
    /// two parts one way only (joined with `/`, run `a/b` with step `c` and run `a` with step
    /// `b/c` were one key, and the second step got the first one's answer), and since no direct
    /// key may hold a space, no direct key is ever the stored form of a pair.
    pub fn stored(&self) -> Result<String, CallError> {
        match self {
            CallKey::Direct(key) => {
                validate_key(key)?;
                Ok(key.clone())
            }
            CallKey::RunStep { run_id, step } => {
                for (name, part) in [("groundidx/runId", run_id), ("groundidx/step", step)] {
                    validate_key(part).map_err(|err| match err {
                        CallError::InvalidKey(why) => {
                            CallError::InvalidKey(format!("{name}: {why}"))
                        }
                        other => other,
                    })?;
                }
                let quoted =
                    |part: &str| serde_json::to_string(part).expect("a string serialises as JSON");
                let stored = format!("[{}, {}]", quoted(run_id), quoted(step));
                if stored.len() > MAX_KEY_LEN {
                    return Err(CallError::InvalidKey(format!(
                        "groundidx/runId and groundidx/step are stored together as {} characters, over {MAX_KEY_LEN}\nhint: shorten them, or pass groundidx/idempotencyKey",
                        stored.len()
                    )));
                }
                Ok(stored)
            }
        }
    }
}

/// A call as a transport hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The caller identity that keys and quotas belong to.
    pub scope: String,
    /// The caller's idempotency key; `None` makes the call not deduplicable.
    pub key: Option<CallKey>,
    pub tool: String,
    pub arguments: Value,
}

/// Whether an answer is a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// Executed and recorded now.
    No,
    /// The stored answer of the first call with this key.
    Yes,
    /// The key's record was pruned; its audit row proves the call was made, so this fresh
    /// answer is neither logged nor counted again.
    Late,
}

/// Where a call's key came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    Caller,
    Server,
}

impl KeySource {
    pub fn as_str(self) -> &'static str {
        match self {
            KeySource::Caller => "caller",
            KeySource::Server => "server",
        }
    }
}

/// The answer to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallResponse {
    /// The structured result as JSON text: byte for byte the same on every replay.
    pub body: String,
    pub is_error: bool,
    pub replayed: Replayed,
    pub key: String,
    pub key_source: KeySource,
    pub index_generation: u64,
    /// Answered while the shared ledger could not be reached: recorded in this host's spool,
    /// forwarded to the shared ledger once it answers again. Or answered from a store on a
    /// read-only mount: recorded nowhere.
    pub read_only: bool,
}

/// Why a call got no answer. None of these writes anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    InvalidKey(String),
    InvalidArguments(String),
    UnknownTool(String),
    KeyReused {
        key: String,
    },
    RateLimited {
        retry_after_seconds: u64,
    },
    Busy {
        retry_after_seconds: u64,
    },
    Unavailable(String),
    Cancelled,
    /// A page cursor of a snapshot the server no longer keeps.
    CursorExpired {
        generation: u64,
    },
}

impl CallError {
    /// The stable code agents and scripts match on.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::InvalidKey(_) => "idempotency_key_invalid",
            CallError::InvalidArguments(_) => "invalid_arguments",
            CallError::UnknownTool(_) => "unknown_tool",
            CallError::KeyReused { .. } => "idempotency_key_reused",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::Busy { .. } => "busy",
            CallError::Unavailable(_) => "unavailable",
            CallError::Cancelled => "cancelled",
            CallError::CursorExpired { .. } => "cursor_expired",
        }
    }

    /// A sentence for the caller that says what to do.
    pub fn message(&self) -> String {
        match self {
            CallError::InvalidKey(why) => format!("invalid idempotency key: {why}"),
            CallError::InvalidArguments(why) => format!("invalid arguments: {why}"),
            CallError::UnknownTool(name) => {
                format!("unknown tool {name:?}; the tools are {}", tools::TOOL_NAMES.join(", "))
            }
            CallError::KeyReused { key } => format!(
                "idempotency key '{key}' was first used with different arguments; retry with the original arguments, or use a new key for a new call"
            ),
            CallError::RateLimited {
                retry_after_seconds,
            } => format!("rate limit exceeded; retry after {retry_after_seconds} s"),
            CallError::Busy {
                retry_after_seconds,
            } => {
                format!("the store is busy; retry after {retry_after_seconds} s with the same key")
            }
            CallError::Unavailable(why)
                if why.contains("shared ledger") || why.contains("read-only file system") =>
            {
                why.clone()
            }
            CallError::Unavailable(why) => {
                format!("the index is unavailable ({why}); retry with the same key")
            }
            CallError::Cancelled => "the call was cancelled before it was recorded; nothing was written, and a retry with the same key executes".into(),
            CallError::CursorExpired { generation } => format!(
                "the cursor is of a store generation ({generation}) that this server no longer serves: the index has been committed or rebuilt since; search again without a cursor (for list_documents: list again)"
            ),
        }
    }

    /// The structured error a tool result carries.
    pub(crate) fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code(), "message": self.message()});
        match self {
            CallError::RateLimited {
                retry_after_seconds,
            } => {
                error["retry_after_seconds"] = json!(retry_after_seconds);
                error["policy"] = json!("per-client");
            }
            CallError::Busy {
                retry_after_seconds,
            } => error["retry_after_seconds"] = json!(retry_after_seconds),
            CallError::KeyReused { key } => error["key"] = json!(key),
            CallError::CursorExpired { generation } => error["generation"] = json!(generation),
            _ => {}
        }
        json!({ "error": error })
    }
}

/// The quota as a scope stands now, for the `RateLimit` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaState {
    pub limit: u64,
    pub window_secs: u64,
    pub remaining: u64,
    pub reset_seconds: u64,
}

/// The agent path over one store: a reader for the tools, shared by every call at once,
/// read-only ledger connections for key lookups and quotas, and one ledger connection for the
/// keyed writes (SQLite takes one writer at a time in any case).
pub struct Agent {
    store_dir: std::path::PathBuf,
    /// `None` while the index cannot be opened; calls answer `unavailable` and every reload
    /// tries again, so a server outlives a broken or missing index.
    reader: RwLock<Option<Arc<StoreReader>>>,
    /// Where calls are recorded: the store's own ledger (on a read-only mount nowhere: calls
    /// are answered unrecorded and new caller-keyed calls refused), or the shared ledger.
    recorder: Recorder,
    cursor_key: CursorKey,
    config: AgentConfig,
    /// The model that embeds queries, given to every reader opened; replaced when the store's
    /// active model changes (`follow_active_model`).
    query_model: RwLock<Option<Arc<dyn crate::embed::Embedder>>>,
    /// Why no model embeds queries, when the store's could not be loaded; given to every
    /// reader with the query model.
    model_problem: RwLock<Option<crate::search::ModelProblem>>,
    /// The model the server was configured with, which it prefers when it is the active one.
    configured_model: Option<crate::embed::ModelConfig>,
    /// The model of the vector index last checked against the query model, and when.
    model_check: Mutex<Option<(crate::embed::Fingerprint, std::time::Instant)>>,
}

/// How often a server checks again that its query model is the store's active one, when the
/// vector index did not change (a remote model is probed again then: see
/// `embed::remote::PROBE_FRESH_FOR`).
const MODEL_RECHECK_EVERY: Duration = Duration::from_secs(60);

/// Checks a caller's key: 1 to 255 visible ASCII characters.
pub fn validate_key(key: &str) -> Result<(), CallError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(CallError::InvalidKey(format!(
            "a key has 1 to {MAX_KEY_LEN} characters, this one has {}",
            key.len()
        )));
    }
    if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(CallError::InvalidKey(
            "a key has only visible ASCII characters (no spaces or control characters)".into(),
        ));
    }
    Ok(())
}

/// The agent's reader of the store, on opening and after a rebuild replaced the index: its
/// every call commits, so it reads the ledger without a memory map
/// (`StoreReader::open_for_serving`).
fn open_reader(store_dir: &Path) -> Result<StoreReader> {
    StoreReader::open_for_serving(store_dir)
}

impl Agent {
    /// Opens the agent path on an existing store, recording calls in the store's own ledger,
    /// or in `shared` (the shared ledger, and this host's name in its audit rows) when given:
    /// one key, one audit row, one unit and one rate limit across every host.
    pub fn open(
        store_dir: &Path,
        config: AgentConfig,
        shared: Option<(PgLedger, String)>,
    ) -> Result<Agent> {
        if config.ttl_ms < MIN_TTL_MS {
            return Err(Error::Usage(format!(
                "key TTL of {} s is below the 24 h floor: a retry a day later must still be recognised\nhint: use --key-ttl 24h or more (default 7d)",
                config.ttl_ms / 1000
            )));
        }
        let local = LocalCalls::open(store_dir, Duration::from_millis(config.busy_timeout_ms))?;
        if !local.writable() {
            tracing::warn!(
                store = %store_dir.display(),
                rate_limit = %format!("{}/{}s", config.rate_limit.units, config.rate_limit.window_secs),
                "the store is on a read-only file system: calls are answered without being recorded (no audit rows, usage units or idempotency keys), the rate limit is not enforced (it counts recorded units), and calls with a new idempotency key are refused"
            );
        }
        let recorder = match shared {
            None => Recorder::Local(local),
            Some((ledger, served_by)) => Recorder::Shared {
                shared: SharedCalls::new(ledger, served_by, config.ttl_ms),
                spool: local,
                away: Mutex::new(None),
            },
        };
        Ok(Agent {
            store_dir: store_dir.to_path_buf(),
            reader: RwLock::new(open_reader(store_dir).ok().map(Arc::new)),
            recorder,
            cursor_key: CursorKey::of_store(store_dir),
            config,
            query_model: RwLock::new(None),
            model_problem: RwLock::new(None),
            configured_model: None,
            model_check: Mutex::new(None),
        })
    }

    /// Whether the shared ledger answered the last time it was asked: `Err` says since when
    /// (ms) and why not. Always `Ok` without a shared ledger.
    pub(crate) fn ledger_reachable(&self) -> std::result::Result<(), (i64, String)> {
        self.recorder.reachable()
    }

    /// Records whether the shared ledger answered (a sync step, or a call): while it does not,
    /// caller-keyed calls are refused at once and unkeyed ones answered from the replica and
    /// spooled.
    pub(crate) fn note_ledger(&self, outcome: std::result::Result<(), &Error>) {
        self.recorder.note(outcome);
    }

    /// With a shared ledger: whether it answers, and how many calls wait in this host's spool
    /// (`None` when the replica cannot be read); `None` without one.
    pub(crate) fn shared_state(&self) -> Option<(bool, Option<u64>)> {
        if !self.recorder.is_shared() {
            return None;
        }
        let spooled = self
            .recorder
            .local()
            .reads()
            .get()
            .and_then(|ledger| ledger.counts())
            .ok()
            .map(|counts| counts.audit_events);
        Some((self.ledger_reachable().is_ok(), spooled))
    }

    /// Sets the model that embeds queries, for this reader and every one opened later.
    ///
    /// Done under the reader's lock, as `reload` installs a new reader: otherwise a reader
    /// swapped in between the two writes here would keep the model it was given before, for
    /// ever, while the server believed it held the new one.
    /// `problem` says why there is none, when the store's model could not be loaded.
    pub(crate) fn set_query_model(
        &self,
        model: Option<Arc<dyn crate::embed::Embedder>>,
        problem: Option<crate::search::ModelProblem>,
    ) {
        let reader = self
            .reader
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *self
            .query_model
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = model.clone();
        *self
            .model_problem
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = problem.clone();
        if let Some(reader) = reader.as_ref() {
            reader.set_embedder(model);
            reader.set_model_problem(problem);
        }
    }

    /// The mode a search that names none would run in now, and whether meaning takes part and
    /// why not fully: what `/health` reports. `None` while the index cannot be opened.
    pub fn semantic_status(&self) -> Option<(crate::search::Mode, crate::search::SemanticStatus)> {
        let reader = self.current_reader()?;
        let snapshot = reader.index().snapshot();
        let vectors = reader.vectors();
        let embedder = reader.embedder();
        let model_problem = reader.model_problem();
        let sources = crate::search::Sources {
            snapshot: &snapshot,
            vectors: vectors.as_deref(),
            embedder: embedder.as_deref(),
            model_problem: model_problem.as_ref(),
        };
        let mode = sources.resolve(None).ok()?;
        Some((mode, sources.semantic_status(None, mode, None)))
    }

    /// The model configured for this server (`--embed-model`, `--embed-url`): the one it
    /// embeds queries with whenever it is the store's active model.
    pub(crate) fn with_configured_model(
        mut self,
        config: Option<crate::embed::ModelConfig>,
    ) -> Agent {
        self.configured_model = config;
        self
    }

    fn query_model(&self) -> Option<Arc<dyn crate::embed::Embedder>> {
        self.query_model
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps the query model the one that made the reader's vector index. When another
    /// model's vectors come in (a new model became active), that model is loaded; every
    /// `MODEL_RECHECK_EVERY` a remote model (or none) is chosen again, so a remote model whose
    /// server changed the model behind its name (another answer to the probe) is dropped
    /// rather than compared with the old vectors. A model that cannot be loaded is tried again
    /// at the next recheck, not at every call. A server calls this on a loop of its own beside
    /// `reload`, so loading a model or probing a slow server never holds up a new generation.
    pub(crate) fn follow_active_model(&self) {
        let Some(vectors) = self
            .current_reader()
            .and_then(|reader| reader.vectors())
            .filter(|v| !v.is_empty())
        else {
            return;
        };
        let wanted = vectors.marker.fingerprint;
        let held_model = self.query_model();
        // A local model in memory stays what it is; a remote one is only what its server
        // answers now, and a model that could not be loaded may load now.
        let may_drift = held_model
            .as_ref()
            .is_none_or(|model| model.describe()["kind"] == "remote");
        {
            let mut check = self
                .model_check
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = check.is_none_or(|(checked, at)| {
                checked != wanted || (may_drift && at.elapsed() >= MODEL_RECHECK_EVERY)
            });
            if !due {
                return;
            }
            *check = Some((wanted, std::time::Instant::now()));
        }
        let held = held_model.map(|model| model.fingerprint());
        let choice = self.read_ledger(|ledger| {
            let choice = crate::search::choose_query_model(ledger, self.configured_model.as_ref())?;
            Ok((choice, crate::store::recorded_models(ledger)?))
        });
        let short = |fingerprint: crate::embed::Fingerprint| fingerprint.to_hex()[..12].to_string();
        match choice {
            Ok((choice, recorded)) => match choice.chosen {
                Some((_, fingerprint)) if Some(fingerprint) == held => {}
                Some((config, fingerprint)) => match crate::embed::load(&config, &recorded) {
                    Ok(model) => {
                        tracing::info!(model = %short(fingerprint), "the store's active model changed; queries are embedded with it now");
                        self.set_query_model(Some(model), None);
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "the store's active model cannot be loaded; searching by words alone");
                        let problem = crate::search::ModelProblem::from_error(
                            crate::search::load_failure(&config),
                            "the store's model",
                            &err,
                        );
                        self.set_query_model(None, Some(problem));
                    }
                },
                // A remote model's server that does not answer one check has not become
                // another model: the one held keeps embedding queries (its own calls fail
                // and fall back to words, and say so, while the server is down), and the next
                // check looks again.
                None if held.is_some()
                    && choice.problem.as_ref().is_some_and(|problem| {
                        problem.reason == crate::search::SemanticReason::ModelUnreachable
                    }) =>
                {
                    tracing::warn!(
                        "the model's server did not answer a check; keeping the model loaded"
                    );
                }
                None => {
                    if held.is_some() {
                        let why = match (&choice.problem, &choice.notice) {
                            (Some(problem), _) => problem.message.clone(),
                            (None, Some(notice)) => notice.clone(),
                            (None, None) => {
                                format!("the store's vectors are from model {}", short(wanted))
                            }
                        };
                        tracing::warn!(
                            "the query model no longer makes the store's vectors: {why}"
                        );
                    }
                    // The latest reason stands, also when no model was held before.
                    self.set_query_model(None, choice.problem);
                }
            },
            Err(err) => {
                tracing::warn!(error = %err, "could not check which model embeds queries; keeping the one loaded");
            }
        }
    }

    /// The ledger's record of the models, for loading the one that embeds queries.
    fn read_ledger<T>(&self, f: impl FnOnce(&Ledger) -> Result<T>) -> Result<T> {
        let ledger = self.recorder.local().reads().get()?;
        f(&ledger)
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Makes the tools see the index's last commit; returns its generation. Calls running
    /// meanwhile finish on the snapshot they started with.
    ///
    /// When a rebuild has swapped a new index folder in, the reader is opened again on it; until
    /// that succeeds, the tools keep serving the commit the reader already has.
    pub fn reload(&self) -> Result<u64> {
        // A failed reload keeps serving the commit the reader already has.
        if let Some(reader) = self.current_reader()
            && !reader.index().is_replaced()
        {
            reader.reload_vectors()?;
            return Ok(reader.index().reload()?.0);
        }
        let reader = Arc::new(open_reader(&self.store_dir)?);
        let generation = reader.index().snapshot().generation().0;
        // The query model is read under the reader's lock, which `set_query_model` holds while
        // it changes the model: the new reader gets the model that is current when it goes in.
        let mut current = self
            .reader
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reader.set_embedder(self.query_model());
        reader.set_model_problem(
            self.model_problem
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        );
        *current = Some(reader);
        Ok(generation)
    }

    /// The index generation the tools see.
    pub fn generation(&self) -> Result<u64> {
        match self.current_reader() {
            Some(reader) => Ok(reader.index().snapshot().generation().0),
            None => Err(Error::NoStore {
                path: self.store_dir.clone(),
            }),
        }
    }

    fn current_reader(&self) -> Option<Arc<StoreReader>> {
        self.reader
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// When the last ingest finished, in ms since the epoch.
    pub fn last_ingest_ms(&self) -> Result<Option<i64>> {
        self.read_ledger(super::ledger::sqlite::Ledger::last_ingest_ms)
    }

    /// Handles one call at time `now_ms`.
    pub fn call(&self, call: &ToolCall, now_ms: i64) -> Result<CallResponse, CallError> {
        self.call_cancellable(call, now_ms, &|| false)
    }

    /// Handles one call that its caller may cancel (MCP `notifications/cancelled`): `cancelled`
    /// is asked just before the commit. Cancelled by then, the call writes nothing and a retry
    /// with its key executes; cancelled later, its rows stay and a retry replays.
    pub(crate) fn call_cancellable(
        &self,
        call: &ToolCall,
        now_ms: i64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<CallResponse, CallError> {
        let request = tools::parse(&call.tool, &call.arguments).map_err(|err| match err {
            ArgumentError::UnknownTool(name) => CallError::UnknownTool(name),
            ArgumentError::Invalid(why) => CallError::InvalidArguments(why),
        })?;
        let identity = CallIdentity::of(call)?;
        // A replay is answered before anything runs: it costs nothing and is served even over
        // the quota.
        let late = match identity.source {
            KeySource::Caller => match self.look_up(&call.scope, &identity)? {
                Settled::Answer(response) => return Ok(response),
                Settled::Late => true,
                Settled::Execute => false,
            },
            KeySource::Server => false,
        };
        let answer: ToolAnswer = {
            let Some(reader) = self.current_reader() else {
                return Err(CallError::Unavailable(format!(
                    "no readable index in {}; retry later (the next `groundidx ingest` or `groundidx rebuild` there makes one)",
                    self.store_dir.display()
                )));
            };
            self.run(&reader, &request)?
        };
        if late {
            return Ok(fresh(answer, Replayed::Late, identity.key, identity.source));
        }
        self.record(call, identity, answer, now_ms, cancelled)
    }

    /// How a caller's key was used: answer the stored call, answer late (pruned), or execute,
    /// which a store that cannot record a new key refuses (a retry must get this call's
    /// answer, which only a record can give).
    fn look_up(&self, scope: &str, identity: &CallIdentity) -> Result<Settled, CallError> {
        let lookup = self.recorder.lookup(scope, &identity.key)?;
        match self.settle(lookup, &identity.fingerprint, &identity.key)? {
            Settled::Execute if !self.recorder.records_new_keys() => {
                Err(CallError::Unavailable(format!(
                    "the store at {} is on a read-only file system, so a call with a new idempotency key cannot be recorded; call without a key to search it unrecorded",
                    self.store_dir.display()
                )))
            }
            settled => Ok(settled),
        }
    }

    /// Records an executed call (its key, audit row and unit) and answers it: fresh, read-only,
    /// cancelled, over the quota, or as the call with its key that committed first.
    fn record(
        &self,
        call: &ToolCall,
        identity: CallIdentity,
        answer: ToolAnswer,
        now_ms: i64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<CallResponse, CallError> {
        let CallIdentity {
            key,
            source: key_source,
            fingerprint,
            arguments,
        } = identity;
        let limit = self.config.rate_limit;
        let window_start = crate::clock::window_start(now_ms, limit.window_secs);
        let new_call = NewCall {
            scope: &call.scope,
            key: &key,
            key_source: key_source.as_str(),
            tool: &call.tool,
            fingerprint: &fingerprint,
            arguments: &arguments,
            response: answer.body.as_bytes(),
            is_error: answer.is_error,
            outcome: answer.outcome,
            n_hits: answer.n_hits,
            index_generation: answer.index_generation,
            now_ms,
            expires_at: now_ms.saturating_add(self.config.ttl_ms),
            window_start,
            window_secs: limit.window_secs,
            quota: limit.units,
        };
        // A store on a read-only mount: an unkeyed call is answered, recorded nowhere.
        let Some(Recorded {
            outcome,
            now_ms,
            read_only,
        }) = self.recorder.record(&new_call, key_source, cancelled)?
        else {
            if cancelled() {
                return Err(CallError::Cancelled);
            }
            return Ok(CallResponse {
                read_only: true,
                ..fresh(answer, Replayed::No, key, key_source)
            });
        };
        match outcome {
            RecordOutcome::Recorded => Ok(CallResponse {
                read_only,
                ..fresh(answer, Replayed::No, key, key_source)
            }),
            RecordOutcome::Cancelled => Err(CallError::Cancelled),
            RecordOutcome::OverQuota => Err(CallError::RateLimited {
                retry_after_seconds: seconds_to_reset(now_ms, limit.window_secs),
            }),
            // Another call with this key committed between our lookup and our transaction.
            RecordOutcome::Existing(lookup) => match self.settle(lookup, &fingerprint, &key)? {
                Settled::Answer(response) => Ok(response),
                Settled::Late => Ok(fresh(answer, Replayed::Late, key, key_source)),
                Settled::Execute => Err(CallError::Unavailable(
                    "the key was recorded and then vanished".into(),
                )),
            },
        }
    }

    /// Runs a validated call on the reader: a first page on the current snapshot, a next page
    /// on the snapshot its cursor names (when still kept), a chunk lookup as it is.
    fn run(&self, reader: &StoreReader, request: &ToolRequest) -> Result<ToolAnswer, CallError> {
        let answer = match request {
            ToolRequest::SearchDocs(search) => {
                reader.follow_ledger();
                tools::search_docs(
                    reader,
                    &reader.index().snapshot(),
                    reader.vectors().as_deref(),
                    search,
                    0,
                    Some(&self.cursor_key),
                )
            }
            ToolRequest::SearchPage { request, cursor } => {
                let cursor = self
                    .cursor_key
                    .open(cursor, &tools::cursor_request(request))
                    .map_err(CallError::InvalidArguments)?;
                let Some(snapshot) = reader.index().snapshot_at(cursor.generation, cursor.layout)
                else {
                    return Err(CallError::CursorExpired {
                        generation: cursor.generation.0,
                    });
                };
                // The page continues on the vector index the first page used, or none.
                let vectors = match cursor.vectors {
                    0 => None,
                    key => match reader.vectors_at(key) {
                        Some(vectors) => Some(vectors),
                        None => {
                            return Err(CallError::CursorExpired {
                                generation: cursor.generation.0,
                            });
                        }
                    },
                };
                // A page that would go past the last hit is cut there (`search_page`); only a
                // cursor at or past it is refused, and this server never gives one.
                if cursor.offset as usize >= crate::search::MAX_PAGED_HITS {
                    return Err(CallError::InvalidArguments(format!(
                        "a search pages through at most {} hits; this cursor is past them",
                        crate::search::MAX_PAGED_HITS
                    )));
                }
                tools::search_docs(
                    reader,
                    &snapshot,
                    vectors.as_deref(),
                    request,
                    cursor.offset,
                    Some(&self.cursor_key),
                )
            }
            ToolRequest::GetChunk(id) => tools::get_chunk(reader, id),
            ToolRequest::ReadDocument(read) => {
                return tools::read::read_document(reader, read, &self.cursor_key)
                    .map_err(tool_error);
            }
            ToolRequest::ListDocuments(list) => {
                return tools::read::list_documents(reader, list, &self.cursor_key)
                    .map_err(tool_error);
            }
        };
        answer.map_err(unavailable)
    }

    /// The scope's quota at `now_ms`.
    pub fn quota(&self, scope: &str, now_ms: i64) -> Result<QuotaState, CallError> {
        let limit = self.config.rate_limit;
        let (used, now_ms) = self.recorder.units_used(scope, limit.window_secs, now_ms)?;
        Ok(QuotaState {
            limit: limit.units,
            window_secs: limit.window_secs,
            remaining: limit.units.saturating_sub(used),
            reset_seconds: seconds_to_reset(now_ms, limit.window_secs),
        })
    }

    fn settle(
        &self,
        lookup: KeyLookup,
        fingerprint: &[u8; 32],
        key: &str,
    ) -> Result<Settled, CallError> {
        match lookup {
            KeyLookup::Unused => Ok(Settled::Execute),
            KeyLookup::Stored(record) if record.fingerprint == fingerprint => {
                Ok(Settled::Answer(replay(record, key)))
            }
            KeyLookup::Pruned {
                fingerprint: stored,
            } if stored == fingerprint => Ok(Settled::Late),
            KeyLookup::Stored(_) | KeyLookup::Pruned { .. } => Err(CallError::KeyReused {
                key: key.to_string(),
            }),
        }
    }
}

/// What names a call for its record: its key (the caller's, or one the server makes), who made
/// the key, the fingerprint of its tool and arguments, and the arguments as the audit row keeps
/// them.
struct CallIdentity {
    key: String,
    source: KeySource,
    fingerprint: [u8; 32],
    arguments: String,
}

impl CallIdentity {
    fn of(call: &ToolCall) -> Result<CallIdentity, CallError> {
        let (key, source) = match &call.key {
            Some(key) => (key.stored()?, KeySource::Caller),
            None => (format!("srv-{}", uuid::Uuid::new_v4()), KeySource::Server),
        };
        Ok(CallIdentity {
            key,
            source,
            fingerprint: ids::fingerprint(
                canonical_json(&json!({"tool": call.tool, "arguments": call.arguments})).as_bytes(),
            ),
            arguments: canonical_json(&call.arguments),
        })
    }
}

enum Settled {
    Answer(CallResponse),
    Late,
    Execute,
}

fn replay(record: KeyRecord, key: &str) -> CallResponse {
    CallResponse {
        body: String::from_utf8_lossy(&record.response).into_owned(),
        is_error: record.is_error,
        replayed: Replayed::Yes,
        key: key.to_string(),
        key_source: KeySource::Caller,
        index_generation: record.index_generation,
        read_only: false,
    }
}

fn fresh(
    answer: ToolAnswer,
    replayed: Replayed,
    key: String,
    key_source: KeySource,
) -> CallResponse {
    CallResponse {
        body: answer.body,
        is_error: answer.is_error,
        replayed,
        key,
        key_source,
        index_generation: answer.index_generation,
        read_only: false,
    }
}

/// A shared-ledger error that says it could not be reached (or not in time), rather than that
/// it refused the call.
fn is_unreachable(err: &Error) -> bool {
    matches!(
        err,
        Error::Shared {
            retryable: true,
            ..
        }
    )
}

/// A read tool's failure as the call's refusal.
fn tool_error(error: tools::ToolError) -> CallError {
    match error {
        tools::ToolError::Store(error) => unavailable(error),
        tools::ToolError::InvalidCursor(why) => CallError::InvalidArguments(why),
        tools::ToolError::CursorExpired { generation } => CallError::CursorExpired { generation },
    }
}

fn unavailable(err: Error) -> CallError {
    match err {
        Error::Busy { .. } => CallError::Busy {
            retry_after_seconds: 1,
        },
        // A search the store cannot run as asked (semantic mode without vectors).
        Error::Usage(message) => CallError::InvalidArguments(message),
        Error::Shared {
            context, message, ..
        } => CallError::Unavailable(format!(
            "the shared ledger could not {context} ({message}); retry with the same key"
        )),
        other => CallError::Unavailable(other.to_string()),
    }
}

fn seconds_to_reset(now_ms: i64, window_secs: u64) -> u64 {
    let window_ms = (window_secs as i64).max(1) * 1000;
    let end = crate::clock::window_start(now_ms, window_secs) + window_ms;
    ((end - now_ms + 999) / 1000).max(1) as u64
}

/// Deletes the idempotency key records of the store's own ledger that expired before `now_ms`,
/// and nothing else (a replica is refused: `LocalCalls::prune_keys`).
pub fn gc(store_dir: &Path, now_ms: i64) -> Result<u64> {
    recorder::call_ledger(store_dir, None, Access::ReadWrite)?.prune_keys(now_ms)
}

/// Deletes the vectors of the models search used before the active one, and those of chunks
/// the ledger no longer holds. It takes no writer lock: the vector index holds neither kind, so
/// nothing a reader or writer uses goes away. A replica is refused: what it holds is the shared
/// ledger's, and rows removed here alone (behind the replica's position) would never come back.
pub fn gc_vectors(store_dir: &Path) -> Result<crate::ledger::VectorGc> {
    let path = StorePaths::new(store_dir).existing_ledger()?;
    let mut ledger = Ledger::open(&path, Access::ReadWrite)?;
    if ledger.replica_state()?.is_some() {
        return Err(Error::Usage(format!(
            "the store at {} is a replica of a shared ledger; gc without it would remove rows the shared ledger still holds\nhint: pass the same --ledger postgres://… (gc then collects the shared ledger, and every replica follows at its next sync)",
            store_dir.display()
        )));
    }
    ledger.gc_vectors()
}

#[cfg(test)]
mod tests {
    use super::{RateLimit, validate_key};
    use crate::clock::parse_duration;

    /// A server's every call commits, and a connection that reads through a memory map
    /// unmaps the whole file at its first read after any commit: the agent's searches read
    /// the ledger by `pread`, while a one-off search keeps its map.
    #[test]
    fn the_agent_reads_its_ledger_without_a_memory_map() {
        use crate::ingest::{IngestConfig, NoProgress, ingest};
        use crate::store::{LockWait, Store, StoreReader};
        let docs = tempfile::tempdir().expect("a docs folder");
        std::fs::write(
            docs.path().join("a.md"),
            "# Keys\n\nRotate the signing key.\n",
        )
        .expect("write a document");
        let dir = tempfile::tempdir().expect("a store folder");
        let (mut store, _) =
            Store::open_writer(dir.path(), LockWait::NoWait, Default::default(), None)
                .expect("open the store");
        ingest(
            &mut store,
            &[docs.path().to_path_buf()],
            &IngestConfig::default(),
            &NoProgress,
        )
        .expect("ingest");
        store.close().expect("close");
        let agent = super::Agent::open(dir.path(), super::AgentConfig::default(), None)
            .expect("open the agent");
        let reader = agent.current_reader().expect("the agent's reader");
        assert_eq!(reader.ledger().expect("a connection").mmap_size(), 0);
        let one_off = StoreReader::open(dir.path()).expect("a one-off reader");
        assert!(one_off.ledger().expect("a connection").mmap_size() > 0);
    }

    #[test]
    fn keys_are_visible_ascii_up_to_255() {
        assert!(validate_key("r1/s1/c1").is_ok());
        assert!(validate_key(&"k".repeat(255)).is_ok());
        assert!(validate_key(&"k".repeat(256)).is_err());
        assert!(validate_key("").is_err());
        assert!(validate_key("a b").is_err());
        assert!(validate_key("a\u{7}").is_err());
        assert!(validate_key("café").is_err());
    }

    #[test]
    fn durations_and_rate_limits_parse() {
        assert_eq!(parse_duration("7d").map(|d| d.as_secs()), Ok(604_800));
        assert_eq!(parse_duration("90").map(|d| d.as_secs()), Ok(90));
        assert_eq!(parse_duration("90s").map(|d| d.as_secs()), Ok(90));
        assert_eq!(parse_duration("30m").map(|d| d.as_secs()), Ok(1_800));
        assert_eq!(parse_duration("24h").map(|d| d.as_secs()), Ok(86_400));
        assert_eq!(parse_duration(" 7d ").map(|d| d.as_secs()), Ok(604_800));
        assert_eq!(parse_duration("1h30m").map(|d| d.as_secs()), Ok(5_400));
        assert_eq!(parse_duration("1h 30m").map(|d| d.as_secs()), Ok(5_400));
        assert_eq!(parse_duration("2w").map(|d| d.as_secs()), Ok(1_209_600));
        assert_eq!(parse_duration("1.5h").map(|d| d.as_secs()), Ok(5_400));
        for bad in ["", "7x", "soon", "-1s", "h"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains("such as 90s, 1h30m or 7d"), "{bad}: {err}");
        }
        assert_eq!(
            "10/1h30m".parse::<RateLimit>(),
            Ok(RateLimit {
                units: 10,
                window_secs: 5_400
            })
        );
        assert_eq!(
            "600/60s".parse::<RateLimit>(),
            Ok(RateLimit {
                units: 600,
                window_secs: 60
            })
        );
        assert!("0/1s".parse::<RateLimit>().is_err());
        assert!("600".parse::<RateLimit>().is_err());
    }
}
