//! Every format a docs folder holds, with every guarantee Markdown has: a mixed folder is
//! indexed, each hit says where it is in its own file, a re-run writes nothing, a renamed file
//! writes nothing, an extractor upgrade re-chunks only its format, the same bytes under two
//! formats are two documents, `--formats` chooses what is read, and every file not indexed is
//! counted by its extension.

use serde_json::Value;

use crate::support::{Env, assert_success, corpus};

/// One document per text format, each with a word found nowhere else, and the line of its file
/// where that word is.
const DOCUMENTS: &[(&str, &str, &str)] = &[
    (
        "guide.md",
        "# Guide\n\nThe zanzibarword passage of Markdown.\n",
        "zanzibarword",
    ),
    (
        "notes.txt",
        "Plain notes.\n\nA quokkaword line of text.\n",
        "quokkaword",
    ),
    (
        "site/deploy.mdx",
        "---\ntitle: Deploy\n---\nimport { Steps } from '@astrojs/starlight/components';\n\n# Deploy\n\n<Steps>\n1. Run the <Since v=\"4\" /> marmotword build.\n</Steps>\n\n:::note\nMind the cache.\n:::\n",
        "marmotword",
    ),
    (
        "api/session.rst",
        ":tags: orm, session\n\n=======\nSession\n=======\n\nOverview\n--------\n\nUse :class:`~sqlalchemy.orm.Session` for the narwhalword unit of work.\n\n.. code-block:: python\n\n    session.commit()\n",
        "narwhalword",
    ),
    (
        "manual/security.adoc",
        "= Security Manual\n:description: How to lock things down\n\n== Passwords\n\nStore them hashed with the ocelotword scheme.\n\n[source,java]\n----\nencoder.encode(raw);\n----\n",
        "ocelotword",
    ),
    (
        "help/contrast.html",
        "<!DOCTYPE html>\n<html>\n<head>\n<title>Contrast</title>\n<script>var x = 'tapirword-in-script';</script>\n</head>\n<body>\n<nav>menu</nav>\n<main>\n<h1>Contrast</h1>\n<p>Text needs a\n  pangolinword ratio &amp; more.</p>\n</main>\n</body>\n</html>\n",
        "pangolinword",
    ),
    (
        "notebooks/train.ipynb",
        "{\n \"cells\": [\n  {\n   \"cell_type\": \"markdown\",\n   \"metadata\": {},\n   \"source\": [\n    \"# Training\\n\",\n    \"\\n\",\n    \"Fit the wombatword model.\"\n   ]\n  },\n  {\n   \"cell_type\": \"code\",\n   \"metadata\": {},\n   \"outputs\": [{\"output_type\": \"stream\", \"text\": [\"outputword\"]}],\n   \"source\": [\n    \"model.fit(X, y)\"\n   ]\n  }\n ],\n \"metadata\": {\"kernelspec\": {\"language\": \"python\"}},\n \"nbformat\": 4,\n \"nbformat_minor\": 5\n}\n",
        "wombatword",
    ),
];

/// Files of no format groundidx reads, and how the report counts them.
const OTHERS: &[&str] = &["report.docx", "diagram.png", "logo.png", "LICENSE"];

fn mixed_folder() -> Env {
    let env = Env::empty();
    for (path, text, _) in DOCUMENTS {
        env.write(path, text);
    }
    for path in OTHERS {
        env.write(path, "not a document");
    }
    env
}

