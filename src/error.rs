//! The library's one error type.
//!
//! A variant exists only when a caller acts on it differently (the CLI maps them to exit codes in
//! `cli/exit_code.rs`; the server maps them to tool errors and HTTP statuses). Foreign errors are
//! wrapped with the path or operation they happened on. A bad input *file* is never an `Error`:
//! it is a `Warning` in the ingest report.

use std::path::{Path, PathBuf};

/// Result with the library's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another process holds the store's writer lock.
    #[error(
        "another groundidx process is writing to the store at {path}\nhint: wait for it, or pass --wait SECONDS"
    )]
    LockBusy { path: PathBuf },

    /// The store was written by a newer (or unknown) version of groundidx.
    #[error(
        "the store at {path} has schema version {found}, this groundidx understands {expected}\nhint: use the groundidx that wrote it, or ingest into a new --store"
    )]
    SchemaVersion {
        path: PathBuf,
        found: i64,
        expected: i64,
    },

    /// The store's ledger file is some other program's SQLite database; it is left untouched.
    #[error(
        "{path} is not a groundidx ledger: it holds tables of another program; left untouched\nhint: pass a --store folder of groundidx's own (a new or empty folder is fine)"
    )]
    NotALedger { path: PathBuf },

    /// No store exists where one was expected (a reader never creates one).
    #[error(
        "no groundidx store at {path}\nhint: run `groundidx ingest DIR` first, or pass --store"
    )]
    NoStore { path: PathBuf },

    /// The ledger is there but its index is missing, damaged or of another schema. A writer
    /// (`ingest`, `rebuild`) makes it again from the ledger; readers report it.
    #[error(
        "the index at {path} cannot be used: {reason}\nhint: run `groundidx rebuild` to make it again from the ledger"
    )]
    IndexUnusable { path: PathBuf, reason: String },

    /// The run would remove more than half of the documents under a root.
    #[error(
        "refusing to remove {removing} of {existing} documents under {root}: the folder may be empty or unmounted, or --exclude or --formats (or groundidx.toml) may now leave its files out\nhint: pass --allow-mass-delete if this is meant"
    )]
    MassDelete {
        root: PathBuf,
        removing: usize,
        existing: usize,
    },

    /// An embedding model could not be read, loaded or run (a local folder or a remote server).
    #[error("embedding model {model}: {message}")]
    Model { model: String, message: String },

    /// Bad input from the user (a folder that does not exist, a bad glob, a bad argument).
    #[error("{0}")]
    Usage(String),

    /// The ledger database is busy or locked beyond its timeout; retrying later may succeed.
    #[error("the ledger is busy ({context}); retry shortly")]
    Busy { context: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("ledger {context}: {source}")]
    Ledger {
        context: String,
        #[source]
        source: rusqlite::Error,
    },

    #[error("index {context}: {source}")]
    Index {
        context: String,
        #[source]
        source: tantivy::TantivyError,
    },

    /// A signal asked the run to end; it ended at a safe point, every batch before it committed.
    #[error(
        "interrupted by signal {signal}: {done} of {total} {what}\nhint: the store is consistent; the next run continues the job"
    )]
    Interrupted {
        signal: i32,
        done: u64,
        total: u64,
        /// What was counted: `files ingested`, `passages embedded`.
        what: &'static str,
    },

    /// The shared ledger (PostgreSQL) failed or could not be reached; `retryable` when trying
    /// again later may succeed (the retries of `ledger::postgres` were spent).
    #[error("shared ledger {ledger}: {context}: {message}{}", if *retryable { "\nhint: the ledger could not be reached or was busy; retry shortly" } else { "" })]
    Shared {
        ledger: String,
        context: String,
        message: String,
        retryable: bool,
    },

    /// Another writer holds the shared ledger's writer lease.
    #[error(
        "another writer holds the shared ledger's lease ({holder}; it expires in {} s unless renewed)\nhint: wait for it, or pass --wait SECONDS",
        (expires_in_ms + 999) / 1000
    )]
    LeaseBusy { holder: String, expires_in_ms: i64 },

    /// This writer lost the shared ledger's writer lease: another took it (after this one
    /// stopped renewing it). Nothing more of this run is written.
    #[error(
        "this writer lost the shared ledger's lease: {context}\nhint: run again; every batch committed before is kept"
    )]
    LeaseLost { context: String },

    /// The ledger and the index disagree in a way a replay cannot heal.
    #[error("store is inconsistent: {0}\nhint: run `groundidx rebuild`")]
    Inconsistent(String),

    /// The ledger itself is damaged: the index cannot be made again from it.
    #[error(
        "the ledger is damaged: {0}\nhint: copy the store from a backup, or ingest into a new store (`groundidx rebuild` makes the index again, not the ledger)"
    )]
    LedgerDamaged(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Names the store a foreign error (I/O, ledger, index) or a busy ledger happened in, unless
    /// its context already names it or a path in it: "database or disk is full" alone does not
    /// say which disk. Every other variant is returned as it is.
    pub(crate) fn in_store(self, dir: &Path) -> Error {
        let dir = dir.display().to_string();
        let name = |context: String| {
            if context.contains(&format!("store {dir}")) || context.contains(&format!("{dir}/")) {
                context
            } else {
                format!("{context} in store {dir}")
            }
        };
        match self {
            Error::Io { context, source } => Error::Io {
                context: name(context),
                source,
            },
            Error::Ledger { context, source } => Error::Ledger {
                context: name(context),
                source,
            },
            Error::Index { context, source } => Error::Index {
                context: name(context),
                source,
            },
            Error::Busy { context } => Error::Busy {
                context: name(context),
            },
            other => other,
        }
    }
}
