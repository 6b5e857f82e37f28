//! The shared ledger in PostgreSQL: what several hosts agree on (the documents, chunks and
//! their change log; the writer lease; idempotency keys, audit, usage and quota windows).
//!
//! The API is synchronous like the SQLite ledger's: `PgLedger` owns a small tokio runtime of its
//! own (one worker, which drives the connections) and a deadpool pool, and blocks on them. It
//! must not be called from a thread that runs async tasks; the server calls it through
//! `spawn_blocking`, as it calls the SQLite ledger.
//!
//! Every transaction goes through `PgLedger::run`, the one place that retries: the whole
//! transaction again, with backoff, while its error is one a retry can cure (a lost or refused
//! connection, a server shutting down, a serialisation failure or deadlock, a standby after a
//! failover) and its budget lasts. Each transaction is decided in advance for its second run, so
//! a retry after an unacknowledged commit finds its own rows.

mod keys;
mod lease;
mod log;
mod meta;
mod schema;
mod tls;
mod vectors;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use crate::error::{Error, Result};

pub(crate) use keys::SharedCall;
pub(crate) use lease::{LeaseGrant, LeaseInfo, lease_busy};
pub use log::Pulled;
pub use log::{ConsumerRow, SharedCounts};
pub use meta::SharedMeta;
pub use schema::{MigrateReport, PG_SCHEMA_VERSION};

/// How long the server lets one of our transactions sit idle before ending it (and releasing
/// its locks): no transaction of ours waits on anything but the server in between statements.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(30);

/// How long a statement waits for a lock before giving up: the lease is then taken to be held,
/// and a write is retried within its budget.
pub(crate) const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '2s'";

/// How a shared ledger is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// `postgres://…` or `postgresql://…`, as libpq takes it.
    pub url: String,
    /// The PostgreSQL schema holding the ledger's tables.
    pub schema: String,
    /// The most connections this process opens.
    pub max_connections: usize,
    /// A PEM file of the CA that signed the server's certificate: TLS is then required and the
    /// certificate checked (see `tls`).
    pub ca_file: Option<std::path::PathBuf>,
}

/// How long a kind of transaction may keep retrying before its error is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// A writer's batch, run record or lease: ride out a restart or a failover.
    Writer,
    /// A keyed call: the caller retries with its key; a prompt answer beats a hanging one.
    Call,
    /// A command or a replica's sync step.
    Command,
}

impl Budget {
    fn duration(self) -> Duration {
        match self {
            Budget::Writer => Duration::from_secs(30),
            Budget::Call => Duration::from_secs(2),
            Budget::Command => Duration::from_secs(10),
        }
    }
}

/// A handle on the shared ledger; clones share the runtime and the pool.
#[derive(Clone)]
pub struct PgLedger {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    /// The URL without its password, for messages.
    shown: String,
    schema: String,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLedger")
            .field("ledger", &self.describe())
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle may be dropped on a thread of another runtime, where dropping a
        // runtime panics.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// An error inside a transaction body: PostgreSQL's, the pool's, or the library's own (which
/// ends the transaction without a retry).
pub(crate) enum PgError {
    Db(tokio_postgres::Error),
    Pool(deadpool_postgres::PoolError),
    App(Error),
}

impl From<tokio_postgres::Error> for PgError {
    fn from(err: tokio_postgres::Error) -> PgError {
        PgError::Db(err)
    }
}

impl From<Error> for PgError {
    fn from(err: Error) -> PgError {
        PgError::App(err)
    }
}

/// The connection a transaction body is given.
pub(crate) type Conn = deadpool_postgres::Object;

/// A `REPEATABLE READ READ ONLY` transaction: everything read in it is one snapshot.
pub(crate) async fn read_snapshot(
    conn: &mut Conn,
) -> std::result::Result<deadpool_postgres::Transaction<'_>, tokio_postgres::Error> {
    conn.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
}

impl PgLedger {
    /// Opens the shared ledger at `options` and checks its schema: migrated to this build's
    /// version when `migrate` is set (the first write does), otherwise required to be at it.
    pub fn open(options: &PgOptions, migrate: bool) -> Result<PgLedger> {
        let ledger = PgLedger::connect(options)?;
        if migrate {
            ledger.migrate()?;
        } else {
            ledger.check_schema()?;
        }
        Ok(ledger)
    }

