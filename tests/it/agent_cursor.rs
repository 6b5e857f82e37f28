//! P6: `search_docs` pages with `cursor`. Each `next_cursor` gives the next page from the same
//! index generation, even after an ingest; a tampered, foreign or other-query cursor, or one
//! whose generation the server no longer keeps, is a tool error that writes nothing.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;
use crate::support::http::{Server, serve};
use crate::support::ledger::{counts, executed};

/// A sample store with `n` marker pages (one hit each for "quokkamarker").
fn markers(env: &Env, from: usize, to: usize) -> u64 {
    for i in from..to {
        env.write(
            &format!("markers/m{i}.md"),
            &format!("# Marker {i}\n\nThe quokkamarker number {i} of the census.\n"),
        );
    }
    env.ingest()["generation"].as_u64().expect("generation")
}

/// Waits until the server searches `generation`.
fn wait_for(server: &Server, generation: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/health").json()["generation"] != generation {
        assert!(
            Instant::now() < deadline,
            "the server never reached generation {generation}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn page(server: &Server, arguments: Value) -> Value {
    let reply = server.search(None, &arguments.to_string());
    assert_eq!(reply.status, 200, "{reply}");
    reply.json()
}

fn ids(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["chunk_id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn pages_follow_each_other_in_one_generation_across_an_ingest() {
    let env = Env::sample();
    let first = markers(&env, 0, 25);
    let server = serve(&env, &["--rate-limit", "100000/60s"]);
    let query = json!({"query": "quokkamarker", "top_k": 10});
    let one = page(&server, query.clone());
    assert_eq!(one["generation"], first);
    let cursor = one["next_cursor"]
        .as_str()
        .expect("a next_cursor")
        .to_string();

    // An ingest lands and the server moves on; the cursor still reads the first generation.
    let second = markers(&env, 25, 30);
    wait_for(&server, second);
    let mut arguments = query.clone();
    arguments["cursor"] = json!(cursor);
    let two = page(&server, arguments.clone());
    assert_eq!(two["generation"], first, "{two}");
    let mut third_arguments = query.clone();
    third_arguments["cursor"] = two["next_cursor"].clone();
    let three = page(&server, third_arguments);
    assert_eq!(three["generation"], first, "{three}");
    assert!(
        three.get("next_cursor").is_none(),
        "25 hits end on page 3: {three}"
    );
    let mut all = [ids(&one), ids(&two), ids(&three)].concat();
    assert_eq!(all.len(), 25, "10 + 10 + 5 hits");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 25, "no hit twice across pages");

    // The same cursor again (a new call, no key) gives the same page.
    assert_eq!(ids(&page(&server, arguments)), ids(&two));
    // A new search sees the second generation.
    let fresh = page(&server, query);
    assert_eq!(fresh["generation"], second);
}

#[test]
fn bad_cursors_are_tool_errors_that_write_nothing() {
    let env = Env::sample();
    markers(&env, 0, 15);
    let server = serve(&env, &[]);
    let query = json!({"query": "quokkamarker", "top_k": 5});
    let cursor = page(&server, query.clone())["next_cursor"]
        .as_str()
        .expect("a next_cursor")
        .to_string();
    let other = Env::sample();
    markers(&other, 0, 15);
    let foreign_server = serve(&other, &[]);
    let foreign = page(&foreign_server, query.clone())["next_cursor"]
        .as_str()
        .expect("a next_cursor")
        .to_string();
    drop(foreign_server);
    let before = counts(&env.store);
    assert_eq!(before, executed(1));

    let mut tampered = cursor.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    let cases = [
        ("tampered", query.clone(), tampered),
        ("foreign", query.clone(), foreign),
        (
            "another query",
            json!({"query": "backups restore", "top_k": 5}),
            cursor.clone(),
        ),
        (
            "another filter",
            json!({"query": "quokkamarker", "top_k": 5, "path_prefix": "markers/"}),
            cursor.clone(),
        ),
        ("garbage", query.clone(), "not a cursor".to_string()),
    ];
    for (what, mut arguments, bad) in cases {
        arguments["cursor"] = json!(bad);
        let result = server.mcp_call(&[], "search_docs", arguments.clone(), Value::Null);
        assert_eq!(result["isError"], true, "{what}: {result}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "invalid_arguments",
            "{what}: {result}"
        );
        let reply = server.search(
            Some(&format!("bad-cursor-{}", what.len())),
            &arguments.to_string(),
        );
        assert_eq!(reply.status, 400, "{what}: {reply}");
    }
    assert_eq!(
        counts(&env.store),
        before,
        "a refused cursor wrote something"
    );
    // The good cursor still works.
    let mut arguments = query;
    arguments["cursor"] = json!(cursor);
    assert_eq!(ids(&page(&server, arguments)).len(), 5);
}

#[test]
fn a_cursor_of_a_generation_no_longer_kept_says_search_again() {
    let env = Env::sample();
    markers(&env, 0, 12);
    let server = serve(&env, &[]);
    let query = json!({"query": "quokkamarker", "top_k": 5});
    let cursor = page(&server, query.clone())["next_cursor"]
        .as_str()
        .expect("a next_cursor")
        .to_string();
    // The server keeps the current snapshot and the last few it replaced.
    for i in 0..10 {
        let generation = markers(&env, 12 + i, 13 + i);
        wait_for(&server, generation);
    }
    let mut arguments = query;
    arguments["cursor"] = json!(cursor);
    let result = server.mcp_call(&[], "search_docs", arguments.clone(), Value::Null);
    assert_eq!(result["isError"], true, "{result}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], "cursor_expired", "{result}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("search again")),
        "{result}"
    );
    let reply = server.search(None, &arguments.to_string());
    assert_eq!(reply.status, 410, "{reply}");
}

/// Following `next_cursor` with the same `top_k` reaches the last page of the 1,000 hits a
/// search pages through, whatever `top_k` is: the page that would go past them is cut there
/// and carries no `next_cursor`, instead of being refused.
#[test]
fn every_top_k_pages_to_the_last_hit_without_an_error() {
    let env = Env::sample();
    let generation = markers(&env, 0, 1_010);
    let server = serve(&env, &["--rate-limit", "100000/60s"]);
    wait_for(&server, generation);
    for top_k in [7, 30, 100] {
        let mut answer = page(&server, json!({"query": "quokkamarker", "top_k": top_k}));
        let mut seen = ids(&answer);
        while let Some(cursor) = answer.get("next_cursor").and_then(Value::as_str) {
            answer = page(
                &server,
                json!({"query": "quokkamarker", "top_k": top_k, "cursor": cursor}),
            );
            assert_eq!(answer["generation"], generation, "{answer}");
            seen.extend(ids(&answer));
        }
        let unique: std::collections::BTreeSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "top_k {top_k}: a hit came twice");
        assert_eq!(
            seen.len(),
            1_000,
            "top_k {top_k}: the pages end at 1,000 hits"
        );
    }
}
