//! The text served is always the text of a file that holds it now: `search`, `get_chunk` and
//! `export` serve a passage byte for byte as a current file holds it, white space included (an
//! indentation fix is a changed chunk), and a store an older groundidx made (chunk IDs of
//! whitespace-folded text, which kept the first variant ever seen) is chunked again by its next
//! ingest.

use serde_json::{Value, json};

use crate::support::mcp::{Mcp, key};
use crate::support::{Env, clean_export};

const UNINDENTED: &str =
    "```python\ndef rotate(key):\nif key.expired():\nreturn key.renew()\nreturn key\n```";
const INDENTED: &str = "```python\ndef rotate(key):\n    if key.expired():\n        return key.renew()\n    return key\n```";

fn page(block: &str) -> String {
    format!("# Rotation\n\nThe helper that renews an expired key.\n\n## Code\n\n{block}\n")
}

/// The hit whose text holds `needle`, from `search --json`.
fn hit_with(env: &Env, query: &str, needle: &str) -> Value {
    let hits = env.search(query, 5);
    hits["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|hit| hit["text"].as_str().is_some_and(|t| t.contains(needle)))
        .unwrap_or_else(|| panic!("no hit holds {needle:?}: {hits}"))
        .clone()
}

/// `get_chunk` over MCP stdio: the chunk record the agent is given.
fn get_chunk(env: &Env, chunk_id: &str) -> Value {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let mcp = Mcp::start(env, &[]).await;
        let called = mcp
            .call("get_chunk", json!({"chunk_id": chunk_id}), key("served"))
            .await;
        mcp.stop().await;
        called.assert_fresh();
        called.structured["chunk"].clone()
    })
}

#[test]
fn an_indentation_fix_in_place_serves_the_fixed_code() {
    let env = Env::empty();
    env.write("rotation.md", &page(UNINDENTED));
    env.ingest();
    env.write("rotation.md", &page(INDENTED));
    let report = env.ingest();
    assert_eq!(report["documents"]["changed"], 1, "{report}");
    assert_eq!(
        report["chunks"]["added"], 1,
        "only the code block: {report}"
    );
    assert_eq!(report["chunks"]["removed"], 1, "{report}");

    let hit = hit_with(&env, "renew expired key", "def rotate");
    assert_eq!(hit["text"], INDENTED, "search serves the old bytes");
    let chunk_id = hit["chunk_id"].as_str().expect("chunk_id");
    let chunk = get_chunk(&env, chunk_id);
    assert_eq!(chunk["text"], INDENTED, "get_chunk serves the old bytes");
    let export = env.export();
    assert_eq!(
        export[chunk_id].text, INDENTED,
        "export serves the old bytes"
    );
    assert!(
        export.values().all(|chunk| chunk.text != UNINDENTED),
        "the unindented code is still in the store"
    );
    assert_eq!(export, clean_export(&env.docs));
    env.assert_verified();
}

#[test]
fn two_whitespace_variants_each_serve_their_own_bytes() {
    // Two proposals share one ABI, indented differently.
    let compact = "```json\n{\n\"name\": \"transfer\",\n\"inputs\": [\"to\", \"amount\"]\n}\n```";
    let spaced =
        "```json\n{\n  \"name\": \"transfer\",\n  \"inputs\": [\"to\",  \"amount\"]\n}\n```";
    let env = Env::empty();
    env.write("a.md", &format!("# ABI\n\n{compact}\n"));
    env.write("b.md", &format!("# ABI\n\n{spaced}\n"));
    env.ingest();
    let export = env.export();
    assert_eq!(export.len(), 2, "two variants are two chunks: {export:?}");
    // Search still shows one passage once: the variants fold into one hit.
    let hits = env.search("transfer inputs amount", 5);
    assert_eq!(hits["hits"].as_array().expect("hits").len(), 1, "{hits}");

    std::fs::remove_file(env.docs.join("a.md")).expect("delete");
    let report = env.ingest();
    assert_eq!(report["chunks"]["removed"], 1, "{report}");
    let hit = hit_with(&env, "transfer inputs amount", "transfer");
    assert_eq!(
        hit["text"], spaced,
        "b.md's hit shows a deleted file's bytes"
    );
    assert_eq!(hit["paths"], json!(["b.md"]));
    let chunk = get_chunk(&env, hit["chunk_id"].as_str().expect("chunk_id"));
    assert_eq!(chunk["text"], spaced);
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
}

