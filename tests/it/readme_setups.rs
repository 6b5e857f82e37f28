//! README's own setups keep hybrid search: its first `ingest --embed-model` with a relative
//! model folder, its cron line, the systemd unit it points to and its MCP client configuration,
//! each read from the file itself and run from another current folder than the one the store
//! was made in, answer in hybrid mode with every chunk embedded; and every client configuration
//! README shows (Claude Desktop, Cursor, VS Code, Claude Code, HTTP with a bearer token) starts
//! a server that answers, from an absolute `command` path. A README change that breaks one of
//! them breaks these tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::recorded_model::small_env;
use crate::support::embed_server::model_dir;
use crate::support::http::{Server, serve, tokens_file};
use crate::support::mcp::Mcp;
use crate::support::{BIN, Env, assert_success, isolate};

fn repository_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// The fenced blocks of a Markdown text whose info string is `language`, in order.
fn fenced_blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start().strip_prefix("```") == Some(language) => {
                current = Some(String::new());
            }
            Some(_) if line.trim_start().starts_with("```") => {
                blocks.extend(current.take());
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// README's placeholders made real: the binary, the store and the documents folder.
struct Places<'a> {
    store: &'a Path,
    docs: &'a Path,
}

impl Places<'_> {
    /// One word of a README command line with its placeholder replaced.
    fn word(&self, word: &str) -> String {
        match word {
            "groundidx" | "/usr/local/bin/groundidx" => BIN.to_string(),
            "/var/lib/groundidx" => self.store.display().to_string(),
            "/srv/docs" | "./docs" => self.docs.display().to_string(),
            other => other.to_string(),
        }
    }

    /// A README command line (plain words, no shell syntax) as a command run from `cwd`.
    fn command(&self, line: &str, cwd: &Path) -> Command {
        let words: Vec<String> = line.split_whitespace().map(|w| self.word(w)).collect();
        assert!(
            words
                .iter()
                .all(|w| !w.contains(['|', '>', '<', ';', '&', '$', '`'])),
            "README's command is plain words: {line}"
        );
        let mut command = Command::new(&words[0]);
        command.args(&words[1..]).current_dir(cwd);
        isolate(&mut command);
        command
    }
}

/// Every chunk has a vector of the store's model, found from `cwd`, so search would be hybrid.
fn assert_all_embedded(env: &Env, cwd: &Path) {
    let status = run_json(env, cwd, &["status", "--json"]);
    assert_eq!(status["mode"], "hybrid", "{status}");
    assert_eq!(status["semantic"]["state"], "on", "{status}");
    assert_eq!(
        status["semantic"]["coverage"]["vectors"], status["chunks"],
        "every chunk embedded: {status}"
    );
}

/// Every chunk embedded, and a search from `cwd` is hybrid (loading the model costs a second
/// in a debug build, so not after every step).
fn assert_hybrid_everywhere(env: &Env, cwd: &Path, query: &str) {
    assert_all_embedded(env, cwd);
    let answer = run_json(env, cwd, &["search", query, "--json"]);
    assert_eq!(answer["mode"], "hybrid", "{answer}");
    assert_eq!(answer["semantic"]["state"], "on", "{answer}");
    assert_eq!(
        answer["semantic_coverage"]["vectors"], answer["semantic_coverage"]["chunks"],
        "{answer}"
    );
}

