//! At the prompt and in log shippers: the progress bar only on a terminal, colour that follows
//! the terminal, `NO_COLOR` and `--color`, and logs as text or JSON lines with `-v` for more.
//!
//! A pseudo-terminal comes from `script` (util-linux); the terminal tests skip with a message
//! where it is missing.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{BIN, Env, assert_success};

/// Runs `groundidx ARGS…` on a pseudo-terminal and returns what the terminal showed, or `None`
/// when `script` is not installed.
fn on_terminal(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Option<String> {
    let probe = Command::new("script").arg("--version").output();
    if probe.is_err() {
        crate::support::prerequisite_missing(
            "`script` (util-linux) is not installed, so there is no pty to test on",
        );
        return None;
    }
    let mut line = format!("{BIN} --store {}", env.store.display());
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    let mut command = Command::new("script");
    crate::support::isolate(&mut command);
    command
        .args(["-qec", &line, "/dev/null"])
        .env("TERM", "xterm");
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().expect("run script");
    assert!(
        output.status.success(),
        "{line} on a pty failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// An environment with enough files that an ingest draws its bar more than once.
fn many_files() -> Env {
    let env = Env::empty();
    for i in 0..1_500 {
        env.write(
            &format!("part-{}/note-{i}.md", i % 20),
            &format!(
                "# Note {i}\n\nThis note {i} is about topic {} and more.\n",
                i % 37
            ),
        );
    }
    env
}

#[test]
fn the_progress_bar_shows_on_a_terminal_and_never_in_a_pipe() {
    let env = many_files();
    let docs = env.docs.to_str().unwrap();
    let Some(shown) = on_terminal(&env, &[], &["ingest", docs]) else {
        return;
    };
    assert!(
        shown.contains("files,") && shown.contains("eta"),
        "a bar with rate and ETA on the terminal:\n{shown}"
    );
    assert!(shown.contains("documents  1500 added"), "{shown}");

    // The same run into a pipe: the summary on stdout, nothing at all on stderr.
    let again = Env::empty();
    crate::support::copy_tree(&env.docs, &again.docs);
    let output = again.run(&["ingest", again.docs.to_str().unwrap()]);
    assert_success(&output, &["ingest"]);
    assert!(output.stderr.is_empty(), "{:?}", stderr(&output));
    assert!(!String::from_utf8_lossy(&output.stdout).contains("eta"));

    // --quiet on a terminal: no bar either.
    std::fs::write(
        env.docs.join("part-0/note-0.md"),
        "# Changed\n\nNew text.\n",
    )
    .unwrap();
    let quiet = on_terminal(&env, &[], &["ingest", docs, "--quiet", "--rehash"]).unwrap();
    assert!(!quiet.contains("eta"), "{quiet}");
}

#[test]
fn colour_follows_the_terminal_no_color_and_the_flag() {
    let env = Env::sample();
    env.ingest();
    let search = ["search", "rotate the signing key", "-k", "2"];
    let escape = "\x1b[";

    let piped = env.run(&search);
    assert_success(&piped, &search);
    assert!(!String::from_utf8_lossy(&piped.stdout).contains(escape));

    let mut forced = search.to_vec();
    forced.extend(["--color", "always"]);
    let output = env.run(&forced);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(escape), "--color always colours a pipe");
    // The snippet's matches are coloured instead of starred.
    assert!(!text.contains("**"), "{text}");

    let Some(terminal) = on_terminal(&env, &[], &search) else {
        return;
    };
    assert!(
        terminal.contains(escape),
        "a terminal is coloured:\n{terminal}"
    );
    let no_color = on_terminal(&env, &[("NO_COLOR", "1")], &search).unwrap();
    assert!(!no_color.contains(escape), "NO_COLOR:\n{no_color}");
    let mut never = search.to_vec();
    never.extend(["--color", "never"]);
    let never = on_terminal(&env, &[], &never).unwrap();
    assert!(!never.contains(escape), "--color never:\n{never}");
    assert!(
        never.contains("**"),
        "without colour the matches are starred"
    );
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A store whose ingest warns about `big.md` (over `--max-file-size`).
fn with_a_warning() -> (Env, Vec<String>) {
    let env = Env::sample();
    env.write("big.md", &"# Big\n\nword ".repeat(100));
    let docs = env.docs.to_str().unwrap().to_string();
    (
        env,
        vec![
            "ingest".into(),
            docs,
            "--max-file-size".into(),
            "600".into(),
        ],
    )
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn logs_are_text_for_people_and_json_lines_for_shippers() {
    let (env, ingest) = with_a_warning();
    let text = env.run(&args(&ingest));
    let text_err = stderr(&text);
    assert!(
        text_err
            .lines()
            .any(|l| l.starts_with("warning: big.md: ") && l.contains("600")),
        "{text_err}"
    );

    std::fs::write(
        env.docs.join("big.md"),
        "# Big\n\n".to_string() + &"more ".repeat(200),
    )
    .unwrap();
    let mut json_args = args(&ingest);
    json_args.extend(["--log-format", "json", "-v"]);
    let json = env.run(&json_args);
    let lines: Vec<Value> = stderr(&json)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN")
        .expect("the warning as JSON");
    assert_eq!(warning["path"], "big.md", "{warning}");
    assert!(warning["timestamp"].is_string() && warning["message"].is_string());
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["message"] == "ingest finished"),
        "-v adds the run's own events: {lines:?}"
    );

    // An error that ends a command is a JSON line too, and the exit status is unchanged.
    let missing = env.tmp.path().join("no-such-folder");
    let failed = env.run(&["ingest", missing.to_str().unwrap(), "--log-format", "json"]);
    assert_eq!(failed.status.code(), Some(2));
    let line: Value = serde_json::from_str(stderr(&failed).trim()).expect("one JSON line");
    assert_eq!(line["level"], "ERROR");
    assert!(line["message"].as_str().unwrap().contains("no-such-folder"));
}

#[test]
fn verbosity_adds_detail_and_the_default_says_nothing_on_success() {
    let env = Env::sample();
    let docs = env.docs.to_str().unwrap();
    let quiet = env.run(&["ingest", docs]);
    assert_success(&quiet, &["ingest"]);
    assert!(quiet.stderr.is_empty(), "{}", stderr(&quiet));

    env.write("new.md", "# New\n\nA new note.\n");
    let verbose = env.run(&["ingest", docs, "-v"]);
    assert_success(&verbose, &["ingest -v"]);
    let log = stderr(&verbose);
    assert!(log.contains("info: ingest planned"), "{log}");
    assert!(
        log.contains("info: ingest finished") && log.contains("chunks_added=1"),
        "{log}"
    );
    assert!(!log.contains("debug:"), "-v stops at info: {log}");
}

#[test]
fn the_progress_bar_ends_on_its_totals_with_whole_rates() {
    let env = many_files();
    let docs = env.docs.to_str().unwrap();
    let Some(shown) = on_terminal(&env, &[], &["ingest", docs]) else {
        return;
    };
    // Every frame, as the terminal got them (indicatif redraws a line after `\r` or an erase).
    let frames: Vec<&str> = shown
        .split(['\r', '\n'])
        .map(|frame| frame.rsplit("\x1b[2K").next().unwrap_or(frame).trim())
        .filter(|frame| !frame.is_empty())
        .collect();
    let bars: Vec<&&str> = frames.iter().filter(|f| f.contains(" files")).collect();
    assert!(!bars.is_empty(), "no bar on the terminal:\n{shown}");
    let mut rates = 0;
    for frame in &frames {
        assert!(!frame.contains("0/0 "), "a bar with no totals: {frame:?}");
        // Each rate: the word before a "/s".
        for (at, _) in frame.match_indices("/s") {
            let rate = frame[..at].rsplit(' ').next().unwrap_or_default();
            assert!(
                !rate.is_empty() && rate.chars().all(|c| c.is_ascii_digit() || c == ','),
                "not a whole rate ({rate:?}): {frame:?}"
            );
            rates += 1;
        }
    }
    assert!(rates > 0, "no rate shown:\n{shown}");
    let last = bars.last().unwrap();
    assert!(
        last.contains("read") && last.contains("1,500/1,500 files in "),
        "the bar's last frame: {last:?}\n{shown}"
    );
    assert!(shown.contains("documents  1500 added"), "{shown}");
}
