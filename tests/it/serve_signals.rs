//! SIGINT and SIGTERM end `serve --reindex` at the reindex's next safe point too: during the
//! ingest it runs before it listens, the server exits 130 or 143 saying how far the run got,
//! serves nothing, and leaves a consistent store. A pause point holds the run while the signal
//! is sent, so the test never races it.

use std::process::Stdio;

use crate::support::{Env, send_signal, wait_paused};

#[test]
fn a_signal_during_the_first_reindex_ends_serve_cleanly() {
    for (signal, code, number) in [("TERM", 143, 15), ("INT", 130, 2)] {
        let env = Env::sample();
        let docs = env.docs.to_str().expect("utf-8");
        let pauses = env.tmp.path().join("pauses");
        std::fs::create_dir(&pauses).expect("create the pause folder");
        let mut child = env
            .command(&["serve", "--listen", "127.0.0.1:0", "--reindex", docs])
            .env(
                "GROUNDIDX_PAUSE_AT",
                format!("ingest.after_plan@{}", pauses.display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn serve");
        wait_paused(&pauses, &mut child);
        send_signal(child.id(), signal);
        std::fs::write(pauses.join("resume"), "").expect("resume the run");
        let output = child.wait_with_output().expect("wait for serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains(&format!("interrupted by signal {number}"))
                && stderr.contains("the next run continues"),
            "SIG{signal}: {stderr}"
        );
        assert!(!stderr.contains("listening"), "SIG{signal}: {stderr}");
        env.ingest();
        env.assert_verified();
    }
}
