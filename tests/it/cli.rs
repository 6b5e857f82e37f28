//! The command line's promises: exit codes, usage errors that say what to do, help, the store
//! location, the schema version and export's one-object-per-line output.

use crate::support::{BIN, Env};

#[test]
fn usage_errors_exit_2() {
    let env = Env::empty();
    let output = env.run(&["ingest"]);
    assert_eq!(output.status.code(), Some(2));
    let output = env.run(&["ingest", "--no-such-flag", "x"]);
    assert_eq!(output.status.code(), Some(2));
    let output = env.run(&["search", "q", "--top-k", "0"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn a_missing_folder_is_named_and_creates_no_store() {
    let env = Env::empty();
    let missing = env.tmp.path().join("no-such-folder");
    let output = env.run(&["ingest", missing.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no-such-folder") && stderr.contains("hint:"),
        "{stderr}"
    );
    assert!(!env.store.exists());
    let file = env.docs.join("a.md");
    std::fs::write(&file, "# A\n").expect("write");
    let output = env.run(&["ingest", file.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a folder"));
}

#[test]
fn help_names_every_command() {
    let output = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for command in [
        "ingest", "search", "status", "verify", "rebuild", "export", "--store", "--json",
    ] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
    let output = std::process::Command::new(BIN)
        .args(["ingest", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--exclude",
        "--chunk-size",
        "--rehash",
        "--allow-mass-delete",
        "--wait",
        "--no-wait",
    ] {
        assert!(help.contains(flag), "ingest --help lacks {flag}:\n{help}");
    }
}

#[test]
fn store_defaults_to_dot_groundidx_and_follows_the_environment() {
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8");
    let output = std::process::Command::new(BIN)
        .args(["ingest", docs, "--quiet"])
        .current_dir(env.tmp.path())
        .env_remove("GROUNDIDX_STORE")
        .output()
        .expect("run");
    assert!(output.status.success());
    assert!(output.stdout.is_empty(), "--quiet printed on success");
    assert!(env.tmp.path().join(".groundidx/ledger.sqlite").exists());

    let elsewhere = env.tmp.path().join("by-env");
    let output = std::process::Command::new(BIN)
        .args(["ingest", docs, "--json"])
        .env("GROUNDIDX_STORE", &elsewhere)
        .output()
        .expect("run");
    assert!(output.status.success());
    assert!(elsewhere.join("ledger.sqlite").exists());
}

#[test]
fn an_unknown_schema_version_is_refused() {
    let env = Env::sample();
    env.ingest();
    let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open");
    ledger
        .execute(
            "UPDATE meta SET value = 99 WHERE name = 'schema_version'",
            [],
        )
        .expect("update");
    drop(ledger);
    for args in [
        vec!["status"],
        vec!["ingest", env.docs.to_str().expect("utf-8")],
    ] {
        let output = env.run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("schema version 99"), "{stderr}");
    }
}

#[test]
fn export_prints_one_object_per_chunk() {
    let env = Env::sample();
    let report = env.ingest();
    let output = env.run(&["export"]);
    assert!(output.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    assert_eq!(
        lines.len() as u64,
        report["chunks"]["added"].as_u64().expect("added")
    );
    for line in &lines {
        for field in ["chunk_id", "paths", "heading", "lines", "text"] {
            assert!(!line[field].is_null(), "{line}");
        }
    }
}

#[test]
fn status_reports_the_contract_fields() {
    let env = Env::sample();
    env.ingest();
    let status = env.json(&["status", "--json"]);
    for field in [
        "documents",
        "sources",
        "chunks",
        "generation",
        "index_generation",
        "last_ingest",
    ] {
        assert!(!status[field].is_null(), "status lacks {field}: {status}");
    }
    assert_eq!(status["generation"], status["index_generation"]);
}
