//! Approximate vector search: from `GROUNDIDX_ANN_FROM` vectors (100 here, 100,000 by
//! default) a reader computes the rows' sign codes and ranks exactly only their shortlist.
//! These tests check what a user sees end to end: the same answers as exact search (on a store
//! this small the shortlist holds every row, so they must be equal), filters kept, and the graph
//! file of older versions removed by the next writer. The shortlist's recall on large sets is
//! measured by `benches/ann_recall.rs` and checked on 20,000 rows by `src/ann.rs`'s tests.

use std::process::Command;

use serde_json::Value;

use crate::support::embed_server::{EmbedServer, Vectors};
use crate::support::{Env, assert_success};

/// The threshold the tests run with: below the 300 chunks of `many_env`.
const ANN_FROM: &str = "100";

/// `groundidx --store STORE ARGS…` with the test's threshold, and the model's flags when given.
fn command(env: &Env, server: Option<&EmbedServer>, args: &[&str]) -> Command {
    let mut command = env.command(args);
    command.env("GROUNDIDX_ANN_FROM", ANN_FROM);
    if let Some(server) = server {
        command.args(server.flags("words"));
    }
    command
}

fn json(env: &Env, server: &EmbedServer, args: &[&str]) -> Value {
    let output = command(env, Some(server), args)
        .output()
        .expect("run groundidx");
    assert_success(&output, args);
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn ingest(env: &Env, server: &EmbedServer) -> Value {
    let docs = env.docs.to_str().expect("utf-8").to_string();
    json(env, server, &["ingest", &docs, "--json"])
}

/// A folder of `n` one-chunk documents on a few subjects.
fn many_env(n: usize) -> Env {
    crate::embedding::notes_env(n, |i| {
        format!(
            "# Note {i}\n\nThis note is about {} and {} in release {}.\n",
            SUBJECTS[i % SUBJECTS.len()],
            SUBJECTS[(i / 3) % SUBJECTS.len()],
            i % 11
        )
    })
}

const SUBJECTS: &[&str] = &[
    "backups", "deploys", "keys", "tokens", "shards", "replicas", "alerts", "quotas", "logs",
    "caches", "queues", "schemas",
];

/// The chunk IDs and scores of the semantic top 10.
fn semantic_scores(env: &Env, server: &EmbedServer, query: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["search", query, "--json", "--mode", "semantic", "-k", "10"];
    args.extend_from_slice(extra);
    let answer = json(env, server, &args);
    assert_eq!(answer["mode"], "semantic", "{answer}");
    hits_of(&answer)
}

/// Each hit of a search answer as its chunk ID and score.
fn hits_of(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| {
            format!(
                "{} {:.5}",
                hit["chunk_id"],
                hit["score"].as_f64().expect("score")
            )
        })
        .collect()
}

fn verify(env: &Env) -> (Option<i32>, Value) {
    let output = command(env, None, &["verify", "--json"])
        .output()
        .expect("run verify");
    let report = serde_json::from_slice(&output.stdout).expect("verify prints JSON");
    (output.status.code(), report)
}

#[test]
fn past_the_threshold_searches_answer_as_exact_search_with_and_without_filters() {
    let env = many_env(300);
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");

    // The same store, searched without the setting: exactly.
    let exact = |query: &str, extra: &[&str]| -> Vec<String> {
        let mut args = vec!["search", query, "--json", "--mode", "semantic", "-k", "10"];
        args.extend_from_slice(extra);
        let output = env
            .command(&args)
            .args(server.flags("words"))
            .output()
            .expect("run groundidx");
        assert_success(&output, &args);
        hits_of(&serde_json::from_slice(&output.stdout).expect("JSON"))
    };
    for query in [
        "backups and keys",
        "shards replicas",
        "release 7 alerts",
        "queues",
    ] {
        let approximate = semantic_scores(&env, &server, query, &[]);
        assert_eq!(approximate.len(), 10, "{query}");
        assert_eq!(approximate, exact(query, &[]), "{query}");
        // A filter of more chunks than the exact-filter limit takes the same path; this one
        // is small, so it checks that the filter is kept whichever path answers.
        let filter = ["--path", "notes/note-01"];
        let filtered = semantic_scores(&env, &server, query, &filter);
        assert!(!filtered.is_empty(), "{query}, filtered");
        assert_eq!(filtered, exact(query, &filter), "{query}, filtered");
    }
}

#[test]
fn the_graph_file_of_older_versions_is_removed_by_the_next_writer() {
    let env = many_env(150);
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let expected = semantic_scores(&env, &server, "keys and tokens", &[]);
    for name in ["vectors.ann", "vectors.ann.tmp"] {
        std::fs::write(
            env.store.join(name),
            b"an HNSW graph an older version wrote",
        )
        .expect("write");
    }
    // Readers never look at it.
    assert_eq!(
        semantic_scores(&env, &server, "keys and tokens", &[]),
        expected
    );
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    // A no-op run removes it and embeds nothing.
    let report = ingest(&env, &server);
    assert_eq!(report["embedding"]["embedded"], 0, "{report}");
    for name in ["vectors.ann", "vectors.ann.tmp"] {
        assert!(!env.store.join(name).exists(), "{name} was left");
    }
    assert_eq!(
        semantic_scores(&env, &server, "keys and tokens", &[]),
        expected
    );
}
