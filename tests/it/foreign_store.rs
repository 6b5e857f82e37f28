//! A `--store` whose `ledger.sqlite` is some other program's SQLite database is refused by
//! every command, with an error that names the file, and the file is left byte for byte as it
//! was (never given groundidx's tables, never switched to WAL). An empty file is a new store.

use std::path::Path;

use crate::support::Env;

fn foreign_ledger(store: &Path, sql: &str) -> Vec<u8> {
    std::fs::create_dir_all(store).expect("mkdir store");
    let path = store.join("ledger.sqlite");
    let db = rusqlite::Connection::open(&path).expect("create foreign database");
    db.execute_batch(sql).expect("fill foreign database");
    drop(db);
    std::fs::read(path).expect("read foreign database")
}

#[test]
fn a_foreign_sqlite_database_is_refused_and_left_untouched() {
    for sql in [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO customers (name) VALUES ('Ada'), ('Grace');",
        // A table named like ours, but no groundidx schema version in it.
        "CREATE TABLE meta (key TEXT, data BLOB); INSERT INTO meta VALUES ('owner', 'someone');",
        // No table at all, but a schema all the same.
        "CREATE VIEW answer AS SELECT 42 AS value;",
    ] {
        let env = Env::sample();
        let bytes = foreign_ledger(&env.store, sql);
        let ledger = env.store.join("ledger.sqlite");
        let docs = env.docs.to_str().expect("utf-8");
        for args in [
            vec!["ingest", docs],
            vec!["status"],
            vec!["search", "anything"],
            vec!["rebuild"],
        ] {
            let output = env.run(&args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&ledger.display().to_string())
                    && stderr.contains("not a groundidx ledger")
                    && stderr.contains("hint:"),
                "{args:?}: {stderr}"
            );
            assert_eq!(
                std::fs::read(&ledger).expect("read"),
                bytes,
                "{args:?} changed the foreign database"
            );
            assert!(
                !env.store.join("ledger.sqlite-wal").exists(),
                "{args:?} switched the foreign database to WAL"
            );
        }
    }
}

#[test]
fn an_empty_ledger_file_becomes_a_new_store() {
    let env = Env::sample();
    std::fs::create_dir_all(&env.store).expect("mkdir store");
    std::fs::write(env.store.join("ledger.sqlite"), b"").expect("empty file");
    let report = env.ingest();
    assert!(
        report["chunks"]["added"].as_u64().expect("added") > 0,
        "{report}"
    );
    env.assert_verified();
}
