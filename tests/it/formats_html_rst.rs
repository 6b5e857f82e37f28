//! HTML and reStructuredText: the real corpora ingested by the binary, found by a search whose
//! hit names the file and the lines that hold what was searched; and hostile pages and files
//! (nesting 100,000 deep, 10 MB of unclosed tags, 100,000 underline-like lines, a giant table,
//! deeply indented directives) that finish with output bounded by their size, each bound that
//! applies named in a warning. Each hostile input also goes through the fuzz targets' property
//! checks (`fuzz/src/lib.rs`, by way of `fuzz_regressions`' copy), with its invariants.

use std::path::Path;
use std::time::Instant;

use groundidx::extract::{Extracted, Limits, Locations, Structure, Unit, extract_here};
use groundidx::format::Format;
use serde_json::Value;

use crate::support::{self, Env};

/// Ingests a copy of `corpus`, prints its throughput and warnings, and returns the environment.
fn ingest_corpus(corpus: &Path, format: &str) -> Env {
    let env = Env::copy_of(corpus);
    let started = Instant::now();
    let docs = env.docs.to_str().expect("utf-8 temp path");
    let report = env.json(&["ingest", docs, "--json", "--formats", format]);
    let seconds = started.elapsed().as_secs_f64();
    let added = report["documents"]["added"]
        .as_u64()
        .expect("documents added");
    let warnings = support::warnings(&report);
    eprintln!(
        "{format}: {added} files in {seconds:.1} s ({:.0} files/s, a debug build), {} warnings",
        added as f64 / seconds,
        warnings.len()
    );
    for (path, message) in warnings.iter().take(20) {
        eprintln!("  {path}: {message}");
    }
    assert!(added > 100, "{report}");
    env
}

/// The first hit of `query` whose path is `path`, among the first `top_k`.
fn hit_in<'v>(response: &'v Value, path: &str) -> &'v Value {
    response["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|hit| hit["paths"][0] == path)
        .unwrap_or_else(|| panic!("no hit in {path}: {response}"))
}

/// The source lines `[first, last]` a hit names.
fn source_lines(env: &Env, path: &str, hit: &Value) -> (usize, usize, Vec<String>) {
    let lines = hit["lines"].as_array().expect("lines");
    let first = lines[0].as_u64().expect("first") as usize;
    let last = lines[1].as_u64().expect("last") as usize;
    assert!(1 <= first && first <= last, "{hit}");
    let text = std::fs::read_to_string(env.docs.join(path)).expect("read source");
    let source: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(last <= source.len(), "{hit} past the end of {path}");
    (first, last, source[first - 1..last].to_vec())
}

/// Every line of a hit's passage has its longest word on the source lines the hit names.
fn assert_text_at_its_lines(env: &Env, path: &str, hit: &Value) {
    let (first, last, lines) = source_lines(env, path, hit);
    let source = lines.join("\n");
    for line in hit["text"].as_str().expect("text").lines() {
        let Some(word) = line
            .split(|c: char| !c.is_alphanumeric())
            .max_by_key(|word| word.len())
            .filter(|word| !word.is_empty())
        else {
            continue;
        };
        assert!(
            source.contains(word),
            "{word:?} of {line:?} is not on lines {first}-{last} of {path}:\n{source}"
        );
    }
}

#[test]
fn the_wcag_pages_are_found_by_a_technique_title_at_its_lines() {
    let Some(corpus) = support::corpus("html-wcag") else {
        return;
    };
    let env = ingest_corpus(&corpus, "html");
    let path = "techniques/aria/ARIA1.html";
    let response = env.search(
        "Using the aria-describedby property to provide a descriptive label for user interface \
         controls",
        5,
    );
    assert_eq!(response["hits"][0]["paths"][0], path, "{response}");
    let hit = hit_in(&response, path);
    assert!(
        hit["heading"]
            .as_str()
            .expect("heading")
            .starts_with("Using the aria-describedby property"),
        "{hit}"
    );
    assert_text_at_its_lines(&env, path, hit);

    // A passage deep in a page: its lines are the ones that hold it.
    let response = env.search("sample form field instructions given name", 10);
    let hit = hit_in(&response, path);
    let (first, last, lines) = source_lines(&env, path, hit);
    assert!(
        lines.iter().any(|line| line.contains("given name")),
        "{first}-{last}: {lines:#?}"
    );
    assert_text_at_its_lines(&env, path, hit);
    // Scripts, comments and markup never reach the index.
    let response = env.search("DOCTYPE stylesheet editors.css", 5);
    for hit in response["hits"].as_array().expect("hits") {
        let text = hit["text"].as_str().expect("text");
        assert!(
            !text.contains("<!DOCTYPE") && !text.contains("editors.css"),
            "{hit}"
        );
    }
}

