//! The test environment: a temp folder with a copy of `sample_docs/` and a store beside it, the
//! `groundidx` commands run in it, and what they print (reports, exports).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_groundidx");

/// The repository's `sample_docs/`.
pub fn sample_docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_docs")
}

/// A test cannot run here because `what` is missing. Under `CI` (set and not empty) that fails
/// the test, so a misconfigured CI cannot go green on skipped tests; elsewhere it says the test
/// is skipped, and the caller returns.
pub fn prerequisite_missing(what: &str) {
    if std::env::var_os("CI").is_some_and(|value| !value.is_empty()) {
        panic!(
            "a prerequisite is missing under CI: {what}\nhint: provide it (`.ci/run` installs \
             what the suite needs), or unset CI to let the test skip"
        );
    }
    eprintln!("skipped: {what}");
}

/// A shared corpus from `../shared/corpora/NAME`, or `GROUNDIDX_CORPORA/NAME`; `None` when it is
/// absent (`prerequisite_missing`: a failure under CI).
pub fn corpus(name: &str) -> Option<PathBuf> {
    let base = std::env::var_os("GROUNDIDX_CORPORA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpora"));
    let path = base.join(name);
    if path.is_dir() {
        Some(path)
    } else {
        prerequisite_missing(&format!(
            "corpus {} not found (set GROUNDIDX_CORPORA to the corpora folder)",
            path.display()
        ));
        None
    }
}

/// Removes every setting the environment could slip into a command, so a test sees only its
/// own flags, files and variables.
pub fn isolate(command: &mut Command) {
    for var in [
        "GROUNDIDX_STORE",
        "GROUNDIDX_LEDGER",
        "GROUNDIDX_LEDGER_SCHEMA",
        "GROUNDIDX_LEDGER_CA",
        "GROUNDIDX_CRASH_AT",
        "GROUNDIDX_PAUSE_AT",
        "GROUNDIDX_FAKE_NOW_MS",
        "GROUNDIDX_CONFIG",
        "GROUNDIDX_CHUNK_SIZE",
        "GROUNDIDX_MAX_FILE_SIZE",
        "GROUNDIDX_ID_FIELDS",
        "GROUNDIDX_KEY_TTL",
        "GROUNDIDX_RATE_LIMIT",
        "GROUNDIDX_CLIENT_ID",
        "GROUNDIDX_LISTEN",
        "GROUNDIDX_TOKENS",
        "GROUNDIDX_LOG_FORMAT",
        "GROUNDIDX_EMBED_MODEL",
        "GROUNDIDX_EMBED_URL",
        "GROUNDIDX_EMBED_REMOTE_MODEL",
        "GROUNDIDX_EMBED_API_KEY",
        "GROUNDIDX_EMBED_QUERY_PREFIX",
        "GROUNDIDX_EMBED_PASSAGE_PREFIX",
        "GROUNDIDX_EMBED_MAX_TOKENS",
        "GROUNDIDX_ANN_FROM",
        "NO_COLOR",
    ] {
        command.env_remove(var);
    }
}

/// A temp folder holding `docs/` (the documents) and `store/`.
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub docs: PathBuf,
    pub store: PathBuf,
}

impl Env {
    /// An environment whose `docs/` is a copy of `sample_docs/`.
    pub fn sample() -> Env {
        let env = Env::empty();
        copy_tree(&sample_docs(), &env.docs);
        env
    }

    /// An environment whose `docs/` is a copy of `from`.
    pub fn copy_of(from: &Path) -> Env {
        let env = Env::empty();
        copy_tree(from, &env.docs);
        env
    }

    /// An environment with an empty `docs/`.
    pub fn empty() -> Env {
        let tmp = tempfile::tempdir().expect("create temp dir");
        let docs = tmp.path().join("docs");
        std::fs::create_dir_all(&docs).expect("create docs");
        let store = tmp.path().join("store");
        Env { tmp, docs, store }
    }

