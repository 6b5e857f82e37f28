//! Which chunks a document is made of, kept by row numbers (schema 13): an older ledger's links
//! are upgraded whole, a damaged one is refused, a killed upgrade leaves the older ledger, the
//! row numbers are the tables' primary keys (which no `VACUUM` renumbers) and are never given
//! twice, and `verify` names links and chunks that damage left behind.

use std::path::Path;

use rusqlite::Connection;

use crate::crash::assert_crashed_at;
use crate::support::ledger::store_links_by_hash;
use crate::support::{Env, clean_export};

/// The crash point inside a schema upgrade's transaction, visited below.
pub const SCHEMA_POINTS: &[&str] = &["schema.before_commit"];

/// Every link as a reader sees it: `(doc_hash, ordinal, chunk_id, lines, pages)`, in order.
type Links = Vec<(Vec<u8>, i64, Vec<u8>, i64, i64, Option<i64>, Option<i64>)>;

fn links(ledger: &Path) -> Links {
    let conn = Connection::open(ledger).expect("open the ledger");
    let mut stmt = conn
        .prepare(
            "SELECT doc_hash, ordinal, chunk_id, line_start, line_end, page_start, page_end
             FROM doc_chunks ORDER BY doc_hash, ordinal",
        )
        .expect("prepare");
    stmt.query_map([], |row| {
        Ok((
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
            row.get(5)?,
            row.get(6)?,
        ))
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("read links")
}

/// The value of `PRAGMA name` on the ledger.
fn pragma(ledger: &Path, name: &str) -> i64 {
    Connection::open(ledger)
        .expect("open the ledger")
        .query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
        .expect("read a pragma")
}

fn schema_version(ledger: &Path) -> i64 {
    Connection::open(ledger)
        .expect("open the ledger")
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .expect("schema version")
}

/// What searches answer, sources and line ranges included, with and without filters (which
/// read the links' short keys since schema 13, the chunk IDs before).
fn answers(env: &Env) -> Vec<serde_json::Value> {
    let mut answers = Vec::new();
    for query in [
        "rotate the signing key",
        "backups",
        "dead letter queue",
        "FAQ",
    ] {
        for filter in [
            &[][..],
            &["--path", "handbook/"][..],
            &["--tag", "operations"][..],
        ] {
            let mut args = vec!["search", query, "--json", "--top-k", "5"];
            args.extend_from_slice(filter);
            let mut answer = env.json(&args);
            // The run that made the store, and when, are not what is compared.
            if let Some(object) = answer.as_object_mut() {
                object.retain(|name, _| name == "hits");
            }
            answers.push(answer);
        }
    }
    assert!(
        answers.iter().any(|answer| answer["hits"]
            .as_array()
            .is_some_and(|hits| !hits.is_empty())),
        "no search found anything to compare"
    );
    answers
}

/// A store of `sample_docs` whose ledger keeps its links as schema 12 did.
fn schema_12_store() -> Env {
    let env = Env::sample();
    env.ingest();
    store_links_by_hash(&env.store.join("ledger.sqlite"));
    assert_eq!(schema_version(&env.store.join("ledger.sqlite")), 12);
    env
}

#[test]
fn a_schema_12_ledger_is_upgraded_with_every_link_and_chunk_row_kept() {
    let env = schema_12_store();
    let ledger = env.store.join("ledger.sqlite");
    let before_links = links(&ledger);
    assert!(!before_links.is_empty());
    let rows_of = |sql: &str| -> Vec<(Vec<u8>, i64)> {
        let conn = Connection::open(&ledger).expect("open the ledger");
        let mut stmt = conn.prepare(sql).expect("prepare");
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read rows")
    };
    let chunk_rows = rows_of("SELECT chunk_id, rowid FROM chunks ORDER BY chunk_id");
    // A reader reads the older ledger as it is.
    let before_answers = answers(&env);
    let before_export = env.export();
    assert_eq!(schema_version(&ledger), 12, "a reader upgraded the ledger");

    // A writer upgrades it; with nothing changed, it writes no chunk.
    let report = env.ingest();
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert_eq!(schema_version(&ledger), groundidx::ledger::SCHEMA_VERSION);
    assert_eq!(links(&ledger), before_links);
    assert_eq!(
        rows_of("SELECT chunk_id, chunk_row FROM chunks ORDER BY chunk_id"),
        chunk_rows,
        "the chunks were numbered anew"
    );
    assert_eq!(answers(&env), before_answers);
    assert_eq!(env.export(), before_export);
    env.assert_verified();

    // And the upgraded ledger takes changes as a new one does.
    std::fs::remove_file(env.docs.join("handbook/backups.md")).expect("delete");
    env.write(
        "notes/new.md",
        "# New\n\nA page written after the upgrade.\n",
    );
    env.ingest();
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn a_link_to_a_missing_chunk_fails_the_upgrade_and_leaves_the_ledger_as_it_was() {
    let env = schema_12_store();
    let ledger = env.store.join("ledger.sqlite");
    {
        let conn = Connection::open(&ledger).expect("open the ledger");
        let deleted = conn
            .execute(
                "DELETE FROM chunks WHERE rowid = (SELECT min(rowid) FROM chunks)",
                [],
            )
            .expect("delete a chunk");
        assert_eq!(deleted, 1);
    }
    let before = links(&ledger);
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&["ingest", docs, "--json"]);
    assert!(!output.status.success(), "a damaged ledger was upgraded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the ledger is damaged")
            && stderr.contains("schema version 13")
            && stderr.contains("NOT NULL"),
        "the error does not say what failed: {stderr}"
    );
    assert_eq!(schema_version(&ledger), 12);
    assert_eq!(
        links(&ledger),
        before,
        "the failed upgrade changed the links"
    );
}

#[test]
fn an_upgrade_killed_before_its_commit_leaves_the_older_ledger_and_the_next_run_upgrades_it() {
    let env = schema_12_store();
    let ledger = env.store.join("ledger.sqlite");
    let before = links(&ledger);
    let point = SCHEMA_POINTS[0];
    let docs = env.docs.to_str().expect("utf-8");
    let output = env
        .command(&["ingest", docs, "--json"])
        .env(groundidx::crash::CRASH_ENV, point)
        .output()
        .expect("run groundidx");
    assert_crashed_at(&output, point);
    assert_eq!(schema_version(&ledger), 12);
    assert_eq!(links(&ledger), before);
    env.ingest();
    assert_eq!(schema_version(&ledger), groundidx::ledger::SCHEMA_VERSION);
    assert_eq!(links(&ledger), before);
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

/// The links name rows by `chunk_row` and `doc_row`, which alias the rowid: a `VACUUM` (which
/// renumbers the rows of a table without such an alias, closing the gaps that deleted rows
/// left) keeps every link pointing at its own document and chunk.
#[test]
fn a_vacuum_renumbers_nothing_the_links_name() {
    let env = Env::sample();
    env.ingest();
    // Gaps in both tables' rows: documents and chunks removed from the start and the middle.
    for path in ["handbook/backups.md", "notes/faq.md"] {
        std::fs::remove_file(env.docs.join(path)).expect("delete");
    }
    env.ingest();
    env.write("notes/later.md", "# Later\n\nWritten after the gaps.\n");
    env.ingest();
    let ledger = env.store.join("ledger.sqlite");
    let before_links = links(&ledger);
    let before_answers = answers(&env);
    let gaps: i64 = Connection::open(&ledger)
        .expect("open the ledger")
        .query_row(
            "SELECT (SELECT max(chunk_row) - count(*) FROM chunks)
                  + (SELECT max(doc_row) - count(*) FROM documents)",
            [],
            |row| row.get(0),
        )
        .expect("count the gaps");
    assert!(gaps > 0, "the test needs rows missing below the last");
    // What keeps a `VACUUM` from renumbering them: each is its table's INTEGER PRIMARY KEY,
    // the rowid's alias (SQLite may renumber the rowids of a table without one).
    let conn = Connection::open(&ledger).expect("open the ledger");
    for (table, column) in [("chunks", "chunk_row"), ("documents", "doc_row")] {
        let keys: Vec<(String, String)> = conn
            .prepare(&format!(
                "SELECT name, type FROM pragma_table_info('{table}') WHERE pk > 0"
            ))
            .expect("prepare")
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("read the primary key");
        assert_eq!(
            keys,
            [(column.to_string(), "INTEGER".to_string())],
            "{table}"
        );
    }
    drop(conn);
    Connection::open(&ledger)
        .expect("open the ledger")
        .execute_batch("VACUUM")
        .expect("vacuum");
    assert_eq!(links(&ledger), before_links);
    assert_eq!(answers(&env), before_answers);
    env.assert_verified();
    env.write("notes/after.md", "# After\n\nWritten after the vacuum.\n");
    env.ingest();
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

/// A ledger made before schema 12 (`auto_vacuum = NONE`) cannot give free pages back one by
/// one, and its upgrade copies the documents, chunks and links, freeing about half the file:
/// the run that upgrades it rewrites it once with `VACUUM`, after which it gives pages back as
/// a new ledger does, and the file is smaller than before the upgrade.
#[test]
fn an_older_ledger_is_rewritten_once_without_the_pages_its_upgrade_freed() {
    upgrade_rewrites(&["ingest"]);
    // A command that ends no run upgrades it the same way.
    upgrade_rewrites(&["migrate", "--json"]);
}

fn upgrade_rewrites(command: &[&str]) {
    let env = Env::empty();
    crate::compressed_text::write_pages(&env, 300);
    env.ingest();
    let ledger = env.store.join("ledger.sqlite");
    store_links_by_hash(&ledger);
    Connection::open(&ledger)
        .expect("open the ledger")
        .execute_batch("PRAGMA auto_vacuum = NONE; VACUUM;")
        .expect("make the ledger one that keeps its free pages");
    let pragma = |name: &str| pragma(&ledger, name);
    assert_eq!(pragma("auto_vacuum"), 0);
    let size = || std::fs::metadata(&ledger).expect("the ledger").len();
    let before = size();

    if command == ["ingest"] {
        env.ingest();
    } else {
        env.json(command);
    }
    assert_eq!(schema_version(&ledger), groundidx::ledger::SCHEMA_VERSION);
    assert_eq!(
        pragma("auto_vacuum"),
        2,
        "{command:?} did not rewrite the ledger"
    );
    let (free, pages) = (pragma("freelist_count"), pragma("page_count"));
    assert!(free * 32 < pages, "{free} of {pages} pages are free");
    assert!(
        size() < before,
        "{} bytes after the upgrade, {before} before",
        size()
    );
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

/// `verify --json` of a store it must find damaged (exit 1).
fn failed_verify(env: &Env) -> serde_json::Value {
    let output = env.run(&["verify", "--json"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("verify's JSON")
}

/// The highest row numbers of documents and chunks.
fn highest_rows(ledger: &Path) -> (i64, i64) {
    Connection::open(ledger)
        .expect("open the ledger")
        .query_row(
            "SELECT (SELECT max(doc_row) FROM documents), (SELECT max(chunk_row) FROM chunks)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("read the highest rows")
}

/// The paths of the hits of a search for `query` under `zz/`.
fn hit_paths(env: &Env, query: &str) -> Vec<String> {
    let hits = env.json(&["search", query, "--json", "--path", "zz/"]);
    hits["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .flat_map(|hit| hit["paths"].as_array().expect("paths").clone())
        .map(|path| path.as_str().expect("a path").to_string())
        .collect()
}

const LAST: &str =
    "# Last\n\nWritten last, so its rows are numbered last.\n\n## More\n\nA second part.\n";
const NEXT: &str =
    "# Next\n\nXylophone marmalade in the rows after.\n\n## Again\n\nAnd a second part.\n";

/// A document and chunks with the highest row numbers removed, then others added: the new rows
/// are numbered above every number given before, never with the freed ones.
#[test]
fn a_row_number_freed_is_never_given_again() {
    let env = Env::sample();
    env.ingest();
    env.write("zz/last.md", LAST);
    env.ingest();
    let ledger = env.store.join("ledger.sqlite");
    let before = highest_rows(&ledger);
    std::fs::remove_file(env.docs.join("zz/last.md")).expect("delete");
    env.ingest();
    let after_delete = highest_rows(&ledger);
    assert!(after_delete.0 < before.0 && after_delete.1 < before.1);
    env.write("zz/next.md", NEXT);
    env.ingest();
    let after = highest_rows(&ledger);
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "{after:?} after, {before:?} before the file was removed"
    );
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
    assert_eq!(hit_paths(&env, "xylophone marmalade"), ["zz/next.md"]);
}

/// A store of `sample_docs` and `zz/last.md` (its rows numbered last), then `damage` run on
/// its ledger.
fn damaged_store(damage: &str) -> Env {
    let env = Env::sample();
    env.write("zz/last.md", LAST);
    env.ingest();
    Connection::open(env.store.join("ledger.sqlite"))
        .expect("open the ledger")
        .execute(damage, [])
        .expect("damage the ledger");
    env
}

/// A chunk row deleted by hand leaves its document's link naming a row the ledger lacks:
/// `verify` says so, and a chunk added after it is never cited from that document.
#[test]
fn a_link_to_a_chunk_deleted_by_hand_is_named_by_verify_and_never_names_another() {
    let env =
        damaged_store("DELETE FROM chunks WHERE chunk_row = (SELECT max(chunk_row) FROM chunks)");
    let report = failed_verify(&env);
    assert_eq!(report["identical"], false, "{report}");
    assert_eq!(report["broken_links_in_ledger"], 1, "{report}");
    env.write("zz/next.md", NEXT);
    env.ingest();
    assert_eq!(hit_paths(&env, "xylophone marmalade"), ["zz/next.md"]);
    let report = failed_verify(&env);
    assert_eq!(report["broken_links_in_ledger"], 1, "{report}");
}

/// A document row deleted by hand leaves its links naming a row the ledger lacks: `verify`
/// counts them, and later ingests still run and cite only what they should.
#[test]
fn links_of_a_document_deleted_by_hand_are_named_by_verify_and_ingest_goes_on() {
    let env =
        damaged_store("DELETE FROM documents WHERE doc_row = (SELECT max(doc_row) FROM documents)");
    let report = failed_verify(&env);
    assert!(
        report["broken_links_in_ledger"].as_u64() >= Some(2),
        "{report}"
    );
    env.write("zz/next.md", NEXT);
    env.ingest();
    assert_eq!(hit_paths(&env, "xylophone marmalade"), ["zz/next.md"]);
}

/// A chunk row no document references (inserted by hand) is named by `verify`.
#[test]
fn a_chunk_no_document_references_is_named_by_verify() {
    let env = Env::sample();
    env.ingest();
    env.assert_verified();
    let id = groundidx::ids::chunk_id(&["Stray".to_string()], "A chunk of no document.");
    Connection::open(env.store.join("ledger.sqlite"))
        .expect("open the ledger")
        .execute(
            "INSERT INTO chunks (chunk_id, heading, text) VALUES (?1, ?2, ?3)",
            rusqlite::params![id.as_bytes(), "[\"Stray\"]", "A chunk of no document."],
        )
        .expect("insert a chunk");
    let report = failed_verify(&env);
    assert_eq!(report["identical"], false, "{report}");
    assert_eq!(
        report["unreferenced_in_ledger"],
        serde_json::json!([id.to_hex()]),
        "{report}"
    );
    assert_eq!(
        report["altered_in_ledger"],
        serde_json::json!([]),
        "{report}"
    );
}

/// A document whose chunk list lost its entries (its chunk still held by another document, so
/// nothing else is missing) is named by `verify`.
#[test]
fn a_document_missing_its_chunk_list_is_named_by_verify() {
    let env = Env::empty();
    let shared = "# Shared\n\nPlatypus alpha text.\n";
    env.write("p.md", shared);
    env.write("q.md", &format!("{shared}\n## Other\n\nBeta gamma.\n"));
    env.ingest();
    env.assert_verified();
    Connection::open(env.store.join("ledger.sqlite"))
        .expect("open the ledger")
        .execute(
            "DELETE FROM doc_chunk_links WHERE doc_row = (SELECT d.doc_row FROM documents d
               JOIN sources s ON s.doc_hash = d.doc_hash WHERE s.path = 'p.md')",
            [],
        )
        .expect("delete a document's links");
    let report = failed_verify(&env);
    assert_eq!(report["broken_links_in_ledger"], 1, "{report}");
}

/// A rewrite that gives an older ledger's free pages back, killed after the upgrade it follows
/// was committed, is done by the next writer to open the ledger, whichever command it runs.
#[test]
fn free_pages_an_upgrade_left_are_given_back_by_the_next_writer_to_open_the_ledger() {
    let env = Env::empty();
    crate::compressed_text::write_pages(&env, 200);
    env.ingest();
    let ledger = env.store.join("ledger.sqlite");
    // What a kill during the rewrite leaves: schema 13, `auto_vacuum = NONE`, half free.
    Connection::open(&ledger)
        .expect("open the ledger")
        .execute_batch(
            "PRAGMA auto_vacuum = NONE; VACUUM;
             CREATE TABLE filler AS SELECT * FROM chunks;
             INSERT INTO filler SELECT * FROM filler;
             DROP TABLE filler;",
        )
        .expect("leave the ledger half free");
    let pragma = |name: &str| pragma(&ledger, name);
    assert_eq!(pragma("auto_vacuum"), 0);
    assert!(pragma("freelist_count") * 4 >= pragma("page_count"));
    env.json(&["migrate", "--json"]);
    assert_eq!(
        pragma("auto_vacuum"),
        2,
        "migrate did not rewrite the ledger"
    );
    assert!(pragma("freelist_count") * 32 < pragma("page_count"));
    env.assert_verified();
}

/// A shared ledger whose document names a chunk it no longer holds (a row deleted there by
/// hand): a new replica's sync refuses it as damaged, naming the chunk, and copies nothing,
/// where a link to nothing would have been kept.
#[test]
fn a_replica_refuses_a_shared_document_naming_a_chunk_no_one_holds() {
    let Some(f) = crate::support::pg::SharedFixture::sample("dangling_link") else {
        return;
    };
    let [_writer, replica] = f.ingested(["writer", "replica"]);
    let name = &f.schema.name;
    let row = crate::support::pg::client(&f.schema.url)
        .query_one(
            format!(
                "DELETE FROM \"{name}\".chunks WHERE chunk_id =
                   (SELECT chunk_id FROM \"{name}\".doc_chunks ORDER BY chunk_id LIMIT 1)
                 RETURNING chunk_id"
            )
            .as_str(),
            &[],
        )
        .expect("delete a shared chunk");
    let deleted: Vec<u8> = row.get(0);
    let hex: String = deleted.iter().map(|byte| format!("{byte:02x}")).collect();
    let output = replica.run(&["sync", "--json"]);
    assert!(!output.status.success(), "the replica copied a broken link");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the ledger is damaged") && stderr.contains(&hex),
        "{stderr}"
    );
    let ledger = replica.store.join("ledger.sqlite");
    if ledger.exists() {
        let links: i64 = Connection::open(&ledger)
            .expect("open the replica's ledger")
            .query_row("SELECT count(*) FROM doc_chunk_links", [], |row| row.get(0))
            .expect("count links");
        assert_eq!(links, 0, "the refused sync left links behind");
    }
}
