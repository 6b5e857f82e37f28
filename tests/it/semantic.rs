//! Search by meaning with the real local model (`../shared/models/all-MiniLM-L6-v2`): a
//! question that shares no word with its answer finds it, a no-op run does not load the model,
//! and the same model behind the OpenAI-compatible server gives the same ranking.

use serde_json::Value;

use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors, local_model, model_dir};

fn ingest_local(env: &Env, model: &std::path::Path) -> Value {
    let docs = env.docs.to_str().expect("utf-8");
    let model = model.to_str().expect("utf-8");
    env.json(&["ingest", docs, "--json", "--embed-model", model])
}

fn first_paths(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["paths"][0].as_str().expect("path").to_string())
        .collect()
}

#[test]
fn a_question_without_the_answers_words_is_found_by_meaning() {
    let Some(model) = model_dir() else { return };
    let env = Env::sample();
    let first = ingest_local(&env, &model);
    assert_eq!(first["embedding"]["model_loaded"], true, "{first}");
    assert_eq!(
        first["embedding"]["embedded"], first["embedding"]["chunks"],
        "{first}"
    );
    // No word of this question is in the answer ("rollback", "previous release").
    let question = "my update broke production, how can I go back";
    let lexical = env.json(&["search", question, "--json", "--mode", "lexical"]);
    let semantic = env.json(&["search", question, "--json", "--mode", "semantic"]);
    let hybrid = env.json(&["search", question, "--json"]);
    assert_eq!(semantic["mode"], "semantic");
    assert_eq!(
        hybrid["mode"], "hybrid",
        "the default with vectors: {hybrid}"
    );
    assert_eq!(
        first_paths(&semantic).first().map(String::as_str),
        Some("handbook/deploys.md"),
        "semantic: {semantic}\nlexical: {lexical}"
    );
    assert!(
        first_paths(&hybrid)[..3].contains(&"handbook/deploys.md".to_string()),
        "{hybrid}"
    );
    let again = ingest_local(&env, &model);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
    assert_eq!(again["embedding"]["model_loaded"], false, "{again}");
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["identical"], true, "{report}");
}

#[test]
fn the_model_behind_the_embeddings_api_ranks_as_the_model_in_process() {
    let Some(model) = model_dir() else { return };
    let Some(loaded) = local_model() else { return };
    let local = Env::sample();
    ingest_local(&local, &model);
    // The model gives the probe's text the same vector to the bit each time (and JSON carries
    // an f32 exactly), so its rounding in the fingerprint is never on the edge by noise here.
    let probe = || {
        loaded.embed_passages(&["dimension probe"]).expect("embed")[0]
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<u32>>()
    };
    assert_eq!(probe(), probe());
    let server = EmbedServer::start(Vectors::Model(loaded));
    let remote = Env::sample();
    let docs = remote.docs.to_str().expect("utf-8").to_string();
    let flags = server.flags("all-MiniLM-L6-v2");
    let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
    args.extend(flags.iter().map(String::as_str));
    let report = remote.json(&args);
    assert_eq!(
        report["embedding"]["embedded"], report["embedding"]["chunks"],
        "{report}"
    );
    // The server gives the probe the same vector each time, so a second run finds the same
    // model behind it (float noise in the probe would make a new model, embedded again).
    let again = remote.json(&args);
    assert_eq!(again["embedding"]["model"], report["embedding"]["model"]);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
    for question in [
        "my update broke production, how can I go back",
        "who do I ask when something is on fire",
        "how often do we change the credentials",
    ] {
        let mut args = vec!["search", question, "--json", "--mode", "semantic"];
        let by_local = local.json(&args);
        args.extend(flags.iter().map(String::as_str));
        let by_remote = remote.json(&args);
        assert_eq!(
            first_paths(&by_local)[..3],
            first_paths(&by_remote)[..3],
            "{question}"
        );
    }
}
