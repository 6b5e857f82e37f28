//! The shared PostgreSQL ledger (`--ledger`): migrations, ingest from several hosts under the
//! lease, every host's replica equal to a clean ingest, a kill at every shared crash point
//! healed, the lease's fence, and keys, audit, usage and the rate limit held across hosts.
//!
//! Each test has a PostgreSQL schema of its own in the database `.ci/run` starts
//! (`support::pg`); without one the tests fail under CI and skip elsewhere.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use groundidx::ledger::postgres::PG_SCHEMA_VERSION;
use serde_json::Value;

use crate::crash::assert_crashed_at;
use crate::support::http::Server;
use crate::support::pg::{Host, SharedFixture, TestSchema, client, count};
use crate::support::{BIN, Env, assert_success, index_files, isolate, wait_paused};

/// Crash points on the shared ledger's paths: a writer's (lease, publish) and a replica's
/// (fetch, replica, bootstrap, progress).
pub const SHARED_POINTS: &[&str] = &[
    "lease.after_take",
    "shared.before_commit",
    "lease.before_release",
    "replica.after_fetch",
    "replica.before_commit",
    "replica.after_commit",
    "replica.before_progress",
    "bootstrap.before_commit",
    "bootstrap.after_commit",
    "spool.after_forward",
];

/// Edits of every kind to the sample documents: a change, a deletion, a rename, new files.
fn edit(env: &Env) {
    let key_rotation = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&key_rotation).expect("read");
    std::fs::write(&key_rotation, text.replace("90 days", "30 days")).expect("edit");
    std::fs::remove_file(env.docs.join("handbook/backups.md")).expect("delete");
    std::fs::rename(env.docs.join("notes/faq.md"), env.docs.join("faq.md")).expect("rename");
    for i in 0..7 {
        env.write(
            &format!("new/page-{i}.md"),
            &format!("# Page {i}\n\nNew page {i} about topic {i}.\n\n## Details\n\nMore on {i}.\n"),
        );
    }
}

/// A shared ledger an older groundidx wrote (chunk IDs of whitespace-folded text, the first
/// variant stored): its writer's next ingest chunks every document again, and every replica,
/// one made from the older state included, converges to a clean ingest, text and all.
#[test]
fn replicas_converge_after_a_writer_chunks_an_older_shared_ledger_again() {
    let Some(f) = SharedFixture::empty("older_chunks") else {
        return;
    };
    let indented = "```python\ndef rotate(key):\n    return key.renew()\n```";
    let unindented = "```python\ndef rotate(key):\nreturn key.renew()\n```";
    f.write("rotation.md", &format!("# Rotation\n\n{indented}\n"));
    f.write("other.md", "# Other\n\nA page that does not change.\n");
    let [writer, replica] = f.ingested(["writer", "replica"]);
    // The older groundidx's rows, in the shared ledger and in its writer's replica.
    crate::served_text::make_ledger_older(
        &writer.store.join("ledger.sqlite"),
        indented,
        unindented,
    );
    let mut shared = client(&f.schema.url);
    let rows = shared
        .query(
            format!(
                "SELECT chunk_id, heading, text FROM \"{}\".chunks",
                f.schema.name
            )
            .as_str(),
            &[],
        )
        .expect("read the shared chunks");
    for row in rows {
        let (id, heading, text): (Vec<u8>, String, String) = (row.get(0), row.get(1), row.get(2));
        let heading_path: Vec<String> = serde_json::from_str(&heading).expect("heading JSON");
        let old_id = crate::served_text::chunk_id_v1(&heading_path, &text).to_vec();
        let old_text = if text == indented {
            unindented
        } else {
            text.as_str()
        };
        let name = &f.schema.name;
        shared
            .execute(
                format!(
                    "UPDATE \"{name}\".chunks SET chunk_id = $2, text = $3 WHERE chunk_id = $1"
                )
                .as_str(),
                &[&id, &old_id, &old_text],
            )
            .expect("rewrite a shared chunk");
        shared
            .execute(
                format!("UPDATE \"{name}\".doc_chunks SET chunk_id = $2 WHERE chunk_id = $1")
                    .as_str(),
                &[&id, &old_id],
            )
            .expect("rewrite a shared chunk");
    }
    drop(shared);
    // A replica made now copies the older rows.
    replica.sync();
    assert!(
        replica
            .export()
            .values()
            .any(|chunk| chunk.text == unindented),
        "the replica did not copy the older state"
    );

    let report = writer.ingest(&f.env.docs);
    assert_eq!(report["documents"]["rechunked"], 2, "{report}");
    assert_eq!(report["chunks"]["added"], 2, "{report}");
    assert_eq!(report["chunks"]["removed"], 2, "{report}");
    replica.sync();
    f.assert_all_equal_clean(&[&writer, &replica]);
}

/// What an older chunking recipe left: no chunk for a file of a heading alone, and every
/// document recorded as chunked by recipe 0. In the shared ledger's SQL; `OLDER_RECIPE_SQLITE`
/// is the same for a store, whose `doc_chunks` is a view of links by row number.
const OLDER_RECIPE: &str = "
DELETE FROM chunks WHERE chunk_id IN (SELECT dc.chunk_id FROM doc_chunks dc
    JOIN sources s ON s.doc_hash = dc.doc_hash WHERE s.path = 'dlq.md');
DELETE FROM doc_chunks WHERE doc_hash IN (SELECT doc_hash FROM sources WHERE path = 'dlq.md');
UPDATE documents SET n_chunks = 0
    WHERE doc_hash IN (SELECT doc_hash FROM sources WHERE path = 'dlq.md');
UPDATE documents SET recipe_version = 0;
";
const OLDER_RECIPE_SQLITE: &str = "
DELETE FROM chunks WHERE chunk_row IN (SELECT l.chunk_row FROM doc_chunk_links l
    JOIN documents d ON d.doc_row = l.doc_row
    JOIN sources s ON s.doc_hash = d.doc_hash WHERE s.path = 'dlq.md');
DELETE FROM doc_chunk_links WHERE doc_row IN (SELECT d.doc_row FROM documents d
    JOIN sources s ON s.doc_hash = d.doc_hash WHERE s.path = 'dlq.md');
UPDATE documents SET n_chunks = 0
    WHERE doc_hash IN (SELECT doc_hash FROM sources WHERE path = 'dlq.md');
UPDATE documents SET recipe_version = 0;
";

