//! The tests' harness, one of each: the environment a test runs `groundidx` in (`env`), child
//! processes and signals (`process`), a store's index files (`store`), the seeded random numbers
//! (`rng`), `groundidx mcp` as a child process (`mcp`), `groundidx serve` and HTTP clients for it
//! (`http`), row counts and locks in a store's SQLite ledger (`ledger`), the PostgreSQL test
//! database and clusters (`pg`), and a fake OpenAI-compatible embeddings server
//! (`embed_server`).

pub mod embed_server;
pub mod env;
pub mod http;
pub mod ledger;
pub mod mcp;
pub mod pg;
pub mod process;
pub mod rng;
pub mod store;

pub use env::*;
pub use process::*;
pub use rng::Rng;
pub use store::*;