    /// A `groundidx --store STORE ARGS…` command, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.arg("--store").arg(&self.store).args(args);
        isolate(&mut command);
        command
    }

    /// Runs `groundidx --store STORE ARGS…`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run groundidx")
    }

    /// Runs a command that must succeed (exit 0) and returns its stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        assert_success(&output, args);
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "groundidx {args:?} printed no JSON ({err}):\n{}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// `ingest docs --json`, which must succeed.
    pub fn ingest(&self) -> Value {
        let docs = self.docs.to_str().expect("utf-8 temp path");
        self.json(&["ingest", docs, "--json"])
    }

    /// `search QUERY --json --top-k K`.
    pub fn search(&self, query: &str, top_k: usize) -> Value {
        self.json(&["search", query, "--json", "--top-k", &top_k.to_string()])
    }

    /// Every exported chunk: chunk ID to its sorted paths and the passage served for it.
    pub fn export(&self) -> BTreeMap<String, Exported> {
        export_of(self)
    }

    /// Writes a document under `docs/`, creating folders.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.docs.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create folders");
        std::fs::write(path, text).expect("write document");
    }

    /// Asserts that `verify` passes.
    pub fn assert_verified(&self) {
        let report = self.json(&["verify", "--json"]);
        assert_eq!(report["identical"], true, "verify: {report}");
    }
}

/// One chunk of `export`: where it appears, and the heading path and text served for it. A
/// comparison of two exports compares the text too, so a store that serves another variant of
/// a passage than a clean ingest would is told apart even under the same chunk ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    pub paths: Vec<String>,
    pub heading: String,
    pub text: String,
}

fn export_of(env: &Env) -> BTreeMap<String, Exported> {
    let output = env.run(&["export"]);
    assert_success(&output, &["export"]);
    parse_export(&String::from_utf8_lossy(&output.stdout))
}

/// `export`'s output as chunk ID to sorted paths, heading and text; a chunk listed twice fails
/// the test.
pub fn parse_export(text: &str) -> BTreeMap<String, Exported> {
    let mut chunks = BTreeMap::new();
    for line in text.lines() {
        let value: Value = serde_json::from_str(line).expect("export line is JSON");
        let id = value["chunk_id"].as_str().expect("chunk_id").to_string();
        let mut paths: Vec<String> = value["paths"]
            .as_array()
            .expect("paths")
            .iter()
            .map(|p| p.as_str().expect("path").to_string())
            .collect();
        paths.sort();
        let exported = Exported {
            paths,
            heading: value["heading"].as_str().expect("heading").to_string(),
            text: value["text"].as_str().expect("text").to_string(),
        };
        assert!(
            chunks.insert(id.clone(), exported).is_none(),
            "export repeats {id}"
        );
    }
    chunks
}

/// What a clean ingest of `docs` into a fresh store holds.
pub fn clean_export(docs: &Path) -> BTreeMap<String, Exported> {
    let clean = Env::empty();
    let output = clean
        .command(&[
            "ingest",
            docs.to_str().expect("utf-8"),
            "--json",
            "--allow-mass-delete",
        ])
        .output()
        .expect("run groundidx");
    assert!(
        output.status.success() || output.status.code() == Some(3),
        "clean ingest failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    export_of(&clean)
}

pub fn assert_success(output: &Output, args: &[&str]) {
    assert!(
        output.status.success(),
        "groundidx {args:?} exited {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Copies a folder tree (regular files and folders only).
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.expect("walk source tree");
        let rel = entry.path().strip_prefix(from).expect("under the source");
        let target = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).expect("create folder");
        } else if entry.file_type().is_file() {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A report's warnings as `(path, message)` pairs, in order.
pub fn warnings(report: &Value) -> Vec<(String, String)> {
    report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| {
            (
                w["path"].as_str().expect("path").to_string(),
                w["message"].as_str().expect("message").to_string(),
            )
        })
        .collect()
}
