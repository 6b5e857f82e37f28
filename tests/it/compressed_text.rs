//! The ledger keeps chunk text compressed (schema 12), and every reader serves it byte for
//! byte: a store large enough trains its dictionary once, in the transaction of the rows that
//! first use it (a batch of a few very large passages too); a store of an older schema keeps
//! its plain rows beside new compressed ones; a killed first batch leaves no dictionary
//! without rows, nor rows without their dictionary; a store whose dictionary is gone is
//! refused, never given another that would decode its rows into other text.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::Connection;

use crate::support::ledger::{store_texts_plain, stored_text};
use crate::support::{Env, parse_export};

/// Writes `files` Markdown pages of a few kilobytes each, every one different, into the env's
/// docs: together far more than the text a dictionary is trained from (256 KiB).
pub fn write_pages(env: &Env, files: usize) {
    let words = [
        "rotate",
        "the",
        "signing",
        "key",
        "before",
        "`groundidx ingest`",
        "runs",
        "café",
        "shard",
        "replica",
        "--store",
        "config.toml",
        "index",
        "ledger",
        "Überblick",
        "日本語",
        "each",
        "passage",
        "once",
        "retry",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    for file in 0..files {
        let mut page = format!("# Page {file}\n\n");
        for section in 0..4 {
            page.push_str(&format!("## Section {section} of page {file}\n\n"));
            for _ in 0..(80 + next() % 120) {
                page.push_str(words[next() % words.len()]);
                page.push(if next() % 13 == 0 { '\n' } else { ' ' });
            }
            page.push_str("\n\n```sh\ngroundidx search \"rotate the key\" --json\n```\n\n");
        }
        env.write(&format!("pages/{:02}/page-{file}.md", file % 17), &page);
    }
}

fn ledger_of(env: &Env) -> Connection {
    Connection::open(env.store.join("ledger.sqlite")).expect("open the ledger")
}

/// Every chunk row's heading and text, decoded by the tests' own reader of the format, by ID.
fn stored_rows(conn: &Connection) -> BTreeMap<String, (String, String)> {
    let mut stmt = conn
        .prepare("SELECT chunk_id, heading, text FROM chunks")
        .expect("prepare");
    let rows = stmt
        .query_map([], |row| {
            let id: Vec<u8> = row.get(0)?;
            let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
            Ok((
                hex,
                (
                    stored_text(conn, row.get_ref(1)?),
                    stored_text(conn, row.get_ref(2)?),
                ),
            ))
        })
        .expect("query");
    rows.collect::<Result<_, _>>().expect("read chunks")
}

/// (rows stored compressed with dictionary `id`, all rows) of `chunks.text`.
fn compressed_with(conn: &Connection, id: u8) -> (i64, i64) {
    conn.query_row(
        "SELECT sum(typeof(text) = 'blob' AND substr(text, 1, 1) = ?1), count(*) FROM chunks",
        [vec![id]],
        |row| Ok((row.get::<_, Option<i64>>(0)?.unwrap_or(0), row.get(1)?)),
    )
    .expect("count compressed rows")
}

fn dictionaries(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM text_dictionaries", [], |row| {
        row.get(0)
    })
    .expect("count dictionaries")
}

/// The export's text equals the rows as stored, decoded independently; and `verify` finds
/// every chunk's text hashing to its ID, which was computed from the text before it was
/// compressed.
fn assert_served_exactly(env: &Env) {
    let conn = ledger_of(env);
    let stored = stored_rows(&conn);
    let exported = parse_export(&String::from_utf8_lossy(&env.run(&["export"]).stdout));
    assert_eq!(exported.len(), stored.len());
    for (id, chunk) in &exported {
        let (_, text) = &stored[id];
        assert_eq!(&chunk.text, text, "chunk {id}");
    }
    env.assert_verified();
}

