//! Every chunk is a passage worth returning, and every document with a heading can be found: a
//! fragment too small to stand alone (`</details>` after a long code block) is served with its
//! neighbour, a file of a heading alone (or a title alone) is found by its heading and by its
//! file name, and a store an older chunking recipe made is chunked again by its next ingest,
//! once, even where the stat cache vouches for every file.

use std::path::Path;

use serde_json::Value;

use crate::support::{Env, clean_export};

/// A page whose code block fills a chunk by itself, so the `</details>` that closes its block
/// was a chunk of its own before fragments joined their neighbours.
fn knn_page() -> String {
    let fields: String = (0..40)
        .map(|i| format!("    \"field_{i:02}\": {{ \"type\": \"knn_vector\" }},\n"))
        .collect();
    format!(
        "# Create a k-NN index\n\n<details markdown=\"block\">\n<summary>Faiss example</summary>\n\n```json\nPUT /my-faiss-index\n{{\n  \"properties\": {{\n{fields}  }}\n}}\n```\n\n</details>\n"
    )
}

fn write_pages(env: &Env) {
    env.write("knn.md", &knn_page());
    env.write("dlq.md", "# Dead letter queues\n");
    env.write(
        "release-notes.md",
        "---\ntitle: Release notes for version 2.19\n---\n",
    );
    env.write(
        "buffers.md",
        "# Buffers\n\nA buffer holds events until a sink writes them.\n",
    );
}

/// The paths of the first hit for `query`.
fn first_hit_paths(env: &Env, query: &str) -> Value {
    let hits = env.search(query, 3);
    hits["hits"][0]["paths"].clone()
}

#[test]
fn a_heading_alone_is_found_by_its_words_and_its_file_name() {
    let env = Env::empty();
    write_pages(&env);
    env.ingest();
    assert_eq!(
        first_hit_paths(&env, "dead letter queues"),
        serde_json::json!(["dlq.md"])
    );
    // Only the file name says `dlq`.
    assert_eq!(first_hit_paths(&env, "dlq"), serde_json::json!(["dlq.md"]));
    assert_eq!(
        first_hit_paths(&env, "release notes 2.19"),
        serde_json::json!(["release-notes.md"])
    );
    let export = env.export();
    let texts: Vec<(&str, &str)> = export
        .values()
        .map(|chunk| (chunk.paths[0].as_str(), chunk.text.as_str()))
        .collect();
    assert!(
        texts.contains(&("dlq.md", "# Dead letter queues")),
        "{texts:?}"
    );
}

#[test]
fn a_closing_tag_is_served_with_the_block_it_closes() {
    let env = Env::empty();
    write_pages(&env);
    env.ingest();
    let export = env.export();
    let knn: Vec<&str> = export
        .values()
        .filter(|chunk| chunk.paths == ["knn.md"])
        .map(|chunk| chunk.text.as_str())
        .collect();
    // The opening tags name the block (its summary), so they stand alone.
    assert_eq!(knn.len(), 2, "{knn:?}");
    assert!(
        knn.iter()
            .any(|text| text.starts_with("```json") && text.ends_with("```\n\n</details>")),
        "{knn:?}"
    );
    let hits = env.search("create a k-NN index with faiss", 5);
    for hit in hits["hits"].as_array().expect("hits") {
        let text = hit["text"].as_str().expect("text");
        assert!(
            text.chars().filter(|c| c.is_alphanumeric()).count() >= 20,
            "{hit}"
        );
    }
}

