//! The agent tool's keyed writes through the library (`groundidx::agent`), with a fake clock:
//! concurrency (C1, C2, Q6), retention and garbage collection (T1–T4) and the quota (Q2, Q3).

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use groundidx::agent::{Agent, AgentConfig, CallError, RateLimit, Replayed, ToolCall};
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::ledger::{
    Counts, assert_executed_once, assert_nothing_for, counts, executed, key_row, rows,
};
use crate::support::mcp::{backups, signing};

// ---------------------------------------------------------------------------------------------
// Library helpers.

const DAY_MS: i64 = 24 * 3600 * 1000;
/// A fake "now", on a minute boundary so that fixed quota windows start here.
const T0: i64 = 1_900_000_020_000;
const SCOPE: &str = "local";

fn open_agent(store: &Path, ttl_ms: i64, units: u64) -> Agent {
    Agent::open(
        store,
        AgentConfig {
            ttl_ms,
            rate_limit: RateLimit {
                units,
                window_secs: 60,
            },
            busy_timeout_ms: 5_000,
        },
        None,
    )
    .expect("open the agent")
}

fn tool_call(key: Option<&str>, tool: &str, arguments: Value) -> ToolCall {
    ToolCall {
        scope: SCOPE.into(),
        key: key.map(Into::into),
        tool: tool.into(),
        arguments,
    }
}

/// A call's answer, in plain fields.
#[derive(Clone, Debug, PartialEq)]
struct Out {
    body: String,
    is_error: bool,
    replayed: &'static str,
    key: String,
    generation: u64,
}

fn run(agent: &Agent, call: &ToolCall, now_ms: i64) -> Result<Out, CallError> {
    agent.call(call, now_ms).map(|response| Out {
        body: response.body.clone(),
        is_error: response.is_error,
        replayed: replayed_name(&response.replayed),
        key: response.key.clone(),
        generation: response.index_generation,
    })
}

fn replayed_name(replayed: &Replayed) -> &'static str {
    match replayed {
        Replayed::No => "no",
        Replayed::Yes => "yes",
        Replayed::Late => "late",
    }
}

fn store_with_docs() -> Env {
    let env = Env::sample();
    env.ingest();
    env
}

// ---------------------------------------------------------------------------------------------
// C1, C2, Q6: concurrency.

/// Runs `calls` on as many threads, each with its own `Agent` (as separate processes would),
/// released together by a barrier; returns the results in call order.
fn race(
    store: &Path,
    units: u64,
    now_ms: i64,
    calls: Vec<ToolCall>,
) -> Vec<Result<Out, CallError>> {
    let barrier = Barrier::new(calls.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = calls
            .iter()
            .map(|call| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let agent = open_agent(store, 7 * DAY_MS, units);
                    barrier.wait();
                    run(&agent, call, now_ms)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a caller thread panicked"))
            .collect()
    })
}