#[test]
fn a_large_store_trains_one_dictionary_and_serves_every_passage_byte_for_byte() {
    let env = Env::empty();
    write_pages(&env, 400);
    let report = env.ingest();
    assert!(
        report["chunks"]["added"].as_u64().unwrap_or(0) > 400,
        "{report}"
    );
    let conn = ledger_of(&env);
    assert_eq!(dictionaries(&conn), 1);
    let (compressed, all) = compressed_with(&conn, 1);
    assert!(
        compressed * 10 >= all * 9,
        "{compressed} of {all} rows use the dictionary"
    );
    let text_bytes: i64 = conn
        .query_row(
            "SELECT sum(length(CAST(text AS BLOB))) FROM chunks",
            [],
            |row| row.get(0),
        )
        .expect("stored bytes");
    let plain_bytes: usize = stored_rows(&conn)
        .values()
        .map(|(_, text)| text.len())
        .sum();
    assert!(
        (text_bytes as usize) * 2 < plain_bytes,
        "{text_bytes} bytes stored for {plain_bytes} bytes of text"
    );
    assert_served_exactly(&env);
    let hit = &env.search("rotate the signing key", 3)["hits"][0];
    let id = hit["chunk_id"].as_str().expect("a hit");
    assert_eq!(
        hit["text"].as_str(),
        Some(stored_rows(&conn)[id].1.as_str())
    );

    // Edits, and a second large batch, reuse the dictionary: never a second one.
    write_pages(&env, 800);
    env.write(
        "pages/00/page-0.md",
        "# Page 0\n\nRewritten entirely, and short.\n",
    );
    env.ingest();
    assert_eq!(dictionaries(&conn), 1);
    assert_served_exactly(&env);
    // A new store of the same files ends with the same passages.
    let again = Env::copy_of(&env.docs);
    again.ingest();
    assert_eq!(again.export(), env.export());
}

#[test]
fn a_store_of_schema_11_keeps_its_plain_rows_and_adds_compressed_ones() {
    let env = Env::empty();
    write_pages(&env, 200);
    env.ingest();
    let ledger = env.store.join("ledger.sqlite");
    make_schema_11(&ledger);
    let conn = ledger_of(&env);
    assert_eq!(compressed_with(&conn, 1).0, 0);
    // A reader reads the older store as it is.
    let status = env.json(&["status", "--json"]);
    assert!(status["chunks"].as_u64().unwrap_or(0) > 0, "{status}");
    // The next ingest upgrades it and writes the new pages compressed; the old rows stay.
    write_pages(&env, 600);
    env.ingest();
    let version: i64 = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .expect("schema version");
    assert_eq!(version, groundidx::ledger::SCHEMA_VERSION);
    let plain: i64 = conn
        .query_row(
            "SELECT count(*) FROM chunks WHERE typeof(text) = 'text'",
            [],
            |row| row.get(0),
        )
        .expect("count plain rows");
    assert!(plain > 0, "the plain rows were rewritten");
    assert!(compressed_with(&conn, 1).0 > 0, "no new row was compressed");
    assert_served_exactly(&env);
}

/// Makes the ledger at `path` what schema 11 wrote: every chunk text plain, no dictionaries.
fn make_schema_11(path: &Path) {
    store_texts_plain(path);
    Connection::open(path)
        .expect("open the ledger")
        .execute(
            "UPDATE meta SET value = 11 WHERE name = 'schema_version'",
            [],
        )
        .expect("set the schema version");
}

#[test]
fn a_first_batch_killed_before_its_commit_leaves_neither_dictionary_nor_rows() {
    let env = Env::empty();
    write_pages(&env, 400);
    let point = "ledger.before_commit";
    let output = env
        .command(&["ingest", env.docs.to_str().expect("utf-8"), "--json"])
        .env(groundidx::crash::CRASH_ENV, point)
        .output()
        .expect("run groundidx");
    crate::crash::assert_crashed_at(&output, point);
    let conn = ledger_of(&env);
    assert_eq!(dictionaries(&conn), 0);
    assert_eq!(
        compressed_with(&conn, 1).1,
        0,
        "rows of the killed batch stayed"
    );
    env.ingest();
    assert_eq!(dictionaries(&conn), 1);
    assert_served_exactly(&env);
    assert_eq!(env.export(), crate::support::clean_export(&env.docs));
}