#[test]
fn the_sqlalchemy_docs_are_found_by_a_class_name_at_its_directive() {
    let Some(corpus) = support::corpus("rst-sqlalchemy-docs") else {
        return;
    };
    let env = ingest_corpus(&corpus, "rst");
    let path = "doc/build/orm/contextual.rst";
    let response = env.search("sqlalchemy.util.ThreadLocalRegistry", 5);
    let hit = hit_in(&response, path);
    let (first, last, lines) = source_lines(&env, path, hit);
    assert!(
        lines
            .iter()
            .any(|line| line.contains(".. autoclass:: sqlalchemy.util.ThreadLocalRegistry")),
        "{first}-{last}: {lines:#?}"
    );
    assert_text_at_its_lines(&env, path, hit);
    assert!(
        hit["heading"]
            .as_str()
            .expect("heading")
            .contains("Contextual Session API"),
        "{hit}"
    );

    // A section title heads its passages.
    let response = env.search("Framing out a begin / commit / rollback block", 5);
    let hit = hit_in(&response, "doc/build/orm/session_basics.rst");
    assert!(
        hit["heading"]
            .as_str()
            .expect("heading")
            .contains("Framing out a begin / commit / rollback block"),
        "{hit}"
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile input.

fn extract(format: Format, text: &str) -> Extracted {
    extract_here(format, text.as_bytes(), &Limits::default()).expect("extracts")
}

fn units(extracted: &Extracted) -> &[Unit] {
    let Structure::Units(units) = &extracted.structure else {
        panic!("units")
    };
    units
}

/// What holds for every extraction: a location per line, and at most about the input's size.
fn assert_bounded(extracted: &Extracted, input: &str) {
    let Locations::Mapped(locations) = &extracted.locations else {
        panic!("mapped")
    };
    assert_eq!(locations.len(), extracted.text.lines().count());
    assert!(
        extracted.text.len() <= 4 * input.len() + 64,
        "{} bytes of text from {}",
        extracted.text.len(),
        input.len()
    );
}

#[test]
fn html_nested_100000_deep_is_read_flat_and_says_so() {
    let input = format!(
        "<title>Deep</title>{}<p>the deepest words</p>{}<p>after</p>",
        "<div><section><blockquote>".repeat(100_000 / 3),
        "</blockquote></section></div>".repeat(100_000 / 3)
    );
    let extracted = extract(Format::Html, &input);
    assert_bounded(&extracted, &input);
    assert!(extracted.text.contains("the deepest words"));
    assert!(extracted.text.contains("after"));
    let depth = Limits::default().max_depth;
    assert!(
        extracted
            .warnings
            .iter()
            .any(|w| w.contains(&format!("deeper than {depth}"))),
        "{:?}",
        extracted.warnings
    );
    // Nested dropped elements: nothing inside leaks, whatever their depth.
    let navs = format!(
        "{}hidden{}<p>shown</p>",
        "<nav>".repeat(100_000),
        "</nav>".repeat(100_000)
    );
    let extracted = extract(Format::Html, &navs);
    assert!(!extracted.text.contains("hidden"));
}

#[test]
fn html_of_10_mb_of_unclosed_tags_costs_its_size() {
    let unit = "<div class=a><span><p>w <a href='x'><li><td><h2>t<pre>";
    let input = unit.repeat(10 * 1024 * 1024 / unit.len());
    let extracted = extract(Format::Html, &input);
    assert_bounded(&extracted, &input);
    assert!(!units(&extracted).is_empty());
    // Attributes and tags that never end: no text, no failure.
    let input = format!("<p>start</p><div title='{}", "x".repeat(10 * 1024 * 1024));
    let extracted = extract(Format::Html, &input);
    assert_bounded(&extracted, &input);
    assert!(extracted.text.starts_with("start"));
}

#[test]
fn rst_of_100000_underline_like_lines_costs_its_size() {
    let adornments = "=====\n-----\n".repeat(50_000);
    let extracted = extract(Format::Rst, &adornments);
    assert_bounded(&extracted, &adornments);
    // Titles and underlines alternating: each title a heading, styles few.
    let titles = "Title\n=====\nSub\n---\n".repeat(25_000);
    let extracted = extract(Format::Rst, &titles);
    assert_bounded(&extracted, &titles);
    let levels: Vec<u8> = units(&extracted)
        .iter()
        .filter_map(|unit| match unit {
            Unit::Heading { level, .. } => Some(*level),
            _ => None,
        })
        .collect();
    assert_eq!(levels.len(), 50_000);
    assert!(levels.iter().all(|level| *level <= 2));
}

#[test]
fn a_giant_rst_table_is_its_lines() {
    let mut input = String::from("Tables\n======\n\n+--------+--------+\n");
    for row in 0..100_000 {
        input.push_str(&format!("| r{row:<6}| {row:<7}|\n+--------+--------+\n"));
    }
    input.push_str("\nAfter the table.\n");
    let extracted = extract(Format::Rst, &input);
    assert_bounded(&extracted, &input);
    assert!(extracted.text.contains("| r99999 | 99999  |"));
    assert!(extracted.text.ends_with("After the table.\n"));
    let mut simple = String::from("=====  =====\n");
    simple.push_str(&"a      b\n".repeat(100_000));
    simple.push_str("=====  =====\n");
    let extracted = extract(Format::Rst, &simple);
    assert_bounded(&extracted, &simple);
}

#[test]
fn deeply_indented_rst_directives_stop_nesting_at_the_limit() {
    let mut input = String::new();
    for depth in 0..3_000 {
        input.push_str(&" ".repeat(depth));
        input.push_str(if depth % 2 == 0 {
            ".. note::\n\n"
        } else {
            ".. change::\n\n"
        });
    }
    input.push_str(&" ".repeat(3_000));
    input.push_str("the innermost words\n");
    let extracted = extract(Format::Rst, &input);
    assert_bounded(&extracted, &input);
    assert!(extracted.text.contains("the innermost words"));
    let depth = Limits::default().max_depth;
    assert!(
        extracted
            .warnings
            .iter()
            .any(|w| w.contains(&format!("deeper than {depth}"))),
        "{:?}",
        extracted.warnings
    );
}

#[test]
fn rst_substitutions_and_list_tables_cost_their_size() {
    use crate::fuzz_regressions::checks::check_rst;

    // 10 MB of references to a 5 KB replacement: it may add at most the file's own size.
    let mut input = format!(".. |s| replace:: {}\n\n", "word ".repeat(1_000));
    input.push_str(&"|s| a||b |s|_, |s \n".repeat(10 * 1024 * 1024 / 19));
    let extracted = extract(Format::Rst, &input);
    assert_bounded(&extracted, &input);
    assert!(extracted.text.len() <= 2 * input.len() + 64);
    assert!(extracted.text.starts_with("word word"));
    assert!(
        extracted.warnings.iter().any(|w| w.contains("own size")),
        "{:?}",
        extracted.warnings
    );
    // Bars that never close a reference: one pass, the text as written.
    let bars = format!(".. |x| replace:: y\n\n{}\n", "|a |b ".repeat(1024 * 1024));
    let extracted = extract(Format::Rst, &bars);
    assert_bounded(&extracted, &bars);
    assert!(extracted.text.starts_with("|a |b |a"));
    // A list table of 100,000 rows: a line per row.
    let mut table = String::from(".. list-table:: Big\n   :header-rows: 1\n\n");
    for row in 0..100_000 {
        table.push_str(&format!("   * - r{row}\n     - :func:`f{row}`\n"));
    }
    table.push_str("\nAfter the table.\n");
    let extracted = extract(Format::Rst, &table);
    assert_bounded(&extracted, &table);
    assert!(extracted.text.contains("\nr99999 | f99999\n"));
    assert!(extracted.text.ends_with("After the table.\n"));
    for hostile in [&input[..4096], &bars[..4096], &table[..4096]] {
        check_rst(hostile.as_bytes());
    }
}

/// Markup-shaped noise: a seeded stream of pieces of HTML or rST syntax, stray and unbalanced,
/// through the fuzz targets' property checks (`check_html`, `check_rst`), so every run of the
/// suite covers a few thousand hostile documents even where `cargo fuzz` cannot run.
#[test]
fn markup_shaped_noise_passes_the_fuzz_properties() {
    use crate::fuzz_regressions::checks::{check_html, check_rst};

    const HTML: &[&str] = &[
        "<p>",
        "</p>",
        "<div>",
        "</div>",
        "<pre>",
        "</pre>",
        "\n",
        " ",
        "word",
        "&amp;",
        "&#x",
        "<table>",
        "</table>",
        "<tr>",
        "<td>",
        "</td>",
        "<th>",
        "<h2>",
        "</h2>",
        "<h1 hidden>",
        "<br>",
        "<main>",
        "</main>",
        "<article>",
        "</article>",
        "<nav>",
        "</nav>",
        "<script>",
        "</script>",
        "<svg/>",
        "<title>",
        "</title>",
        "<!--",
        "-->",
        "---\n",
        "title: x\n",
        "<header>",
        "</header>",
        "<section>",
        "</section>",
        "<plaintext>",
        "<li>",
        "\r\n",
        "é",
        "<meta name=keywords content='a,B'>",
        "<",
        ">",
        "\"",
        "'",
        "=",
        "\t",
        "<xmp>",
        "</xmp>",
        "<div role=main>",
        "<textarea>",
        "<template>",
        "</template>",
        "<caption>",
        "\u{0}",
    ];
    const RST: &[&str] = &[
        "Title\n",
        "=====\n",
        "-----\n",
        "===\n",
        "\n",
        " ",
        "   ",
        "\t",
        ".. note::",
        ".. code-block:: py",
        ".. autoclass:: a.B",
        ".. _t:",
        ".. |s| replace:: x",
        "\n.. |s| replace:: |s| :func:`y` and longer words\n",
        "|s|",
        "|s|_ ",
        "|",
        " |S| ",
        ".. list-table:: T\n",
        "   :header-rows: 1\n",
        "   * - ",
        "     - ",
        "   * - ::\n",
        "       - .. list-table::\n",
        ".. ",
        "..",
        "::",
        ":func:`x`",
        "`t <u>`_",
        "x_",
        "[1]_",
        "``lit``",
        "`",
        "``",
        ":tags: a, b\n",
        ":orphan:\n",
        "+--+--+\n",
        "| a| b|\n",
        "=====  =====\n",
        "* item\n",
        "1. one\n",
        ">>> x\n",
        "word",
        "é",
        "\r\n",
        ".. versionadded:: 1.0",
        ".. figure:: f",
        "   :alt: x\n",
        "~~~\n",
        "| line\n",
        "term\n    def\n",
        ".. [1] note\n",
        ":",
    ];
    let mut rng = support::Rng::from_env("markup_shaped_noise");
    for round in 0..3_000 {
        let (pieces, check): (&[&str], fn(&[u8])) = if round % 2 == 0 {
            (HTML, check_html)
        } else {
            (RST, check_rst)
        };
        let mut input = String::new();
        for _ in 0..rng.below(300) {
            input.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
        }
        let result = std::panic::catch_unwind(|| check(input.as_bytes()));
        assert!(result.is_ok(), "round {round} fails on {input:?}");
    }
}
