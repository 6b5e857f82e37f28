//! Reading around a hit: `read_document` (around a passage, by lines, by pages, whole, in parts
//! with a cursor, pinned to the generation a search saw), `list_documents` (the roots, filters,
//! pages from one generation) and the documents as MCP resources, over MCP stdio and the JSON
//! API; each call keyed like `search_docs`, so a replay writes nothing. The filters `search_docs`
//! and `search` share (root, path prefix or glob, tags, field values) select the same hits.

use rmcp::ServiceError;
use rmcp::model::{ReadResourceRequestParams, RequestMetaObject};
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::http::serve;
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{Called, Mcp, key, sample_store};

fn passages(answer: &Value) -> &Vec<Value> {
    answer["passages"]
        .as_array()
        .unwrap_or_else(|| panic!("no passages: {answer}"))
}

fn ordinals(answer: &Value) -> Vec<u64> {
    passages(answer)
        .iter()
        .map(|p| p["ordinal"].as_u64().expect("ordinal"))
        .collect()
}

fn ids(answer: &Value) -> Vec<String> {
    passages(answer)
        .iter()
        .map(|p| p["chunk_id"].as_str().expect("chunk_id").to_string())
        .collect()
}

fn paths(answer: &Value) -> Vec<String> {
    answer["documents"]
        .as_array()
        .unwrap_or_else(|| panic!("no documents: {answer}"))
        .iter()
        .map(|d| d["path"].as_str().expect("path").to_string())
        .collect()
}

/// `read_document` with a key of its own; must succeed.
async fn read(mcp: &Mcp, k: &str, arguments: Value) -> Value {
    let called = mcp.call("read_document", arguments, key(k)).await;
    called.assert_fresh();
    called.structured
}

/// `list_documents` with a key of its own; must succeed.
async fn list(mcp: &Mcp, k: &str, arguments: Value) -> Value {
    let called = mcp.call("list_documents", arguments, key(k)).await;
    called.assert_fresh();
    called.structured
}

#[tokio::test]
async fn around_a_hit_reads_its_neighbours_in_document_order() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let search = mcp
        .search("s", json!({"query": "restore a database", "top_k": 1}))
        .await;
    search.assert_fresh();
    let hit = &search.structured["hits"][0];
    assert_eq!(hit["paths"], json!(["handbook/backups.md"]), "{hit}");
    let id = hit["chunk_id"].as_str().expect("chunk_id");

    let whole = read(&mcp, "whole", json!({"path": "handbook/backups.md"})).await;
    assert_eq!(ordinals(&whole), [0, 1, 2, 3], "{whole}");
    assert_eq!(whole["document"]["title"], "Backups and restore", "{whole}");
    assert_eq!(whole["document"]["tags"], json!(["operations"]), "{whole}");
    assert_eq!(whole["generation"], search.structured["generation"]);
    let starts: Vec<u64> = passages(&whole)
        .iter()
        .map(|p| p["lines"][0].as_u64().expect("line"))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{whole}");
    let at = ids(&whole).iter().position(|i| i == id).expect("the hit");
    assert_eq!(passages(&whole)[at]["text"], hit["text"], "the hit's text");

    // One passage each side, with or without the path; none at the edges of the document.
    let around = read(&mcp, "around", json!({"chunk_id": id, "around": 1})).await;
    assert_eq!(ids(&around), ids(&whole)[at - 1..=at + 1], "{around}");
    let with_path = read(
        &mcp,
        "around/path",
        json!({"chunk_id": id, "around": 1, "path": "handbook/backups.md"}),
    )
    .await;
    assert_eq!(ids(&with_path), ids(&around));
    let only = read(&mcp, "around/0", json!({"chunk_id": id, "around": 0})).await;
    assert_eq!(ids(&only), [id]);
    let wide = read(&mcp, "around/9", json!({"chunk_id": id, "around": 9})).await;
    assert_eq!(ids(&wide), ids(&whole), "clamped to the document");

    // By lines: the passages that overlap them; none for the front matter.
    let schedule = read(
        &mcp,
        "lines",
        json!({"path": "handbook/backups.md", "lines": [13, 14]}),
    )
    .await;
    assert_eq!(ordinals(&schedule), [1], "{schedule}");
    assert_eq!(
        passages(&schedule)[0]["heading"],
        "Backups and restore > Schedule"
    );
    let front = read(
        &mcp,
        "front",
        json!({"path": "handbook/backups.md", "lines": [1, 3]}),
    )
    .await;
    assert_eq!(ordinals(&front), Vec::<u64>::new(), "{front}");

    // A passage that is not in the document named, a path no document has.
    let elsewhere = mcp
        .call(
            "read_document",
            json!({"chunk_id": id, "path": "handbook/deploys.md"}),
            key("elsewhere"),
        )
        .await;
    elsewhere.assert_error("not_found");
    let missing = mcp
        .call("read_document", json!({"path": "nope.md"}), key("nope"))
        .await;
    missing.assert_error("not_found");
    assert!(missing.text.contains("list_documents"), "{}", missing.text);
    mcp.stop().await;
}

