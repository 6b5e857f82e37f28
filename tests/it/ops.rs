//! Running groundidx unattended: the README's crontab line, monitoring with `status --max-age`,
//! the systemd units in `contrib/`, and the generated completions and man page.

use std::path::Path;
use std::process::Command;

use crate::support::{BIN, Env};

/// The crontab line of README.md's "From cron" section.
fn readme_crontab_line() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let section = readme
        .split("```cron")
        .nth(1)
        .expect("a ```cron block in README.md");
    section.lines().nth(1).expect("a crontab line").to_string()
}

#[test]
fn the_readme_crontab_line_runs_quietly_and_overlaps_safely() {
    let env = Env::sample();
    let line = readme_crontab_line();
    // Five schedule fields, then the command cron hands to sh.
    let command: String = line
        .split_whitespace()
        .skip(5)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(command.starts_with("groundidx "), "{line}");
    let command = command
        .replacen("groundidx", BIN, 1)
        .replace("/var/lib/groundidx", env.store.to_str().expect("utf-8"))
        .replace("/srv/docs", env.docs.to_str().expect("utf-8"));
    let run = || {
        Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env_remove("GROUNDIDX_STORE")
            .output()
            .expect("sh")
    };

    let first = run();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        first.stdout.is_empty() && first.stderr.is_empty(),
        "cron would mail a successful run"
    );
    assert!(env.json(&["status", "--json"])["documents"].as_u64() > Some(0));

    // An overlapping run exits 75 at once and changes nothing.
    let lock =
        groundidx::store::WriterLock::acquire(&env.store, groundidx::store::LockWait::NoWait)
            .expect("lock");
    let overlapping = run();
    assert_eq!(overlapping.status.code(), Some(75));
    drop(lock);

    // A failure is loud: a folder that vanished (say, an unmounted disk) must not be silent.
    std::fs::rename(&env.docs, env.tmp.path().join("gone")).expect("move away");
    let failed = run();
    assert_ne!(failed.status.code(), Some(0));
    assert!(
        !failed.stderr.is_empty(),
        "a failed cron run printed nothing"
    );
}

