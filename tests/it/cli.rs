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

/// `groundidx SUBCOMMAND --help` as text.
fn help_of(subcommand: &str) -> String {
    let output = std::process::Command::new(BIN)
        .args([subcommand, "--help"])
        .output()
        .expect("run");
    assert!(output.status.success(), "{subcommand} --help failed");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The subcommands `groundidx --help` lists.
fn subcommands() -> Vec<String> {
    let output = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run");
    let help = String::from_utf8(output.stdout).expect("UTF-8 help");
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // A command's line; a description's wrapped lines are indented further.
        .filter(|line| !line[2..].starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Each flag of a help text with the heading it sits under (`Options`, `Embedding`, …).
fn flags_by_heading(help: &str) -> Vec<(String, String)> {
    let mut heading = String::new();
    let mut flags = Vec::new();
    for line in help.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = line.trim_end_matches(':').to_string();
        } else if line.starts_with("  -") || line.starts_with("      --") {
            let flag = line
                .split([',', ' ', '.'])
                .map(str::trim)
                .find(|word| word.starts_with("--"))
                .expect("a long flag on a flag line");
            flags.push((flag.to_string(), heading.clone()));
        }
    }
    flags
}

#[test]
fn every_flag_sits_under_a_heading_that_fits_it() {
    // Where each group of flags belongs; every other flag is the command's own, under Options.
    let groups: &[(&[&str], &[&str])] = &[
        (
            &[
                "--embed-model",
                "--embed-url",
                "--embed-remote-model",
                "--embed-query-prefix",
                "--embed-passage-prefix",
                "--embed-max-tokens",
                "--embed-precision",
            ],
            &["Embedding"],
        ),
        (
            &[
                "--exclude",
                "--chunk-size",
                "--formats",
                "--max-file-size",
                "--id-fields",
            ],
            &["Indexing", "What --reindex indexes"],
        ),
        (&["--wait", "--no-wait"], &["Waiting for other writers"]),
        (
            &["--client-id", "--key-ttl", "--rate-limit"],
            &["Keys and quotas"],
        ),
        (&["--listen", "--tokens"], &["Listening"]),
        (
            &[
                "--max-connections",
                "--header-timeout",
                "--idle-timeout",
                "--body-timeout",
            ],
            &["Connections"],
        ),
        (
            &[
                "--store",
                "--json",
                "--quiet",
                "--verbose",
                "--log-format",
                "--color",
                "--config",
                "--ledger",
                "--ledger-schema",
                "--ledger-ca",
                "--lease-ttl",
            ],
            &["Global options"],
        ),
    ];
    let commands = subcommands();
    assert!(
        commands.len() > 10 && commands.contains(&"ingest".to_string()),
        "{commands:?}"
    );
    let mut checked = 0;
    for command in &commands {
        for (flag, heading) in flags_by_heading(&help_of(command)) {
            let allowed: &[&str] = groups
                .iter()
                .find(|(flags, _)| flags.contains(&flag.as_str()))
                .map_or(&["Options"], |(_, headings)| headings);
            assert!(
                allowed.contains(&heading.as_str()),
                "{command} --help puts {flag} under {heading:?}, not {allowed:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} flags read");
    // The flags a newcomer found under "Embedding".
    let ingest = flags_by_heading(&help_of("ingest"));
    for flag in ["--rehash", "--watch", "--wait", "--no-wait"] {
        let (_, heading) = ingest
            .iter()
            .find(|(f, _)| f == flag)
            .unwrap_or_else(|| panic!("ingest --help lacks {flag}"));
        assert_ne!(heading, "Embedding", "{flag}");
    }
}

#[test]
fn gc_help_says_what_it_deletes_and_what_it_keeps() {
    let help = help_of("gc");
    let text = help.split("Usage:").next().expect("the description");
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "idempotency keys past their TTL",
        "vectors of embedding models search used before the active one",
        "vectors of chunks no document holds",
        "Kept:",
        "every document, chunk and index entry",
        "audit and usage row",
    ] {
        assert!(words.contains(said), "gc --help lacks {said:?}:\n{help}");
    }
    assert!(!words.contains("nothing else"), "{help}");
    // gc takes the writer lease only with --ledger: its wait flags say so.
    let flags = help.split("Usage:").nth(1).expect("the options");
    let wait = flags
        .split("--wait <SECONDS>")
        .nth(1)
        .and_then(|rest| rest.split("--no-wait").next())
        .expect("--wait is described");
    assert!(wait.contains("With --ledger"), "--wait: {wait}");
}

#[test]
fn a_search_that_matches_nothing_exits_0_with_no_hits() {
    let env = crate::support::Env::sample();
    env.ingest();
    let query = "zyzzyvaword qwxplunk";
    let plain = env.run(&["search", query]);
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout).trim(), "no hits");
    assert!(plain.stderr.is_empty(), "{plain:?}");

    let json = env.run(&["search", query, "--json"]);
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let answer: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(answer["hits"], serde_json::json!([]), "{answer}");
}

#[test]
fn the_package_ships_both_licenses_cargo_toml_names() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""));
    let mit = std::fs::read_to_string(root.join("LICENSE-MIT")).expect("LICENSE-MIT");
    assert!(mit.contains("Permission is hereby granted, free of charge"));
    assert!(mit.contains("Copyright (c) The groundidx developers"));
    let apache = std::fs::read_to_string(root.join("LICENSE-APACHE")).expect("LICENSE-APACHE");
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));

    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "package",
            "--list",
            "--locked",
            "--allow-dirty",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("run cargo package --list");
    assert!(
        output.status.success(),
        "cargo package --list: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed = String::from_utf8_lossy(&output.stdout);
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(
            listed.lines().any(|line| line == file),
            "the package lacks {file}:\n{listed}"
        );
    }
}
