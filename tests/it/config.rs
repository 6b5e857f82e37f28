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

/// Runs `args` in `dir` and returns stderr, checking it was a usage error (2) that created no
/// store.
fn refused(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> String {
    let output = run_in(dir, vars, args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(output.stdout.is_empty(), "{args:?} printed: {output:?}");
    assert!(!dir.join(".groundidx").exists(), "{args:?} made a store");
    for rust in ["usize", "u64", "i64", "invalid type", "panicked"] {
        assert!(!stderr.contains(rust), "{args:?}: {stderr}");
    }
    stderr
}

#[test]
fn each_config_error_names_the_file_line_real_key_value_and_what_is_expected() {
    let cases: &[(&str, &[&str])] = &[
        (
            "roots = [\"docs\"]\nid_keys = [\"id\"]\n",
            &["line 2", "unknown key id_keys", "did you mean id_fields?"],
        ),
        (
            "chunk_size = \"big\"\n",
            &[
                "line 1",
                "chunk_size = \"big\"",
                "expected a whole number of characters from 50 to 100000",
            ],
        ),
        (
            "# sizes\nmax_file_size = -3\n",
            &[
                "line 2",
                "max_file_size = -3",
                "expected a whole number of bytes",
            ],
        ),
        (
            "key_ttl = \"soon\"\n",
            &[
                "key_ttl = \"soon\"",
                "expected a duration such as 90s, 1h30m or 7d, at least 24h",
            ],
        ),
        (
            "key_ttl = 7\n",
            &[
                "key_ttl = 7",
                "expected a duration such as 90s, 1h30m or 7d",
            ],
        ),
        (
            "rate_limit = \"lots\"\n",
            &[
                "rate_limit = \"lots\"",
                "expected calls per window in quotes, such as \"600/60s\"",
            ],
        ),
        (
            "listen = \"nowhere\"\n",
            &[
                "listen = \"nowhere\"",
                "expected an address and port in quotes, such as \"127.0.0.1:7878\"",
            ],
        ),
        (
            "roots = \"docs\"\n",
            &[
                "roots = \"docs\"",
                "expected a list of folders, such as [\"docs\"",
            ],
        ),
        (
            "formats = [\"md\", \"docx\"]\n",
            &["unknown format \"docx\"", "expected a list of formats"],
        ),
    ];
    for (text, said) in cases {
        let env = with_file(text);
        let dir = env.tmp.path();
        let stderr = refused(dir, &[], &["config"]);
        assert!(stderr.contains("groundidx.toml"), "{text}: {stderr}");
        for words in *said {
            assert!(stderr.contains(words), "{text} lacks {words:?}: {stderr}");
        }
        assert!(stderr.contains("hint: "), "{text}: {stderr}");
    }
}

#[test]
fn a_bad_value_stops_every_command_that_reads_the_file_even_one_that_does_not_use_it() {
    let env = with_file("roots = [\"docs\"]\nrate_limit = \"lots\"\n");
    let dir = env.tmp.path();
    for args in [
        vec!["ingest"],
        vec!["ingest", "docs", "--json"],
        vec!["status"],
        vec!["search", "signing key"],
        vec!["verify"],
        vec!["export"],
        vec!["rebuild"],
        vec!["embed"],
        vec!["gc"],
        vec!["audit"],
        vec!["usage"],
        vec!["migrate"],
        vec!["config"],
    ] {
        let stderr = refused(dir, &[], &args);
        assert!(
            stderr.contains("groundidx.toml, line 2: rate_limit = \"lots\""),
            "{args:?}: {stderr}"
        );
    }
    // The hint names the flag only where the command has one.
    let ingest = refused(dir, &[], &["ingest"]);
    assert!(!ingest.contains("--rate-limit"), "{ingest}");
    let mcp = refused(dir, &[], &["mcp"]);
    assert!(mcp.contains("override it with --rate-limit"), "{mcp}");
    // Replaced by a flag or a variable, the bad value is not used, and the command runs.
    let config = run_in(dir, &[("GROUNDIDX_RATE_LIMIT", "5/1m")], &["config"]);
    assert_success(&config, &["config with GROUNDIDX_RATE_LIMIT"]);
}

#[test]
fn durations_such_as_1h30m_and_2w_are_read_from_flags_the_environment_and_the_file() {
    let env = with_file("key_ttl = \"2w\"\nrate_limit = \"5/1h30m\"\n");
    let dir = env.tmp.path();
    let shown = json_in(dir, &[], &["config", "--json"])["settings"].clone();
    assert_eq!(shown["key_ttl"]["value"], "14d");
    assert_eq!(shown["key_ttl"]["source"], "file");
    assert_eq!(shown["rate_limit"]["value"], "5/5400s");

    let vars = [
        ("GROUNDIDX_KEY_TTL", "1w 1d"),
        ("GROUNDIDX_RATE_LIMIT", "7/2h30m"),
    ];
    let shown = json_in(dir, &vars, &["config", "--json"])["settings"].clone();
    assert_eq!(shown["key_ttl"]["value"], "8d");
    assert_eq!(shown["key_ttl"]["source"], "env");
    assert_eq!(shown["rate_limit"]["value"], "7/9000s");

    let flags = [
        "config",
        "--json",
        "--key-ttl",
        "25h30m",
        "--rate-limit",
        "9/1h30m",
    ];
    let shown = json_in(dir, &vars, &flags)["settings"].clone();
    assert_eq!(shown["key_ttl"]["value"], "1530m");
    assert_eq!(shown["key_ttl"]["source"], "flag");
    assert_eq!(shown["rate_limit"]["value"], "9/5400s");

    // The other commands that read a duration take the same forms.
    env.ingest();
    let store = env.store.to_str().unwrap();
    for args in [
        vec!["--store", store, "status", "--max-age", "1h30m"],
        vec!["--store", store, "audit", "--since", "2w"],
        vec!["--store", store, "gc", "--log-retention", "2w"],
        vec!["--store", store, "--lease-ttl", "1h30m", "status"],
    ] {
        assert_success(&run_in(dir, &[], &args), &args);
    }
    let output = run_in(dir, &[], &["--store", store, "status", "--max-age", "1x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("such as 90s, 1h30m or 7d"),
        "{output:?}"
    );
}

#[test]
fn a_bad_value_a_flag_replaced_does_not_stop_the_pdf_reader_ingest_starts() {
    let Some(papers) = crate::support::corpus("pdf-jose-papers") else {
        return;
    };
    let pdf = walkdir::WalkDir::new(&papers)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.path().extension().is_some_and(|x| x == "pdf"))
        .expect("a PDF in the corpus")
        .into_path();
    // The reader runs in a child process, in ingest's folder, where the file is.
    let env = with_file("roots = [\"docs\"]\nchunk_size = 10\n");
    std::fs::copy(&pdf, env.docs.join("paper.pdf")).expect("copy the PDF");
    let dir = env.tmp.path();
    let report = json_in(dir, &[], &["ingest", "--json", "--chunk-size", "800"]);
    assert_eq!(report["documents"]["skipped"], 0, "{report}");
    assert_eq!(crate::support::warnings(&report), vec![], "{report}");
    assert!(
        report["documents"]["added"].as_u64() > Some(1),
        "the PDF was read: {report}"
    );
}