#[tokio::test]
async fn a_document_changed_since_the_search_is_named_never_served_as_it_was_not() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let search = mcp
        .search("s", json!({"query": "nightly backups", "top_k": 1}))
        .await;
    let searched = search.structured["generation"].as_u64().expect("gen");
    let before = read(
        &mcp,
        "before",
        json!({"path": "handbook/backups.md", "generation": searched}),
    )
    .await;
    assert_eq!(before["generation"], searched);

    // Another ingest: backups.md changes, deploys.md does not.
    let text = std::fs::read_to_string(env.docs.join("handbook/backups.md")).expect("read");
    env.write("handbook/backups.md", &text.replace("35 days", "90 days"));
    env.write(
        "notes/new.md",
        "# New\n\nA note that moves the generation on.\n",
    );
    let now = env.ingest()["generation"].as_u64().expect("gen");
    assert!(now > searched);

    let changed = mcp
        .call(
            "read_document",
            json!({"path": "handbook/backups.md", "generation": searched}),
            key("changed"),
        )
        .await;
    changed.assert_error("document_changed");
    assert!(
        changed.text.contains("handbook/backups.md") && changed.text.contains("search again"),
        "{}",
        changed.text
    );
    // The same passage by its id, pinned: also changed (the id names the old text).
    let old_id = before["passages"][0]["chunk_id"].clone();
    let by_id = mcp
        .call(
            "read_document",
            json!({"chunk_id": old_id, "generation": searched}),
            key("changed/id"),
        )
        .await;
    assert!(by_id.is_error, "{}", by_id.raw);

    // Unchanged since the search: served, as of the searched generation.
    let deploys = read(
        &mcp,
        "unchanged",
        json!({"path": "handbook/deploys.md", "generation": searched}),
    )
    .await;
    assert_eq!(deploys["generation"], searched, "{deploys}");
    // Without a generation: the current version.
    let current = read(&mcp, "current", json!({"path": "handbook/backups.md"})).await;
    assert_eq!(current["generation"], now);
    assert!(current.to_string().contains("90 days"), "{current}");
    // A generation the store has not reached.
    let future = mcp
        .call(
            "read_document",
            json!({"path": "handbook/deploys.md", "generation": now + 5}),
            key("future"),
        )
        .await;
    future.assert_error("not_found");
    mcp.stop().await;
}

/// A document of `n` sections of about 300 characters each.
fn long_document(n: usize, word: &str) -> String {
    let mut text = String::from("# Long\n\n");
    for i in 0..n {
        text.push_str(&format!("## Section {i}\n\n"));
        for j in 0..5 {
            text.push_str(&format!(
                "Sentence {j} of section {i} tells of the {word} in some detail here.\n"
            ));
        }
        text.push('\n');
    }
    text
}

