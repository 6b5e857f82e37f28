//! Invariant 4: `verify` passes on a healthy store and exits 1 naming every difference
//! otherwise. The differences are made by writing to the store behind groundidx's back.

use groundidx::ids::{ChunkId, Generation};
use groundidx::index::{Index, IndexedChunk, Indexing};

use crate::support::Env;

fn verify(env: &Env) -> (Option<i32>, serde_json::Value) {
    let output = env.run(&["verify", "--json"]);
    (
        output.status.code(),
        serde_json::from_slice(&output.stdout).expect("verify prints JSON"),
    )
}

#[test]
fn healthy_store_verifies() {
    let env = Env::sample();
    env.ingest();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["ledger_chunks"], report["index_chunks"]);
}

#[test]
fn a_chunk_whose_text_was_altered_in_the_ledger_is_named() {
    let env = Env::sample();
    env.ingest();
    let victim = env.export().keys().next().expect("a chunk").clone();
    let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open ledger");
    let bytes = victim
        .parse::<ChunkId>()
        .expect("an exported chunk ID")
        .as_bytes()
        .to_vec();
    // White space alone: what a chunk ID of whitespace-folded text could not see. The text
    // is stored compressed; the altered one is written back as plain text, which the ledger
    // reads too.
    let text = ledger
        .query_row(
            "SELECT text FROM chunks WHERE chunk_id = ?1",
            [&bytes],
            |row| {
                Ok(crate::support::ledger::stored_text(
                    &ledger,
                    row.get_ref(0)?,
                ))
            },
        )
        .expect("read the text");
    let altered = ledger
        .execute(
            "UPDATE chunks SET text = ?2 WHERE chunk_id = ?1",
            rusqlite::params![bytes, text.replace(' ', "  ")],
        )
        .expect("alter the text");
    assert_eq!(altered, 1);
    drop(ledger);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(
        report["altered_in_ledger"],
        serde_json::json!([victim]),
        "{report}"
    );
    assert_eq!(report["missing_from_index"], serde_json::json!([]));
    assert_eq!(report["lag_only"], false);
    assert_eq!(report["identical"], false);
    let text = env.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains(&format!(
            "text does not hash to its ID in the ledger: {victim}"
        )),
        "{stdout}"
    );
}

#[test]
fn a_chunk_missing_from_the_ledger_is_named() {
    let env = Env::sample();
    env.ingest();
    let victim = env.export().keys().next().expect("a chunk").clone();
    let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open ledger");
    let bytes = victim
        .parse::<ChunkId>()
        .expect("an exported chunk ID")
        .as_bytes()
        .to_vec();
    ledger
        .execute("DELETE FROM chunks WHERE chunk_id = ?1", [bytes])
        .expect("delete");
    drop(ledger);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["extra_in_index"], serde_json::json!([victim]));
    assert_eq!(report["lag_only"], false);
    // Its document still lists it: damage to the ledger itself.
    assert_eq!(report["broken_links_in_ledger"], 1, "{report}");
    // A rebuild makes the index follow the ledger again, but cannot mend the ledger.
    env.json(&["rebuild", "--json"]);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["extra_in_index"], serde_json::json!([]), "{report}");
    assert_eq!(report["broken_links_in_ledger"], 1, "{report}");
    let text = env.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("are missing or name a document or chunk it lacks")
            && stdout.contains("altered outside groundidx"),
        "{stdout}"
    );
}

#[test]
fn a_duplicated_chunk_in_the_index_is_named() {
    let env = Env::sample();
    env.ingest();
    let exported = env.export();
    let victim = exported.keys().next().expect("a chunk").clone();
    let generation = env.json(&["status", "--json"])["generation"]
        .as_u64()
        .expect("generation");
    {
        let index = Index::open_or_create(&env.store.join("index")).expect("open index");
        let mut writer = index.writer(Indexing::Short).expect("writer");
        let heading = vec!["Injected".to_string()];
        writer
            .add(&IndexedChunk {
                id: victim.parse().expect("id"),
                heading_path: &heading,
                text: "copy",
                labels: &Default::default(),
            })
            .expect("add");
        writer.commit(Generation(generation)).expect("commit");
        writer.finish().expect("finish");
    }
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["duplicated_in_index"], serde_json::json!([victim]));
    let human = env.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&human.stdout);
    assert!(
        stdout.contains(&format!("duplicated in index: {victim}")),
        "{stdout}"
    );
    // The next writer does not paper over it, but a rebuild heals it.
    env.json(&["rebuild", "--json"]);
    assert_eq!(verify(&env).0, Some(0));
}
