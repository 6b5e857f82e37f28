//! Untrusted bytes cost at most their size: front matter that would expand (YAML aliases), nest
//! deeply or run long, and Markdown built to stress the parser, each next to normal documents.
//! The run succeeds, warns about the file by name, indexes its body and every other document,
//! and its memory stays bounded (measured from `/proc`, the child killed past the limit, so a
//! regression fails the test instead of taking the machine).

use groundidx::chunk::{ChunkConfig, chunk_document};
use groundidx::format::Format;
use serde_json::Value;

use crate::support::{Env, assert_success, run_bounded};

/// Far above what ingesting a few small files takes, far below what an expanded alias bomb takes.
const RSS_LIMIT_KIB: u64 = 1 << 20;

/// Nine levels of aliases, each naming the level below ten times: under 512 bytes, 10^9 strings
/// once expanded.
fn billion_laughs() -> String {
    let mut text = String::from("---\ntitle: Laughs\na: &a [\"lol\"]\n");
    for level in 1..9u8 {
        let name = char::from(b'a' + level);
        let below = char::from(b'a' + level - 1);
        let refs = vec![format!("*{below}"); 10].join(",");
        text.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    text.push_str("tags: *i\n---\n# Laughter\n\nThe alias bomb body is indexed.\n");
    text
}

fn hits_for(env: &Env, query: &str) -> Vec<String> {
    env.search(query, 10)["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .flat_map(|hit| hit["paths"].as_array().expect("paths").clone())
        .map(|path| path.as_str().expect("path").to_string())
        .collect()
}

fn warned(report: &Value, path: &str, words: &str) -> bool {
    report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| w["path"] == path && w["message"].as_str().is_some_and(|m| m.contains(words)))
}

#[test]
fn hostile_front_matter_warns_indexes_the_body_and_stays_small() {
    let env = Env::sample();
    let laughs = billion_laughs();
    assert!(laughs.len() <= 512, "the bomb is {} bytes", laughs.len());
    env.write("bomb/laughs.md", &laughs);
    let depth = 30_000;
    env.write(
        "bomb/deep.md",
        &format!(
            "---\nx: {}{}\n---\n# Deep\n\nThe deeply nested body is indexed.\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    );
    env.write(
        "bomb/deep-block.md",
        &format!(
            "---\nx:\n{}---\nThe block nested body is indexed.\n",
            (1..200)
                .map(|level| format!("{}- \n", " ".repeat(level)))
                .collect::<String>()
        ),
    );
    env.write(
        "bomb/huge.md",
        &format!(
            "---\ntitle: Huge\n{}---\nThe huge front matter body is indexed.\n",
            "k: [1, 2, 3]\n".repeat(1 << 20)
        ),
    );
    let docs = env.docs.to_str().expect("utf-8");
    let (output, peak_kib) = run_bounded(&env, &["ingest", docs, "--json"], RSS_LIMIT_KIB);
    assert_success(&output, &["ingest"]);
    eprintln!("peak resident set of the ingest: {peak_kib} KiB");
    let report: Value = serde_json::from_slice(&output.stdout).expect("ingest JSON");

    assert!(warned(&report, "bomb/laughs.md", "aliases"), "{report}");
    assert!(warned(&report, "bomb/deep.md", "front matter"), "{report}");
    assert!(warned(&report, "bomb/deep-block.md", "deeper"), "{report}");
    assert!(warned(&report, "bomb/huge.md", "KiB limit"), "{report}");
    for (query, path) in [
        ("alias bomb body", "bomb/laughs.md"),
        ("deeply nested body", "bomb/deep.md"),
        ("block nested body", "bomb/deep-block.md"),
        ("huge front matter body", "bomb/huge.md"),
        ("signing key", "handbook/key-rotation.md"),
    ] {
        assert!(
            hits_for(&env, query).iter().any(|hit| hit == path),
            "{query:?} did not find {path}"
        );
    }
    env.assert_verified();
}

/// Markdown that stresses pulldown-cmark: the chunks it gives are never much bigger than the input
/// (nothing is copied per nesting level), and every input with words gives some (tags alone are
/// no passage: a warning instead).
#[test]
fn hostile_markdown_gives_output_linear_in_its_size() {
    let mb = 1 << 20;
    let cases: Vec<(&str, String)> = vec![
        ("brackets", "[".repeat(mb)),
        ("closing brackets", "[a](".repeat(mb / 4)),
        ("nested quotes", format!("{} deep\n", ">".repeat(mb / 4))),
        (
            "nested lists",
            (0..5_000)
                .map(|level| format!("{}- item {level}\n", "  ".repeat(level)))
                .collect(),
        ),
        ("emphasis", "*a **b ".repeat(mb / 8)),
        ("backticks", "`".repeat(mb / 2) + "x"),
        ("links", "[x]: <".repeat(mb / 8)),
        (
            "long table",
            format!("| a | b |\n|---|---|\n{}", "| 1 | 2 |\n".repeat(mb / 10)),
        ),
        (
            "wide table",
            format!("{}\n{}\n", "| a ".repeat(mb / 16), "|---".repeat(mb / 16)),
        ),
        ("html", "<div>".repeat(mb / 8)),
        ("html with words", "<div>a ".repeat(mb / 8)),
        ("headings", "# h\nt\n".repeat(mb / 4)),
    ];
    for (name, text) in cases {
        let doc = chunk_document(Format::Markdown, &text, &ChunkConfig::default());
        if name == "html" {
            assert_eq!(doc.chunks, [], "{name}");
            assert_eq!(doc.warnings, ["no text to index"], "{name}");
            continue;
        }
        let out: usize = doc
            .chunks
            .iter()
            .map(|chunk| {
                chunk.text.len() + chunk.heading_path.iter().map(String::len).sum::<usize>()
            })
            .sum();
        assert!(!doc.chunks.is_empty(), "{name}: no chunks");
        assert!(
            out <= 4 * text.len(),
            "{name}: {} bytes of input gave {out} bytes of chunks",
            text.len()
        );
    }
}