#[tokio::test]
async fn a_long_document_comes_in_parts_that_join_to_the_whole() {
    let env = Env::sample();
    env.write("long.md", &long_document(40, "capybara"));
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    let whole = read(
        &mcp,
        "whole",
        json!({"path": "long.md", "max_chars": 200000}),
    )
    .await;
    assert!(whole.get("next_cursor").is_none(), "{whole}");
    let all = ids(&whole);
    assert!(all.len() >= 20, "{} passages", all.len());

    let arguments = json!({"path": "long.md", "max_chars": 1000});
    let mut joined = Vec::new();
    let mut cursor: Option<String> = None;
    let mut parts = 0;
    loop {
        let mut call = arguments.clone();
        if let Some(cursor) = &cursor {
            call["cursor"] = json!(cursor);
        }
        let part = read(&mcp, &format!("part/{parts}"), call).await;
        parts += 1;
        let size: usize = passages(&part)
            .iter()
            .map(|p| p["text"].as_str().expect("text").chars().count())
            .sum();
        assert!(
            size <= 1000 || passages(&part).len() == 1,
            "part {parts}: {size} characters"
        );
        assert_eq!(part["generation"], whole["generation"]);
        joined.extend(ids(&part));
        match part.get("next_cursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(parts < 100, "the parts never end");
    }
    assert!(parts > 3, "{parts} parts");
    assert_eq!(joined, all, "the parts, in order, are the whole, each once");

    // A cursor is bound to its arguments.
    let first = read(&mcp, "again", arguments.clone()).await;
    let next = first["next_cursor"].as_str().expect("a next part");
    let other = mcp
        .call(
            "read_document",
            json!({"path": "handbook/backups.md", "max_chars": 1000, "cursor": next}),
            key("other"),
        )
        .await;
    other.assert_error("invalid_arguments");
    assert_eq!(counts(&env.store).audit, i64::from(parts) + 2);

    // Edited after the first part: the rest is refused, never mixed with the new version.
    env.write("long.md", &long_document(40, "wombat"));
    env.ingest();
    let mut call = arguments.clone();
    call["cursor"] = json!(next);
    let after = mcp.call("read_document", call, key("after")).await;
    after.assert_error("document_changed");
    mcp.stop().await;
}

#[tokio::test]
async fn a_path_under_two_roots_needs_its_root() {
    let env = Env::empty();
    let mut roots = Vec::new();
    for (name, animal) in [("one", "heron"), ("two", "egret")] {
        let root = env.tmp.path().join(name);
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(
            root.join("a.md"),
            format!("# Birds\n\nThe {animal} stands in the shallows.\n"),
        )
        .expect("write");
        roots.push(
            root.canonicalize()
                .expect("canonical")
                .to_str()
                .expect("utf-8")
                .to_string(),
        );
    }
    env.json(&["ingest", &roots[0], &roots[1], "--json"]);
    let mcp = Mcp::start(&env, &[]).await;
    let ambiguous = mcp
        .call("read_document", json!({"path": "a.md"}), key("a"))
        .await;
    ambiguous.assert_error("ambiguous_path");
    assert!(
        ambiguous.text.contains(&roots[0]) && ambiguous.text.contains(&roots[1]),
        "{}",
        ambiguous.text
    );
    let by_name = read(&mcp, "two", json!({"path": "a.md", "root": "two"})).await;
    assert!(by_name.to_string().contains("egret"), "{by_name}");
    assert_eq!(by_name["document"]["root"], roots[1]);
    let by_path = read(&mcp, "one", json!({"path": "a.md", "root": roots[0]})).await;
    assert!(by_path.to_string().contains("heron"), "{by_path}");
    let full = read(&mcp, "full", json!({"path": format!("{}/a.md", roots[1])})).await;
    assert!(full.to_string().contains("egret"), "a full path: {full}");
    assert_eq!(full["document"]["path"], "a.md");
    // Around a passage only one root holds: its source names the root.
    let heron = mcp
        .search("heron", json!({"query": "heron shallows", "top_k": 1}))
        .await;
    let id = heron.structured["hits"][0]["chunk_id"].clone();
    let around = read(&mcp, "around", json!({"chunk_id": id})).await;
    assert_eq!(around["document"]["root"], roots[0], "{around}");
    let around = read(&mcp, "around/path", json!({"chunk_id": id, "path": "a.md"})).await;
    assert_eq!(around["document"]["root"], roots[0], "{around}");
    let unknown = mcp
        .call(
            "read_document",
            json!({"path": "a.md", "root": "three"}),
            key("three"),
        )
        .await;
    unknown.assert_error("not_found");

    let listing = list(&mcp, "list", json!({})).await;
    assert_eq!(
        listing["roots"],
        json!([{"root": roots[0], "documents": 1}, {"root": roots[1], "documents": 1}])
    );
    let two = list(&mcp, "list/two", json!({"root": "two"})).await;
    assert_eq!(two["documents"].as_array().map(Vec::len), Some(1), "{two}");
    assert_eq!(two["documents"][0]["root"], roots[1]);
    // search_docs takes a root by its folder name too.
    let hits = mcp
        .search("search", json!({"query": "shallows", "root": "one"}))
        .await;
    hits.assert_fresh();
    let found = hits.structured["hits"].as_array().expect("hits");
    assert_eq!(found.len(), 1, "{}", hits.raw);
    assert_eq!(found[0]["sources"][0]["root"], roots[0]);
    mcp.stop().await;
}

#[tokio::test]
async fn listings_filter_like_search_and_page_within_one_generation() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let all = list(&mcp, "all", json!({})).await;
    assert_eq!(paths(&all).len(), 8, "{all}");
    assert_eq!(all["roots"][0]["documents"], 8);
    let key_rotation = all["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .find(|d| d["path"] == "handbook/key-rotation.md")
        .expect("listed");
    assert_eq!(key_rotation["title"], "Signing key rotation");
    assert_eq!(key_rotation["tags"], json!(["operations", "security"]));
    assert_eq!(key_rotation["chunks"], 4);

    for (i, (arguments, expected)) in [
        (
            json!({"title": "GETTING help"}),
            vec!["handbook/support.md", "notes/support.md"],
        ),
        (
            json!({"tags": ["security"]}),
            vec!["handbook/key-rotation.md"],
        ),
        (
            json!({"path_prefix": "notes/"}),
            vec!["notes/faq.md", "notes/glossary.txt", "notes/support.md"],
        ),
        (json!({"path_glob": "**/*.txt"}), vec!["notes/glossary.txt"]),
        (
            json!({"path_glob": "handbook/{deploys,backups}.md"}),
            vec!["handbook/backups.md", "handbook/deploys.md"],
        ),
        (
            json!({"fields": {"title": "deploying A service"}}),
            vec!["handbook/deploys.md"],
        ),
        (json!({"fields": {"title": "deploying"}}), vec![]),
        (
            json!({"tags": ["operations"], "path_glob": "*/k*"}),
            vec!["handbook/key-rotation.md"],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = list(&mcp, &format!("filter/{i}"), arguments.clone()).await;
        assert_eq!(paths(&answer), expected, "{arguments}: {answer}");
    }

    // Pages of three, joined, are the whole listing.
    let mut joined = Vec::new();
    let mut cursor = None;
    for page in 0.. {
        let mut arguments = json!({"limit": 3});
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let answer = list(&mcp, &format!("page/{page}"), arguments).await;
        joined.extend(paths(&answer));
        match answer.get("next_cursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(joined, paths(&all));

    // A cursor from an older generation has expired; a bad glob or field is refused.
    let first = list(&mcp, "page/again", json!({"limit": 3})).await;
    env.write("notes/more.md", "# More\n\nAnother note.\n");
    env.ingest();
    let expired = mcp
        .call(
            "list_documents",
            json!({"limit": 3, "cursor": first["next_cursor"]}),
            key("expired"),
        )
        .await;
    expired.assert_error("cursor_expired");
    for (arguments, phrase) in [
        (json!({"path_glob": "a/[b"}), "path_glob"),
        (json!({"fields": {"title": 3}}), "fields"),
        (json!({"limit": 0}), "limit"),
        (json!({"sort": "title"}), "sort"),
    ] {
        let refused = mcp
            .call("list_documents", arguments.clone(), key("refused"))
            .await;
        refused.assert_error("invalid_arguments");
        assert!(
            refused.text.contains(phrase),
            "{arguments}: {}",
            refused.text
        );
    }
    mcp.stop().await;
}

#[tokio::test]
async fn search_docs_and_the_cli_filter_alike() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let hit_paths = |called: &Called| -> Vec<String> {
        called.assert_fresh();
        let mut paths: Vec<String> = called.structured["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .flat_map(|h| h["paths"].as_array().expect("paths").clone())
            .map(|p| p.as_str().expect("path").to_string())
            .collect();
        paths.sort();
        paths.dedup();
        paths
    };
    for (i, (arguments, flags)) in [
        (
            json!({"query": "help support", "path_glob": "notes/**"}),
            vec!["--glob", "notes/**"],
        ),
        (
            json!({"query": "rotate key deploy", "fields": {"title": "signing key rotation"}}),
            vec!["--field", "title=signing key rotation"],
        ),
        (
            json!({"query": "help", "root": "docs", "path_prefix": "handbook/"}),
            vec!["--path", "handbook/"],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let tool = hit_paths(&mcp.search(&format!("f{i}"), arguments.clone()).await);
        assert!(!tool.is_empty(), "{arguments}");
        let query = arguments["query"].as_str().expect("query");
        let mut args = vec!["search", query, "--json", "--top-k", "10"];
        args.extend(flags);
        let cli = env.json(&args);
        let mut cli_paths: Vec<String> = cli["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .flat_map(|h| h["paths"].as_array().expect("paths").clone())
            .map(|p| p.as_str().expect("path").to_string())
            .collect();
        cli_paths.sort();
        cli_paths.dedup();
        assert_eq!(tool, cli_paths, "{arguments}");
    }
    let refused = mcp
        .search("bad", json!({"query": "x", "path_glob": "[z"}))
        .await;
    refused.assert_error("invalid_arguments");
    mcp.stop().await;
}

#[tokio::test]
async fn reads_are_keyed_like_searches() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let arguments = json!({"path": "handbook/deploys.md"});
    let first = mcp
        .call("read_document", arguments.clone(), key("r/1"))
        .await;
    first.assert_fresh();
    let again = mcp
        .call("read_document", arguments.clone(), key("r/1"))
        .await;
    assert_eq!(again.replayed(), &json!(true), "{}", again.raw);
    assert_eq!(again.structured, first.structured);
    let other = mcp
        .call(
            "read_document",
            json!({"path": "handbook/backups.md"}),
            key("r/1"),
        )
        .await;
    other.assert_error("idempotency_key_reused");
    let listed = mcp.call("list_documents", json!({}), key("r/2")).await;
    listed.assert_fresh();
    let relisted = mcp.call("list_documents", json!({}), key("r/2")).await;
    assert_eq!(relisted.replayed(), &json!(true));
    assert_eq!(counts(&env.store), executed(2));

    // A resource read with a key in its _meta is a keyed read_document call.
    let mut meta = RequestMetaObject::new();
    meta.insert("groundidx/idempotencyKey".into(), json!("r/3"));
    let params =
        ReadResourceRequestParams::new("groundidx://docs/handbook/deploys.md").with_meta(meta);
    let one = mcp
        .client()
        .read_resource(params.clone())
        .await
        .expect("resources/read");
    let two = mcp
        .client()
        .read_resource(params)
        .await
        .expect("resources/read");
    assert_eq!(
        serde_json::to_value(&one.contents).expect("json"),
        serde_json::to_value(&two.contents).expect("json")
    );
    assert_eq!(counts(&env.store), executed(3));
    mcp.stop().await;
    let audit = env.json(&["audit", "--json"]);
    let tools: Vec<&str> = audit
        .as_array()
        .or_else(|| audit["events"].as_array())
        .unwrap_or_else(|| panic!("audit: {audit}"))
        .iter()
        .map(|e| e["tool"].as_str().expect("tool"))
        .collect();
    assert_eq!(
        tools.iter().filter(|t| **t == "read_document").count(),
        2,
        "{audit}"
    );
}

#[tokio::test]
async fn documents_are_resources_listed_in_pages_and_read_with_their_headings() {
    let env = Env::sample();
    // One page of resources/list is list_documents' largest, 1,000.
    for i in 0..1000 {
        env.write(
            &format!("many/m{i:04}.md"),
            &format!("# Marker {i}\n\nThe tapir census entry {i}.\n"),
        );
    }
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    let resources = mcp
        .client()
        .list_all_resources()
        .await
        .expect("resources/list");
    assert_eq!(resources.len(), 1008, "every document, across pages");
    let first = mcp
        .client()
        .list_resources(None)
        .await
        .expect("resources/list");
    assert_eq!(first.resources.len(), 1000);
    assert!(
        first.next_cursor.is_some(),
        "1,008 documents need two pages"
    );
    let backups = resources
        .iter()
        .find(|r| r.uri == "groundidx://docs/handbook/backups.md")
        .expect("backups listed");
    let listed = serde_json::to_value(backups).expect("json");
    assert_eq!(listed["title"], "Backups and restore", "{listed}");
    assert_eq!(listed["mimeType"], "text/markdown", "{listed}");

    let templates = mcp
        .client()
        .list_all_resource_templates()
        .await
        .expect("templates");
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "groundidx://{root}/{path}");

    let read = mcp
        .client()
        .read_resource(ReadResourceRequestParams::new(backups.uri.clone()))
        .await
        .expect("resources/read");
    let contents = serde_json::to_value(&read.contents).expect("json");
    let text = contents[0]["text"].as_str().expect("text");
    assert!(
        text.starts_with("# Backups and restore\n\nEvery database is backed up"),
        "{text}"
    );
    assert!(text.contains("\n\n## Schedule\n\n| Data"), "{text}");
    // The template expanded as RFC 6570 expands {path}: its / encoded.
    let expanded = mcp
        .client()
        .read_resource(ReadResourceRequestParams::new(
            "groundidx://docs/handbook%2Fbackups.md",
        ))
        .await
        .expect("resources/read of the expanded template");
    assert_eq!(
        serde_json::to_value(&expanded.contents).expect("json")[0]["text"],
        text
    );

    for (uri, code) in [
        ("groundidx://docs/handbook/nope.md", -32002),
        ("groundidx://elsewhere/handbook/backups.md", -32002),
        ("file:///etc/passwd", -32002),
        ("groundidx://docs/../../../etc/passwd", -32002),
        ("groundidx://docs/handbook/..%2F..%2Fbackups.md", -32002),
        ("groundidx://%2Fetc/passwd", -32002),
    ] {
        match mcp
            .client()
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
        {
            Err(ServiceError::McpError(error)) => {
                assert_eq!(error.code.0, code, "{uri}: {error:?}");
            }
            other => panic!("{uri}: expected error {code}, got {other:?}"),
        }
    }
    mcp.stop().await;
}

#[test]
fn the_json_api_reads_and_lists_with_problems_for_what_it_cannot() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let reply = server.tool(
        "read_document",
        &[("Idempotency-Key", "\"j/1\"")],
        &json!({"path": "handbook/deploys.md", "lines": [1, 100]}).to_string(),
    );
    assert_eq!(reply.status, 200, "{reply}");
    let answer = reply.json();
    assert_eq!(answer["document"]["path"], "handbook/deploys.md");
    assert!(!passages(&answer).is_empty(), "{answer}");
    let again = server.tool(
        "read_document",
        &[("Idempotency-Key", "\"j/1\"")],
        &json!({"path": "handbook/deploys.md", "lines": [1, 100]}).to_string(),
    );
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"), "{again}");

    let listing = server.tool(
        "list_documents",
        &[],
        &json!({"tags": ["release"]}).to_string(),
    );
    assert_eq!(listing.status, 200, "{listing}");
    assert_eq!(paths(&listing.json()), ["handbook/deploys.md"]);

    let missing = server.tool(
        "read_document",
        &[],
        &json!({"path": "nope.md"}).to_string(),
    );
    let problem = missing.assert_problem(404);
    assert_eq!(problem["code"], "not_found", "{problem}");

    let generation = answer["generation"].as_u64().expect("generation");
    env.write("handbook/deploys.md", "# Deploying\n\nNow by hand only.\n");
    env.ingest();
    let changed = server.tool(
        "read_document",
        &[],
        &json!({"path": "handbook/deploys.md", "generation": generation}).to_string(),
    );
    let problem = changed.assert_problem(409);
    assert_eq!(problem["code"], "document_changed", "{problem}");
    let bad = server.tool("read_document", &[], &json!({"lines": [1, 2]}).to_string());
    let problem = bad.assert_problem(400);
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("path")),
        "{problem}"
    );
}

/// A PDF of `pages`, each page's lines drawn one under the other.
fn pdf_of(pages: &[Vec<String>]) -> Vec<u8> {
    use crate::formats_pdf_adoc::{FONT, pdf, stream, text};
    let n = pages.len();
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 3 + 2 * i)).collect();
    let mut objects = vec![
        text("<< /Type /Catalog /Pages 2 0 R >>"),
        text(&format!(
            "<< /Type /Pages /Kids [{}] /Count {n} >>",
            kids.join(" ")
        )),
    ];
    for (i, lines) in pages.iter().enumerate() {
        objects.push(text(&format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << {FONT} >> /Contents {} 0 R >>",
            4 + 2 * i
        )));
        let mut content = String::from("BT /F1 11 Tf 72 740 Td 14 TL ");
        for line in lines {
            content.push_str(&format!("({line}) Tj T* "));
        }
        content.push_str("ET");
        objects.push(stream("", content.as_bytes()));
    }
    pdf(&objects, "")
}