/// Rewrites a store's ledger as a groundidx of ledger schema 7 left it, with the chunks the
/// recipe before version 1 made: `</details>` a chunk of its own, and no chunk for a file of a
/// heading alone.
fn make_it_older(store: &Path) {
    crate::support::ledger::store_texts_plain(&store.join("ledger.sqlite"));
    let ledger = rusqlite::Connection::open(store.join("ledger.sqlite")).expect("open ledger");
    let doc_of = |path: &str| -> Vec<u8> {
        ledger
            .query_row(
                "SELECT doc_hash FROM sources WHERE path = ?1",
                [path],
                |row| row.get(0),
            )
            .expect("a source")
    };
    let chunks_of = |doc: &[u8]| -> Vec<(Vec<u8>, String, String, i64, i64)> {
        ledger
            .prepare(
                "SELECT c.chunk_id, c.heading, c.text, dc.line_start, dc.line_end
                 FROM doc_chunks dc JOIN chunks c USING (chunk_id)
                 WHERE dc.doc_hash = ?1 ORDER BY dc.ordinal",
            )
            .expect("prepare")
            .query_map([doc], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read chunks")
    };
    let drop_chunks = |doc: &[u8]| {
        for (id, ..) in chunks_of(doc) {
            ledger
                .execute("DELETE FROM chunks WHERE chunk_id = ?1", [&id])
                .expect("delete chunk");
        }
        ledger
            .execute("DELETE FROM doc_chunks WHERE doc_hash = ?1", [doc])
            .expect("delete links");
    };

    let knn = doc_of("knn.md");
    let knn_chunks = chunks_of(&knn);
    let last = knn_chunks.len() - 1;
    let (id, heading, text, start, end) = knn_chunks[last].clone();
    let code = text
        .strip_suffix("\n\n</details>")
        .expect("the block's end");
    let heading_path: Vec<String> = serde_json::from_str(&heading).expect("heading JSON");
    ledger
        .execute("DELETE FROM chunks WHERE chunk_id = ?1", [&id])
        .expect("delete chunk");
    ledger
        .execute(
            "DELETE FROM doc_chunks WHERE doc_hash = ?1 AND ordinal = ?2",
            rusqlite::params![knn, last as i64],
        )
        .expect("delete link");
    let pieces = [(code, (start, end - 2)), ("</details>", (end, end))];
    for (ordinal, (piece, lines)) in (last..).zip(pieces) {
        let id = groundidx::ids::chunk_id(&heading_path, piece);
        ledger
            .execute(
                "INSERT INTO chunks (chunk_id, heading, text) VALUES (?1, ?2, ?3)",
                rusqlite::params![id.as_bytes(), heading, piece],
            )
            .expect("write chunk");
        ledger
            .execute(
                "INSERT INTO doc_chunks (doc_hash, ordinal, chunk_id, line_start, line_end)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![knn, ordinal as i64, id.as_bytes(), lines.0, lines.1],
            )
            .expect("link chunk");
    }
    ledger
        .execute(
            "UPDATE documents SET n_chunks = n_chunks + 1 WHERE doc_hash = ?1",
            [&knn],
        )
        .expect("count chunks");
    for path in ["dlq.md", "release-notes.md"] {
        let doc = doc_of(path);
        drop_chunks(&doc);
        ledger
            .execute(
                "UPDATE documents SET n_chunks = 0 WHERE doc_hash = ?1",
                [&doc],
            )
            .expect("count chunks");
    }
    // Every stat recorded an hour after the files were written, so the stat cache vouches for
    // each file on the next run (a file changed within two seconds of its record is read again).
    ledger
        .execute_batch(
            "ALTER TABLE documents DROP COLUMN recipe_version;
             ALTER TABLE sources DROP COLUMN since_generation;
             ALTER TABLE doc_chunks DROP COLUMN page_start;
             ALTER TABLE doc_chunks DROP COLUMN page_end;
             UPDATE meta SET value = 7 WHERE name = 'schema_version';
             UPDATE sources SET recorded_ns = recorded_ns + 3600000000000;",
        )
        .expect("make schema 7");
}

#[test]
fn a_store_of_an_older_recipe_is_chunked_again_once() {
    let env = Env::empty();
    write_pages(&env);
    env.ingest();
    make_it_older(&env.store);
    // The index follows the older ledger, as the older groundidx left it.
    env.json(&["rebuild", "--json"]);
    assert!(
        env.export()
            .values()
            .any(|chunk| chunk.text == "</details>"),
        "the older state was not written"
    );
    assert_eq!(env.search("dlq", 3)["hits"], serde_json::json!([]));

    // No file changed, and the stat cache vouches for every one.
    let report = env.ingest();
    assert_eq!(report["documents"]["unchanged"], 4, "{report}");
    assert_eq!(report["documents"]["rechunked"], 4, "{report}");
    assert_eq!(report["chunks"]["added"], 3, "{report}");
    assert_eq!(report["chunks"]["removed"], 2, "{report}");
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
    assert_eq!(first_hit_paths(&env, "dlq"), serde_json::json!(["dlq.md"]));

    // Once: the next run reads nothing and writes nothing.
    let again = env.ingest();
    assert_eq!(again["documents"]["rechunked"], 0, "{again}");
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
}
