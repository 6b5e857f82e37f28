//! A model is what it claims to be: a remote model is named by what its server answers to a
//! fixed probe (its dimensions and vector), not by its name alone, so a server that changes its
//! model or its dimensions under the same name gives a new model whose vectors are a new set,
//! never mixed with the old, never stored as damaged, never re-embedded in a loop, while a server
//! whose answers differ only in their last digits stays one model; and a running
//! server embeds queries with the model that is active now, not the one it loaded first.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::embedding::assert_vectors_verified;
use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors, model_dir};
use crate::support::http::serve;

/// `ARGS… --json` with the embeddings server's flags for the model name `words`.
fn with_words(env: &Env, server: &EmbedServer, args: &[&str]) -> Value {
    let flags = server.flags("words");
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    all.extend(flags.iter().map(String::as_str));
    env.json(&all)
}

fn ingest(env: &Env, server: &EmbedServer) -> Value {
    let docs = env.docs.to_str().expect("utf-8").to_string();
    with_words(env, server, &["ingest", &docs])
}

fn model_of(report: &Value) -> String {
    report["embedding"]["model"]
        .as_str()
        .unwrap_or_else(|| panic!("no model in {report}"))
        .to_string()
}

fn models(env: &Env) -> Vec<Value> {
    env.json(&["status", "--json"])["models"]
        .as_array()
        .expect("models")
        .clone()
}

#[test]
fn a_model_updated_under_the_same_name_is_a_new_model_and_never_mixed_with_the_old() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    let first = ingest(&env, &server);
    let old = model_of(&first);
    assert_eq!(first["embedding"]["active"], true, "{first}");
    server.switch(Vectors::WordsUpdated);

    // Before the store is embedded again, a query embedded by the new model is never compared
    // with the old model's vectors: words alone answer, and the answer says why.
    let hits = with_words(&env, &server, &["search", "rotate keys"]);
    assert_eq!(hits["mode"], "lexical", "{hits}");
    let why = hits["semantic_unavailable"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason in {hits}"));
    assert!(why.contains(&old[..12]), "{why}");
    assert!(!hits["hits"].as_array().expect("hits").is_empty());
    let flags = server.flags("words");
    let mut args = vec!["search", "rotate keys", "--mode", "semantic"];
    args.extend(flags.iter().map(String::as_str));
    let refused = env.run(&args);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("another model"), "{stderr}");

    // The next ingest finds a new model behind the name and embeds every chunk under it.
    let second = ingest(&env, &server);
    let new = model_of(&second);
    assert_ne!(
        new, old,
        "the updated model kept the old fingerprint: {second}"
    );
    assert_eq!(
        second["embedding"]["embedded"], second["embedding"]["chunks"],
        "{second}"
    );
    assert_eq!(second["embedding"]["active"], true, "{second}");
    assert_eq!(models(&env).len(), 2);
    let hits = with_words(&env, &server, &["search", "rotate keys"]);
    assert_eq!(hits["mode"], "hybrid", "{hits}");
    assert!(hits.get("semantic_unavailable").is_none(), "{hits}");
    assert_vectors_verified(&env);
    // And a run after that finds the same model again: nothing to embed.
    let third = ingest(&env, &server);
    assert_eq!(model_of(&third), new);
    assert_eq!(third["embedding"]["embedded"], 0, "{third}");
}

#[test]
fn a_server_whose_answers_vary_in_their_last_digits_is_one_model() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Noisy);
    let first = ingest(&env, &server);
    let model = model_of(&first);
    assert_eq!(first["embedding"]["active"], true, "{first}");
    env.write(
        "notes/sizes.md",
        "# Sizes\n\nThe staging bucket holds forty-two gigabytes of nightly snapshots.\n",
    );

    // Another process, another probe with other noise: the same model, so only the new
    // passages are embedded.
    let second = ingest(&env, &server);
    assert_eq!(
        model_of(&second),
        model,
        "a new model for float noise: {second}"
    );
    let new_chunks = second["embedding"]["chunks"].as_u64().expect("chunks")
        - first["embedding"]["chunks"].as_u64().expect("chunks");
    assert!(new_chunks > 0, "{second}");
    assert_eq!(second["embedding"]["embedded"], new_chunks, "{second}");
    assert_eq!(models(&env).len(), 1, "{:?}", models(&env));

    // And a search's own probe finds it too: its query is compared with the vectors.
    let hits = with_words(&env, &server, &["search", "nightly snapshots"]);
    assert_eq!(hits["mode"], "hybrid", "{hits}");
    assert!(hits.get("semantic_unavailable").is_none(), "{hits}");
    assert_vectors_verified(&env);
}

#[test]
fn a_model_answering_other_dimensions_is_a_new_model_and_embed_does_not_loop() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    let first = ingest(&env, &server);
    let old = model_of(&first);
    // The server now answers 48 numbers where the store's vectors have 64, and a new file
    // brings a passage to embed.
    server.switch(Vectors::Shorter);
    env.write(
        "notes/sizes.md",
        "# Sizes\n\nThe staging bucket holds forty-two gigabytes of nightly snapshots.\n",
    );
    let second = ingest(&env, &server);
    assert_ne!(model_of(&second), old, "{second}");
    assert_eq!(
        second["embedding"]["embedded"], second["embedding"]["chunks"],
        "{second}"
    );
    let listed = models(&env);
    let new = listed
        .iter()
        .find(|m| m["model"] == model_of(&second).as_str())
        .unwrap_or_else(|| panic!("the new model is not listed: {listed:?}"));
    assert_eq!(new["dims"], 48, "{new}");
    // No vector of the wrong length was stored: verify is clean, and neither `embed` nor
    // `rebuild` then `embed` embeds anything again.
    assert_vectors_verified(&env);
    let again = with_words(&env, &server, &["embed"]);
    assert_eq!(again["embedded"], 0, "{again}");
    env.json(&["rebuild", "--json"]);
    let after_rebuild = with_words(&env, &server, &["embed"]);
    assert_eq!(after_rebuild["embedded"], 0, "{after_rebuild}");
    assert_vectors_verified(&env);
}

#[test]
fn a_running_server_embeds_queries_with_a_newly_activated_model() {
    let Some(model) = model_dir() else { return };
    let words = EmbedServer::start(Vectors::Words);
    let env = Env::sample();
    ingest(&env, &words);
    // No model flag: the server loads the model of the store's vectors (the words model).
    let server = serve(&env, &[]);
    let question = "my update broke production, how can I go back";
    let body = json!({"query": question, "mode": "semantic", "top_k": 3}).to_string();
    let answer = server.search(None, &body).json();
    assert_eq!(answer["mode"], "semantic", "{answer}");

    // The real local model embeds every chunk and becomes the active one.
    let embedded = env.json(&[
        "embed",
        "--json",
        "--embed-model",
        model.to_str().expect("utf-8"),
    ]);
    assert_eq!(embedded["active"], true, "{embedded}");

    // Without a restart, the server's queries go to the local model: the words server gets
    // none, and the question finds its answer by meaning.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = words.inputs();
        let answer = server.search(None, &body).json();
        let by_local = answer["mode"] == "semantic" && words.inputs() == before;
        if by_local {
            assert_eq!(
                answer["hits"][0]["paths"][0], "handbook/deploys.md",
                "{answer}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server still embeds queries with the old model: {answer}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let default = server
        .search(None, &json!({"query": question}).to_string())
        .json();
    assert_eq!(default["mode"], "hybrid", "{default}");
}