#[tokio::test]
async fn a_pdf_is_read_by_pages() {
    let env = Env::empty();
    let animals = ["okapi", "dugong", "saola"];
    let pages: Vec<Vec<String>> = animals
        .iter()
        .enumerate()
        .map(|(page, animal)| {
            (0..30)
                .map(|line| {
                    format!(
                        "Line {line} of page {} is about the {animal} and its habits.",
                        page + 1
                    )
                })
                .collect()
        })
        .collect();
    std::fs::write(env.docs.join("animals.pdf"), pdf_of(&pages)).expect("write the PDF");
    std::fs::write(env.docs.join("notes.md"), "# Notes\n\nNo pages here.\n").expect("write");
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    let whole = read(&mcp, "whole", json!({"path": "animals.pdf"})).await;
    let on_pages: Vec<(u64, u64)> = passages(&whole)
        .iter()
        .map(|p| {
            (
                p["pages"][0].as_u64().expect("pages"),
                p["pages"][1].as_u64().expect("pages"),
            )
        })
        .collect();
    assert!(
        on_pages.iter().any(|(a, _)| *a == 1) && on_pages.iter().any(|(_, b)| *b == 3),
        "{on_pages:?}"
    );
    let second = read(
        &mcp,
        "page2",
        json!({"path": "animals.pdf", "pages": [2, 2]}),
    )
    .await;
    assert!(!passages(&second).is_empty(), "{second}");
    for passage in passages(&second) {
        let (first, last) = (
            passage["pages"][0].as_u64().expect("page"),
            passage["pages"][1].as_u64().expect("page"),
        );
        assert!(first <= 2 && 2 <= last, "{passage}");
    }
    let text = second.to_string();
    assert!(text.contains("dugong"), "{second}");
    assert!(
        passages(&second).len() < passages(&whole).len(),
        "page 2 is not the whole document"
    );
    let no_pages = mcp
        .call(
            "read_document",
            json!({"path": "notes.md", "pages": [1, 1]}),
            key("no-pages"),
        )
        .await;
    no_pages.assert_error("not_found");
    assert!(no_pages.text.contains("lines"), "{}", no_pages.text);
    mcp.stop().await;
}

