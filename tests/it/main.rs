//! Integration tests: the real `groundidx` binary on real folders.
//!
//! Table of contents, one file per promise:
//! - `support`: the test environment (a temp copy of `sample_docs/`, a store, a runner).
//! - `reingest`: invariant 1, a re-run on unchanged documents writes nothing.
//! - `edits`: edits, renames, deletions and shared passages write only what changed.
//! - `crash`: invariant 2, an abort at every named crash point heals on the next run.
//! - `kill`: invariant 2 again, SIGKILL at random moments on a real corpus.
//! - `search`: invariant 3, no passage twice; filters, snippets and the JSON contract.
//! - `verify`: invariant 4, verify passes on a healthy store and names every difference.
//! - `malformed`: invariant 6, hostile files warn and hurt no other document.
//! - `deletion`: deletions wait for a clean walk; the mass-delete guard; roots stay apart.
//! - `lock`: one writer at a time; readers never wait.
//! - `cli`: exit codes, usage errors, help, store location and schema version.
//! - `ops`: the README's crontab line, `status --max-age`, systemd units, completions, man page.
//! - `config`: `groundidx.toml`, precedence of flags, environment, file and defaults; bad keys.
//! - `prompt`: the progress bar on a terminal only, colour and `NO_COLOR`, text and JSON logs.
//! - `tidy`: every source file documents itself and appears in ARCHITECTURE.md.
//! - `agent_keys`: the keyed agent path through the library with a fake clock: concurrency,
//!   retention and gc, the quota; and the ledger helpers the other agent files count rows with.
//! - `agent_mcp`: the agent tool over MCP stdio: keys, replays, mismatches, crashes, failures,
//!   the quota and the MCP surface.
//! - `agent_http`: the agent tool over HTTP (JSON API and `/mcp`): header keys, replays, the
//!   quota headers, Origin/Host/auth security, and reads during an ingest.
//! - `abuse`: hostile bytes, bodies and arguments on the agent path get clear errors, write
//!   nothing, never leak a file from outside the ingested folders, and the server keeps serving.
//! - `faults`: a full disk, an unwritable or read-only store and a locked ledger fail clearly,
//!   and the store heals once the fault is gone.
//! - `hostile_tree`: a tree that changes under a run (folders swapped for links between the
//!   walk and the read, the root swapped before or during the walk) or misbehaves (late NUL bytes, an
//!   unreadable root, the year 2400).
//! - `hostile_names`: file names and text with control characters print as one harmless line.
//! - `stat_cache`: what the stat cache may conclude: ctime, reused inodes, the schema upgrade.
//! - `foreign_store`: another program's SQLite file as the ledger is refused and left untouched.
//! - `fuzz_regressions`: every input kept under `tests/fuzz_regressions/` passes its fuzz
//!   target's property checks (`fuzz/src/lib.rs`).

mod support;

mod abuse;
mod agent_http;
mod agent_keys;
mod agent_mcp;
mod cli;
mod config;
mod crash;
mod deletion;
mod edits;
mod faults;
mod foreign_store;
mod fuzz_regressions;
mod hostile_names;
mod hostile_tree;
mod kill;
mod lock;
mod malformed;
mod ops;
mod prompt;
mod reingest;
mod search;
mod stat_cache;
mod tidy;
mod verify;