/// The chunk ID an older groundidx (chunk IDs version 1) gave a passage: blake3 over a version
/// tag, the normalised headings and the normalised text. Written out here, apart from the
/// library, as the oracle of what older stores hold.
pub fn chunk_id_v1(heading_path: &[String], text: &str) -> [u8; 32] {
    use groundidx::ids::normalise;
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"groundidx-chunk-v1");
    hasher.update(&[0]);
    for heading in heading_path {
        hasher.update(normalise(heading).as_bytes());
        hasher.update(&[0x1f]);
    }
    hasher.update(&[0]);
    hasher.update(normalise(text).as_bytes());
    *hasher.finalize().as_bytes()
}

/// Rewrites a store's ledger as an older groundidx (ledger schema 6, chunk IDs version 1) left
/// it, with the first whitespace variant it saw stored: every chunk is renamed by its version 1
/// ID, and the chunk that holds `fresh` holds `stale` instead.
fn make_it_older(env: &Env, fresh: &str, stale: &str) {
    make_ledger_older(&env.store.join("ledger.sqlite"), fresh, stale);
}

/// `make_it_older` on the ledger file at `path`.
pub fn make_ledger_older(path: &std::path::Path, fresh: &str, stale: &str) {
    crate::support::ledger::store_texts_plain(path);
    let ledger = rusqlite::Connection::open(path).expect("open ledger");
    let chunks: Vec<(Vec<u8>, String, String)> = ledger
        .prepare("SELECT chunk_id, heading, text FROM chunks")
        .expect("prepare")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("read chunks");
    for (id, heading, text) in chunks {
        let heading_path: Vec<String> = serde_json::from_str(&heading).expect("heading JSON");
        let old_id = chunk_id_v1(&heading_path, &text);
        let old_text = if text == fresh { stale } else { text.as_str() };
        ledger
            .execute(
                "UPDATE chunks SET chunk_id = ?2, text = ?3 WHERE chunk_id = ?1",
                rusqlite::params![id, old_id, old_text],
            )
            .expect("rename chunk");
        ledger
            .execute(
                "UPDATE doc_chunks SET chunk_id = ?2 WHERE chunk_id = ?1",
                rusqlite::params![id, old_id],
            )
            .expect("rename chunk");
    }
    ledger
        .execute_batch(
            "ALTER TABLE documents DROP COLUMN recipe_version;
             ALTER TABLE sources DROP COLUMN since_generation;
             ALTER TABLE doc_chunks DROP COLUMN page_start;
             ALTER TABLE doc_chunks DROP COLUMN page_end;
             UPDATE meta SET value = 6 WHERE name = 'schema_version';",
        )
        .expect("set the schema version");
}

#[test]
fn a_store_of_older_chunk_ids_is_chunked_again_by_its_next_ingest() {
    let env = Env::empty();
    env.write("rotation.md", &page(INDENTED));
    env.write("other.md", "# Other\n\nA page that does not change.\n");
    env.ingest();
    make_it_older(&env, INDENTED, UNINDENTED);
    // The index follows the older ledger, as the older groundidx left it.
    env.json(&["rebuild", "--json"]);
    let output = env.run(&["verify", "--json"]);
    let verified: Value = serde_json::from_slice(&output.stdout).expect("verify JSON");
    assert_eq!(output.status.code(), Some(1), "{verified}");
    assert_eq!(verified["outdated_in_ledger"], 3, "{verified}");
    assert_eq!(verified["missing_from_index"], json!([]), "{verified}");
    assert_eq!(
        hit_with(&env, "renew expired key", "def rotate")["text"],
        UNINDENTED
    );

    // No file changed, and the stat cache would vouch for both.
    let report = env.ingest();
    assert_eq!(report["documents"]["unchanged"], 2, "{report}");
    assert_eq!(report["documents"]["rechunked"], 2, "{report}");
    assert_eq!(report["chunks"]["added"], 3, "{report}");
    assert_eq!(report["chunks"]["removed"], 3, "{report}");
    assert_eq!(
        hit_with(&env, "renew expired key", "def rotate")["text"],
        INDENTED
    );
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
    // Once: the next run finds nothing to chunk again.
    let again = env.ingest();
    assert_eq!(again["documents"]["rechunked"], 0, "{again}");
    assert_eq!(again["chunks"]["added"], 0, "{again}");
}

#[test]
fn the_text_output_of_ingest_says_it_chunks_again() {
    let env = Env::empty();
    env.write("rotation.md", &page(INDENTED));
    env.ingest();
    make_it_older(&env, INDENTED, UNINDENTED);
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&["ingest", docs]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("1 chunked again") && stdout.contains("older groundidx"),
        "{stdout}"
    );
}
