//! Keyed calls from concurrent clients are committed together (several calls, one commit), and
//! none is answered before the commit that holds its rows: a server killed at a random moment
//! has recorded every call it answered, exactly once, and no call in part; a retry with the same
//! key of each call left unanswered leaves it recorded exactly once too.
//!
//! A kill lands between a commit and its answers only by chance (the gap is microseconds), so
//! the order itself, no answer before the commit, is held by the unit test
//! `no_call_of_a_group_returns_before_its_commit` in `src/agent/group_commit.rs`; this test is
//! the whole path under real kills and a real client.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::support::http::serve;
use crate::support::ledger::{counts, executed, ledger};
use crate::support::mcp::sample_store;
use crate::support::process::send_signal;
use crate::support::rng::Rng;

const SCOPE: &str = "local";
const CLIENTS: usize = 8;
const ROUNDS: usize = 3;

#[test]
fn c7_concurrent_keyed_calls_killed_at_random_are_recorded_once_each_answered_or_retried() {
    let env = sample_store();
    let mut rng = Rng::from_env("group_commit");
    let body = json!({"query": "signing keys", "top_k": 3}).to_string();
    let sent = Mutex::new(Vec::<String>::new());
    let answered = Mutex::new(BTreeSet::<String>::new());
    for round in 0..ROUNDS {
        let server = serve(&env, &["--rate-limit", "1000000/60s"]);
        let stop = AtomicBool::new(false);
        let kill_after = Duration::from_millis(200 + rng.below(800));
        std::thread::scope(|scope| {
            for client in 0..CLIENTS {
                let (server, body, stop, sent, answered) =
                    (&server, &body, &stop, &sent, &answered);
                scope.spawn(move || {
                    for n in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let key = format!("gc/{round}/{client}/{n}");
                        sent.lock().expect("sent").push(key.clone());
                        let Ok(reply) = server.try_search(&key, body) else {
                            break;
                        };
                        assert_eq!(reply.status, 200, "{reply}");
                        assert!(!reply.replayed(), "a new key is executed: {reply}");
                        answered.lock().expect("answered").insert(key);
                    }
                });
            }
            std::thread::sleep(kill_after);
            // SIGKILL while calls are in flight.
            send_signal(server.pid(), "KILL");
            stop.store(true, Ordering::SeqCst);
        });
        drop(server);
        let sent = sent.lock().expect("sent").clone();
        let answered = answered.lock().expect("answered").clone();
        eprintln!(
            "round {round}: killed after {kill_after:?}, {} calls sent, {} answered",
            sent.len(),
            answered.len()
        );
        let recorded = recorded_per_key(&env.store);
        for key in &answered {
            assert_eq!(
                recorded.get(key),
                Some(&[1, 1, 1]),
                "the answered call {key} is recorded once (audit, usage, key)"
            );
        }
        for key in &sent {
            let found = recorded.get(key).copied().unwrap_or([0, 0, 0]);
            assert!(
                found == [0, 0, 0] || found == [1, 1, 1],
                "call {key} is recorded in part: {found:?} (audit, usage, key)"
            );
        }
    }
    let sent = sent.into_inner().expect("sent");
    let answered = answered.into_inner().expect("answered");
    assert!(
        answered.len() >= CLIENTS,
        "the clients got answers before the kills: {}",
        answered.len()
    );
    // A retry of each unanswered call executes it (or replays it, where its commit had landed).
    let server = serve(&env, &["--rate-limit", "1000000/60s"]);
    for key in sent.iter().filter(|key| !answered.contains(*key)) {
        let reply = server
            .try_search(key, &body)
            .expect("the retry is answered");
        assert_eq!(reply.status, 200, "{reply}");
    }
    drop(server);
    let recorded = recorded_per_key(&env.store);
    for key in &sent {
        assert_eq!(
            recorded.get(key),
            Some(&[1, 1, 1]),
            "call {key} after its retry"
        );
    }
    assert_eq!(counts(&env.store), executed(sent.len() as i64));
}

/// The rows each key of the scope has in the audit, usage and key tables.
fn recorded_per_key(store: &Path) -> BTreeMap<String, [i64; 3]> {
    let conn = ledger(store);
    let mut found = BTreeMap::<String, [i64; 3]>::new();
    for (column, table) in ["audit_events", "usage_events", "idempotency_keys"]
        .iter()
        .enumerate()
    {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT key, count(*) FROM {table} WHERE scope = ?1 GROUP BY key"
            ))
            .expect("count rows per key");
        let rows = stmt
            .query_map([SCOPE], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))
            .expect("count rows per key");
        for row in rows {
            let (key, n) = row.expect("a row count");
            found.entry(key).or_default()[column] = n;
        }
    }
    found
}