fn run_json(env: &Env, cwd: &Path, args: &[&str]) -> Value {
    let output = env
        .command(args)
        .current_dir(cwd)
        .output()
        .expect("run groundidx");
    assert_success(&output, args);
    assert!(
        output.stderr.is_empty(),
        "nothing on stderr when hybrid runs at full coverage: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readmes_cron_line_systemd_unit_and_mcp_config_keep_hybrid_search() {
    let Some(model) = model_dir() else { return };
    let readme = repository_file("README.md");
    let env = small_env();
    let places = Places {
        store: &env.store,
        docs: &env.docs,
    };
    let root = PathBuf::from("/");

    // README's first run with a model, from the model's parent folder, the model named
    // relative to it.
    let first = fenced_blocks(&readme, "sh")
        .iter()
        .flat_map(|block| block.lines().map(str::to_string).collect::<Vec<_>>())
        .find(|line| line.contains("ingest") && line.contains("--embed-model ./"))
        .expect("README shows an ingest with a relative --embed-model");
    let first = first
        .split('#')
        .next()
        .expect("a command")
        .trim()
        .to_string();
    let model_name = model
        .file_name()
        .and_then(|n| n.to_str())
        .expect("the model folder's name");
    let first = first.replace(
        first
            .split_whitespace()
            .find(|w| w.starts_with("./") && w.contains("MiniLM"))
            .expect("README names the model folder"),
        &format!("./{model_name}"),
    );
    let mut ingest = places.command(&first, model.parent().expect("the model's parent"));
    ingest.args(["--store", env.store.to_str().expect("utf-8")]);
    let output = ingest.output().expect("run README's first ingest");
    assert_success(&output, &[first.as_str()]);
    assert_hybrid_everywhere(&env, &root, "undo a release");

    // The cron line, run as cron does: from another folder (cron's is the user's home; `/`
    // here), with only the words on the line.
    let cron = fenced_blocks(&readme, "cron");
    let cron_line = cron
        .first()
        .and_then(|block| block.lines().find(|l| l.contains("ingest")))
        .expect("README has a cron block with an ingest line");
    let cron_command: Vec<&str> = cron_line.split_whitespace().skip(5).collect();
    env.write(
        "backups.md",
        "# Backups\n\nSnapshots are kept for a week.\n",
    );
    let output = places
        .command(&cron_command.join(" "), &root)
        .output()
        .expect("run the cron line");
    assert_success(&output, &cron_command);
    assert!(output.stdout.is_empty(), "--quiet: {output:?}");
    assert_all_embedded(&env, &root);

    // The systemd unit README points to, its ExecStart run from `/` (systemd's default
    // working directory for a system service).
    assert!(readme.contains("contrib/systemd/"), "README names the unit");
    let unit = repository_file("contrib/systemd/groundidx-ingest.service");
    let exec_start = unit
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart line");
    env.write("alerts.md", "# Alerts\n\nPage the on-call engineer.\n");
    let output = places
        .command(exec_start, &root)
        .output()
        .expect("run the unit's ExecStart");
    assert_success(&output, &[exec_start]);
    assert_all_embedded(&env, &root);

    // The MCP client configuration: its command and arguments started from another folder,
    // as Claude Desktop or Cursor starts them.
    let config: Value = fenced_blocks(&readme, "json")
        .iter()
        .find(|block| block.contains("mcpServers"))
        .map(|block| serde_json::from_str(block).expect("README's MCP configuration is JSON"))
        .expect("README has an MCP client configuration");
    let server = config["mcpServers"]
        .as_object()
        .and_then(|servers| servers.values().next())
        .expect("one server in the configuration");
    let command_line: Vec<String> = std::iter::once(&server["command"])
        .chain(server["args"].as_array().expect("args").iter())
        .map(|word| word.as_str().expect("a string").to_string())
        .collect();
    let mcp = Mcp::start_command(
        places.command(&command_line.join(" "), &env.docs),
        env.tmp.path(),
    )
    .await;
    let called = mcp
        .search("readme-setup", json!({"query": "who gets paged"}))
        .await;
    called.assert_fresh();
    assert_eq!(called.structured["mode"], "hybrid", "{}", called.raw);
    assert_eq!(
        called.structured["semantic"]["state"], "on",
        "{}",
        called.raw
    );
    assert_eq!(
        called.structured["semantic"]["coverage"]["vectors"],
        called.structured["semantic"]["coverage"]["chunks"],
        "{}",
        called.raw
    );
    mcp.stop().await;
}

/// The token README's HTTP configurations stand for with `TOKEN`.
const README_TOKEN: &str = "readme-token-0123456789";

/// A README configuration's words with its placeholders made real (`TOKEN` too).
fn real(places: &Places, words: &[String]) -> String {
    words
        .iter()
        .map(|word| places.word(word).replace("TOKEN", README_TOKEN))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts a README stdio configuration's command line and checks the server lists every tool.
async fn assert_stdio_config_serves(places: &Places<'_>, env: &Env, words: &[String], what: &str) {
    assert!(
        words[0].starts_with('/'),
        "{what}: `command` must be an absolute path (a desktop client does not see ~/.cargo/bin): {words:?}"
    );
    let mcp = Mcp::start_command(
        places.command(&real(places, words), &env.docs),
        env.tmp.path(),
    )
    .await;
    let tools = mcp.client().list_all_tools().await.expect("tools/list");
    mcp.stop().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "search_docs",
            "get_chunk",
            "read_document",
            "list_documents"
        ],
        "{what}"
    );
}