#[test]
fn status_max_age_fails_when_the_last_ingest_is_too_old() {
    let env = Env::sample();
    env.ingest();
    let fresh = env.run(&["status", "--max-age", "2h", "--quiet"]);
    assert_eq!(fresh.status.code(), Some(0));
    assert!(fresh.stdout.is_empty());
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let stale = env.run(&["status", "--max-age", "1s"]);
    assert_eq!(stale.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stale.stderr).contains("older than --max-age"));
    let bad = env.run(&["status", "--max-age", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn completions_and_man_page_come_from_the_cli_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(output.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(
            script.contains("groundidx") && script.contains("ingest"),
            "{shell}: {script}"
        );
    }
    let output = Command::new(BIN).arg("man").output().expect("run");
    assert!(output.status.success());
    let page = String::from_utf8_lossy(&output.stdout);
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    assert!(page.contains("groundidx") && page.contains("ingest"));
}

#[test]
fn contrib_systemd_units_are_valid() {
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd");
    let service =
        std::fs::read_to_string(contrib.join("groundidx-ingest.service")).expect("service");
    let timer = std::fs::read_to_string(contrib.join("groundidx-ingest.timer")).expect("timer");
    let serve =
        std::fs::read_to_string(contrib.join("groundidx-serve.service")).expect("serve unit");
    assert!(
        service.contains("ingest --quiet --no-wait") && service.contains("SuccessExitStatus=75")
    );
    assert!(timer.contains("OnUnitActiveSec="));
    // The server: HTTP on loopback with tokens, restarted on failure, stopped by SIGTERM (which
    // serve handles), sandboxed, with the store writable (audit and usage rows go there).
    let exec_start = serve
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("the serve unit has an ExecStart line");
    assert!(
        exec_start.contains(" serve --listen 127.0.0.1:")
            && exec_start.contains("--tokens /")
            && exec_start.contains("--store /var/lib/groundidx"),
        "{exec_start}"
    );
    for line in [
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "StateDirectory=groundidx",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "WantedBy=multi-user.target",
    ] {
        assert!(
            serve.lines().any(|l| l == line),
            "the serve unit lacks {line}"
        );
    }
    assert!(
        !serve.contains("ReadOnlyPaths=/var/lib/groundidx"),
        "serve writes audit and usage rows into its store"
    );
    let Ok(analyze) = Command::new("systemd-analyze").arg("--version").output() else {
        crate::support::prerequisite_missing(
            "systemd-analyze not found (package systemd), the units were only read",
        );
        return;
    };
    if !analyze.status.success() {
        crate::support::prerequisite_missing("systemd-analyze does not run here");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in [
        ("groundidx-ingest.service", &service),
        ("groundidx-ingest.timer", &timer),
        ("groundidx-serve.service", &serve),
    ] {
        std::fs::write(
            dir.path().join(name),
            text.replace("/usr/local/bin/groundidx", BIN),
        )
        .expect("write");
    }
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("groundidx-ingest.service"))
        .arg(dir.path().join("groundidx-ingest.timer"))
        .arg(dir.path().join("groundidx-serve.service"))
        .output()
        .expect("run systemd-analyze");
    assert!(
        output.status.success(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // What systemd-analyze reports at all (a warning does not fail verify) is about our units
    // only when it names them.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("groundidx-serve.service:"),
        "systemd-analyze verify warns about the serve unit: {stderr}"
    );
}

#[test]
fn serve_reindexes_on_an_interval_and_respects_the_writer_lock() {
    use std::time::{Duration, Instant};

    let env = crate::support::Env::sample();
    let docs = env.docs.to_str().expect("utf-8").to_string();
    // No store yet: the server ingests once before it serves.
    let server = crate::support::http::serve(&env, &["--reindex", &docs, "--every", "1s"]);
    let wait_for = |query: &str, path: &str| -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            let reply = server.search(None, &format!("{{\"query\": \"{query}\", \"top_k\": 3}}"));
            if reply.json()["hits"]
                .as_array()
                .is_some_and(|hits| hits.iter().any(|hit| hit["paths"][0] == path))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    };
    assert!(
        wait_for("rotate the signing key", "handbook/key-rotation.md"),
        "{}",
        server.stderr()
    );

    // While another writer holds the lock, the ticks skip; the edit lands after it is released.
    let lock =
        groundidx::store::WriterLock::acquire(&env.store, groundidx::store::LockWait::NoWait)
            .expect("lock");
    env.write(
        "scheduled.md",
        "# Scheduled\n\nPicked up by the interval reindex.\n",
    );
    std::thread::sleep(Duration::from_millis(2_500));
    let during = server.search(
        None,
        r#"{"query": "picked up by the interval reindex", "top_k": 5}"#,
    );
    assert!(
        during.json()["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .all(|hit| hit["paths"][0] != "scheduled.md"),
        "a reindex ran while another writer held the lock"
    );
    assert!(server.stderr().contains("skipped"), "{}", server.stderr());
    drop(lock);
    assert!(
        wait_for("picked up by the interval reindex", "scheduled.md"),
        "{}",
        server.stderr()
    );
    env.assert_verified();
}

/// Parses Prometheus text exposition strictly enough to catch malformed lines: every sample is
/// `name{label="value",...} number`, and every sample's metric family has HELP and TYPE lines.
fn parse_prometheus(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut samples = std::collections::BTreeMap::new();
    let mut typed = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            typed.insert(parts.next().expect("a metric name").to_string());
            let kind = parts.next().expect("a type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment line: {line}");
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        if name_end < series.len() {
            let labels = series[name_end..]
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'));
            let labels = labels.unwrap_or_else(|| panic!("bad labels: {line}"));
            for label in labels.split(',') {
                let (key, quoted) = label
                    .split_once('=')
                    .unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(
                    key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{line}"
                );
                assert!(
                    quoted.starts_with('"') && quoted.ends_with('"') && quoted.len() >= 2,
                    "{line}"
                );
            }
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| typed.contains(*base))
            })
            .unwrap_or(name);
        assert!(
            typed.contains(family),
            "sample before its TYPE line: {line}"
        );
        samples.insert(series.to_string(), value);
    }
    samples
}