/// A shared ledger and a writer's replica that an older chunking recipe made: the writer's next
/// ingest reads its files past the stat cache, chunks them again and publishes them with its
/// recipe's version, and every replica, one made from the older state included, converges to
/// a clean ingest.
#[test]
fn a_writer_chunks_again_what_an_older_recipe_published() {
    let Some(f) = SharedFixture::empty("older_recipe") else {
        return;
    };
    f.write("dlq.md", "# Dead letter queues\n");
    f.write("other.md", "# Other\n\nA page that does not change.\n");
    let [writer, replica] = f.ingested(["writer", "replica"]);
    let own = rusqlite::Connection::open(writer.store.join("ledger.sqlite")).expect("open");
    // Stats recorded an hour after the files were written: the stat cache vouches for both.
    own.execute_batch(&format!(
        "{OLDER_RECIPE_SQLITE} UPDATE sources SET recorded_ns = recorded_ns + 3600000000000;"
    ))
    .expect("make the writer's replica older");
    drop(own);
    client(&f.schema.url)
        .batch_execute(&format!(
            "SET search_path TO \"{}\"; {OLDER_RECIPE}",
            f.schema.name
        ))
        .expect("make the shared ledger older");
    replica.sync();
    assert!(
        replica
            .export()
            .values()
            .all(|chunk| chunk.paths != ["dlq.md"]),
        "the replica did not copy the older state"
    );

    let report = writer.ingest(&f.env.docs);
    assert_eq!(report["documents"]["rechunked"], 2, "{report}");
    assert_eq!(report["chunks"]["added"], 1, "{report}");
    let current = groundidx::chunk::CHUNKER_VERSION;
    assert_eq!(
        count(
            &f.schema.url,
            &f.schema.name,
            &format!("documents WHERE recipe_version = {current}")
        ),
        2,
        "the shared ledger records the recipe"
    );
    replica.sync();
    f.assert_all_equal_clean(&[&writer, &replica]);
    let copied: i64 = rusqlite::Connection::open(replica.store.join("ledger.sqlite"))
        .expect("open")
        .query_row(
            "SELECT count(*) FROM documents WHERE recipe_version = ?1",
            [current],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(copied, 2, "the replica copies the recipe");
    let again = writer.ingest(&f.env.docs);
    assert_eq!(again["documents"]["rechunked"], 0, "{again}");
}

#[test]
fn migrate_creates_the_schema_once_and_refuses_what_is_not_its_own() {
    let Some(f) = SharedFixture::empty("migrate") else {
        return;
    };
    let host = f.host("a");
    let check = host.run(&["migrate", "--check", "--json"]);
    assert_eq!(
        check.status.code(),
        Some(1),
        "an upgrade is due on a new schema"
    );
    let first = host.json(&["migrate", "--json"]);
    assert_eq!(
        (first["from"].as_i64(), first["to"].as_i64()),
        (Some(0), Some(PG_SCHEMA_VERSION))
    );
    let again = host.json(&["migrate", "--json"]);
    assert_eq!(again["from"], again["to"], "{again}");
    assert_success(&host.run(&["migrate", "--check"]), &["migrate", "--check"]);
    assert_eq!(f.count("schema_migrations"), PG_SCHEMA_VERSION);

    // A version from a newer groundidx is refused by every command, and left as it is.
    client(&f.schema.url)
        .batch_execute(&format!(
            "INSERT INTO \"{}\".schema_migrations (version, name) VALUES (99, 'future')",
            f.schema.name
        ))
        .expect("pretend a newer version");
    for args in [vec!["migrate"], vec!["sync"]] {
        let output = host.run(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("schema version 99"),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    // A schema of another program is never touched.
    let Some(foreign) = TestSchema::new("foreign") else {
        return;
    };
    client(&foreign.url)
        .batch_execute(&format!(
            "CREATE SCHEMA \"{0}\"; CREATE TABLE \"{0}\".orders (id int); INSERT INTO \"{0}\".orders VALUES (7);",
            foreign.name
        ))
        .expect("a foreign schema");
    let other = Host::new(&f.env, "b", &foreign);
    let output = other.run(&["migrate"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("another program"));
    assert_eq!(count(&foreign.url, &foreign.name, "orders"), 1);
    let tables: i64 = client(&foreign.url)
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&foreign.name],
        )
        .expect("count tables")
        .get(0);
    assert_eq!(tables, 1, "nothing was added to the foreign schema");
}

#[test]
fn hosts_migrating_at_once_apply_each_migration_once() {
    let Some(f) = SharedFixture::empty("migrate_race") else {
        return;
    };
    let hosts: Vec<Host<'_>> = (0..4).map(|i| f.host(&format!("h{i}"))).collect();
    let children: Vec<_> = hosts
        .iter()
        .map(|host| {
            host.command(&["migrate", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn migrate")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("wait");
        assert_success(&output, &["migrate"]);
    }
    assert_eq!(f.count("schema_migrations"), PG_SCHEMA_VERSION);
    assert_eq!(f.count("ledger_meta"), 1);
}

#[test]
fn a_second_ingest_writes_nothing_to_the_shared_ledger() {
    let Some(f) = SharedFixture::sample("reingest") else {
        return;
    };
    let host = f.host("a");
    let first = host.ingest(&f.env.docs);
    assert!(first["chunks"]["added"].as_u64() > Some(0));
    let before = f.counters();
    let log_rows = f.count("chunk_log");
    let replica = f.host("replica");
    replica.sync();
    let (writer_index, replica_index) = (index_files(&host.store), index_files(&replica.store));
    let again = host.ingest(&f.env.docs);
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
    assert_eq!(f.counters(), before, "the counters did not move");
    assert_eq!(f.count("chunk_log"), log_rows);
    // No Tantivy segment either, on the writer or on a replica that syncs again.
    assert_eq!(replica.sync()["mirror"], "in_step");
    assert_eq!(
        index_files(&host.store),
        writer_index,
        "the writer's index was written"
    );
    assert_eq!(
        index_files(&replica.store),
        replica_index,
        "the replica's index was written"
    );
    // A second host ingesting the same folder (same root) finds everything in place too.
    let other = f.host("b");
    let theirs = other.ingest(&f.env.docs);
    assert_eq!(theirs["chunks"]["added"], 0, "{theirs}");
    assert_eq!(f.counters(), before);
    f.assert_all_equal_clean(&[&host, &other]);
}

#[test]
fn every_replica_holds_what_a_clean_ingest_holds() {
    let Some(f) = SharedFixture::sample("replicas") else {
        return;
    };
    let [writer, early] = f.ingested(["writer", "early"]);
    assert_eq!(early.sync()["mirror"], "bootstrapped");
    edit(&f.env);
    let report = writer.json(&[
        "ingest",
        f.env.docs.to_str().expect("utf-8"),
        "--json",
        "--batch-files",
        "3",
    ]);
    assert!(report["chunks"]["removed"].as_u64() > Some(0), "{report}");
    assert_eq!(early.sync()["mirror"], "pulled");
    assert_eq!(early.sync()["mirror"], "in_step");
    let late = f.host("late");
    assert_eq!(late.sync()["mirror"], "bootstrapped");
    f.assert_all_equal_clean(&[&writer, &early, &late]);
    // The answers name the shared generation on every host.
    let generation = f.counters().0;
    for host in [&writer, &early, &late] {
        let answer = host.json(&["search", "rotate the signing key", "--json"]);
        assert_eq!(answer["generation"].as_i64(), Some(generation), "{answer}");
    }
    // A store of its own is never turned into a replica, and a replica never ingests alone.
    let own = Env::sample();
    own.ingest();
    let foreign_store = Host {
        store: own.store.clone(),
        schema: &f.schema,
    };
    let refused = foreign_store.run(&["sync"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("ledger of its own"));
    let mut alone = Command::new(BIN);
    isolate(&mut alone);
    let alone = alone
        .arg("--store")
        .arg(&early.store)
        .args(["ingest", f.env.docs.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert_eq!(alone.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("replica of a shared ledger"));
}

/// Runs `host ARGS` with `point` armed and asserts it died there.
fn crash(host: &Host<'_>, args: &[&str], point: &str) {
    let output = host
        .command(args)
        .env(groundidx::crash::CRASH_ENV, point)
        .output()
        .expect("run");
    assert_crashed_at(&output, point);
}

#[test]
fn a_writer_killed_at_any_point_leaves_one_copy_of_every_chunk() {
    let writer_points = [
        "lease.after_take",
        "shared.before_commit",
        "ledger.before_commit",
        "store.after_ledger_commit",
        "ingest.between_batches:2",
        "ingest.before_finish_run",
        "lease.before_release",
    ];
    for point in writer_points {
        let Some(f) = SharedFixture::sample("writer_kill") else {
            return;
        };
        let [writer, reader] = f.ingested(["writer", "reader"]);
        reader.sync();
        edit(&f.env);
        let docs = f.env.docs.to_str().expect("utf-8");
        crash(&writer, &["ingest", docs, "--batch-files", "3"], point);
        // The killed writer's lease lasts 1 s; the next run waits it out and heals.
        writer.ingest(&f.env.docs);
        reader.sync();
        f.assert_all_equal_clean(&[&writer, &reader]);
    }
}

#[test]
fn a_replica_killed_at_any_point_heals_at_its_next_sync() {
    for point in SHARED_POINTS
        .iter()
        .filter(|p| p.starts_with("replica.") || p.starts_with("bootstrap."))
    {
        let Some(f) = SharedFixture::sample("replica_kill") else {
            return;
        };
        let [writer, reader] = f.ingested(["writer", "reader"]);
        if point.starts_with("replica.") {
            reader.sync();
            edit(&f.env);
            writer.ingest(&f.env.docs);
        }
        crash(&reader, &["sync"], point);
        reader.sync();
        // Once more over the same range: nothing changes.
        reader.sync();
        f.assert_all_equal_clean(&[&writer, &reader]);
    }
}

#[test]
fn a_writer_killed_mid_batch_on_one_host_is_healed_by_another() {
    let Some(f) = SharedFixture::sample("takeover") else {
        return;
    };
    let [a, b] = f.ingested(["a", "b"]);
    edit(&f.env);
    // Host A publishes its first batch and is killed before its replica commits it.
    let pauses = f.env.tmp.path().join("pauses");
    std::fs::create_dir_all(&pauses).expect("pause folder");
    let docs = f.env.docs.to_str().expect("utf-8");
    let mut held = a
        .command(&["ingest", docs, "--batch-files", "3"])
        .env(
            groundidx::crash::PAUSE_ENV,
            format!("ledger.before_commit@{}", pauses.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ingest");
    wait_paused(&pauses, &mut held);
    held.kill().expect("kill -9");
    held.wait().expect("reap");
    // Host B waits out the lease (1 s), takes it at the next epoch, and finishes the job.
    let epoch_before: i64 = client(&f.schema.url)
        .query_one(
            format!("SELECT epoch FROM \"{}\".writer_lease", f.schema.name).as_str(),
            &[],
        )
        .expect("lease")
        .get(0);
    b.ingest(&f.env.docs);
    let epoch_after: i64 = client(&f.schema.url)
        .query_one(
            format!("SELECT epoch FROM \"{}\".writer_lease", f.schema.name).as_str(),
            &[],
        )
        .expect("lease")
        .get(0);
    assert!(epoch_after > epoch_before);
    // Host A's replica lacks its own last batch; its next sync brings it.
    a.sync();
    f.assert_all_equal_clean(&[&a, &b]);
}

#[test]
fn the_lease_fences_a_writer_that_lost_it() {
    use groundidx::ledger::postgres::{PgLedger, PgOptions};
    let Some(f) = SharedFixture::sample("fence") else {
        return;
    };
    let ledger = PgLedger::open(
        &PgOptions {
            url: f.schema.url.clone(),
            schema: f.schema.name.clone(),
            max_connections: 2,
            ca_file: None,
        },
        true,
    )
    .expect("open");
    let first = ledger.take_lease("a", 1).expect("take").expect("free");
    assert!(
        ledger.take_lease("b", 1).expect("take").is_none(),
        "held until it expires"
    );
    std::thread::sleep(Duration::from_millis(1_200));
    let second = ledger.take_lease("b", 30).expect("take").expect("expired");
    assert!(second.epoch > first.epoch);
    let run = groundidx::ledger::RunRow {
        run_id: "r".into(),
        roots: "[]".into(),
        started_at: 0,
        finished_at: None,
        generation: None,
        report: None,
    };
    let lost = ledger
        .publish_run(first.epoch, "a", &run)
        .expect_err("fenced");
    assert!(matches!(lost, groundidx::Error::LeaseLost { .. }), "{lost}");
    let lost = ledger
        .publish(first.epoch, 0, &groundidx::ledger::ChangeSet::default())
        .expect_err("fenced");
    assert!(matches!(lost, groundidx::Error::LeaseLost { .. }), "{lost}");
    assert!(!ledger.renew_lease(&first, 30).expect("renew"));
    assert!(ledger.renew_lease(&second, 30).expect("renew"));
    ledger
        .publish_run(second.epoch, "b", &run)
        .expect("the holder writes");
    // A lease held by a live writer makes another wait, then exit 75 naming the holder.
    let host = f.host("c");
    let busy = host.run(&["ingest", f.env.docs.to_str().expect("utf-8"), "--no-wait"]);
    assert_eq!(busy.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("holds the shared ledger's lease"));
    ledger.release_lease(&second).expect("release");
    host.ingest(&f.env.docs);
}

#[test]
fn the_same_key_sent_to_two_hosts_at_once_is_recorded_once() {
    let Some(f) = SharedFixture::sample("same_key") else {
        return;
    };
    f.ingested(["writer"]);
    let a = std::sync::Arc::new(f.serve("a", &[], &[]));
    let b = std::sync::Arc::new(f.serve("b", &[], &[]));
    let body = r#"{"query": "rotate the signing key", "top_k": 3}"#;
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let server = if i % 2 == 0 { a.clone() } else { b.clone() };
            std::thread::spawn(move || {
                server.post(
                    "/v1/tools/search_docs",
                    &[("Idempotency-Key", "run-7/step-3")],
                    body,
                )
            })
        })
        .collect();
    let replies: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.body, replies[0].body,
            "every host answers the same bytes"
        );
    }
    assert_eq!(f.count("idempotency_keys"), 1);
    assert_eq!(f.count("audit_events"), 1);
    assert_eq!(f.count("usage_events"), 1);
    // The same key with other arguments is refused on either host.
    for server in [&a, &b] {
        let reply = server.post(
            "/v1/tools/search_docs",
            &[("Idempotency-Key", "run-7/step-3")],
            r#"{"query": "something else"}"#,
        );
        assert_eq!(reply.status, 422, "{}", reply.body);
    }
    assert_eq!(f.count("audit_events"), 1);
}

#[test]
fn one_rate_limit_holds_across_hosts() {
    let Some(f) = SharedFixture::sample("limit") else {
        return;
    };
    f.ingested(["writer"]);
    let frozen = [("GROUNDIDX_FAKE_NOW_MS", "1800000000000")];
    let limit = ["--rate-limit", "10/60s"];
    let hosts = [
        f.serve("a", &limit, &frozen),
        f.serve("b", &limit, &frozen),
        f.serve("c", &limit, &frozen),
    ];
    let mut ok = 0;
    let mut limited = 0;
    for i in 0..30 {
        let key = format!("k-{i}");
        let reply = hosts[i % 3].post(
            "/v1/tools/search_docs",
            &[("Idempotency-Key", key.as_str())],
            r#"{"query": "backups"}"#,
        );
        match reply.status {
            200 => ok += 1,
            429 => {
                assert!(reply.header("Retry-After").is_some());
                limited += 1;
            }
            other => panic!("status {other}: {}", reply.body),
        }
    }
    assert_eq!((ok, limited), (10, 20));
    assert_eq!(f.count("usage_events"), 10);
    assert_eq!(f.count("audit_events"), 10);
}

#[test]
fn a_server_picks_up_what_another_host_ingests() {
    let Some(f) = SharedFixture::sample("pickup") else {
        return;
    };
    let [writer] = f.ingested(["writer"]);
    let server = f.serve("server", &[], &[]);
    f.write(
        "narwhal.md",
        "# Narwhal\n\nThe narwhal pipeline rotates tusks nightly.\n",
    );
    writer.ingest(&f.env.docs);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reply = server.post(
            "/v1/tools/search_docs",
            &[],
            r#"{"query": "narwhal tusks"}"#,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer: Value = serde_json::from_str(&reply.body).expect("JSON");
        if answer["hits"][0]["paths"][0] == "narwhal.md" {
            assert_eq!(answer["generation"].as_i64(), Some(f.counters().0));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never saw the new document: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_server_without_its_ledger_refuses_keyed_calls_and_spools_the_rest() {
    let Some(cluster) = crate::support::pg::Cluster::start() else {
        return;
    };
    let f = SharedFixture {
        env: Env::sample(),
        schema: TestSchema {
            url: cluster.url.clone(),
            name: "groundidx".into(),
        },
    };
    f.ingested(["writer"]);
    let server = f.serve("server", &[], &[]);
    let search = r#"{"query": "rotate the signing key"}"#;
    let key = |k: &'static str| [("Idempotency-Key", k)];
    assert_eq!(
        server
            .post("/v1/tools/search_docs", &key("before"), search)
            .status,
        200
    );

    cluster.stop();
    // A keyed call cannot be recorded, so it is refused: never an answer without its row.
    let refused = server.post("/v1/tools/search_docs", &key("during"), search);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("unavailable"), "{}", refused.body);
    // An unkeyed call is answered from the replica, flagged, and spooled on this host.
    let answered = server.post("/v1/tools/search_docs", &[], search);
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.header("groundidx-read-only"), Some("1"));
    let spooled_key = answered
        .header("Idempotency-Key")
        .expect("the server's key")
        .to_string();
    let health = server.get("/health");
    assert_eq!(health.status, 200, "{}", health.body);
    let health: Value = serde_json::from_str(&health.body).expect("JSON");
    assert_eq!(health["status"], "read_only", "{health}");
    let metrics = server.get("/metrics").body;
    assert!(
        metrics.contains("groundidx_ledger_reachable 0"),
        "{metrics}"
    );
    assert!(metrics.contains("groundidx_spooled_calls 1"), "{metrics}");
    assert_eq!(health["ledger"]["reachable"], false, "{health}");
    // Refused at once while read-only, not after a retry budget.
    let started = std::time::Instant::now();
    assert_eq!(
        server
            .post("/v1/tools/search_docs", &key("during"), search)
            .status,
        503
    );
    assert!(started.elapsed() < Duration::from_millis(1_500));

    cluster.resume();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let reply = loop {
        let reply = server.post("/v1/tools/search_docs", &key("during"), search);
        if reply.status == 200 || std::time::Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.header("Idempotent-Replayed"),
        None,
        "executed, not replayed"
    );
    assert_eq!(reply.header("groundidx-read-only"), None);
    // The answered calls are recorded once each, the spooled one forwarded by the next sync.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let keys: Vec<String> = client(&cluster.url)
            .query(
                "SELECT key FROM groundidx.audit_events ORDER BY event_id",
                &[],
            )
            .expect("audit rows")
            .iter()
            .map(|row| row.get(0))
            .collect();
        if keys.len() == 3 {
            let mut keys = keys;
            keys.sort();
            let mut expected = vec!["before".to_string(), "during".into(), spooled_key.clone()];
            expected.sort();
            assert_eq!(keys, expected);
            break;
        }
        assert!(keys.len() < 3, "{keys:?}");
        assert!(
            std::time::Instant::now() < deadline,
            "the spooled call never reached the shared ledger: {keys:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(count(&cluster.url, "groundidx", "usage_events"), 3);
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn a_spooled_call_forwarded_twice_is_recorded_once() {
    let Some(cluster) = crate::support::pg::Cluster::start() else {
        return;
    };
    let f = SharedFixture {
        env: Env::sample(),
        schema: TestSchema {
            url: cluster.url.clone(),
            name: "groundidx".into(),
        },
    };
    f.ingested(["writer"]);
    // A frozen clock keeps every call in one rate-limit window.
    let frozen = [("GROUNDIDX_FAKE_NOW_MS", "1800000000000")];
    let limit = ["--rate-limit", "2/60s"];
    let server = f.serve("server", &limit, &frozen);
    cluster.stop();
    let answered = server.post("/v1/tools/search_docs", &[], r#"{"query": "backups"}"#);
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.header("groundidx-read-only"), Some("1"));
    drop(server);
    cluster.resume();
    // Killed after the shared ledger took the spool, before the spool was emptied: forwarded
    // again by the next sync, and still one row.
    let host = f.host("server");
    crash(&host, &["sync"], "spool.after_forward");
    host.sync();
    host.sync();
    assert_eq!(
        count(
            &cluster.url,
            "groundidx",
            "audit_events WHERE key_source = 'server'"
        ),
        1
    );
    assert_eq!(count(&cluster.url, "groundidx", "usage_events"), 1);
    let spool: i64 = rusqlite::Connection::open(host.store.join("ledger.sqlite"))
        .expect("open the replica")
        .query_row("SELECT count(*) FROM audit_events", [], |row| row.get(0))
        .expect("count the spool");
    assert_eq!(spool, 0, "the spool is empty once forwarded");
    // The forwarded unit counts in the shared rate limit too (once): of 2 units, 1 is left.
    let other = f.serve("other", &limit, &frozen);
    let statuses: Vec<u16> = ["after-1", "after-2"]
        .iter()
        .map(|key| {
            other
                .post(
                    "/v1/tools/search_docs",
                    &[("Idempotency-Key", key)],
                    r#"{"query": "backups"}"#,
                )
                .status
        })
        .collect();
    assert_eq!(statuses, [200, 429], "the spooled call was not counted");
}

#[test]
fn a_replica_the_log_no_longer_reaches_copies_a_snapshot() {
    let Some(f) = SharedFixture::sample("far_behind") else {
        return;
    };
    let [writer, away] = f.ingested(["writer", "away"]);
    away.sync();
    edit(&f.env);
    writer.ingest(&f.env.docs);
    // The writer's close kept the log for the registered replica.
    assert_eq!(away.sync()["mirror"], "pulled");
    f.write("later.md", "# Later\n\nWritten while a replica was away.\n");
    writer.ingest(&f.env.docs);
    let (_, head) = f.counters();
    // Silent past the retention: marked stale, and the log goes past it.
    let gc = writer.json(&["gc", "--log-retention", "0s", "--json"]);
    assert_eq!(gc["log_floor"].as_i64(), Some(head), "{gc}");
    let state = |host: &Host<'_>| -> String {
        client(&f.schema.url)
            .query_one(
                format!(
                    "SELECT state FROM \"{}\".consumers WHERE store_dir = $1",
                    f.schema.name
                )
                .as_str(),
                &[&host.store.display().to_string()],
            )
            .expect("the consumer row")
            .get(0)
    };
    assert_eq!(state(&away), "stale");
    assert_eq!(f.count("chunk_log"), 0);
    assert_eq!(away.sync()["mirror"], "bootstrapped");
    assert_eq!(state(&away), "active");
    f.assert_all_equal_clean(&[&writer, &away]);
}

#[test]
fn every_passage_is_embedded_once_whichever_host_runs_the_model() {
    use crate::support::embed_server::{EmbedServer, Vectors};
    let Some(f) = SharedFixture::sample("embed") else {
        return;
    };
    let model = EmbedServer::start(Vectors::Words);
    let flags = model.flags("words");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let docs = f.env.docs.to_str().expect("utf-8");
    let ingest = |host: &Host<'_>| -> Value {
        let mut args = vec!["ingest", docs, "--json", "--wait", "30"];
        args.extend_from_slice(&flags);
        host.json(&args)
    };
    let [a, b, reader] = f.hosts(["a", "b", "reader"]);
    let first = ingest(&a);
    assert!(first["embedding"]["embedded"].as_u64() > Some(0), "{first}");
    let given = model.inputs();
    // Host B ingests the same folder with the same model: every vector is already shared.
    let second = ingest(&b);
    assert_eq!(second["embedding"]["embedded"], 0, "{second}");
    assert_eq!(
        model.inputs(),
        given + 1,
        "no passage was given to the model twice (host B sent only the probe)"
    );
    // A host that only reads gets the vectors with the replica, and searches by meaning.
    reader.sync();
    let mut search = vec![
        "search",
        "rotate the signing key",
        "--json",
        "--mode",
        "semantic",
    ];
    search.extend_from_slice(&flags);
    let answer = reader.json(&search);
    assert_eq!(answer["mode"], "semantic", "{answer}");
    assert!(
        !answer["hits"].as_array().expect("hits").is_empty(),
        "{answer}"
    );
    // An edit embeds only its new passages, once, and reaches every replica.
    edit(&f.env);
    let before = model.inputs();
    let third = ingest(&b);
    let new_chunks = third["chunks"]["added"].as_u64().expect("added");
    assert_eq!(
        third["embedding"]["embedded"].as_u64(),
        Some(new_chunks),
        "{third}"
    );
    // The new passages and the model's one dimension probe.
    assert_eq!(model.inputs() - before, new_chunks + 1);
    let passages: Vec<String> = model
        .texts
        .lock()
        .expect("texts")
        .iter()
        .filter(|text| !["dimension probe", "rotate the signing key"].contains(&text.as_str()))
        .cloned()
        .collect();
    let distinct: std::collections::HashSet<&String> = passages.iter().collect();
    assert_eq!(
        distinct.len(),
        passages.len(),
        "a passage was embedded twice"
    );
    assert_eq!(
        f.count("vectors") as usize,
        passages.len(),
        "one shared vector per passage ever embedded"
    );
    a.sync();
    reader.sync();
    f.assert_all_equal_clean(&[&a, &b, &reader]);
    for host in [&a, &b, &reader] {
        let report = host.json(&["verify", "--json"]);
        assert_eq!(report["vectors"]["identical"], true, "{report}");
    }
    let chunks = f.count("chunks");
    assert_eq!(
        count(
            &f.schema.url,
            &f.schema.name,
            &format!(
                "vectors WHERE chunk_id IN (SELECT chunk_id FROM \"{}\".chunks)",
                f.schema.name
            )
        ),
        chunks,
        "one vector per chunk the shared ledger holds"
    );
}

#[test]
fn a_writer_killed_while_embedding_loses_no_shared_vector() {
    use crate::support::embed_server::{EmbedServer, Vectors};
    for point in ["embed.before_commit", "embed.after_commit"] {
        let Some(f) = SharedFixture::sample("embed_kill") else {
            return;
        };
        let model = EmbedServer::start(Vectors::Words);
        let mut args: Vec<String> =
            vec!["ingest".into(), f.env.docs.to_str().expect("utf-8").into()];
        args.extend(model.flags("words"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let writer = f.host("writer");
        crash(&writer, &args, point);
        assert_success(&writer.run(&args), &args);
        let reader = f.host("reader");
        reader.sync();
        for host in [&writer, &reader] {
            let report = host.json(&["verify", "--json"]);
            assert_eq!(report["identical"], true, "{point}: {report}");
            assert_eq!(report["vectors"]["identical"], true, "{point}: {report}");
        }
        // The page the kill interrupted had reached the shared ledger: nothing was embedded
        // twice.
        let passages: Vec<String> = model
            .texts
            .lock()
            .expect("texts")
            .iter()
            .filter(|text| text.as_str() != "dimension probe")
            .cloned()
            .collect();
        let distinct: std::collections::HashSet<&String> = passages.iter().collect();
        assert_eq!(
            distinct.len(),
            passages.len(),
            "{point}: a passage embedded twice"
        );
    }
}

#[test]
fn the_shared_ledger_can_come_from_the_configuration_file() {
    let Some(f) = SharedFixture::sample("config_file") else {
        return;
    };
    let dir = f.env.tmp.path();
    std::fs::write(
        dir.join("groundidx.toml"),
        format!(
            "store = \"replica\"\nledger = \"{}\"\nledger_schema = \"{}\"\n",
            f.schema.url, f.schema.name
        ),
    )
    .expect("write groundidx.toml");
    let run = |args: &[&str]| -> Output {
        let mut command = Command::new(BIN);
        isolate(&mut command);
        command.current_dir(dir).args(args).output().expect("run")
    };
    let config = run(&["config", "--json"]);
    assert_success(&config, &["config"]);
    let config: Value = serde_json::from_slice(&config.stdout).expect("JSON");
    assert_eq!(config["settings"]["ledger"]["source"], "file", "{config}");
    assert_eq!(
        config["settings"]["ledger_schema"]["value"],
        f.schema.name.as_str()
    );
    let ingest = run(&["ingest", "docs", "--json"]);
    assert_success(&ingest, &["ingest"]);
    assert!(f.count("chunks") > 0);
    // A password never shows.
    std::fs::write(
        dir.join("groundidx.toml"),
        "ledger = \"postgres://app:s3cret@127.0.0.1:1/none\"\n",
    )
    .expect("write groundidx.toml");
    let shown = run(&["config"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("app:***@"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    let failed = run(&["sync"]);
    assert_eq!(
        failed.status.code(),
        Some(75),
        "an unreachable ledger is worth a retry"
    );
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
}

#[test]
fn keyed_calls_survive_a_failover_to_a_synchronous_standby() {
    let Some(primary) = crate::support::pg::Cluster::start() else {
        return;
    };
    let Some(standby) = crate::support::pg::Cluster::standby_of(&primary) else {
        return;
    };
    // Both servers in the URL; only the one that takes writes is used.
    let f = SharedFixture {
        env: Env::sample(),
        schema: TestSchema {
            url: format!(
                "postgresql://postgres@{},{}/postgres?target_session_attrs=read-write",
                primary.host(),
                standby.host()
            ),
            name: "groundidx".into(),
        },
    };
    f.ingested(["writer"]);
    let server = f.serve("server", &[], &[]);
    let search = r#"{"query": "rotate the signing key"}"#;
    let mut answered = Vec::new();
    for i in 0..5 {
        let key = format!("before-{i}");
        let reply = server.post(
            "/v1/tools/search_docs",
            &[("Idempotency-Key", &key)],
            search,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        answered.push(key);
    }
    primary.stop();
    standby.promote();
    // Calls during the switch may be refused (503, retry with the same key); once the standby
    // takes writes they are answered, and none is answered without its row.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let mut after = 0;
    let mut i = 0;
    while after < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer after the failover"
        );
        let key = format!("after-{i}");
        let reply = server.post(
            "/v1/tools/search_docs",
            &[("Idempotency-Key", &key)],
            search,
        );
        match reply.status {
            200 => {
                answered.push(key);
                after += 1;
                i += 1;
            }
            503 => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("status {other}: {}", reply.body),
        }
    }
    let mut keys: Vec<String> = client(&standby.url)
        .query("SELECT key FROM groundidx.audit_events", &[])
        .expect("audit rows on the new primary")
        .iter()
        .map(|row| row.get(0))
        .collect();
    keys.sort();
    answered.sort();
    assert_eq!(
        keys, answered,
        "every answered call, once, on the new primary"
    );
    // A retry of an answered key on the new primary replays it.
    let replay = server.post(
        "/v1/tools/search_docs",
        &[("Idempotency-Key", "before-0")],
        search,
    );
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
}

#[test]
fn a_ledger_behind_tls_is_reached_encrypted_and_checked_against_its_ca() {
    let Some((cluster, port, ca)) = crate::support::pg::Cluster::start_tls() else {
        return;
    };
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8");
    let run = |url: &str, store: &str, extra: &[&str]| -> Output {
        let mut command = Command::new(BIN);
        isolate(&mut command);
        command
            .arg("--store")
            .arg(env.tmp.path().join(store))
            .args(["--ledger", url])
            .args(extra)
            .args(["ingest", docs, "--json"])
            .output()
            .expect("run")
    };
    let tcp = format!("postgresql://postgres@127.0.0.1:{port}/postgres");
    // The server refuses plain connections: without TLS the ingest fails, saying why.
    let plain = run(&format!("{tcp}?sslmode=disable"), "plain", &[]);
    assert!(!plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("pg_hba.conf"), "{stderr}");
    // sslmode=require encrypts (without checking the certificate, as libpq does).
    assert_success(
        &run(&format!("{tcp}?sslmode=require"), "require", &[]),
        &["require"],
    );
    // With the CA, the certificate is checked, and TLS is required even under `prefer`.
    let ca = ca.to_str().expect("utf-8");
    assert_success(
        &run(&tcp, "verified", &["--ledger-ca", ca]),
        &["--ledger-ca"],
    );
    // A CA that did not sign the server's certificate is refused.
    let other = env.tmp.path().join("other-ca.crt");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-keyout"])
        .arg(env.tmp.path().join("other.key"))
        .arg("-out")
        .arg(&other)
        .args(["-days", "2", "-subj", "/CN=someone-else"])
        .output()
        .expect("openssl");
    assert!(made.status.success());
    let refused = run(
        &tcp,
        "refused",
        &["--ledger-ca", other.to_str().expect("utf-8")],
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    assert_eq!(
        count(
            &cluster.url,
            "groundidx",
            "runs WHERE finished_at IS NOT NULL"
        ),
        2
    );
}

#[test]
fn serve_reindex_and_ingest_watch_write_to_the_shared_ledger() {
    let Some(f) = SharedFixture::sample("reindex_watch") else {
        return;
    };
    let docs = f.env.docs.to_str().expect("utf-8");
    // A server that re-ingests every second, under the lease like any writer.
    let writer = f.serve("writer", &["--reindex", docs, "--every", "1s"], &[]);
    let reader = f.serve("reader", &[], &[]);
    let found = |server: &Server, query: &str, path: &str| -> bool {
        let body = serde_json::json!({ "query": query }).to_string();
        let reply = server.post("/v1/tools/search_docs", &[], &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer: Value = serde_json::from_str(&reply.body).expect("JSON");
        answer["hits"][0]["paths"][0] == path
    };
    let wait_for = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    f.write(
        "okapi.md",
        "# Okapi\n\nThe okapi relay drains queues at dawn.\n",
    );
    wait_for("the reindexed document on the other host", &|| {
        found(&reader, "okapi relay", "okapi.md")
    });
    drop(writer);
    // `ingest --watch` on a third host: a change is published as soon as it settles.
    let watcher_host = f.host("watcher");
    let mut watcher = watcher_host
        .command(&["ingest", docs, "--watch", "--settle", "1s", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ingest --watch");
    f.write(
        "quokka.md",
        "# Quokka\n\nThe quokka gateway retries twice.\n",
    );
    wait_for("the watched document on the other host", &|| {
        found(&reader, "quokka gateway", "quokka.md")
    });
    watcher.kill().expect("kill the watch");
    watcher.wait().expect("reap");
    watcher_host.sync();
    let reader_host = f.host("reader");
    reader_host.sync();
    f.assert_all_equal_clean(&[&watcher_host, &reader_host]);
}

#[test]
fn a_writer_frozen_inside_a_write_does_not_block_the_next_one_for_ever() {
    let Some(f) = SharedFixture::sample("frozen") else {
        return;
    };
    let [host] = f.ingested(["a"]);
    // A transaction that holds the counter row's lock and never ends, as a writer stopped
    // inside its publish would.
    let mut frozen = client(&f.schema.url);
    let mut tx = frozen.transaction().expect("begin");
    tx.query_one(
        format!(
            "SELECT writer_epoch FROM \"{}\".ledger_meta FOR UPDATE",
            f.schema.name
        )
        .as_str(),
        &[],
    )
    .expect("lock the counter row");
    let started = std::time::Instant::now();
    let busy = host.run(&["ingest", f.env.docs.to_str().expect("utf-8"), "--no-wait"]);
    assert_eq!(
        busy.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "--no-wait waited {:?}",
        started.elapsed()
    );
    tx.rollback().expect("rollback");
    host.ingest(&f.env.docs);
}

#[test]
fn hostile_metadata_and_settings_are_refused_or_survive_the_shared_ledger() {
    let Some(f) = SharedFixture::sample("hostile") else {
        return;
    };
    f.write(
        "nul.md",
        "---\ntitle: \"a\\0b\"\ntags: [\"t\\0g\"]\nowner: \"x\\0y\"\n---\n# Heading\n\nbody of the nul page\n",
    );
    let [host] = f.ingested(["a"]);
    f.assert_all_equal_clean(&[&host]);
    // A replica is never served without its shared ledger.
    let mut alone = Command::new(BIN);
    isolate(&mut alone);
    let alone = alone
        .arg("--store")
        .arg(&host.store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(alone.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("replica of a shared ledger"));
    // A database that does not exist is a usage error, not a retry.
    let missing = f.schema.url.replace("/groundidx_test", "/no_such_database");
    let mut wrong = Command::new(BIN);
    isolate(&mut wrong);
    let wrong = wrong
        .args(["--ledger", &missing, "migrate"])
        .output()
        .expect("run");
    assert_eq!(
        wrong.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    // Schema names: a reserved word works (quoted), PostgreSQL's own prefix is refused, and
    // another tool's `schema_migrations` is left alone.
    let reserved = TestSchema {
        url: f.schema.url.clone(),
        name: "select".into(),
    };
    let quoted = Host::new(&f.env, "b", &reserved);
    quoted.json(&["migrate", "--json"]);
    drop(reserved);
    let system = TestSchema {
        url: f.schema.url.clone(),
        name: "pg_groundidx".into(),
    };
    assert_eq!(
        Host::new(&f.env, "c", &system)
            .run(&["migrate"])
            .status
            .code(),
        Some(2)
    );
    let Some(other) = TestSchema::new("golang_migrate") else {
        return;
    };
    client(&other.url)
        .batch_execute(&format!(
            "CREATE SCHEMA \"{0}\"; CREATE TABLE \"{0}\".schema_migrations (version bigint, dirty bool);
             INSERT INTO \"{0}\".schema_migrations VALUES (1, false);",
            other.name
        ))
        .expect("another tool's migrations");
    let refused = Host::new(&f.env, "d", &other).run(&["migrate"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("another program"));
    assert_eq!(count(&other.url, &other.name, "schema_migrations"), 1);
}

#[test]
fn a_mirror_of_a_ledger_restored_from_a_backup_starts_over() {
    let Some(f) = SharedFixture::sample("restored") else {
        return;
    };
    let [writer, replica] = f.ingested(["writer", "replica"]);
    assert_eq!(replica.sync()["mirror"], "bootstrapped");
    assert_eq!(replica.sync()["mirror"], "in_step");
    // What a restore followed by other writes looks like to a replica: its position now holds
    // another batch (another token), though the ledger and the position are the same.
    client(&f.schema.url)
        .batch_execute(&format!(
            "UPDATE \"{0}\".log_tokens SET token = 'restored' WHERE seq = (SELECT log_seq FROM \"{0}\".ledger_meta);
             UPDATE \"{0}\".ledger_meta SET log_token = 'restored';",
            f.schema.name
        ))
        .expect("pretend a restore");
    assert_eq!(
        replica.sync()["mirror"],
        "bootstrapped",
        "not taken for in step"
    );
    assert_eq!(replica.sync()["mirror"], "in_step");
    // The writer's own replica starts over too, at its next run, and nothing is lost.
    edit(&f.env);
    writer.ingest(&f.env.docs);
    replica.sync();
    f.assert_all_equal_clean(&[&writer, &replica]);
}

#[test]
fn keys_expire_by_the_database_clock_and_a_late_retry_is_not_counted_again() {
    let Some(f) = SharedFixture::sample("key_gc") else {
        return;
    };
    f.ingested(["writer"]);
    const T0: &str = "1800000000000";
    const LATER: &str = "1800700000000"; // eight days on: past the 7-day key TTL
    let search = r#"{"query": "backups"}"#;
    let key = [("Idempotency-Key", "late-1")];
    {
        let server = f.serve("a", &[], &[("GROUNDIDX_FAKE_NOW_MS", T0)]);
        assert_eq!(
            server.post("/v1/tools/search_docs", &key, search).status,
            200
        );
    }
    let gc = f
        .host("writer")
        .command(&["gc", "--json"])
        .env("GROUNDIDX_FAKE_NOW_MS", LATER)
        .output()
        .expect("gc");
    assert_success(&gc, &["gc"]);
    let gc: Value = serde_json::from_slice(&gc.stdout).expect("JSON");
    assert_eq!(gc["keys_removed"], 1, "{gc}");
    assert_eq!(f.count("idempotency_keys"), 0);
    // The retry comes after its key record is gone: answered, but neither logged nor counted
    // again, on another host too.
    let server = f.serve("b", &[], &[("GROUNDIDX_FAKE_NOW_MS", LATER)]);
    let late = server.post("/v1/tools/search_docs", &key, search);
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(f.count("audit_events"), 1);
    assert_eq!(f.count("usage_events"), 1);
}

#[test]
fn a_server_on_a_writers_store_answers_read_only_while_the_writer_waits_for_its_ledger() {
    let Some(cluster) = crate::support::pg::Cluster::start() else {
        return;
    };
    let f = SharedFixture {
        env: Env::sample(),
        schema: TestSchema {
            url: cluster.url.clone(),
            name: "groundidx".into(),
        },
    };
    // One host: a writer and a server on the same store folder.
    let [writer] = f.ingested(["host"]);
    let server = f.serve("host", &[], &[]);
    edit(&f.env);
    let pauses = f.env.tmp.path().join("pauses");
    std::fs::create_dir_all(&pauses).expect("pause folder");
    let docs = f.env.docs.to_str().expect("utf-8");
    let held = writer
        .command(&["ingest", docs, "--batch-files", "3", "--wait", "30"])
        .env(
            groundidx::crash::PAUSE_ENV,
            format!("shared.before_commit@{}", pauses.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ingest");
    let mut held = held;
    wait_paused(&pauses, &mut held);
    // PostgreSQL goes away in the middle of a publish: the writer retries it (for up to 30 s).
    cluster.stop();
    std::fs::write(pauses.join("resume"), "").expect("resume the writer");
    for round in 0..3 {
        let reply = server.post(
            "/v1/tools/search_docs",
            &[],
            r#"{"query": "rotate the signing key"}"#,
        );
        assert_eq!(reply.status, 200, "round {round}: {}", reply.body);
        assert_eq!(
            reply.header("groundidx-read-only"),
            Some("1"),
            "round {round}"
        );
    }
    // Back in time for the writer's retries: it finishes the run.
    cluster.resume();
    let output = held.wait_with_output().expect("wait for the writer");
    assert_success(&output, &["ingest"]);
    drop(server);
    writer.sync();
    f.assert_all_equal_clean(&[&writer]);
}

/// The vectors a host's replica holds.
fn mirror_vectors(host: &Host<'_>) -> i64 {
    rusqlite::Connection::open(host.store.join("ledger.sqlite"))
        .expect("open the replica")
        .query_row("SELECT count(*) FROM vectors", [], |row| row.get(0))
        .expect("count the replica's vectors")
}

#[test]
fn gc_removes_replaced_models_from_the_shared_ledger_and_every_mirror_follows() {
    use crate::support::embed_server::{EmbedServer, Vectors};
    let Some(f) = SharedFixture::sample("gc_vectors") else {
        return;
    };
    let model = EmbedServer::start(Vectors::Words);
    let docs = f.env.docs.to_str().expect("utf-8");
    let [writer, reader] = f.hosts(["writer", "reader"]);
    // A first model, then a second that replaces it once it covers every chunk.
    for name in ["words", "words-v2"] {
        let flags = model.flags(name);
        let mut args = vec!["ingest", docs, "--json", "--wait", "30"];
        args.extend(flags.iter().map(String::as_str));
        writer.json(&args);
    }
    reader.sync();
    let chunks = f.count("chunks");
    assert_eq!(f.count("vectors"), 2 * chunks);
    assert_eq!(mirror_vectors(&reader), 2 * chunks);
    // A replica's gc without its shared ledger is refused and removes nothing.
    let mut alone = Command::new(BIN);
    isolate(&mut alone);
    let alone = alone
        .arg("--store")
        .arg(&reader.store)
        .args(["gc"])
        .output()
        .expect("run");
    assert_eq!(
        alone.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    assert!(String::from_utf8_lossy(&alone.stderr).contains("replica of a shared ledger"));
    assert_eq!(mirror_vectors(&reader), 2 * chunks);
    // With it, the replaced model goes from the shared ledger, and each replica follows.
    let gc = writer.json(&["gc", "--json"]);
    assert_eq!(
        gc["vectors_removed"]["replaced_models"].as_i64(),
        Some(chunks),
        "{gc}"
    );
    assert_eq!(f.count("vectors"), chunks);
    assert_eq!(f.count("embedding_models"), 1);
    for host in [&reader, &writer] {
        host.sync();
        assert_eq!(mirror_vectors(host), chunks, "{}", host.store.display());
        let status = host.json(&["status", "--json"]);
        assert_eq!(
            status["models"].as_array().map(Vec::len),
            Some(1),
            "{status}"
        );
        let report = host.json(&["verify", "--json"]);
        assert_eq!(report["vectors"]["identical"], true, "{report}");
    }
    // Nothing is embedded again by the next run with the active model.
    let flags = model.flags("words-v2");
    let mut args = vec!["ingest", docs, "--json", "--wait", "30"];
    args.extend(flags.iter().map(String::as_str));
    let again = writer.json(&args);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
}

#[test]
fn a_mirror_refuses_another_shared_ledger_unless_told_to_rebind() {
    let Some(f) = SharedFixture::sample("bound") else {
        return;
    };
    // Another ledger in the same database, as a typo in --ledger-schema makes one.
    let Some(typo) = TestSchema::new("bound_typo") else {
        return;
    };
    let docs = f.env.docs.to_str().expect("utf-8");
    let [writer, replica] = f.ingested(["writer", "replica"]);
    replica.sync();
    let before = replica.export();
    assert!(!before.is_empty());
    let replica_elsewhere = Host {
        store: replica.store.clone(),
        schema: &typo,
    };
    let writer_elsewhere = Host {
        store: writer.store.clone(),
        schema: &typo,
    };
    replica_elsewhere.json(&["migrate", "--json"]);
    for (host, args) in [
        (&replica_elsewhere, vec!["sync"]),
        (&writer_elsewhere, vec!["ingest", docs, "--wait", "30"]),
    ] {
        let refused = host.run(&args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&typo.name), "{args:?}: {stderr}");
        assert!(stderr.contains(&f.schema.name), "{args:?}: {stderr}");
        assert!(stderr.contains("--rebind"), "{args:?}: {stderr}");
    }
    assert_eq!(count(&typo.url, &typo.name, "chunks"), 0);
    assert_eq!(replica.export(), before, "the replica was left as it was");
    assert_eq!(replica.sync()["mirror"], "in_step");
    f.assert_all_equal_clean(&[&writer, &replica]);
    // Told to, the store becomes a replica of the other ledger (empty here).
    let rebound = replica_elsewhere.json(&["sync", "--rebind", "--json"]);
    assert_eq!(rebound["mirror"], "bootstrapped", "{rebound}");
    assert!(replica_elsewhere.export().is_empty());
    assert_eq!(replica_elsewhere.sync()["mirror"], "in_step");
    // And it is bound to that one now.
    let refused = replica.run(&["sync"]);
    assert_eq!(refused.status.code(), Some(2));
}

#[test]
fn a_replica_serves_a_pdf_passage_at_its_pages() {
    let Some(f) = SharedFixture::empty("pages") else {
        return;
    };
    let Some(papers) = crate::support::corpus("pdf-jose-papers") else {
        return;
    };
    let paper = papers.join("jose.00013/10.21105.jose.00013.pdf");
    std::fs::copy(&paper, f.env.docs.join("paper.pdf")).expect("copy a paper");
    f.write(
        "notes.md",
        "# Notes\n\nA tutorial series on reproducible research.\n",
    );
    let writer = f.host("a");
    let first = writer.ingest(&f.env.docs);
    assert_eq!(first["documents"]["added"], 2, "{first}");
    let replica = f.host("replica");
    replica.sync();
    // Every PDF passage has its pages on the writer, in the shared ledger and on the replica.
    let with_pages = count(
        &f.schema.url,
        &f.schema.name,
        "doc_chunks WHERE page_start IS NOT NULL AND page_end >= page_start",
    );
    assert!(with_pages > 0, "no page in the shared ledger");
    let pdf_chunks = |exported: &std::collections::BTreeMap<String, crate::support::Exported>| {
        exported
            .values()
            .filter(|chunk| chunk.paths.iter().any(|p| p.ends_with(".pdf")))
            .count()
    };
    assert_eq!(pdf_chunks(&replica.export()), pdf_chunks(&writer.export()));
    for host in [&writer, &replica] {
        let answer = host.json(&["search", "Riffomonas tutorial series", "--json", "-k", "20"]);
        let hits = answer["hits"].as_array().expect("hits");
        let pdf = hits
            .iter()
            .find(|hit| hit["paths"][0] == "paper.pdf")
            .unwrap_or_else(|| panic!("no PDF hit: {answer}"));
        assert!(
            pdf["pages"][0].as_u64().is_some_and(|page| page >= 1),
            "{pdf}"
        );
        let note = hits
            .iter()
            .find(|hit| hit["paths"][0] == "notes.md")
            .unwrap_or_else(|| panic!("no Markdown hit: {answer}"));
        assert!(note.get("pages").is_none(), "{note}");
    }
    f.assert_all_equal_clean(&[&writer, &replica]);
}

/// A replica learns from the shared log since when each document holds its content:
/// `read_document` pinned to a generation serves what did not change after it on another host's
/// server, and names what did.
#[test]
fn a_replica_serves_a_pinned_read_only_of_documents_unchanged_since() {
    let Some(f) = SharedFixture::sample("since") else {
        return;
    };
    let writer = f.host("writer");
    let first = writer.ingest(&f.env.docs)["generation"]
        .as_i64()
        .expect("generation");
    let server = f.serve("server", &[], &[]);
    let text = std::fs::read_to_string(f.env.docs.join("handbook/backups.md")).expect("read");
    f.write("handbook/backups.md", &text.replace("35 days", "60 days"));
    let second = writer.ingest(&f.env.docs)["generation"]
        .as_i64()
        .expect("generation");
    assert!(second > first);
    let read = |path: &str| {
        server.post(
            "/v1/tools/read_document",
            &[],
            &serde_json::json!({"path": path, "generation": first}).to_string(),
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server.get("/health").json()["generation"].as_i64() != Some(second) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never reached generation {second}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let unchanged = read("handbook/deploys.md");
    assert_eq!(unchanged.status, 200, "{unchanged}");
    assert_eq!(unchanged.json()["generation"].as_i64(), Some(first));
    let changed = read("handbook/backups.md");
    let problem = changed.assert_problem(409);
    assert_eq!(problem["code"], "document_changed", "{problem}");
}
