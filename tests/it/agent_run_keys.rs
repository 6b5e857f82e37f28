//! Keys made of `_meta` `groundidx/runId` and `groundidx/step`: every pair is its own key, and
//! none is a direct `groundidx/idempotencyKey`.

use serde_json::json;

use crate::support::ledger::{assert_executed_once, counts, executed};
use crate::support::mcp::{Mcp, sample_store, signing};

const SCOPE: &str = "local";

#[tokio::test]
async fn pairs_that_join_to_the_same_text_are_different_keys() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    // Each couple joins to one text with "/" (or with JSON quoting done naively), and each
    // second call is a different step: it must execute, not get the first step's answer.
    let couples = [
        (("a/b", "c"), ("a", "b/c")),
        ((r#"x""#, "y"), ("x", r#""y"#)),
        ((r"p\", "q"), ("p", r"\q")),
    ];
    let mut stored = Vec::new();
    for ((run_1, step_1), (run_2, step_2)) in couples {
        let first = mcp
            .call(
                "search_docs",
                signing(),
                json!({"groundidx/runId": run_1, "groundidx/step": step_1}),
            )
            .await;
        first.assert_fresh();
        let second = mcp
            .call(
                "search_docs",
                signing(),
                json!({"groundidx/runId": run_2, "groundidx/step": step_2}),
            )
            .await;
        second.assert_fresh();
        assert_ne!(first.key(), second.key(), "{} / {}", first.raw, second.raw);
        for called in [first, second] {
            stored.push(called.key().as_str().expect("a key").to_string());
        }
    }
    mcp.stop().await;
    for key in &stored {
        assert_executed_once(&env.store, SCOPE, key);
    }
    assert_eq!(counts(&env.store), executed(stored.len() as i64));
}

#[tokio::test]
async fn no_direct_key_is_a_pair() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let pair = mcp
        .call(
            "search_docs",
            signing(),
            json!({"groundidx/runId": "a/b", "groundidx/step": "c"}),
        )
        .await;
    pair.assert_fresh();
    let stored = pair.key().as_str().expect("a key").to_string();
    // The stored form of a pair holds a space, which no direct key may: spelling it out as a
    // direct key is refused, never answered with the pair's result.
    let spelled = mcp.search(&stored, signing()).await;
    spelled.assert_error("idempotency_key_invalid");
    // Without the space it is a direct key of its own, and so is the `/` join.
    for direct in [stored.replace(' ', ""), "a/b/c".to_string()] {
        mcp.search(&direct, signing()).await.assert_fresh();
    }
    // A pair too long to store is refused, not cut.
    let long = "r".repeat(200);
    let too_long = mcp
        .call(
            "search_docs",
            signing(),
            json!({"groundidx/runId": long, "groundidx/step": long}),
        )
        .await;
    too_long.assert_error("idempotency_key_invalid");
    mcp.stop().await;
    assert_executed_once(&env.store, SCOPE, &stored);
    assert_eq!(counts(&env.store), executed(3));
}
