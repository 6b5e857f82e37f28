//! Invariant 3 and the search contract: no passage twice, every source listed, filters,
//! snippets, a lenient parser and the `--json` fields scripts rely on.

use std::collections::HashSet;

use crate::support::Env;

#[test]
fn search_never_returns_the_same_text_twice() {
    let env = Env::sample();
    env.ingest();
    // "Support contacts" is the same passage under two different headings.
    let response = env.search("page the on-call security engineer", 20);
    let hits = response["hits"].as_array().expect("hits");
    let mut texts = HashSet::new();
    for hit in hits {
        let text: String = hit["text"]
            .as_str()
            .expect("text")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(texts.insert(text), "a passage came back twice: {response}");
    }
    let folded = hits
        .iter()
        .find(|hit| {
            hit["text"]
                .as_str()
                .expect("text")
                .contains("keyctl resume")
        })
        .expect("the shared passage is found");
    let mut paths: Vec<&str> = folded["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p.as_str().expect("path"))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        ["handbook/backups.md", "handbook/key-rotation.md"],
        "{folded}"
    );
}

#[test]
fn hits_carry_the_contract_fields() {
    let env = Env::sample();
    env.ingest();
    let response = env.search("rotate the signing key", 5);
    assert!(response["generation"].as_u64().expect("generation") >= 1);
    assert!(
        response["last_ingest"]
            .as_str()
            .expect("last_ingest")
            .ends_with('Z')
    );
    let hit = &response["hits"][0];
    for field in [
        "chunk_id", "score", "paths", "heading", "lines", "snippet", "text",
    ] {
        assert!(!hit[field].is_null(), "hit lacks {field}: {hit}");
    }
    assert_eq!(hit["chunk_id"].as_str().expect("id").len(), 64);
    assert_eq!(hit["paths"][0], "handbook/key-rotation.md");
    assert!(
        hit["heading"]
            .as_str()
            .expect("heading")
            .starts_with("Signing key rotation")
    );
    assert!(
        hit["snippet"].as_str().expect("snippet").contains("**"),
        "{hit}"
    );
    let lines = hit["lines"].as_array().expect("lines");
    assert!(lines[0].as_u64() <= lines[1].as_u64());
}

#[test]
fn stemming_and_heading_boost() {
    let env = Env::sample();
    env.ingest();
    // "rotating" stems to "rotat", like "rotate" and "rotation".
    let response = env.search("rotating", 3);
    assert!(
        response["hits"][0]["paths"][0]
            .as_str()
            .expect("path")
            .contains("key-rotation"),
        "{response}"
    );
}

#[test]
fn path_and_tag_filters() {
    let env = Env::sample();
    env.ingest();
    let all = env.search("days", 20);
    assert!(all["hits"].as_array().expect("hits").len() > 1);
    let notes = env.json(&["search", "days", "--json", "--path", "notes/"]);
    for hit in notes["hits"].as_array().expect("hits") {
        assert!(
            hit["paths"]
                .as_array()
                .expect("paths")
                .iter()
                .any(|p| p.as_str().expect("path").starts_with("notes/")),
            "{hit}"
        );
    }
    assert!(!notes["hits"].as_array().expect("hits").is_empty());
    let security = env.json(&["search", "days", "--json", "--tag", "security"]);
    let hits = security["hits"].as_array().expect("hits");
    assert!(!hits.is_empty());
    for hit in hits {
        assert_eq!(hit["paths"][0], "handbook/key-rotation.md", "{hit}");
    }
    let none = env.json(&["search", "days", "--json", "--tag", "no-such-tag"]);
    assert_eq!(none["hits"], serde_json::json!([]));
}

#[test]
fn front_matter_is_metadata_not_text() {
    let env = Env::sample();
    env.ingest();
    // The words of key-rotation.md's front matter: found through the title (which leads the
    // heading path) and the body, never through the front-matter block itself.
    let response = env.search("signing key rotation security operations", 20);
    let hits = response["hits"].as_array().expect("hits");
    assert!(
        hits.iter()
            .any(|hit| hit["paths"][0] == "handbook/key-rotation.md"),
        "the document with the front matter was not found: {response}"
    );
    for hit in hits {
        let text = hit["text"].as_str().expect("text");
        assert!(
            !text.contains("tags:") && !text.contains("title:") && !text.starts_with("---"),
            "{hit}"
        );
    }
    // The tags are metadata: a filter finds the document by them.
    let tagged = env.json(&["search", "rotate", "--json", "--tag", "operations"]);
    assert_eq!(
        tagged["hits"][0]["paths"][0], "handbook/key-rotation.md",
        "{tagged}"
    );
}

