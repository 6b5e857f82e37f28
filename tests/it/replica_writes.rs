//! A replica's ledger is the shared ledger's copy: no command writes it except through the
//! shared ledger (a sync, or a writer that publishes first). Its `vector_seq` names the last page
//! of shared vectors it holds, so a command that moved it on its own would make the next sync
//! skip a page of vectors for good.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::embed_server::{EmbedServer, Vectors};
use crate::support::pg::{TestSchema, client};
use crate::support::{BIN, Env, assert_success, isolate};

/// `groundidx --store STORE [shared ledger] ARGS…`.
fn run(store: &Path, shared: Option<&TestSchema>, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    isolate(&mut command);
    command.arg("--store").arg(store);
    if let Some(schema) = shared {
        command.args(schema.args()).args(["--lease-ttl", "1s"]);
    }
    command.args(args).output().expect("run groundidx")
}

fn json(store: &Path, shared: Option<&TestSchema>, args: &[&str]) -> Value {
    let output = run(store, shared, args);
    assert_success(&output, args);
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// The replica's own `vector_seq` and vector count.
fn replica_vectors(store: &Path) -> (i64, i64) {
    let ledger = rusqlite::Connection::open(store.join("ledger.sqlite")).expect("open ledger");
    let seq = ledger
        .query_row(
            "SELECT value FROM meta WHERE name = 'vector_seq'",
            [],
            |row| row.get(0),
        )
        .expect("vector_seq");
    let count = ledger
        .query_row("SELECT count(*) FROM vectors", [], |row| row.get(0))
        .expect("count vectors");
    (seq, count)
}

/// The shared ledger's `vector_seq` and vector count.
fn shared_vectors(schema: &TestSchema) -> (i64, i64) {
    let mut client = client(&schema.url);
    let seq = client
        .query_one(
            format!("SELECT vector_seq FROM \"{}\".ledger_meta", schema.name).as_str(),
            &[],
        )
        .expect("read ledger_meta")
        .get(0);
    let count = client
        .query_one(
            format!("SELECT count(*) FROM \"{}\".vectors", schema.name).as_str(),
            &[],
        )
        .expect("count vectors")
        .get(0);
    (seq, count)
}

/// Writes over one vector of the replica's ledger with a vector of the wrong length, as a
/// damaged disk or a hand edit might.
fn damage_one_vector(store: &Path) {
    let ledger = rusqlite::Connection::open(store.join("ledger.sqlite")).expect("open ledger");
    let changed = ledger
        .execute(
            "UPDATE vectors SET vector = x'00000000' WHERE chunk_id = (SELECT min(chunk_id) FROM vectors)",
            [],
        )
        .expect("damage a vector");
    assert_eq!(changed, 1);
}

#[test]
fn commands_on_a_replica_never_move_its_vector_position() {
    let Some(schema) = TestSchema::new("replica_writes") else {
        return;
    };
    let env = Env::sample();
    let model = EmbedServer::start(Vectors::Words);
    let flags = model.flags("words");
    let mut ingest: Vec<&str> = vec!["ingest", env.docs.to_str().expect("utf-8"), "--json"];
    ingest.extend(flags.iter().map(String::as_str));
    let writer = env.tmp.path().join("writer");
    let reader = env.tmp.path().join("reader");
    json(&writer, Some(&schema), &ingest);
    json(&reader, Some(&schema), &["sync", "--json"]);
    let (shared_seq, shared_count) = shared_vectors(&schema);
    assert!(shared_count > 0, "the writer embedded the sample");
    assert_eq!(replica_vectors(&reader), (shared_seq, shared_count));

    // A rebuild of the replica's index (with or without its shared ledger) finds a damaged
    // vector: it leaves it out of the vector index, and the replica's ledger alone.
    damage_one_vector(&reader);
    for shared in [None, Some(&schema)] {
        let rebuilt = run(&reader, shared, &["rebuild", "--json"]);
        assert_success(&rebuilt, &["rebuild"]);
        assert_eq!(
            replica_vectors(&reader),
            (shared_seq, shared_count),
            "rebuild (shared ledger given: {}) wrote the replica's vectors: {}",
            shared.is_some(),
            String::from_utf8_lossy(&rebuilt.stderr)
        );
    }

    // Embedding into the replica without its shared ledger is refused: the vectors would be
    // the replica's alone, at a position of its own.
    let mut embed: Vec<&str> = vec!["embed", "--json"];
    embed.extend(flags.iter().map(String::as_str));
    let refused = run(&reader, None, &embed);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "embed into a replica without its ledger: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--ledger"),
        "the refusal says what to pass: {stderr}"
    );
    assert_eq!(replica_vectors(&reader), (shared_seq, shared_count));

    // The next page of shared vectors reaches the replica: nothing was skipped.
    env.write(
        "new/vectors.md",
        "# Vector page\n\nA new passage about rotating vectors in place.\n",
    );
    json(&writer, Some(&schema), &ingest);
    let (seq_after, count_after) = shared_vectors(&schema);
    assert!(
        count_after > shared_count,
        "the writer embedded the new passage"
    );
    json(&reader, Some(&schema), &["sync", "--json"]);
    assert_eq!(replica_vectors(&reader), (seq_after, count_after));

    // A new replica whose first sync copies a damaged vector from the shared ledger keeps it
    // (out of its vector index), at the shared position.
    client(&schema.url)
        .execute(
            format!(
                "UPDATE \"{0}\".vectors SET vector = '\\x00000000'::bytea
                 WHERE chunk_id = (SELECT chunk_id FROM \"{0}\".vectors
                                   ORDER BY chunk_id LIMIT 1)",
                schema.name
            )
            .as_str(),
            &[],
        )
        .expect("damage a shared vector");
    let fresh = env.tmp.path().join("fresh");
    json(&fresh, Some(&schema), &["sync", "--json"]);
    assert_eq!(replica_vectors(&fresh), shared_vectors(&schema));
}