#[test]
fn a_store_whose_dictionary_is_gone_is_refused_never_given_another() {
    let env = Env::empty();
    write_pages(&env, 400);
    env.ingest();
    ledger_of(&env)
        .execute("DELETE FROM text_dictionaries", [])
        .expect("delete the dictionary");
    // Readers say the text is damaged.
    let search = env.run(&["search", "rotate the signing key", "--json"]);
    assert!(!search.status.success());
    let stderr = String::from_utf8_lossy(&search.stderr);
    assert!(stderr.contains("stored chunk text is damaged"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A writer with new text to store refuses, rather than train a new dictionary 1 that
    // would decode the old rows into other text.
    write_pages(&env, 800);
    let ingest = env.run(&["ingest", env.docs.to_str().expect("utf-8"), "--json"]);
    assert!(!ingest.status.success());
    let stderr = String::from_utf8_lossy(&ingest.stderr);
    assert!(
        stderr.contains("the ledger is damaged: its chunk text dictionary 1 is missing"),
        "{stderr}"
    );
    assert_eq!(dictionaries(&ledger_of(&env)), 0);
}

#[test]
fn a_batch_of_a_few_very_large_passages_trains_a_dictionary_too() {
    let env = Env::empty();
    // 200 files of about 60 KB, each one passage at this chunk size: 12 MB in 200 values.
    let words = [
        "rotate", "the", "signing", "key", "shard", "replica", "café", "ledger",
    ];
    for file in 0..200usize {
        let mut page = format!("# Large page {file}\n\n");
        let mut n = file;
        while page.len() < 60_000 {
            n = n.wrapping_mul(2_654_435_761).wrapping_add(file) % 1_000_003;
            page.push_str(words[n % words.len()]);
            page.push(' ');
        }
        env.write(&format!("large/page-{file}.md"), &page);
    }
    env.json(&[
        "ingest",
        env.docs.to_str().expect("utf-8"),
        "--json",
        "--chunk-size",
        "100000",
    ]);
    let conn = ledger_of(&env);
    assert_eq!(dictionaries(&conn), 1);
    assert_served_exactly(&env);
}

#[test]
fn verify_names_a_chunk_whose_stored_text_is_damaged_and_readers_say_so() {
    let env = Env::empty();
    write_pages(&env, 400);
    env.ingest();
    let conn = ledger_of(&env);
    let (id, blob): (Vec<u8>, Vec<u8>) = conn
        .query_row(
            "SELECT chunk_id, text FROM chunks WHERE typeof(text) = 'blob' ORDER BY chunk_id LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("a compressed row");
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    // One byte in the middle of the frame: without its checksum this decoded to other text.
    let mut damaged = blob.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x41;
    conn.execute(
        "UPDATE chunks SET text = ?2 WHERE chunk_id = ?1",
        rusqlite::params![id, damaged],
    )
    .expect("damage the text");
    let verify = env.run(&["verify", "--json"]);
    assert_eq!(verify.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("JSON");
    assert_eq!(report["identical"], false, "{report}");
    assert_eq!(
        report["altered_in_ledger"],
        serde_json::json!([hex]),
        "{report}"
    );
    let export = env.run(&["export"]);
    assert!(!export.status.success());
    let stderr = String::from_utf8_lossy(&export.stderr);
    assert!(stderr.contains(&format!("read chunk {hex}")), "{stderr}");
    assert!(stderr.contains("stored chunk text is damaged"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_store_ingested_in_small_batches_trains_its_dictionary_once_they_add_up() {
    let env = Env::empty();
    write_pages(&env, 400);
    // 50 pages a batch, each under the text a dictionary is trained from: the batches' text
    // adds up until a batch trains it where it is chunked, and the next batch is packed with
    // it before that one has committed it. Only the rows before it are without.
    env.json(&[
        "ingest",
        env.docs.to_str().expect("utf-8"),
        "--json",
        "--batch-files",
        "50",
    ]);
    let conn = ledger_of(&env);
    assert_eq!(dictionaries(&conn), 1);
    let (compressed, all) = compressed_with(&conn, 1);
    assert!(
        compressed * 4 >= all * 3,
        "{compressed} of {all} rows use the dictionary"
    );
    assert_served_exactly(&env);
    assert_eq!(env.export(), crate::support::clean_export(&env.docs));
}

#[test]
fn a_new_ledger_gives_its_free_pages_back_at_the_end_of_a_run() {
    let env = Env::empty();
    write_pages(&env, 400);
    env.ingest();
    let conn = ledger_of(&env);
    let pragma = |name: &str| -> i64 {
        conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
            .expect(name)
    };
    assert_eq!(pragma("auto_vacuum"), 2, "a new ledger is not incremental");
    // The run's log rows, one per chunk, were deleted once the index had them.
    let (free, total) = (pragma("freelist_count"), pragma("page_count"));
    assert!(
        free < 16 || free * 32 < total,
        "{free} of {total} pages are free"
    );
}