#[test]
fn malformed_queries_never_fail() {
    let env = Env::sample();
    env.ingest();
    for query in [
        "\"unclosed",
        "key AND",
        "(((",
        "title:",
        "+-",
        "::",
        "k\u{e9}y \u{1F511}",
        "a:b:c",
        "*",
    ] {
        let output = env.run(&["search", query, "--json"]);
        assert!(
            output.status.success(),
            "query {query:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let _: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    }
}

#[test]
fn search_on_a_missing_store_says_what_to_do() {
    let env = Env::empty();
    let output = env.run(&["search", "anything"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no groundidx store") && stderr.contains("hint:"),
        "{stderr}"
    );
    assert!(!env.store.exists(), "a reader must not create a store");
}

#[test]
fn a_heading_only_match_still_has_a_snippet() {
    let env = Env::empty();
    env.write(
        "a.md",
        "# Zebra crossings\n\nPedestrians have right of way at marked stripes.\n",
    );
    env.ingest();
    let response = env.search("zebra", 1);
    let hit = &response["hits"][0];
    assert_eq!(hit["paths"][0], "a.md", "{response}");
    assert!(
        hit["snippet"]
            .as_str()
            .expect("snippet")
            .starts_with("Pedestrians have"),
        "{hit}"
    );
}

#[test]
fn root_filter_keeps_hits_from_one_ingested_folder() {
    let env = Env::empty();
    let handbook = env.tmp.path().join("handbook");
    let runbooks = env.tmp.path().join("runbooks");
    for (dir, text) in [
        (
            &handbook,
            "# Backups\n\nRestore the nightly backup from the vault.\n",
        ),
        (
            &runbooks,
            "# Backups\n\nRestore the backup, then page the on-call.\n",
        ),
    ] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("backups.md"), text).unwrap();
    }
    let (h, r) = (handbook.to_str().unwrap(), runbooks.to_str().unwrap());
    env.json(&["ingest", h, r, "--json"]);

    let all = env.json(&["search", "restore backup", "--json"]);
    assert_eq!(all["hits"].as_array().unwrap().len(), 2, "{all}");
    let only = env.json(&["search", "restore backup", "--json", "--root", r]);
    let hits = only["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{only}");
    assert!(
        hits[0]["text"].as_str().unwrap().contains("on-call"),
        "{only}"
    );

    let elsewhere = env.run(&["search", "restore", "--root", env.docs.to_str().unwrap()]);
    assert_eq!(elsewhere.status.code(), Some(2));
    let message = String::from_utf8_lossy(&elsewhere.stderr);
    assert!(
        message.contains("not a folder this store has ingested") && message.contains("runbooks"),
        "{message}"
    );
}

/// A passage found in several files, and twice in one of them, is one hit: every file once,
/// sorted by its path's bytes, each with the lines of its first place, and the hit's lines
/// those of the first source. The hit's text and its sources are read together; a passage that repeats a kept
/// one only adds its sources.
#[test]
fn a_passage_in_several_files_is_one_hit_with_each_file_once_at_its_first_place() {
    let env = Env::empty();
    let passage = "The flux capacitor hums at 1.21 gigawatts when the quench valve opens.";
    let twice = format!(
        "# Reactor\n\n## Quench\n\n{passage}\n\n# Reactor\n\n## Other\n\nFiller words here.\n\n\
         # Reactor\n\n## Quench\n\n{passage}\n"
    );
    env.write("b/twice.md", &twice);
    env.write(
        "a/once.md",
        &format!("# Reactor\n\n## Quench\n\n{passage}\n"),
    );
    env.write(
        "c/later.md",
        &format!("Intro line.\n\n# Reactor\n\n## Quench\n\n{passage}\n"),
    );
    // Paths sort by their bytes, as SQLite's `ORDER BY` on text did: capitals before small
    // letters, `-` and `.` before `/`, and a non-ASCII letter after every ASCII one.
    for path in ["É/accent.md", "Z/upper.md", "a-b/dash.md", "a.b/dot.md"] {
        env.write(path, &format!("# Reactor\n\n## Quench\n\n{passage}\n"));
    }
    env.ingest();
    let response = env.search("quench valve gigawatts", 5);
    let hits = response["hits"].as_array().expect("hits");
    let found: Vec<&serde_json::Value> = hits
        .iter()
        .filter(|hit| {
            hit["text"]
                .as_str()
                .expect("text")
                .contains("flux capacitor")
        })
        .collect();
    assert_eq!(found.len(), 1, "{response}");
    let hit = found[0];
    let sources: Vec<(String, [u64; 2])> = hit["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|source| {
            let lines = source["lines"].as_array().expect("lines");
            (
                source["path"].as_str().expect("path").to_string(),
                [
                    lines[0].as_u64().expect("first line"),
                    lines[1].as_u64().expect("last line"),
                ],
            )
        })
        .collect();
    let paths: Vec<&str> = sources.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Z/upper.md",
            "a-b/dash.md",
            "a.b/dot.md",
            "a/once.md",
            "b/twice.md",
            "c/later.md",
            "É/accent.md"
        ],
        "{hit}"
    );
    assert_eq!(hit["paths"], serde_json::json!(paths), "{hit}");
    // Each file at its first place: `twice.md` holds the passage from line 5, and again at 17.
    let line_of = |path: &str| {
        let text = std::fs::read_to_string(env.docs.join(path)).expect("read");
        text.lines()
            .position(|line| line == passage)
            .expect("passage") as u64
            + 1
    };
    for (path, [first, last]) in &sources {
        assert!(
            *first <= line_of(path) && line_of(path) <= *last,
            "{path} lines {first}-{last} miss its first place: {hit}"
        );
    }
    let twice_lines = sources
        .iter()
        .find(|(path, _)| path == "b/twice.md")
        .map(|(_, lines)| *lines)
        .expect("twice.md");
    assert!(twice_lines[1] < 17, "twice.md at its second place: {hit}");
    assert_eq!(
        hit["lines"],
        serde_json::json!(sources[0].1),
        "the hit's lines are not its first source's: {hit}"
    );
}
