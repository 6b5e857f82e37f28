//! `groundidx.toml`: found in the current folder, or through `--config` or `GROUNDIDX_CONFIG`;
//! flags beat the environment, which beats the file, which beats the defaults; relative paths
//! in the file are relative to the file; `groundidx config` says where each value came from;
//! an unknown key or a bad value is an error naming the key and the file, and touches nothing.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{BIN, Env, assert_success, isolate};

/// `groundidx ARGS…` run in `dir`, with no `--store` and only the given variables set.
fn run_in(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    isolate(&mut command);
    command.current_dir(dir).args(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run groundidx")
}

fn json_in(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> Value {
    let output = run_in(dir, vars, args);
    assert_success(&output, args);
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// The chunk count of the store at `store`.
fn chunks_in(store: &Path) -> u64 {
    let output = Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(["status", "--json"])
        .output()
        .expect("run status");
    assert_success(&output, &["status"]);
    let status: Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    status["chunks"].as_u64().expect("chunk count")
}

/// An environment with a `groundidx.toml` beside `docs/`.
fn with_file(text: &str) -> Env {
    let env = Env::sample();
    std::fs::write(env.tmp.path().join("groundidx.toml"), text).expect("write groundidx.toml");
    env
}

#[test]
fn the_file_in_the_current_folder_gives_store_roots_and_chunk_size() {
    let env = with_file("store = \"from-file\"\nroots = [\"docs\"]\nchunk_size = 120\n");
    let dir = env.tmp.path();
    let report = json_in(dir, &[], &["ingest", "--json"]);
    assert!(report["chunks"]["added"].as_u64().unwrap() > 0, "{report}");
    assert!(dir.join("from-file").is_dir(), "the file's store was used");
    assert!(
        !dir.join(".groundidx").exists(),
        "the default store was not"
    );

    // The same chunks as the same settings given as flags.
    let docs = env.docs.to_str().unwrap();
    let flags = dir.join("flags");
    let output = run_in(
        dir,
        &[],
        &[
            "--store",
            flags.to_str().unwrap(),
            "ingest",
            docs,
            "--chunk-size",
            "120",
        ],
    );
    assert_success(&output, &["ingest --chunk-size 120"]);
    assert_eq!(chunks_in(&dir.join("from-file")), chunks_in(&flags));
    // And the file's chunk size mattered: the default size cuts fewer chunks.
    let default = dir.join("default-size");
    let output = run_in(
        dir,
        &[],
        &[
            "--store",
            default.to_str().unwrap(),
            "ingest",
            docs,
            "--chunk-size",
            "1000",
        ],
    );
    assert_success(&output, &["ingest --chunk-size 1000"]);
    assert!(chunks_in(&default) < chunks_in(&flags));
}

#[test]
fn flags_beat_the_environment_which_beats_the_file() {
    let env = with_file("store = \"from-file\"\nroots = [\"docs\"]\nchunk_size = 120\n");
    let dir = env.tmp.path();
    let settings = |vars: &[(&str, &str)], args: &[&str]| -> Value {
        let mut all = vec!["config", "--json"];
        all.extend_from_slice(args);
        json_in(dir, vars, &all)["settings"].clone()
    };

    let file_only = settings(&[], &[]);
    assert_eq!(file_only["chunk_size"]["value"], 120);
    assert_eq!(file_only["chunk_size"]["source"], "file");
    assert_eq!(file_only["store"]["source"], "file");
    assert_eq!(file_only["rate_limit"]["source"], "default");

    let env_too = settings(
        &[
            ("GROUNDIDX_CHUNK_SIZE", "300"),
            ("GROUNDIDX_STORE", "from-env"),
        ],
        &[],
    );
    assert_eq!(env_too["chunk_size"]["value"], 300);
    assert_eq!(env_too["chunk_size"]["source"], "env");
    assert_eq!(env_too["chunk_size"]["from"], "GROUNDIDX_CHUNK_SIZE");
    assert_eq!(env_too["store"]["value"], "from-env");
    assert_eq!(env_too["store"]["source"], "env");

    let flag_too = settings(
        &[
            ("GROUNDIDX_CHUNK_SIZE", "300"),
            ("GROUNDIDX_STORE", "from-env"),
        ],
        &["--chunk-size", "500", "--store", "from-flag"],
    );
    assert_eq!(flag_too["chunk_size"]["value"], 500);
    assert_eq!(flag_too["chunk_size"]["source"], "flag");
    assert_eq!(flag_too["store"]["value"], "from-flag");

    // And ingest really uses what `config` shows: the environment's chunk size and store.
    let vars = [
        ("GROUNDIDX_CHUNK_SIZE", "300"),
        ("GROUNDIDX_STORE", "from-env"),
    ];
    assert_success(&run_in(dir, &vars, &["ingest"]), &["ingest"]);
    assert!(dir.join("from-env").is_dir() && !dir.join("from-file").exists());
    let by_flag = dir.join("by-flag");
    let docs = env.docs.to_str().unwrap();
    let out = run_in(
        dir,
        &[],
        &[
            "--store",
            by_flag.to_str().unwrap(),
            "ingest",
            docs,
            "--chunk-size",
            "300",
        ],
    );
    assert_success(&out, &["ingest --chunk-size 300"]);
    assert_eq!(chunks_in(&dir.join("from-env")), chunks_in(&by_flag));

    // A DIR argument replaces the file's roots.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("only.md"), "# Only\n\nThe one document here.\n").unwrap();
    let report = json_in(dir, &vars, &["ingest", "other", "--json"]);
    assert_eq!(report["documents"]["added"], 1, "{report}");
}

#[test]
fn config_env_names_a_file_elsewhere_and_its_paths_are_relative_to_it() {
    let env = Env::sample();
    let etc = env.tmp.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("indexer.toml"),
        "store = \"../var/store\"\nroots = [\"../docs\"]\nexclude = [\"handbook\"]\n",
    )
    .unwrap();
    let elsewhere = env.tmp.path().join("cwd");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let config = etc.join("indexer.toml");
    let vars = [("GROUNDIDX_CONFIG", config.to_str().unwrap())];
    let report = json_in(&elsewhere, &vars, &["ingest", "--json"]);
    assert!(report["documents"]["added"].as_u64().unwrap() > 0);
    let store = env.tmp.path().join("var/store");
    assert!(store.is_dir(), "the store is relative to the file's folder");
    let exported = Command::new(BIN)
        .arg("--store")
        .arg(&store)
        .arg("export")
        .output()
        .unwrap();
    let text = String::from_utf8(exported.stdout).unwrap();
    assert!(!text.is_empty());
    assert!(
        !text.contains("\"handbook/"),
        "the file's exclude applied: {text}"
    );

    // --config beats GROUNDIDX_CONFIG.
    std::fs::write(elsewhere.join("mine.toml"), "chunk_size = 777\n").unwrap();
    let shown = json_in(
        &elsewhere,
        &vars,
        &["config", "--json", "--config", "mine.toml"],
    );
    assert_eq!(shown["file"], "mine.toml");
    assert_eq!(shown["settings"]["chunk_size"]["value"], 777);
    assert_eq!(shown["settings"]["store"]["source"], "default");
}

#[test]
fn an_unknown_key_is_an_error_naming_the_key_and_the_file() {
    let env = with_file("roots = [\"docs\"]\n\nchunk_sise = 300\n");
    let dir = env.tmp.path();
    let output = run_in(dir, &[], &["ingest"]);
    assert_eq!(output.status.code(), Some(2), "usage error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chunk_sise"), "{stderr}");
    assert!(stderr.contains("groundidx.toml"), "{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!dir.join(".groundidx").exists(), "nothing was created");
}

#[test]
fn a_bad_value_or_a_missing_file_is_an_error_that_says_where() {
    let env = with_file("roots = [\"docs\"]\nchunk_size = 10\n");
    let dir = env.tmp.path();
    let output = run_in(dir, &[], &["ingest"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("groundidx.toml") && stderr.contains("chunk_size"),
        "{stderr}"
    );
    assert!(!dir.join(".groundidx").exists());
    // A flag overrides the bad value, so the file's other settings still serve.
    let output = run_in(dir, &[], &["ingest", "--chunk-size", "200"]);
    assert_success(&output, &["ingest --chunk-size 200"]);

    for (text, key) in [
        ("rate_limit = \"lots\"\n", "rate_limit"),
        ("key_ttl = \"1m\"\n", "key_ttl"),
        ("listen = \"nowhere\"\n", "listen"),
        ("chunk_size = \"big\"\n", "chunk_size"),
    ] {
        std::fs::write(dir.join("groundidx.toml"), text).unwrap();
        let output = run_in(dir, &[], &["config"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(key), "{text}: {stderr}");
    }

    let output = run_in(dir, &[], &["--config", "absent.toml", "status"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("absent.toml"));
}

#[test]
fn ingest_without_folders_or_roots_says_what_to_do() {
    let env = Env::sample();
    let output = run_in(env.tmp.path(), &[], &["ingest"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no folders to ingest") && stderr.contains("roots"),
        "{stderr}"
    );
}

#[test]
fn config_prints_every_setting_with_its_source_for_people() {
    let env = with_file("chunk_size = 400\n");
    let output = run_in(
        env.tmp.path(),
        &[("GROUNDIDX_RATE_LIMIT", "10/1m")],
        &["config"],
    );
    assert_success(&output, &["config"]);
    let text = String::from_utf8(output.stdout).unwrap();
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("no {key} line in:\n{text}"))
            .to_string()
    };
    assert!(line("chunk_size").contains("400") && line("chunk_size").contains("file"));
    assert!(line("rate_limit").contains("10/60s") && line("rate_limit").contains("env"));
    assert!(line("key_ttl").contains("7d") && line("key_ttl").contains("default"));
    for key in [
        "store",
        "roots",
        "exclude",
        "max_file_size",
        "client_id",
        "listen",
        "tokens",
    ] {
        line(key);
    }
}
