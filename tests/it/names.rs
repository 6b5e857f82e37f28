//! File names and document text are untrusted: in text output and text logs every control
//! character is shown as an escape, so a name can neither forge an `error:` line on stderr nor
//! send the terminal an escape sequence. JSON output and JSON logs stay exact.

use crate::support::Env;

const FORGED: &str = "evil\nerror: forged line.md";
const ESCAPES: &str = "bell\u{1b}]0;owned\u{7}\u{1b}[2Jname.md";

fn env_with_hostile_names() -> Env {
    let env = Env::sample();
    // Binary content, so the file is skipped with a warning that names it.
    std::fs::write(env.docs.join(FORGED), b"\x00\x01\x02binary").expect("write");
    std::fs::write(
        env.docs.join(ESCAPES),
        "# Escapes\n\nThe zanzibar passage \u{1b}[31mwith an escape\u{1b}[0m inside.\n",
    )
    .expect("write");
    env
}

#[test]
fn names_never_reach_stderr_or_the_terminal_raw() {
    let env = env_with_hostile_names();
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&["ingest", docs]);
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .lines()
            .all(|line| !line.starts_with("error: forged")),
        "a file name forged a line:\n{stderr}"
    );
    assert!(stderr.contains("evil\\nerror: forged line.md"), "{stderr}");
    assert!(!output.stderr.contains(&0x1b), "{stderr}");

    let output = env.run(&["search", "zanzibar passage", "--color", "never"]);
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.stdout.contains(&0x1b), "raw escape in: {stdout:?}");
    assert!(!output.stdout.contains(&0x07), "raw bell in: {stdout:?}");
    assert!(stdout.contains("bell\\x1b]0;owned\\x07"), "{stdout}");

    // JSON keeps the name exact (serde escapes it).
    let hits = env.search("zanzibar passage", 1);
    assert_eq!(hits["hits"][0]["paths"][0], ESCAPES, "{hits}");
    let output = env.run(&["ingest", docs, "--rehash", "--log-format", "json"]);
    let line = String::from_utf8_lossy(&output.stderr)
        .lines()
        .find(|line| line.contains("forged"))
        .map(str::to_string)
        .expect("a JSON log line about the forged name");
    let event: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
    assert_eq!(event["path"], FORGED, "{event}");
}