/// Initializes over README's HTTP configuration (its URL on the test server, its headers).
fn assert_http_config_serves(server: &Server, url: &str, headers: &[(String, String)], what: &str) {
    let path = url
        .strip_prefix("http://127.0.0.1:7878")
        .unwrap_or_else(|| panic!("{what}: README's URL is serve's default address: {url}"));
    assert_eq!(path, "/mcp", "{what}");
    let mut all: Vec<(&str, String)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.replace("TOKEN", README_TOKEN)))
        .collect();
    assert!(
        all.iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("authorization")
                && value.starts_with("Bearer ")),
        "{what}: a bearer token: {headers:?}"
    );
    all.push(("Accept", "application/json, text/event-stream".into()));
    all.push(("Content-Type", "application/json".into()));
    let borrowed: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "readme", "version": "0"}}});
    let reply = server.post(path, &borrowed, &initialize.to_string());
    assert_eq!(reply.status, 200, "{what}: {reply}");
    assert_eq!(
        reply.json()["result"]["serverInfo"]["name"],
        "groundidx",
        "{what}"
    );
}

#[tokio::test]
async fn every_client_configuration_in_readme_starts_a_server() {
    let readme = repository_file("README.md");
    let env = crate::support::mcp::sample_store();
    let places = Places {
        store: &env.store,
        docs: &env.docs,
    };
    let tokens = tokens_file(&env, &[(README_TOKEN, "readme")]);
    let server = serve(&env, &["--tokens", tokens.to_str().expect("utf-8")]);
    let (mut stdio, mut http, mut vs_code) = (0, 0, 0);
    for block in fenced_blocks(&readme, "json") {
        let config: Value = serde_json::from_str(&block)
            .unwrap_or_else(|err| panic!("a JSON block of README is not JSON ({err}): {block}"));
        let (servers, is_vs_code) = match (config.get("mcpServers"), config.get("servers")) {
            (Some(servers), None) => (servers, false),
            (None, Some(servers)) => (servers, true),
            _ => continue,
        };
        for (name, entry) in servers.as_object().expect("servers by name") {
            let what = format!("README's configuration {name}: {entry}");
            if is_vs_code {
                vs_code += 1;
                assert!(entry["type"].is_string(), "{what}: VS Code needs type");
            }
            if let Some(command) = entry.get("command") {
                let words: Vec<String> = std::iter::once(command)
                    .chain(entry["args"].as_array().expect("args"))
                    .map(|w| w.as_str().expect("a string").to_string())
                    .collect();
                assert_stdio_config_serves(&places, &env, &words, &what).await;
                stdio += 1;
            } else {
                let url = entry["url"].as_str().expect("command or url");
                let headers: Vec<(String, String)> = entry["headers"]
                    .as_object()
                    .expect("headers")
                    .iter()
                    .map(|(n, v)| (n.clone(), v.as_str().expect("a string").to_string()))
                    .collect();
                assert_http_config_serves(&server, url, &headers, &what);
                http += 1;
            }
        }
    }
    // Claude Code's command lines: a stdio server after `--`, an HTTP one with a header.
    let mut claude = 0;
    for line in fenced_blocks(&readme, "sh")
        .iter()
        .flat_map(|block| block.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|line| line.starts_with("claude mcp add"))
    {
        claude += 1;
        if let Some((_, command)) = line.split_once(" -- ") {
            let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
            assert_stdio_config_serves(&places, &env, &words, &line).await;
        } else {
            let words: Vec<&str> = line.split_whitespace().collect();
            let url = words
                .iter()
                .find(|w| w.starts_with("http://"))
                .unwrap_or_else(|| panic!("a URL: {line}"));
            let (_, header) = line
                .split_once("--header \"")
                .unwrap_or_else(|| panic!("a --header: {line}"));
            let header = header.trim_end_matches('"');
            let (name, value) = header.split_once(": ").expect("Name: value");
            assert_http_config_serves(
                &server,
                url,
                &[(name.to_string(), value.to_string())],
                &line,
            );
        }
    }
    assert!(
        stdio >= 2 && http >= 1 && vs_code >= 1 && claude >= 2,
        "README shows stdio ({stdio}), HTTP ({http}), VS Code ({vs_code}) and Claude Code ({claude}) configurations"
    );
}
