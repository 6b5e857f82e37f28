//! One writer at a time: a second writer waits or exits 75 and changes nothing; readers never
//! take the lock.

use std::process::Stdio;

use groundidx::store::{LockWait, WriterLock};

use crate::support::{Env, await_line, clean_export};

/// An `ingest --json --wait 600 -v` of `docs`, once it has said that it waits for the lock; its
/// stderr is read on by the thread returned.
fn spawn_waiting_ingest(
    env: &Env,
    docs: &str,
) -> (std::process::Child, std::thread::JoinHandle<String>) {
    let mut child = env
        .command(&["ingest", docs, "--json", "--wait", "600", "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a waiting ingest");
    let stderr = await_line(
        child.stderr.take().expect("stderr"),
        "another writer holds the store; waiting",
    );
    (child, stderr)
}

#[test]
fn a_second_writer_exits_75_and_readers_go_on() {
    let env = Env::sample();
    env.ingest();
    let docs = env.docs.to_str().expect("utf-8");
    env.write(
        "new.md",
        "# New\n\nWritten while another writer holds the lock.\n",
    );
    let lock = WriterLock::acquire(&env.store, LockWait::NoWait).expect("take the lock");

    let output = env.run(&["ingest", docs, "--no-wait"]);
    assert_eq!(output.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another groundidx process"), "{stderr}");

    let output = env.run(&["ingest", docs, "--wait", "1"]);
    assert_eq!(output.status.code(), Some(75));
    assert_eq!(env.run(&["rebuild", "--no-wait"]).status.code(), Some(75));

    // Readers do not take the lock.
    assert_eq!(
        env.search("signing key", 1)["hits"]
            .as_array()
            .expect("hits")
            .len(),
        1
    );
    env.json(&["status", "--json"]);
    env.assert_verified();
    let hits = env.search("another writer holds the lock", 20);
    assert!(
        hits["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .all(|hit| hit["paths"][0] != "new.md"),
        "a refused writer changed the store: {hits}"
    );

    // A waiting writer says so, then goes on once the lock is free.
    let (mut waiting, stderr) = spawn_waiting_ingest(&env, docs);
    assert!(
        waiting.try_wait().expect("poll ingest").is_none(),
        "the writer stopped waiting while the lock was held"
    );
    drop(lock);
    let output = waiting.wait_with_output().expect("wait for ingest");
    let stderr = stderr.join().expect("stderr reader");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        env.search("another writer holds the lock", 1)["hits"][0]["paths"][0],
        "new.md"
    );
}

#[test]
fn two_ingests_started_together_leave_one_consistent_store() {
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8");
    let mut running: Vec<std::process::Child> = (0..3)
        .map(|_| {
            env.command(&["ingest", docs, "--json"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in &mut running {
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(0));
    }
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

/// A run waiting for the lock walks its folders only once it holds the lock: a file another
/// writer added meanwhile is in its walk, not taken for a deletion.
#[test]
fn a_waiting_run_walks_only_once_it_holds_the_lock() {
    let env = Env::sample();
    env.ingest();
    let docs = env.docs.to_str().expect("utf-8");
    // The first writer holds the store, paused before its walk.
    let pause = env.tmp.path().join("pause");
    std::fs::create_dir(&pause).expect("mkdir pause");
    let mut first = env
        .command(&["ingest", docs, "--json"])
        .env(
            "GROUNDIDX_PAUSE_AT",
            format!("plan.before_walk@{}", pause.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the first ingest");
    crate::support::wait_paused(&pause, &mut first);
    // The second waits for it; a walk started now would not see the file written next.
    let (second, stderr) = spawn_waiting_ingest(&env, docs);
    std::thread::sleep(std::time::Duration::from_millis(300));
    env.write(
        "arrived.md",
        "# Arrived\n\nWritten while the second run waited, ingested by the first.\n",
    );
    std::fs::write(pause.join("resume"), "").expect("resume");
    let first = first.wait_with_output().expect("wait for the first ingest");
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).expect("json report");
    assert_eq!(report["documents"]["added"], 1, "{report}");
    let second = second
        .wait_with_output()
        .expect("wait for the second ingest");
    let stderr = stderr.join().expect("stderr reader");
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&second.stdout).expect("json report");
    assert_eq!(report["documents"]["removed"], 0, "{report}");
    assert_eq!(report["documents"]["added"], 0, "{report}");
    assert_eq!(
        env.search("written while the second run waited", 1)["hits"][0]["paths"][0],
        "arrived.md"
    );
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}
