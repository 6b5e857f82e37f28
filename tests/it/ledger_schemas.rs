//! The two ledger dialects hold the same rows: every column of a table both the SQLite ledger
//! and the shared PostgreSQL ledger hold is in both, but for the differences named here, each
//! with its reason. A column added to one dialect alone fails this test until it is added to
//! the other or named below.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::support::pg::{TestSchema, client};
use crate::support::{BIN, Env, assert_success, isolate};

/// Columns one dialect holds in a table both hold: (table, column, why).
const SQLITE_ONLY_COLUMNS: &[(&str, &str, &str)] = &[
    ("sources", "size", "the stat cache is each store's own"),
    ("sources", "mtime_ns", "the stat cache is each store's own"),
    ("sources", "ctime_ns", "the stat cache is each store's own"),
    ("sources", "inode", "the stat cache is each store's own"),
    (
        "sources",
        "recorded_ns",
        "the stat cache is each store's own",
    ),
    (
        "sources",
        "root_id",
        "roots are rows of each store (the shared ledger names them by path)",
    ),
    (
        "sources",
        "since_generation",
        "the generation a source reached this store in",
    ),
    (
        "documents",
        "doc_row",
        "the row number that `doc_chunk_links` names a document by",
    ),
    (
        "chunks",
        "chunk_row",
        "the row number that `doc_chunk_links` names a chunk by",
    ),
];
const POSTGRES_ONLY_COLUMNS: &[(&str, &str, &str)] = &[
    ("audit_events", "served_by", "which host answered the call"),
    (
        "chunk_log",
        "seq",
        "the shared log position replicas pull after",
    ),
    ("runs", "epoch", "the writer lease's epoch that ran it"),
    ("runs", "holder", "the writer lease's holder that ran it"),
    (
        "sources",
        "root",
        "the root's path (a store keeps a root row ID)",
    ),
    ("vectors", "seq", "the page of vectors replicas pull after"),
];

/// Tables one dialect alone holds.
const SQLITE_ONLY_TABLES: &[(&str, &str)] = &[
    (
        "doc_chunk_links",
        "`doc_chunks` by row numbers (in SQLite `doc_chunks` is a view of it)",
    ),
    ("meta", "the store's counters (generation, vector_seq)"),
    (
        "model_stat_cache",
        "each host's cache of local model fingerprints",
    ),
    ("replica", "a replica's position in the shared log"),
    ("roots", "each store's root rows"),
    (
        "text_dictionaries",
        "how each store compresses its copy of the chunk text (the shared ledger keeps it plain)",
    ),
];
const POSTGRES_ONLY_TABLES: &[(&str, &str)] = &[
    (
        "consumers",
        "each replica's position, so the log is kept for it",
    ),
    ("ledger_meta", "the shared counters and the writer epoch"),
    ("log_tokens", "the token of each log position"),
    ("schema_migrations", "the migrations applied"),
    ("source_log", "the sources each log position changed"),
    ("usage_windows", "the shared rate limit's counts"),
    ("writer_lease", "the writer lease"),
];

type Columns = BTreeMap<String, BTreeSet<String>>;

fn sqlite_columns(ledger: &Path) -> Columns {
    let conn = rusqlite::Connection::open(ledger).expect("open the ledger");
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master
             WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'",
        )
        .expect("list tables")
        .query_map([], |row| row.get(0))
        .expect("list tables")
        .collect::<rusqlite::Result<_>>()
        .expect("list tables");
    tables
        .into_iter()
        .map(|table| {
            let columns = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .expect("list columns")
                .query_map([], |row| row.get(0))
                .expect("list columns")
                .collect::<rusqlite::Result<_>>()
                .expect("list columns");
            (table, columns)
        })
        .collect()
}

fn postgres_columns(schema: &TestSchema) -> Columns {
    let mut columns = Columns::new();
    for row in client(&schema.url)
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = $1",
            &[&schema.name],
        )
        .expect("list columns")
    {
        columns.entry(row.get(0)).or_default().insert(row.get(1));
    }
    columns
}

fn ingest(store: &Path, docs: &Path, shared: Option<&TestSchema>) {
    let mut command = Command::new(BIN);
    isolate(&mut command);
    command.arg("--store").arg(store);
    if let Some(schema) = shared {
        command.args(schema.args());
    }
    let output = command
        .args(["ingest", docs.to_str().expect("utf-8"), "--quiet"])
        .output()
        .expect("run groundidx");
    assert_success(&output, &["ingest"]);
}

fn named(list: &[(&str, &str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(table, column, _)| (table.to_string(), column.to_string()))
        .collect()
}

fn tables(list: &[(&str, &str)]) -> BTreeSet<String> {
    list.iter().map(|(table, _)| table.to_string()).collect()
}

#[test]
fn the_dialects_agree() {
    let Some(schema) = TestSchema::new("ledger_schemas") else {
        return;
    };
    let env = Env::sample();
    let own = env.tmp.path().join("own");
    let replica = env.tmp.path().join("replica");
    ingest(&own, &env.docs, None);
    ingest(&replica, &env.docs, Some(&schema));
    let sqlite = sqlite_columns(&own.join("ledger.sqlite"));
    assert_eq!(
        sqlite,
        sqlite_columns(&replica.join("ledger.sqlite")),
        "a replica's ledger has the schema of a store's own"
    );
    let postgres = postgres_columns(&schema);

    let only = |left: &Columns, right: &Columns| -> BTreeSet<String> {
        left.keys()
            .filter(|table| !right.contains_key(*table))
            .cloned()
            .collect()
    };
    assert_eq!(only(&sqlite, &postgres), tables(SQLITE_ONLY_TABLES));
    assert_eq!(only(&postgres, &sqlite), tables(POSTGRES_ONLY_TABLES));

    let mut sqlite_only = BTreeSet::new();
    let mut postgres_only = BTreeSet::new();
    for (table, columns) in &sqlite {
        let Some(other) = postgres.get(table) else {
            continue;
        };
        for column in columns.difference(other) {
            sqlite_only.insert((table.clone(), column.clone()));
        }
        for column in other.difference(columns) {
            postgres_only.insert((table.clone(), column.clone()));
        }
    }
    assert_eq!(
        sqlite_only,
        named(SQLITE_ONLY_COLUMNS),
        "columns of the SQLite ledger alone"
    );
    assert_eq!(
        postgres_only,
        named(POSTGRES_ONLY_COLUMNS),
        "columns of the shared ledger alone"
    );
    // The tables the change sets copy are in both dialects.
    for table in [
        "sources",
        "documents",
        "doc_chunks",
        "doc_tags",
        "chunks",
        "chunk_log",
    ] {
        assert!(
            sqlite.contains_key(table) && postgres.contains_key(table),
            "{table}"
        );
    }
}
