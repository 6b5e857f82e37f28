//! The same relative path under two roots: a hit lists the path once in `paths` and says each
//! root in `sources`, in the CLI's JSON and text, the JSON API and MCP.

use serde_json::{Value, json};

use crate::support::http::serve;
use crate::support::mcp::schema_errors;
use crate::support::{Env, assert_success};

const TEXT: &str = "# Pelican\n\nThe pelican roster lists every pelican by name.\n";

/// A store holding `one/a.md` and `two/a.md` with the same text: one chunk, two sources.
fn two_roots() -> (Env, Vec<String>) {
    let env = Env::empty();
    let mut roots = Vec::new();
    for name in ["one", "two"] {
        let root = env.tmp.path().join(name);
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join("a.md"), TEXT).expect("write");
        let root = root.canonicalize().expect("canonical root");
        roots.push(root.to_str().expect("utf-8").to_string());
    }
    env.json(&["ingest", &roots[0], &roots[1], "--json"]);
    (env, roots)
}

/// Asserts a hit (or a chunk) names `a.md` once and both roots.
fn assert_both_roots(hit: &Value, roots: &[String]) {
    assert_eq!(hit["paths"], json!(["a.md"]), "{hit}");
    let mut sources: Vec<(String, String)> = hit["sources"]
        .as_array()
        .unwrap_or_else(|| panic!("no sources: {hit}"))
        .iter()
        .map(|s| {
            assert_eq!(s["lines"].as_array().map(Vec::len), Some(2), "{s}");
            (
                s["root"].as_str().expect("root").to_string(),
                s["path"].as_str().expect("path").to_string(),
            )
        })
        .collect();
    sources.sort();
    assert_eq!(
        sources,
        roots
            .iter()
            .map(|r| (r.clone(), "a.md".to_string()))
            .collect::<Vec<_>>(),
        "{hit}"
    );
}

#[test]
fn the_cli_says_which_root_each_path_is_under() {
    let (env, roots) = two_roots();
    let response = env.search("pelican roster", 5);
    let hits = response["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 1, "{response}");
    assert_both_roots(&hits[0], &roots);

    let output = env.run(&["search", "pelican roster"]);
    assert_success(&output, &["search", "pelican roster"]);
    let text = String::from_utf8_lossy(&output.stdout);
    let first = std::path::Path::new(&roots[0]).join("a.md");
    assert!(
        text.contains(first.to_str().expect("utf-8")),
        "the text names the file with its root: {text}"
    );

    let export = env.run(&["export"]);
    assert_success(&export, &["export"]);
    let line: Value = serde_json::from_slice(&export.stdout).expect("one JSON line");
    assert_both_roots(&line, &roots);
}

#[test]
fn the_agent_tools_say_which_root_each_path_is_under() {
    let (env, roots) = two_roots();
    let server = serve(&env, &[]);
    let reply = server.search(None, &json!({"query": "pelican roster"}).to_string());
    assert_eq!(reply.status, 200, "{reply}");
    let answer = reply.json();
    assert_both_roots(&answer["hits"][0], &roots);

    let result = server.mcp_call(
        &[],
        "search_docs",
        json!({"query": "pelican roster"}),
        Value::Null,
    );
    let structured = &result["structuredContent"];
    assert_both_roots(&structured["hits"][0], &roots);
    let (_, listed) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    let tools = listed["result"]["tools"].as_array().expect("tools");
    let schema_of = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {listed}"))["outputSchema"]
            .clone()
    };
    let search_schema = schema_of("search_docs");
    assert!(
        search_schema["properties"]["hits"]["items"]["properties"]["sources"].is_object(),
        "the output schema describes sources: {search_schema}"
    );
    let errors = schema_errors(&search_schema, structured);
    assert!(errors.is_empty(), "{errors:?}");

    let chunk_id = structured["hits"][0]["chunk_id"].as_str().expect("id");
    let chunk = server.mcp_call(&[], "get_chunk", json!({"chunk_id": chunk_id}), Value::Null);
    assert_both_roots(&chunk["structuredContent"]["chunk"], &roots);
    let chunk_schema = schema_of("get_chunk");
    assert!(
        chunk_schema["properties"]["chunk"]["properties"]["sources"].is_object(),
        "{chunk_schema}"
    );
    let errors = schema_errors(&chunk_schema, &chunk["structuredContent"]);
    assert!(errors.is_empty(), "{errors:?}");
}
