//! Keyed calls per second against the reference that bounds them: bare SQLite inserts.
//!
//! A keyed call (`groundidx::agent::Agent::call`, as `mcp` and `serve` make it, with a new key
//! each time) looks its key up, runs `search_docs`, and writes the key record, an audit row and a
//! usage row in one `BEGIN IMMEDIATE` transaction. The reference makes the same number of
//! transactions of the same three rows (in the tables of a fresh groundidx ledger, so the same
//! columns and indexes; the response blob as long as a real answer) with the same SQLite build (rusqlite's bundled one, linked into
//! this same binary), the same pragmas (`journal_mode = WAL`, `synchronous = FULL`) and a
//! database on the same file system, and does nothing else: no lookup, no quota count, no
//! search. With `synchronous = FULL` both pay one WAL fsync per transaction.
//!
//! - `cargo bench --bench sqlite_reference`: criterion, on a store of `sample_docs/` (or
//!   `GROUNDIDX_BENCH_DOCS`).
//! - `sqlite_reference keyed STORE CALLS [BLOCKS [QUERIES]] [--clients N]`: whole runs for
//!   `benches/compare.sh`: CALLS keyed calls on the existing STORE (with the queries of the file
//!   QUERIES, one a line, if given) and CALLS reference transactions, alternating in BLOCKS
//!   blocks; prints one JSON line with both rates and the keyed calls' p50 and p99.
//!   With `--clients N`, N threads share each side's work: N callers of one `Agent` (whose
//!   calls arriving together commit together), and N writers of the reference taking turns on
//!   its connection, one transaction per row set as before (a writer without group commit).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use criterion::Criterion;
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::json;

use groundidx::agent::{Agent, AgentConfig, RateLimit, ToolCall};
use groundidx::ingest::{IngestConfig, NoProgress, ingest};
use groundidx::store::{LockWait, Store};

const QUERIES: [&str; 6] = [
    "rotate the signing key",
    "install on linux",
    "backup and restore",
    "configure the proxy",
    "error handling",
    "release checklist",
];

struct Bare {
    conn: Connection,
    response: Vec<u8>,
    n: u64,
}

impl Bare {
    /// A new, empty groundidx store at `dir`, so the reference writes into exactly the tables
    /// (columns, constraints, indexes) the ledger's schema makes, opened with bare SQLite.
    fn open(dir: &Path, response_len: usize) -> Bare {
        let _ = std::fs::remove_dir_all(dir);
        let (store, _) = Store::open_writer(dir, LockWait::NoWait, Default::default(), None)
            .expect("create the reference store");
        store.close().expect("close the reference store");
        let conn = Connection::open(dir.join("ledger.sqlite")).expect("open reference db");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
        )
        .expect("pragmas");
        Bare {
            conn,
            response: vec![b'x'; response_len],
            n: 0,
        }
    }

    /// One transaction of the three rows a keyed call writes.
    fn insert(&mut self) {
        self.n += 1;
        let key = format!("bench-run/step/{}", self.n);
        let now = 1_700_000_000_000i64 + self.n as i64;
        let fingerprint = [7u8; 32];
        let arguments = r#"{"query":"rotate the signing key","top_k":10}"#;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        tx.prepare_cached(
            "INSERT INTO idempotency_keys (scope, key, tool, fingerprint, status, response,
                 is_error, index_generation, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, ?8, ?9)",
        )
        .expect("prepare")
        .execute(params![
            "bench",
            key,
            "search_docs",
            &fingerprint[..],
            self.response,
            false,
            1i64,
            now,
            now + 7 * 86_400_000
        ])
        .expect("insert key");
        tx.prepare_cached(
            "INSERT INTO audit_events (scope, key, key_source, tool, fingerprint, arguments,
                 outcome, n_hits, index_generation, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .expect("prepare")
        .execute(params![
            "bench",
            key,
            "caller",
            "search_docs",
            &fingerprint[..],
            arguments,
            "ok",
            10i64,
            1i64,
            now
        ])
        .expect("insert audit");
        tx.prepare_cached(
            "INSERT INTO usage_events (scope, key, units, window_start, window_secs, created_at)
             VALUES (?1, ?2, 1, ?3, ?4, ?5)",
        )
        .expect("prepare")
        .execute(params!["bench", key, now - now % 60_000, 60i64, now])
        .expect("insert usage");
        tx.commit().expect("commit");
    }
}

struct Keyed {
    agent: Agent,
    run: String,
    n: AtomicU64,
    queries: Vec<String>,
}

impl Keyed {
    fn open(store: &Path) -> Keyed {
        let config = AgentConfig {
            rate_limit: RateLimit {
                units: u64::MAX / 2,
                window_secs: 60,
            },
            ..AgentConfig::default()
        };
        Keyed {
            agent: Agent::open(store, config, None).expect("open agent"),
            run: format!("bench-{}-{}", std::process::id(), now_ms()),
            n: AtomicU64::new(0),
            queries: QUERIES
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        }
    }

