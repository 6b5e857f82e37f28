//! An answer names the generation of the index commit it searched, never a later one an ingest
//! wrote meanwhile: for a search, for the tool's answer, its audit row and its stored replay.
//! The agent path searches the ledger's commit as soon as the index holds it (it does not wait
//! for the server's next reload), so its hits, resolved against the ledger, are of the
//! generation the answer names.

use groundidx::agent::{Agent, AgentConfig, Replayed, ToolCall};
use groundidx::ledger::ChunkFilter;
use groundidx::search::{self, SearchRequest};
use groundidx::store::StoreReader;
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::ledger::{key_row, ledger};

const QUOKKA: &str = "# Quokka\n\nThe quokka census counts every quokka on the island.\n";

fn quokka_search() -> SearchRequest {
    SearchRequest {
        query: "quokka census".into(),
        top_k: 5,
        filter: ChunkFilter::default(),
        mode: None,
        min_score: None,
    }
}

/// A sample store at its first generation, then a second ingest that adds the quokka page.
/// Returns the environment and both generations; `between` runs after the first ingest.
fn two_generations<T>(between: impl FnOnce(&Env) -> T) -> (Env, T, u64, u64) {
    let env = Env::sample();
    let first = env.ingest()["generation"].as_u64().expect("generation");
    let held = between(&env);
    env.write("new/quokka.md", QUOKKA);
    let second = env.ingest()["generation"].as_u64().expect("generation");
    assert!(second > first, "the second ingest changed nothing");
    (env, held, first, second)
}

#[test]
fn a_search_names_the_commit_its_reader_holds() {
    let (_env, reader, first, second) =
        two_generations(|env| StoreReader::open(&env.store).expect("open the reader"));
    // The reader opened before the second commit and has not reloaded: it searches the first.
    let held = search::search(&reader, &quokka_search()).expect("search");
    assert_eq!(
        held.generation, first,
        "the answer claims a commit it did not search: {held:?}"
    );
    assert!(held.hits.is_empty(), "{held:?}");

    assert_eq!(reader.index().reload().expect("reload").0, second);
    let fresh = search::search(&reader, &quokka_search()).expect("search");
    assert_eq!(fresh.generation, second);
    assert_eq!(fresh.hits.len(), 1, "{fresh:?}");
}

#[test]
fn a_tool_search_right_after_an_ingest_answers_from_it() {
    let (_env, agent, _first, second) = two_generations(|env| {
        Agent::open(&env.store, AgentConfig::default(), None).expect("open the agent path")
    });
    // No reload since the second ingest: the call itself follows the ledger's commit.
    let answer = agent
        .call(
            &ToolCall {
                scope: "local".into(),
                key: Some("generation/now".into()),
                tool: "search_docs".into(),
                arguments: json!({"query": "quokka census", "top_k": 5}),
            },
            groundidx::clock::now_ms(),
        )
        .expect("a search");
    let body: Value = serde_json::from_str(&answer.body).expect("JSON");
    assert_eq!(body["generation"], second, "{body}");
    assert_eq!(body["hits"][0]["paths"], json!(["new/quokka.md"]), "{body}");
}

#[test]
fn the_audit_row_and_the_replay_keep_the_searched_generation() {
    // The second ingest dies between its ledger commit and its index commit: the ledger is at
    // the second generation, the index still at the first.
    let env = Env::sample();
    let first = env.ingest()["generation"].as_u64().expect("generation");
    let agent = Agent::open(&env.store, AgentConfig::default(), None).expect("open the agent path");
    env.write("new/quokka.md", QUOKKA);
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let output = env
        .command(&["ingest", &docs])
        .env(groundidx::crash::CRASH_ENV, "store.after_ledger_commit")
        .output()
        .expect("run ingest");
    crate::crash::assert_crashed_at(&output, "store.after_ledger_commit");
    let call = ToolCall {
        scope: "local".into(),
        key: Some("generation/1".into()),
        tool: "search_docs".into(),
        arguments: json!({"query": "quokka census", "top_k": 5}),
    };
    let answer = agent
        .call(&call, groundidx::clock::now_ms())
        .expect("a search");
    let body: Value = serde_json::from_str(&answer.body).expect("JSON");
    assert_eq!(body["generation"], first, "{body}");
    assert_eq!(body["hits"], json!([]), "{body}");
    assert_eq!(answer.index_generation, first);
    let stored = key_row(&env.store, "local", "generation/1").expect("a key record");
    assert_eq!(stored.3 as u64, first, "the stored replay's generation");
    let audited: i64 = ledger(&env.store)
        .query_row(
            "SELECT index_generation FROM audit_events WHERE scope = 'local' AND key = ?1",
            ["generation/1"],
            |row| row.get(0),
        )
        .expect("an audit row");
    assert_eq!(audited as u64, first, "the audit row's generation");

    // A writer catches the index up; after the reload a replay still answers the first
    // generation's bytes, a new key the second.
    let second = env.ingest()["generation"].as_u64().expect("generation");
    assert!(second > first);
    assert_eq!(agent.reload().expect("reload"), second);
    let replay = agent
        .call(&call, groundidx::clock::now_ms())
        .expect("a replay");
    assert_eq!(replay.replayed, Replayed::Yes);
    assert_eq!(replay.body, answer.body);
    assert_eq!(replay.index_generation, first);
    let fresh = agent
        .call(
            &ToolCall {
                key: Some("generation/2".into()),
                ..call.clone()
            },
            groundidx::clock::now_ms(),
        )
        .expect("a search");
    assert_eq!(fresh.index_generation, second);
}
