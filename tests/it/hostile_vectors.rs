//! Hostile vector stores and models: a ledger vector blob of the wrong length, a vector index
//! from another store, a truncated or empty one, and a model that embeds queries in other
//! dimensions than the store's vectors. Readers do not fail, `verify` names the problem, and
//! `rebuild` heals it without the model.

use serde_json::Value;

use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors};

fn with_model(env: &Env, server: &EmbedServer, args: &[&str]) -> Value {
    let flags = server.flags("words");
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    all.extend(flags.iter().map(String::as_str));
    env.json(&all)
}

fn ingest(env: &Env, server: &EmbedServer) -> Value {
    let docs = env.docs.to_str().expect("utf-8").to_string();
    with_model(env, server, &["ingest", &docs])
}

/// `verify --json`, which must fail, and its report.
fn verify_fails(env: &Env) -> Value {
    let output = env.run(&["verify", "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("verify prints JSON");
    assert_eq!(output.status.code(), Some(1), "verify must fail: {report}");
    report
}

/// `verify` passes and every chunk has one vector.
fn assert_every_chunk_has_its_vector(env: &Env) {
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["identical"], true, "verify: {report}");
    assert_eq!(report["vectors"]["identical"], true, "verify: {report}");
    assert_eq!(
        report["vectors"]["ledger_vectors"], report["ledger_chunks"],
        "every chunk has one vector: {report}"
    );
}

fn hits(answer: &Value) -> usize {
    answer["hits"].as_array().expect("hits").len()
}

#[test]
fn a_ledger_vector_of_the_wrong_length_is_named_by_verify_and_healed_by_rebuild() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let damaged: Vec<u8> = {
        let conn =
            rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open the ledger");
        let id: Vec<u8> = conn
            .query_row("SELECT chunk_id FROM vectors LIMIT 1", [], |row| row.get(0))
            .expect("a vector");
        conn.execute(
            "UPDATE vectors SET vector = substr(vector, 1, 12) WHERE chunk_id = ?1",
            [&id],
        )
        .expect("damage the vector");
        id
    };
    let hex: String = damaged.iter().map(|b| format!("{b:02x}")).collect();
    let report = verify_fails(&env);
    assert!(
        report["vectors"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains(&hex) && p.contains("rebuild")),
        "verify names the damaged vector: {report}"
    );
    // Writers and readers go on: lexical search, and an ingest that changes nothing.
    assert!(hits(&env.json(&["search", "rotate keys", "--json", "--mode", "lexical"])) > 0);
    ingest(&env, &server);
    // The model is gone: rebuild heals without it, and the damaged vector is made again once.
    drop(server);
    env.json(&["rebuild", "--json"]);
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["identical"], true, "after rebuild: {report}");
    let server = EmbedServer::start(Vectors::Words);
    let report = ingest(&env, &server);
    assert_eq!(report["embedding"]["embedded"], 1, "{report}");
    assert_every_chunk_has_its_vector(&env);
}

#[test]
fn a_foreign_truncated_or_empty_vector_index_is_named_by_verify_and_rebuilt_without_the_model() {
    let server = EmbedServer::start(Vectors::Words);
    let env = Env::sample();
    ingest(&env, &server);
    let other = Env::empty();
    other.write(
        "other.md",
        "# Other\n\nA store of its own, about sailing boats.\n",
    );
    ingest(&other, &server);
    let file = env.store.join("vectors.bin");
    let good = std::fs::read(&file).expect("read");
    let foreign = std::fs::read(other.store.join("vectors.bin")).expect("read");
    let damages: [(&str, Vec<u8>); 3] = [
        ("foreign", foreign),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in damages {
        std::fs::write(&file, &bytes).expect("damage");
        // A reader does not fail: the default mode still answers.
        let answer = with_model(&env, &server, &["search", "rotate keys"]);
        assert!(hits(&answer) > 0, "{what}: {answer}");
        let report = verify_fails(&env);
        assert_eq!(report["vectors"]["identical"], false, "{what}: {report}");
        env.json(&["rebuild", "--json"]);
        assert_every_chunk_has_its_vector(&env);
    }
}

#[test]
fn a_query_embedded_in_other_dimensions_falls_back_to_words_by_default_and_fails_when_asked() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    // The same model name now answers 65 dimensions after a probe of 64: each query is refused
    // by its dimensions.
    query_in_other_dimensions(&env);
    // 65 from the probe on: another model behind the name, never used with this store's
    // vectors; the store's own model, at the address it was recorded with, embeds the query.
    let longer = EmbedServer::start(Vectors::Broken("longer"));
    let answer = with_model(
        &env,
        &longer,
        &["search", "rotate keys", "--mode", "semantic"],
    );
    assert_eq!(answer["mode"], "semantic", "{answer}");
    assert_eq!(longer.inputs(), 1, "only the probe reached the other model");
}

/// Each search process probes the model once, and the server answers only its first request
/// (the probe) in the store's dimensions: one server per process.
fn query_in_other_dimensions(env: &Env) {
    let longer = EmbedServer::start(Vectors::Broken("longer-later"));
    let answer = with_model(env, &longer, &["search", "rotate keys"]);
    assert_eq!(answer["mode"], "lexical", "{answer}");
    assert!(
        answer["semantic_unavailable"]
            .as_str()
            .is_some_and(|why| why.contains("dimensions")),
        "the answer says why it ranks by words alone: {answer}"
    );
    assert!(hits(&answer) > 0, "{answer}");
    let mut args = vec!["search", "rotate keys", "--mode", "semantic", "--json"];
    let longer = EmbedServer::start(Vectors::Broken("longer-later"));
    let flags = longer.flags("words");
    args.extend(flags.iter().map(String::as_str));
    let output = env.run(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&longer.url()) && stderr.contains("dimensions"),
        "the error names the address and the dimensions: {stderr}"
    );
}
