//! A closed pipe on stdout (`export | head`, `search … | head`, `completions bash | head`) ends
//! the command quietly with success, as ripgrep does: no error, no panic.

use std::process::Stdio;

use crate::support::Env;

/// Runs `groundidx ARGS…` with stdout a pipe whose reader is already gone, so every write fails
/// with `EPIPE`; returns the exit status and stderr.
fn with_closed_stdout(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("create a pipe");
    drop(reader);
    let output = env
        .command(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run groundidx");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let env = Env::sample();
    env.ingest();
    for args in [
        &["export"][..],
        &["search", "signing key"],
        &["search", "signing key", "--json"],
        &["status"],
        &["completions", "bash"],
        &["man"],
        &["audit"],
    ] {
        let (code, stderr) = with_closed_stdout(&env, args);
        assert_eq!(
            code,
            Some(0),
            "groundidx {args:?} into a closed pipe: {stderr}"
        );
        assert!(
            stderr.is_empty(),
            "groundidx {args:?} into a closed pipe said: {stderr}"
        );
    }
}