#[test]
fn c1_twenty_concurrent_calls_one_key_one_row() {
    let env = store_with_docs();
    let calls = (0..20)
        .map(|_| tool_call(Some("c1/run/step"), "search_docs", signing()))
        .collect();
    let results = race(&env.store, 600, groundidx::clock::now_ms(), calls);
    let outs: Vec<&Out> = results
        .iter()
        .map(|r| {
            r.as_ref()
                .unwrap_or_else(|err| panic!("a call failed: {err:?}; all: {results:?}"))
        })
        .collect();
    let first = outs[0];
    assert!(!first.is_error, "{first:?}");
    assert!(
        serde_json::from_str::<Value>(&first.body).expect("body is JSON")["hits"]
            .as_array()
            .is_some_and(|hits| !hits.is_empty()),
        "{first:?}"
    );
    for out in &outs {
        assert_eq!(out.body, first.body, "bodies differ: {outs:?}");
        assert_eq!(out.key, "c1/run/step");
    }
    let fresh = outs.iter().filter(|o| o.replayed == "no").count();
    let replays = outs.iter().filter(|o| o.replayed == "yes").count();
    assert_eq!((fresh, replays), (1, 19), "{outs:?}");
    assert_executed_once(&env.store, SCOPE, "c1/run/step");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn c2_twenty_concurrent_calls_two_argument_sets_one_winner() {
    let env = store_with_docs();
    let args = [signing(), backups()];
    let calls = (0..20)
        .map(|i| tool_call(Some("c2"), "search_docs", args[i % 2].clone()))
        .collect();
    let results = race(&env.store, 600, groundidx::clock::now_ms(), calls);
    let winners: Vec<usize> = (0..20)
        .filter(|&i| matches!(&results[i], Ok(out) if out.replayed == "no"))
        .collect();
    assert_eq!(winners.len(), 1, "exactly one call commits: {results:?}");
    let winning_set = winners[0] % 2;
    let body = &results[winners[0]].as_ref().expect("the winner").body;
    for (i, result) in results.iter().enumerate() {
        if i % 2 == winning_set {
            match result {
                Ok(out) => assert_eq!(&out.body, body, "call {i}: {results:?}"),
                Err(err) => panic!("call {i} has the winning arguments but failed: {err:?}"),
            }
        } else {
            assert!(
                matches!(result, Err(CallError::KeyReused { .. })),
                "call {i} has the other arguments and must get M1: {results:?}"
            );
        }
    }
    assert_executed_once(&env.store, SCOPE, "c2");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn q6_two_keys_race_for_the_last_unit() {
    let env = store_with_docs();
    let warm = open_agent(&env.store, 7 * DAY_MS, 2);
    for round in 0..5i64 {
        // A fresh window each round: two minutes apart.
        let now = T0 + round * 120_000;
        run(
            &warm,
            &tool_call(
                Some(format!("q6/{round}/first").as_str()),
                "search_docs",
                signing(),
            ),
            now,
        )
        .unwrap_or_else(|err| panic!("round {round}: the first unit: {err:?}"));
        let calls = vec![
            tool_call(
                Some(format!("q6/{round}/a").as_str()),
                "search_docs",
                signing(),
            ),
            tool_call(
                Some(format!("q6/{round}/b").as_str()),
                "search_docs",
                backups(),
            ),
        ];
        let results = race(&env.store, 2, now + 1_000, calls);
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let limited = results
            .iter()
            .filter(|r| matches!(r, Err(CallError::RateLimited { .. })))
            .count();
        assert_eq!((ok, limited), (1, 1), "round {round}: {results:?}");
    }
    assert_eq!(counts(&env.store), executed(10));
}

// ---------------------------------------------------------------------------------------------
// Q2, Q3: the quota.

#[test]
fn q2_replay_is_served_when_the_quota_is_exhausted() {
    let env = store_with_docs();
    let agent = open_agent(&env.store, 7 * DAY_MS, 1);
    let first = run(
        &agent,
        &tool_call(Some("q2/a"), "search_docs", signing()),
        T0,
    )
    .expect("the first call executes");
    assert_eq!(first.replayed, "no");
    let refused = run(
        &agent,
        &tool_call(Some("q2/b"), "search_docs", signing()),
        T0 + 1_000,
    );
    match &refused {
        Err(CallError::RateLimited {
            retry_after_seconds,
        }) => {
            let seconds = *retry_after_seconds;
            assert!((1..=60).contains(&seconds), "{refused:?}");
        }
        other => panic!("a second key over a quota of 1 must be refused: {other:?}"),
    }
    let replay = run(
        &agent,
        &tool_call(Some("q2/a"), "search_docs", signing()),
        T0 + 2_000,
    )
    .expect("a replay is served even when the quota is exhausted");
    assert_eq!(replay.replayed, "yes");
    assert_eq!(replay.body, first.body);
    assert_nothing_for(&env.store, SCOPE, "q2/b");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn q3_refused_key_executes_after_the_window_resets() {
    let env = store_with_docs();
    let agent = open_agent(&env.store, 7 * DAY_MS, 1);
    run(
        &agent,
        &tool_call(Some("q3/a"), "search_docs", signing()),
        T0,
    )
    .expect("first");
    let refused = run(
        &agent,
        &tool_call(Some("q3/b"), "search_docs", backups()),
        T0 + 1_000,
    );
    assert!(
        matches!(refused, Err(CallError::RateLimited { .. })),
        "{refused:?}"
    );
    assert_nothing_for(&env.store, SCOPE, "q3/b");
    let retried = run(
        &agent,
        &tool_call(Some("q3/b"), "search_docs", backups()),
        T0 + 61_000,
    )
    .expect("after the reset the same key executes normally");
    assert_eq!(retried.replayed, "no", "{retried:?}");
    assert_executed_once(&env.store, SCOPE, "q3/b");
    assert_eq!(counts(&env.store), executed(2));
}

// ---------------------------------------------------------------------------------------------
// T1–T4: retention.

#[test]
fn t1_ttl_below_24h_is_refused() {
    let env = store_with_docs();
    for (command, ttl) in [("mcp", "1h"), ("mcp", "23h"), ("serve", "1h")] {
        let mut args = vec![command, "--key-ttl", ttl];
        if command == "serve" {
            args.extend(["--listen", "127.0.0.1:0"]);
        }
        let mut child = env
            .command(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start groundidx");
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = child.wait_with_output().expect("collect output");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "groundidx {args:?} must refuse to start; stderr: {stderr}"
        );
        assert!(
            stderr.contains("24"),
            "the message must name the 24 h floor: {stderr}"
        );
    }
    assert_eq!(counts(&env.store), executed(0));
}

#[test]
fn t2_replay_just_before_expiry() {
    let env = store_with_docs();
    let agent = open_agent(&env.store, DAY_MS, 600);
    let call = tool_call(Some("t2"), "search_docs", signing());
    let first = run(&agent, &call, T0).expect("first");
    assert_eq!(first.replayed, "no");
    let (_, _, _, _, created_at, expires_at) =
        key_row(&env.store, SCOPE, "t2").expect("a key record");
    assert_eq!(created_at, T0, "created_at is the call's now_ms");
    assert_eq!(expires_at, T0 + DAY_MS, "expires_at = created_at + ttl");

    let just_before = T0 + DAY_MS - 1_000;
    let removed = groundidx::agent::gc(&env.store, just_before).expect("gc");
    assert_eq!(removed, 0, "nothing has expired yet");
    let replay = run(&agent, &call, just_before).expect("replay");
    assert_eq!(replay.replayed, "yes", "{replay:?}");
    assert_eq!(replay.body, first.body);
    let (_, _, _, _, _, after) = key_row(&env.store, SCOPE, "t2").expect("still there");
    assert_eq!(after, expires_at, "a replay must not extend expires_at");

    // Not extended: a gc just after the original expiry removes it.
    let removed = groundidx::agent::gc(&env.store, T0 + DAY_MS + 1_000).expect("gc");
    assert_eq!(removed, 1);
    assert_eq!(key_row(&env.store, SCOPE, "t2"), None);
    assert_eq!(
        counts(&env.store),
        Counts {
            keys: 0,
            ..executed(1)
        }
    );
}

#[test]
fn t3_late_retry_after_gc_is_not_counted_again() {
    let env = store_with_docs();
    let agent = open_agent(&env.store, DAY_MS, 600);
    let call = tool_call(Some("t3"), "search_docs", signing());
    let first = run(&agent, &call, T0).expect("first");
    assert_eq!(first.replayed, "no");
    let late = T0 + DAY_MS + 1_000;
    assert_eq!(groundidx::agent::gc(&env.store, late).expect("gc"), 1);
    assert_eq!(
        key_row(&env.store, SCOPE, "t3"),
        None,
        "gc pruned the key record"
    );
    assert_eq!(
        rows(&env.store, "audit_events", SCOPE, "t3"),
        1,
        "the audit row stays"
    );

    for attempt in 0..2 {
        let retry = run(&agent, &call, late + 1_000 + attempt).expect("late retry");
        assert_eq!(retry.replayed, "late", "attempt {attempt}: {retry:?}");
        assert!(!retry.is_error, "{retry:?}");
        let body: Value = serde_json::from_str(&retry.body).expect("JSON body");
        assert!(
            body["hits"].as_array().is_some_and(|h| !h.is_empty()),
            "a late retry serves a fresh search: {body}"
        );
    }
    let other = run(
        &agent,
        &tool_call(Some("t3"), "search_docs", backups()),
        late + 5_000,
    );
    assert!(
        matches!(&other, Err(CallError::KeyReused { .. })),
        "the fingerprint is checked against the audit row: {other:?}"
    );
    assert_eq!(rows(&env.store, "audit_events", SCOPE, "t3"), 1);
    assert_eq!(rows(&env.store, "usage_events", SCOPE, "t3"), 1);
    let c = counts(&env.store);
    assert_eq!((c.audit, c.usage_rows, c.units), (1, 1, 1), "{c:?}");
}

#[test]
fn t4_gc_removes_only_expired_keys() {
    let env = store_with_docs();
    let agent = open_agent(&env.store, DAY_MS, 600);
    let t0 = groundidx::clock::now_ms();
    run(
        &agent,
        &tool_call(Some("t4/old"), "search_docs", signing()),
        t0,
    )
    .expect("old");
    run(
        &agent,
        &tool_call(Some("t4/new"), "search_docs", backups()),
        t0 + DAY_MS / 2,
    )
    .expect("new");
    assert_eq!(counts(&env.store), executed(2));

    // The CLI's gc at the real time: nothing has expired.
    let report = env.json(&["gc", "--json"]);
    assert_eq!(report["keys_removed"], 0, "{report}");

    let removed = groundidx::agent::gc(&env.store, t0 + DAY_MS + 1_000).expect("gc");
    assert_eq!(removed, 1);
    assert_eq!(key_row(&env.store, SCOPE, "t4/old"), None);
    assert!(
        key_row(&env.store, SCOPE, "t4/new").is_some(),
        "an unexpired key was removed"
    );
    assert_eq!(
        counts(&env.store),
        Counts {
            keys: 1,
            ..executed(2)
        },
        "gc never touches audit or usage rows"
    );
    let replay = run(
        &agent,
        &tool_call(Some("t4/new"), "search_docs", backups()),
        t0 + DAY_MS + 2_000,
    )
    .expect("replay");
    assert_eq!(replay.replayed, "yes");

    let removed = groundidx::agent::gc(&env.store, t0 + 2 * DAY_MS).expect("gc");
    assert_eq!(removed, 1);
    let again = groundidx::agent::gc(&env.store, t0 + 2 * DAY_MS).expect("gc");
    assert_eq!(again, 0);
    assert_eq!(
        counts(&env.store),
        Counts {
            keys: 0,
            ..executed(2)
        }
    );
    let status = env.json(&["status", "--json"]);
    assert_eq!(
        (
            &status["audit_events"],
            &status["usage_units"],
            &status["idempotency_keys"]
        ),
        (&json!(2), &json!(2), &json!(0)),
        "{status}"
    );
}
