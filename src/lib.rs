//! groundidx: a content-addressed, idempotent, crash-safe indexer for documents that AI agents
//! search. See ARCHITECTURE.md for the design; the binary in `src/main.rs` is a thin shell.

pub mod agent;
pub mod chunk;
pub mod clock;
pub mod crash;
pub mod embed;
pub mod error;
pub mod export;
pub mod extract;
pub mod format;
pub mod ids;
pub mod index;
pub mod ingest;
pub mod ledger;
pub mod search;
pub mod server;
pub mod stat;
pub mod status;
pub mod store;
pub mod vectors;
pub mod verify;
pub mod walk;

pub use error::{Error, Result};