    /// One executed keyed call; returns the length of its answer.
    fn call(&self) -> usize {
        let n = self.n.fetch_add(1, Ordering::Relaxed) + 1;
        let call = ToolCall {
            scope: "bench".into(),
            key: Some(format!("{}/{}", self.run, n).into()),
            tool: "search_docs".into(),
            arguments: json!({"query": self.queries[n as usize % self.queries.len()], "top_k": 10}),
        };
        let response = self.agent.call(&call, now_ms()).expect("keyed call");
        response.body.len()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn keyed_mode(store: &Path, calls: usize, blocks: usize, queries: Option<&Path>, clients: usize) {
    let mut keyed = Keyed::open(store);
    if let Some(file) = queries {
        keyed.queries = std::fs::read_to_string(file)
            .expect("read queries")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
    }
    let clients = clients.max(1);
    let response_len = keyed.call();
    let reference_db = store
        .parent()
        .unwrap_or(Path::new("."))
        .join("sqlite-reference");
    let bare = Mutex::new(Bare::open(&reference_db, response_len));
    bare.lock().expect("reference").insert();
    let per_block = (calls / blocks.max(1)).max(clients);
    let per_client = per_block / clients;
    let per_block = per_client * clients;
    let mut latencies: Vec<f64> = Vec::with_capacity(calls);
    let (mut keyed_secs, mut bare_secs, mut done) = (0.0, 0.0, 0);
    for block in 0..blocks.max(1) {
        // Alternate which side goes first.
        for side in [block % 2, 1 - block % 2] {
            let started = Instant::now();
            let timed: Vec<Vec<f64>> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..clients)
                    .map(|_| {
                        let (keyed, bare) = (&keyed, &bare);
                        scope.spawn(move || {
                            let mut timed = Vec::with_capacity(per_client);
                            for _ in 0..per_client {
                                if side == 0 {
                                    let one = Instant::now();
                                    keyed.call();
                                    timed.push(one.elapsed().as_secs_f64() * 1e6);
                                } else {
                                    bare.lock().expect("reference").insert();
                                }
                            }
                            timed
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().expect("a client"))
                    .collect()
            });
            let secs = started.elapsed().as_secs_f64();
            latencies.extend(timed.into_iter().flatten());
            if side == 0 {
                keyed_secs += secs;
            } else {
                bare_secs += secs;
            }
        }
        done += per_block;
    }
    drop(bare);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", reference_db.display()));
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((p / 100.0) * (latencies.len() - 1) as f64).round() as usize];
    emit(json!({
        "clients": clients,
        "keyed_call_p50_us": pct(50.0),
        "keyed_call_p99_us": pct(99.0),
        "transactions_each": done,
        "response_bytes": response_len,
        "keyed_calls_per_s": done as f64 / keyed_secs,
        "bare_insert_tx_per_s": done as f64 / bare_secs,
        "ratio": bare_secs / keyed_secs,
    }));
}

fn docs() -> PathBuf {
    std::env::var_os("GROUNDIDX_BENCH_DOCS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_docs"))
}

fn criterion_benches(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store_dir = tmp.path().join("store");
    let (mut store, _) = Store::open_writer(&store_dir, LockWait::NoWait, Default::default(), None)
        .expect("open store");
    ingest(&mut store, &[docs()], &IngestConfig::default(), &NoProgress).expect("ingest");
    store.close().expect("close");
    let keyed = Keyed::open(&store_dir);
    let response_len = keyed.call();
    let mut bare = Bare::open(&tmp.path().join("reference"), response_len);
    let mut group = c.benchmark_group("keyed-call");
    group.bench_function("groundidx-search_docs", |b| b.iter(|| keyed.call()));
    group.bench_function("bare-sqlite-3-inserts", |b| b.iter(|| bare.insert()));
    group.finish();
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let clients = match args.iter().position(|a| a == "--clients") {
        Some(at) => {
            let n = args
                .get(at + 1)
                .and_then(|n| n.parse().ok())
                .expect("--clients takes a number");
            args.drain(at..at + 2);
            n
        }
        None => 1,
    };
    match args.first().map(String::as_str) {
        Some("keyed") if args.len() >= 3 => {
            let calls = args[2].parse().expect("CALLS is a number");
            let blocks = args.get(3).and_then(|b| b.parse().ok()).unwrap_or(10);
            keyed_mode(
                Path::new(&args[1]),
                calls,
                blocks,
                args.get(4).map(Path::new),
                clients,
            );
        }
        _ => {
            let mut c = Criterion::default().configure_from_args();
            criterion_benches(&mut c);
            c.final_summary();
        }
    }
}

/// One JSON line on standard output, for the script that runs this bench.
fn emit(value: serde_json::Value) {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{value}").expect("write to stdout");
}
