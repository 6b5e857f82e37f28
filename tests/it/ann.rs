//! The ANN graph (`vectors.ann`) is a projection of the vector index like the vector index is of
//! the ledger: built by a writer once the store has `GROUNDIDX_ANN_FROM` vectors (never when it
//! is not set; 100 here), used by readers only when it was built from the very
//! `vectors.bin` they read, healed by the next writer after a kill, refused when damaged, and
//! removed when the store shrinks below the threshold. Its answers are those of exact search.

use std::process::Command;

use serde_json::Value;

use crate::crash::assert_crashed_at;
use crate::embed_server::{EmbedServer, Vectors};
use crate::support::{Env, assert_success};

/// Crash points reached while writing the ANN graph.
pub const ANN_POINTS: &[&str] = &["ann.before_rename", "ann.after_rename"];

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

/// The scores of the semantic top 10 (their cosines): chunks of equal score may come in either
/// order from the graph, so answers are compared by score.
fn semantic_scores(env: &Env, server: &EmbedServer, query: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["search", query, "--json", "--mode", "semantic", "-k", "10"];
    args.extend_from_slice(extra);
    let answer = json(env, server, &args);
    assert_eq!(answer["mode"], "semantic", "{answer}");
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| format!("{:.5}", hit["score"].as_f64().expect("score")))
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
fn a_store_past_the_threshold_searches_through_a_graph_that_answers_as_exact_search() {
    let env = many_env(300);
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let graph = env.store.join("vectors.ann");
    assert!(graph.exists(), "no ANN graph past the threshold");
    // Without the setting, the same store is searched exactly and a writer drops the graph.
    let unset = Env::empty();
    crate::support::copy_tree(&env.docs, &unset.docs);
    let docs = unset.docs.to_str().expect("utf-8").to_string();
    let output = unset
        .command(&["ingest", &docs, "--json"])
        .args(server.flags("words"))
        .output()
        .expect("run");
    assert_success(&output, &["ingest"]);
    assert!(
        !unset.store.join("vectors.ann").exists(),
        "a graph by default"
    );
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");

    // The same store without its graph searches exactly.
    let exact = Env::empty();
    crate::support::copy_tree(&env.store, &exact.store);
    std::fs::remove_file(exact.store.join("vectors.ann")).expect("remove the copy's graph");
    for query in [
        "backups and keys",
        "shards replicas",
        "release 7 alerts",
        "queues",
    ] {
        assert_eq!(
            semantic_scores(&env, &server, query, &[]),
            semantic_scores(&exact, &server, query, &[]),
            "{query}"
        );
        assert_eq!(
            semantic_scores(&env, &server, query, &["--path", "notes/note-01"]),
            semantic_scores(&exact, &server, query, &["--path", "notes/note-01"]),
            "{query}, filtered"
        );
    }

    // A no-op run leaves the graph as it was.
    let modified = std::fs::metadata(&graph)
        .and_then(|m| m.modified())
        .expect("mtime");
    ingest(&env, &server);
    assert_eq!(
        std::fs::metadata(&graph)
            .and_then(|m| m.modified())
            .expect("mtime"),
        modified,
        "a no-op run rebuilt the graph"
    );

    // An edit makes a new vector index, and the graph follows it.
    env.write("notes/note-0007.md", "# Note 7\n\nNow about tokens only.\n");
    ingest(&env, &server);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    let hits = semantic_scores(&env, &server, "tokens only", &[]);
    assert!(!hits.is_empty());

    // Shrunk below the threshold, the store drops its graph and searches exactly.
    for i in 0..250 {
        std::fs::remove_file(env.docs.join(format!("notes/note-{i:04}.md"))).expect("remove");
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    json(
        &env,
        &server,
        &["ingest", &docs, "--json", "--allow-mass-delete"],
    );
    assert!(!graph.exists(), "a graph below the threshold was kept");
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(semantic_scores(&env, &server, "queues", &[]).len(), 10);
}

#[test]
fn a_run_killed_at_either_ann_point_is_healed_by_the_next_writer() {
    for point in ANN_POINTS {
        let env = many_env(300);
        let server = EmbedServer::start(Vectors::Words);
        let docs = env.docs.to_str().expect("utf-8").to_string();
        let output = command(&env, Some(&server), &["ingest", &docs, "--json"])
            .env(groundidx::crash::CRASH_ENV, point)
            .output()
            .expect("run");
        assert_crashed_at(&output, point);
        // Searches answer meanwhile, exactly when the graph did not make it.
        assert_eq!(semantic_scores(&env, &server, "backups", &[]).len(), 10);
        let report = ingest(&env, &server);
        assert_eq!(report["embedding"]["embedded"], 0, "{point}: {report}");
        assert!(env.store.join("vectors.ann").exists(), "{point}");
        assert!(
            !env.store.join("vectors.ann.tmp").exists(),
            "{point}: the killed write's file was left"
        );
        let (code, report) = verify(&env);
        assert_eq!(code, Some(0), "{point}: {report}");
    }
}

#[test]
fn a_damaged_graph_is_not_used_verify_names_it_and_rebuild_makes_it_again() {
    let env = many_env(300);
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let expected = semantic_scores(&env, &server, "keys and tokens", &[]);
    let graph = env.store.join("vectors.ann");
    let mut bytes = std::fs::read(&graph).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&graph, &bytes).expect("damage");

    // Searches answer from the vector index alone, with the same passages.
    assert_eq!(
        semantic_scores(&env, &server, "keys and tokens", &[]),
        expected
    );
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    let problem = report["vectors"]["problem"].as_str().unwrap_or_default();
    assert!(problem.contains("vectors.ann"), "{report}");

    let output = command(&env, None, &["rebuild", "--json"])
        .output()
        .expect("run rebuild");
    assert_success(&output, &["rebuild"]);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        semantic_scores(&env, &server, "keys and tokens", &[]),
        expected
    );
}