/// The one hit for `word`, which must be in `path`.
fn only_hit(env: &Env, word: &str, path: &str) -> Value {
    let answer = env.search(word, 5);
    let hits = answer["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 1, "{word}: {answer}");
    assert_eq!(hits[0]["paths"][0], path, "{word}: {answer}");
    hits[0].clone()
}

#[test]
fn a_mixed_folder_is_indexed_with_each_hit_at_its_lines() {
    let env = mixed_folder();
    let report = env.ingest();
    assert_eq!(report["documents"]["added"], DOCUMENTS.len(), "{report}");
    assert_eq!(report["documents"]["skipped"], 0, "{report}");
    let skipped = &report["skipped_by_extension"]["unsupported"];
    assert_eq!(skipped[".png"], 2, "{report}");
    assert_eq!(skipped[".docx"], 1, "{report}");
    assert_eq!(skipped["(no extension)"], 1, "{report}");
    for (path, text, word) in DOCUMENTS {
        let hit = only_hit(&env, word, path);
        // The hit's lines are the lines of its own file that hold the word.
        let lines: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| line.contains(word))
            .map(|(i, _)| i + 1)
            .collect();
        let [first, last] = [hit["lines"][0].as_u64(), hit["lines"][1].as_u64()]
            .map(|n| n.expect("a line number") as usize);
        assert!(
            lines.iter().all(|line| (first..=last).contains(line)),
            "{path}: the word is on lines {lines:?}, the hit says {first}-{last}"
        );
        assert!(
            hit.get("pages").is_none(),
            "{path}: a text format has no pages"
        );
    }
    // What each format drops never reaches the index.
    for dropped in ["tapirword", "outputword", "menu", "Steps", "import"] {
        let answer = env.search(dropped, 5);
        assert!(
            answer["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .all(|hit| !hit["text"].as_str().unwrap_or("").contains(dropped)),
            "{dropped}: {answer}"
        );
    }
    // Roles are read as their text, and the front matter and headings of each format make
    // the heading path.
    let rst = only_hit(&env, "narwhalword", "api/session.rst");
    assert!(
        rst["text"].as_str().is_some_and(
            |text| text.contains("sqlalchemy.orm.Session") && !text.contains(":class:")
        ),
        "{rst}"
    );
    assert_eq!(rst["heading"], "Session > Overview", "{rst}");
    let mdx = only_hit(&env, "marmotword", "site/deploy.mdx");
    assert_eq!(mdx["heading"], "Deploy", "{mdx}");
    let html = only_hit(&env, "pangolinword", "help/contrast.html");
    assert_eq!(html["heading"], "Contrast", "{html}");
    assert!(
        html["text"]
            .as_str()
            .is_some_and(|t| t.contains("ratio & more")),
        "{html}"
    );
    env.assert_verified();

    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
    assert_eq!(again["documents"]["unchanged"], DOCUMENTS.len(), "{again}");
}

#[test]
fn the_report_names_what_was_not_indexed() {
    let env = mixed_folder();
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&["ingest", docs]);
    assert_success(&output, &["ingest"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains("2 .png, 1 (no extension), 1 .docx: not a supported format"),
        "{said}"
    );
}

#[test]
fn formats_choose_what_is_read() {
    let env = mixed_folder();
    let docs = env.docs.to_str().expect("utf-8");
    let report = env.json(&["ingest", docs, "--json", "--formats", "md,rst"]);
    assert_eq!(report["documents"]["added"], 2, "{report}");
    let not_selected = &report["skipped_by_extension"]["not_selected"];
    for extension in [".txt", ".mdx", ".adoc", ".html", ".ipynb"] {
        assert_eq!(not_selected[extension], 1, "{extension}: {report}");
    }
    // From the configuration file too, and all formats again when it is gone.
    std::fs::write(
        env.tmp.path().join("groundidx.toml"),
        "formats = [\"html\", \"ipynb\"]\n",
    )
    .expect("write config");
    let mut command = env.command(&["ingest", docs, "--json", "--allow-mass-delete"]);
    command.current_dir(env.tmp.path());
    let output = command.output().expect("run");
    assert_success(&output, &["ingest", "(config)"]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["documents"]["added"], 2, "{report}");
    assert_eq!(report["documents"]["removed"], 2, "{report}");
    // An unknown format is refused, naming the formats there are.
    let output = env.run(&["ingest", docs, "--formats", "md,docx"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("docx") && stderr.contains("ipynb"),
        "{stderr}"
    );
}

#[test]
fn the_same_bytes_in_two_formats_are_two_documents() {
    let env = Env::empty();
    let page = "<p>Hello <b>kiwiword</b> &amp; friends</p>\n";
    env.write("page.html", page);
    env.write("page.txt", page);
    let report = env.ingest();
    assert_eq!(report["documents"]["added"], 2, "{report}");
    let answer = env.search("kiwiword", 5);
    let texts: Vec<(&str, &str)> = answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| {
            (
                hit["paths"][0].as_str().unwrap_or(""),
                hit["text"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(texts.contains(&("page.txt", page.trim_end())), "{answer}");
    assert!(
        texts.contains(&("page.html", "Hello kiwiword & friends")),
        "{answer}"
    );
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["documents"]["rechunked"], 0, "{again}");
}

#[test]
fn a_renamed_document_of_any_format_writes_nothing() {
    let env = mixed_folder();
    env.ingest();
    for (path, _, _) in DOCUMENTS {
        let from = env.docs.join(path);
        let name = from.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let to = from.with_file_name(format!("renamed-{name}"));
        std::fs::rename(&from, &to).expect("rename");
    }
    let report = env.ingest();
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert_eq!(report["chunks"]["removed"], 0, "{report}");
    assert_eq!(report["documents"]["renamed"], DOCUMENTS.len(), "{report}");
}

#[test]
fn an_extractor_upgrade_rechunks_only_its_format() {
    let env = mixed_folder();
    env.ingest();
    // A store whose MDX documents an older MDX extractor made: the next run reads and chunks
    // those files again, and only those.
    let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("ledger");
    let mdx_recipe: i64 = ledger
        .query_row(
            "SELECT d.recipe_version FROM documents d JOIN sources s ON s.doc_hash = d.doc_hash
             WHERE s.path = 'site/deploy.mdx'",
            [],
            |row| row.get(0),
        )
        .expect("the MDX document");
    assert!(
        mdx_recipe >= 1000,
        "an extracted format's recipe: {mdx_recipe}"
    );
    ledger
        .execute(
            "UPDATE documents SET recipe_version = ?1 WHERE doc_hash IN
             (SELECT doc_hash FROM sources WHERE path = 'site/deploy.mdx')",
            [mdx_recipe - 1000],
        )
        .expect("age the MDX document");
    drop(ledger);
    let report = env.ingest();
    assert_eq!(report["documents"]["rechunked"], 1, "{report}");
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    let again = env.ingest();
    assert_eq!(again["documents"]["rechunked"], 0, "{again}");
}

#[test]
fn pdfs_are_indexed_with_their_pages() {
    let Some(papers) = corpus("pdf-jose-papers") else {
        return;
    };
    let env = Env::empty();
    let mut copied = 0;
    let mut entries: Vec<_> = walkdir::WalkDir::new(&papers)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "pdf"))
        .map(walkdir::DirEntry::into_path)
        .collect();
    entries.sort();
    for pdf in entries.iter().take(3) {
        let to = env.docs.join(pdf.file_name().expect("a name"));
        std::fs::copy(pdf, to).expect("copy");
        copied += 1;
    }
    env.write("readme.md", "# Papers\n\nThree papers.\n");
    let report = env.ingest();
    assert_eq!(report["documents"]["added"], copied + 1, "{report}");
    assert_eq!(report["documents"]["skipped"], 0, "{report}");
    let answer = env.search("Journal of Open Source Education", 10);
    let pdf_hit = answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|hit| {
            hit["paths"][0]
                .as_str()
                .is_some_and(|p| p.ends_with(".pdf"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no PDF hit: {answer}"));
    let pages = &pdf_hit["pages"];
    assert!(
        pages[0].as_u64().is_some_and(|p| p >= 1) && pages[1].as_u64() >= pages[0].as_u64(),
        "{pdf_hit}"
    );
    assert_eq!(pdf_hit["sources"][0]["pages"], *pages, "{pdf_hit}");
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["documents"]["unchanged"], copied + 1, "{again}");
}

#[test]
fn a_byte_order_mark_is_read_in_every_text_format() {
    let env = Env::empty();
    for (path, text, _) in DOCUMENTS {
        env.write(path, &format!("\u{feff}{text}"));
    }
    env.write("bom-only.rst", "\u{feff}");
    env.write("titled.adoc", "\u{feff}= Title\n\nBody of emuword.\n");
    env.write(
        "crlf.rst",
        "\u{feff}Notes\r\n=====\r\n\r\nA caracalword file.\r\n",
    );
    let report = env.ingest();
    assert_eq!(report["documents"]["skipped"], 0, "{report}");
    for (path, _, word) in DOCUMENTS {
        let hit = only_hit(&env, word, path);
        assert!(
            hit["text"].as_str().is_some_and(|t| t.contains(word)),
            "{hit}"
        );
    }
    only_hit(&env, "emuword", "titled.adoc");
    let rst = only_hit(&env, "caracalword", "crlf.rst");
    assert_eq!(rst["heading"], "Notes", "{rst}");
    assert_eq!(rst["lines"], serde_json::json!([4, 4]), "{rst}");
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
}
