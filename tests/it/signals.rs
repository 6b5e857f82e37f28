//! SIGINT and SIGTERM end `ingest` and `ingest --watch` at the next safe point (between batches,
//! never inside a commit), say how far the run got, exit 130 or 143, and leave a consistent store
//! that the next run finishes. A pause point (`GROUNDIDX_PAUSE_AT`) holds the run between two
//! batches while the signal is sent, so the test never races the run.

use std::process::Stdio;

use serde_json::Value;

use crate::support::{Env, await_line, clean_export, send_signal, wait_paused};

fn env_with_files(count: usize) -> Env {
    let env = Env::empty();
    for i in 0..count {
        env.write(
            &format!("doc-{i:03}.md"),
            &format!("# Document {i}\n\nThe passage of document number {i}.\n"),
        );
    }
    env
}

#[test]
fn a_signal_ends_an_ingest_between_batches_and_the_next_run_finishes() {
    for (signal, code, number) in [("TERM", 143, 15), ("INT", 130, 2)] {
        let env = env_with_files(20);
        let docs = env.docs.to_str().expect("utf-8");
        let pauses = env.tmp.path().join("pauses");
        std::fs::create_dir(&pauses).expect("create the pause folder");
        let armed = format!("ingest.between_batches@{}", pauses.display());
        let mut child = env
            .command(&["ingest", docs, "--json", "--batch-files", "5"])
            .env("GROUNDIDX_PAUSE_AT", armed)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ingest");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut { stderr_pipe }, &mut text);
            text
        });
        wait_paused(&pauses, &mut child);
        send_signal(child.id(), signal);
        std::fs::write(pauses.join("resume"), "").expect("resume the run");
        let output = child.wait_with_output().expect("wait for ingest");
        let stderr = stderr.join().expect("stderr reader");
        assert_eq!(output.status.code(), Some(code), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "interrupted by signal {number}: 5 of 20 files ingested"
            )) && stderr.contains("the next run continues"),
            "SIG{signal}: {stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "an interrupted run printed a report"
        );
        env.assert_verified();
        assert_eq!(
            env.export().len(),
            5,
            "SIG{signal}: the first batch is kept"
        );

        let report = env.ingest();
        assert_eq!(report["documents"]["added"], 15, "{report}");
        assert_eq!(report["documents"]["unchanged"], 5, "{report}");
        env.assert_verified();
        assert_eq!(env.export(), clean_export(&env.docs));
    }
}

#[test]
fn a_signal_ends_a_watch_cleanly() {
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let env = env_with_files(3);
        let docs = env.docs.to_str().expect("utf-8");
        let mut child = env
            .command(&["ingest", docs, "--watch", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ingest --watch");
        // The first run's report: the watch is now waiting for changes.
        let stdout = await_line(child.stdout.take().expect("stdout"), "\"generation\"");
        send_signal(child.id(), signal);
        let status = child.wait().expect("wait for the watch");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("read stderr");
        assert_eq!(status.code(), Some(code), "SIG{signal}: {stderr}");
        assert!(stderr.contains("the watch ended on signal"), "{stderr}");
        let first: Value = serde_json::from_str(
            stdout
                .join()
                .expect("stdout reader")
                .lines()
                .next()
                .expect("a report"),
        )
        .expect("report JSON");
        assert_eq!(first["documents"]["added"], 3, "{first}");
        env.assert_verified();
    }
}