    /// A handle on the database, without checking anything yet.
    pub fn connect(options: &PgOptions) -> Result<PgLedger> {
        let shown = redact(&options.url);
        if !(options.url.starts_with("postgres://") || options.url.starts_with("postgresql://")) {
            return Err(Error::Usage(format!(
                "--ledger {shown}: a shared ledger is a PostgreSQL URL (postgres://user@host/db)\nhint: leave --ledger out for the store's own SQLite ledger"
            )));
        }
        check_schema_name(&options.schema)?;
        let mut config = tokio_postgres::Config::from_str(&options.url).map_err(|err| {
            Error::Usage(format!(
                "--ledger {shown}: not a PostgreSQL URL: {err}\nhint: postgres://user:password@host:5432/database"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("groundidx");
        }
        // A transaction left open by a frozen or vanished process holds the counter row's
        // lock: the server ends it after this long, so no writer waits on it for ever.
        config.options(format!(
            "-c search_path=\"{}\" -c idle_in_transaction_session_timeout={}",
            options.schema,
            IDLE_IN_TRANSACTION.as_millis()
        ));
        if options.ca_file.is_some() {
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        let manager = Manager::from_config(
            config,
            tls::connector(options.ca_file.as_deref())?,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("groundidx-pg")
            .enable_all()
            .build()
            .map_err(|err| Error::io("start the PostgreSQL client's runtime", err))?;
        let pool = Pool::builder(manager)
            .max_size(options.max_connections.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(1)))
            .build()
            .map_err(|err| Error::Usage(format!("--ledger {shown}: {err}")))?;
        Ok(PgLedger {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                pool,
                shown,
                schema: options.schema.clone(),
            }),
        })
    }

    /// The URL without its password, and the schema: what messages name.
    pub fn describe(&self) -> String {
        format!("{} (schema {})", self.inner.shown, self.inner.schema)
    }

    /// The URL without its password.
    pub(crate) fn shown_url(&self) -> &str {
        &self.inner.shown
    }

    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.inner
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the ledger")
            .block_on(future)
    }

    /// Runs `body` on a pooled connection (the body opens and commits its transaction), again
    /// from the start on an error a retry can cure, until `budget` is spent.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        budget: Budget,
        mut body: impl AsyncFnMut(&mut Conn) -> std::result::Result<T, PgError>,
    ) -> Result<T> {
        let mut started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut idle_forgiven = false;
        self.block_on(async {
            loop {
                let attempt = match self.inner.pool.get().await {
                    Ok(mut conn) => {
                        let result = body(&mut conn).await;
                        if matches!(&result, Err(PgError::Db(err)) if retryable_db(err)) {
                            // A connection that failed this way (closed, or a standby) is not
                            // given to anyone again.
                            drop(deadpool_postgres::Object::take(conn));
                        }
                        result
                    }
                    Err(err) => Err(PgError::Pool(err)),
                };
                let err = match attempt {
                    Ok(value) => return Ok(value),
                    Err(PgError::App(err)) => return Err(err),
                    Err(err) => err,
                };
                let retry = match &err {
                    PgError::Db(err) => retryable_db(err),
                    PgError::Pool(err) => retryable_pool(err),
                    PgError::App(_) => false,
                };
                // The time a frozen process sat idle inside the transaction was not spent
                // waiting on the server: it gets its retry (once), whose fence says whether
                // the lease is still this writer's.
                if !idle_forgiven
                    && matches!(&err, PgError::Db(err) if err.code().is_some_and(|code| code.code() == IDLE_ENDED))
                {
                    idle_forgiven = true;
                    started = Instant::now();
                }
                if !retry || started.elapsed() + pause > budget.duration() {
                    return Err(self.error(what, err, retry));
                }
                tracing::debug!(what, "retrying a shared-ledger transaction");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        })
    }

    fn error(&self, what: &str, err: PgError, retryable: bool) -> Error {
        let code = match &err {
            PgError::Db(err) | PgError::Pool(deadpool_postgres::PoolError::Backend(err)) => {
                err.code().map(|code| code.code().to_string())
            }
            _ => None,
        };
        // Credentials or a database that do not work are the settings' fault: usage, exit 2.
        if code.is_some_and(|code| code.starts_with("28") || code == "3D000") {
            let message = match &err {
                PgError::Db(err) | PgError::Pool(deadpool_postgres::PoolError::Backend(err)) => {
                    db_message(err)
                }
                _ => String::new(),
            };
            return Error::Usage(format!(
                "shared ledger {}: {what}: {message}\nhint: check the user, password and database in --ledger (and pg_hba.conf on the server)",
                self.describe()
            ));
        }
        let message = match err {
            PgError::Db(err) => db_message(&err),
            PgError::Pool(deadpool_postgres::PoolError::Backend(err)) => db_message(&err),
            PgError::Pool(err) => err.to_string(),
            PgError::App(err) => return err,
        };
        Error::Shared {
            ledger: self.describe(),
            context: what.to_string(),
            message,
            retryable,
        }
    }
}

/// The message of a PostgreSQL error with its code, or of a connection error with its cause.
fn db_message(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

/// Errors a retry of the whole transaction can cure.
fn retryable_db(err: &tokio_postgres::Error) -> bool {
    match err.code() {
        Some(code) => retryable_code(code.code()),
        // No SQLSTATE: the connection broke or could not be made (a refused TLS certificate
        // or a bad password is not cured by trying again).
        None => err.is_closed() || connection_failed(err),
    }
}

/// SQLSTATEs a retry of the whole transaction can cure. `25P03`: the server ended the
/// transaction (and its connection) after it sat idle past `IDLE_IN_TRANSACTION`, as it does to
/// a writer frozen mid-transaction; nothing of it committed, and the retry's fence tells a
/// writer whose lease was taken meanwhile (`LeaseLost`) from one that still holds it.
fn retryable_code(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "25006" | IDLE_ENDED
        )
}

/// The SQLSTATE of a transaction the server ended for sitting idle.
const IDLE_ENDED: &str = "25P03";

/// Whether an error's causes hold an I/O error of a connection that broke or could not be
/// made (refused, reset, timed out, a socket not there yet).
fn connection_failed(err: &tokio_postgres::Error) -> bool {
    use std::io::ErrorKind::*;
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | NotConnected
                    | BrokenPipe
                    | TimedOut
                    | UnexpectedEof
                    | AddrNotAvailable
                    | NotFound
                    | Interrupted
            );
        }
        source = cause.source();
    }
    // A closed connection or a timeout of the client's own carry no I/O error.
    let text = err.to_string();
    text.contains("timeout") || text.contains("closed")
}