#[tokio::test]
async fn a_ledger_from_before_generations_per_document_is_taken_as_changed_until_it_is_known() {
    let env = sample_store();
    env.write("notes/faq.md", "# FAQ\n\nAsked once, answered here.\n");
    let second = env.ingest()["generation"].as_u64().expect("generation");
    {
        crate::support::ledger::store_links_by_hash(&env.store.join("ledger.sqlite"));
        let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("ledger");
        ledger
            .execute_batch(
                "ALTER TABLE sources DROP COLUMN since_generation;
                 UPDATE meta SET value = 9 WHERE name = 'schema_version';",
            )
            .expect("make schema 9");
    }
    let pinned = |path: &str, generation: u64| json!({"path": path, "generation": generation, "lines": [1, 4]});
    let mcp = Mcp::start(&env, &[]).await;
    // Unknown since when: as recent as can be, so an older generation is refused, never guessed.
    let older = mcp
        .call(
            "read_document",
            pinned("handbook/deploys.md", second - 1),
            key("older"),
        )
        .await;
    older.assert_error("document_changed");
    read(&mcp, "now", pinned("handbook/deploys.md", second)).await;
    mcp.stop().await;

    // After the upgrade each change is recorded: an untouched document keeps its generation.
    env.write("handbook/backups.md", "# Backups\n\nWeekly now.\n");
    let third = env.ingest()["generation"].as_u64().expect("generation");
    assert!(third > second);
    let mcp = Mcp::start(&env, &[]).await;
    read(&mcp, "kept", pinned("handbook/deploys.md", second)).await;
    let changed = mcp
        .call(
            "read_document",
            pinned("handbook/backups.md", second),
            key("changed"),
        )
        .await;
    changed.assert_error("document_changed");
    mcp.stop().await;
}