#[test]
fn metrics_are_prometheus_text_and_count_calls() {
    let env = crate::support::Env::sample();
    env.ingest();
    let server = crate::support::http::serve(&env, &[]);
    let body = r#"{"query": "signing key"}"#;
    assert_eq!(server.search(Some("m1"), body).status, 200);
    assert_eq!(server.search(Some("m1"), body).status, 200);
    assert_eq!(
        server
            .search(Some("m2"), r#"{"query": "x", "top_k": 0}"#)
            .status,
        400
    );
    let reply = server.get("/metrics");
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain"))
    );
    let samples = parse_prometheus(&reply.body);
    let calls = |outcome: &str| {
        samples
            .get(&format!(
                "groundidx_tool_calls_total{{tool=\"search_docs\",transport=\"http\",outcome=\"{outcome}\"}}"
            ))
            .copied()
    };
    assert_eq!(calls("executed"), Some(1.0), "{}", reply.body);
    assert_eq!(calls("replayed"), Some(1.0), "{}", reply.body);
    assert_eq!(
        calls("refused_invalid_arguments"),
        Some(1.0),
        "{}",
        reply.body
    );
    assert_eq!(
        samples.get("groundidx_tool_call_duration_seconds_count{tool=\"search_docs\"}"),
        Some(&3.0)
    );
    assert_eq!(
        samples.get("groundidx_index_generation"),
        Some(&1.0),
        "{}",
        reply.body
    );
    assert!(
        samples
            .get("groundidx_seconds_since_last_ingest")
            .is_some_and(|s| *s >= 0.0)
    );
}

#[test]
fn watch_picks_up_an_edit_and_runs_nothing_when_nothing_changed() {
    use std::io::BufRead;
    use std::time::Duration;

    let env = crate::support::Env::sample();
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let mut child = env
        .command(&["ingest", &docs, "--watch", "--json", "--settle", "1s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn ingest --watch");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().expect("stdout");
    let _guard = Kill(child);
    let (sender, reports) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if sender
                .send(serde_json::from_str(&line).expect("one JSON report per run"))
                .is_err()
            {
                break;
            }
        }
    });
    let first = reports
        .recv_timeout(Duration::from_secs(30))
        .expect("the first run");
    assert!(first["chunks"]["added"].as_u64() > Some(0), "{first}");

    env.write(
        "watched.md",
        "# Watched\n\nWritten while the watcher runs.\n",
    );
    let second = reports
        .recv_timeout(Duration::from_secs(15))
        .expect("a run after the edit");
    assert_eq!(second["documents"]["added"], 1, "{second}");
    assert!(second["chunks"]["added"].as_u64() > Some(0), "{second}");
    assert_eq!(
        env.search("written while the watcher runs", 1)["hits"][0]["paths"][0],
        "watched.md"
    );

    // Nothing changes: no run at all (searching and the store's own writes wake nothing).
    assert!(
        reports.recv_timeout(Duration::from_secs(3)).is_err(),
        "the watcher ran though nothing changed"
    );
}

/// `audit` and `usage` read the ledger and never write it: a store that an older groundidx
/// wrote keeps its schema (a host still serving it with that version would refuse an
/// upgraded one), and the answer still lists its calls.
#[test]
fn audit_and_usage_only_read_the_ledger() {
    let env = Env::sample();
    env.ingest();
    let searched = env.run(&["search", "rotate the signing key", "--json"]);
    assert!(searched.status.success());
    let ledger = || rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("ledger");
    crate::support::ledger::store_links_by_hash(&env.store.join("ledger.sqlite"));
    ledger()
        .execute_batch(
            "ALTER TABLE sources DROP COLUMN since_generation;
             UPDATE meta SET value = 9 WHERE name = 'schema_version';",
        )
        .expect("make schema 9");
    for command in ["audit", "usage"] {
        let output = env.run(&[command, "--json"]);
        assert!(
            output.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let version: i64 = ledger()
            .query_row(
                "SELECT value FROM meta WHERE name = 'schema_version'",
                [],
                |row| row.get(0),
            )
            .expect("schema version");
        assert_eq!(version, 9, "{command} upgraded the store");
    }
}