fn retryable_pool(err: &deadpool_postgres::PoolError) -> bool {
    match err {
        deadpool_postgres::PoolError::Backend(err) => retryable_db(err),
        deadpool_postgres::PoolError::Timeout(_) => true,
        _ => false,
    }
}

/// A schema name is a plain identifier, so it never needs quoting.
fn check_schema_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok && !name.starts_with("pg_") {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "--ledger-schema {name:?}: a schema name is 1 to 63 lower-case letters, digits and _, not starting with a digit or pg_"
        )))
    }
}

/// The URL with its password replaced by `***`, in the userinfo and in a `password=` parameter.
pub fn redact(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(scheme_end) = shown.find("://") {
        let rest = &shown[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@')
            && let Some(colon) = rest[..at].find(':')
        {
            let start = scheme_end + 3 + colon + 1;
            let end = scheme_end + 3 + at;
            shown.replace_range(start..end, "***");
        }
    }
    if let Some(at) = shown.find("password=") {
        let start = at + "password=".len();
        let end = shown[start..]
            .find('&')
            .map_or(shown.len(), |offset| start + offset);
        shown.replace_range(start..end, "***");
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::{check_schema_name, redact, retryable_code};

    #[test]
    fn transactions_the_server_ended_or_refused_for_now_are_retried() {
        // Connection lost, server shutting down or starting, serialisation failure, deadlock,
        // a standby, and a transaction the server ended after it sat idle.
        for code in [
            "08006", "57P01", "57P03", "40001", "40P01", "25006", "25P03",
        ] {
            assert!(retryable_code(code), "{code}");
        }
        // A constraint, a missing table, bad credentials, a missing database, bad text.
        for code in ["23505", "42P01", "28P01", "3D000", "22021"] {
            assert!(!retryable_code(code), "{code}");
        }
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://app:s3cret@db.example:5432/idx"),
            "postgres://app:***@db.example:5432/idx"
        );
        assert_eq!(
            redact("postgresql://app@db/idx?password=s3cret&sslmode=require"),
            "postgresql://app@db/idx?password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgresql://postgres@%2Ftmp%2Fpg/idx"),
            "postgresql://postgres@%2Ftmp%2Fpg/idx"
        );
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(check_schema_name("groundidx").is_ok());
        assert!(check_schema_name("t_1").is_ok());
        for bad in [
            "",
            "Groundidx",
            "1abc",
            "a-b",
            "a\"b",
            "pg_temp",
            &"a".repeat(64),
        ] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }
}