#[tokio::test]
async fn field_values_and_titles_match_ignoring_case_in_any_script() {
    let env = Env::empty();
    env.write(
        "zurich.md",
        "---\ntitle: Été à Zürich\nstatus: Première\n---\n# Été à Zürich\n\nThe lake swims in August.\n",
    );
    env.write(
        "athens.md",
        "---\ntitle: ΚΑΛΟΚΑΙΡΙ\nstatus: draft\n---\n# Athens\n\nThe sea swims in August.\n",
    );
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    for (i, (arguments, expected)) in [
        (json!({"fields": {"status": "PREMIÈRE"}}), vec!["zurich.md"]),
        (json!({"title": "ÉTÉ À"}), vec!["zurich.md"]),
        (json!({"title": "καλοκαίρι"}), vec![]),
        (json!({"title": "καλοκαιρι"}), vec!["athens.md"]),
        (
            json!({"fields": {"status": "DRAFT", "title": "καλοκαιρι"}}),
            vec!["athens.md"],
        ),
        (json!({"fields": {"Status": "draft"}}), vec![]),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = list(&mcp, &format!("case/{i}"), arguments.clone()).await;
        assert_eq!(paths(&answer), expected, "{arguments}: {answer}");
    }
    let hits = mcp
        .search(
            "search",
            json!({"query": "swims August", "fields": {"status": "première"}}),
        )
        .await;
    hits.assert_fresh();
    let found: Vec<&Value> = hits.structured["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| &h["paths"][0])
        .collect();
    assert_eq!(found, [&json!("zurich.md")], "{}", hits.raw);
    mcp.stop().await;
}
