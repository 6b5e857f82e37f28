//! Edits, renames, deletions and shared passages: each writes only what changed.

use crate::support::{Env, clean_export};

#[test]
fn one_edited_section_rewrites_only_its_chunk() {
    let env = Env::sample();
    env.ingest();
    let before = env.export();
    let path = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&path).expect("read");
    let edited = text.replace(
        "Rotate the signing key every 90 days",
        "Rotate the signing key every 60 days",
    );
    assert_ne!(text, edited);
    std::fs::write(&path, edited).expect("write");

    let report = env.ingest();
    assert_eq!(report["documents"]["changed"], 1, "{report}");
    assert_eq!(report["chunks"]["added"], 1, "{report}");
    assert_eq!(report["chunks"]["removed"], 1, "{report}");
    let after = env.export();
    assert_eq!(
        before.keys().filter(|id| !after.contains_key(*id)).count(),
        1
    );
    assert_eq!(after, clean_export(&env.docs));
    let hits = env.search("every 60 days", 3);
    assert!(
        hits["hits"][0]["text"]
            .as_str()
            .expect("text")
            .contains("60 days")
    );
    env.assert_verified();
}

#[test]
fn rename_writes_no_chunk() {
    let env = Env::sample();
    env.ingest();
    std::fs::rename(
        env.docs.join("handbook/deploys.md"),
        env.docs.join("notes/deploying.md"),
    )
    .expect("rename");
    let report = env.ingest();
    assert_eq!(report["documents"]["renamed"], 1, "{report}");
    assert_eq!(report["documents"]["removed"], 0, "{report}");
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert_eq!(report["chunks"]["removed"], 0, "{report}");
    let hits = env.search("deployctl rollback", 1);
    assert_eq!(hits["hits"][0]["paths"][0], "notes/deploying.md", "{hits}");
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn renames_copies_and_removals_are_told_apart_across_batches() {
    let env = Env::sample();
    env.ingest();
    let read = |rel: &str| std::fs::read_to_string(env.docs.join(rel)).expect("read");
    // Moved: one path to a folder read last, one content to two new paths read first (one of
    // them is the move, the other a copy); copied: a document that stays; removed: one.
    std::fs::create_dir_all(env.docs.join("zz")).expect("mkdir");
    std::fs::rename(
        env.docs.join("handbook/deploys.md"),
        env.docs.join("zz/deploying.md"),
    )
    .expect("rename");
    let backups = read("handbook/backups.md");
    env.write("aa/backups-1.md", &backups);
    env.write("aa/backups-2.md", &backups);
    std::fs::remove_file(env.docs.join("handbook/backups.md")).expect("delete");
    env.write("aa/faq-copy.md", &read("notes/faq.md"));
    std::fs::remove_file(env.docs.join("notes/glossary.txt")).expect("delete");

    let docs = env.docs.to_str().expect("utf-8 temp path");
    let report = env.json(&["ingest", docs, "--json", "--batch-files", "1"]);
    assert_eq!(report["documents"]["renamed"], 2, "{report}");
    assert_eq!(report["documents"]["added"], 2, "{report}");
    assert_eq!(report["documents"]["removed"], 1, "{report}");
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
}

#[test]
fn deleted_document_leaves_search() {
    let env = Env::sample();
    env.ingest();
    assert_eq!(
        env.search("deployctl rollback", 5)["hits"][0]["paths"][0],
        "handbook/deploys.md"
    );
    std::fs::remove_file(env.docs.join("handbook/deploys.md")).expect("delete");
    let report = env.ingest();
    assert_eq!(report["documents"]["removed"], 1, "{report}");
    assert!(report["chunks"]["removed"].as_u64().expect("removed") > 0);
    let hits = env.search("deployctl rollback", 5);
    for hit in hits["hits"].as_array().expect("hits") {
        assert!(
            !hit["text"].as_str().expect("text").contains("deployctl"),
            "{hit}"
        );
    }
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
}

#[test]
fn a_whitespace_edit_rewrites_only_the_chunk_whose_bytes_changed() {
    let env = Env::sample();
    env.ingest();
    let before = env.export();
    let path = env.docs.join("notes/faq.md");
    let text = std::fs::read_to_string(&path).expect("read");
    // Blank lines between sections are in no chunk; the double space is in one.
    let spaced = text
        .replace("\n\n## ", "\n\n\n\n## ")
        .replace("Every 90 days.", "Every  90 days.")
        + "\n\n";
    std::fs::write(&path, spaced).expect("write");
    let report = env.ingest();
    assert_eq!(report["documents"]["changed"], 1, "{report}");
    assert_eq!(report["chunks"]["added"], 1, "{report}");
    assert_eq!(report["chunks"]["removed"], 1, "{report}");
    let after = env.export();
    assert_eq!(
        before.keys().filter(|id| !after.contains_key(*id)).count(),
        1
    );
    let hits = env.search("how often signing key rotated", 10);
    let faq = hits["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|hit| hit["paths"][0] == "notes/faq.md")
        .unwrap_or_else(|| panic!("no hit in notes/faq.md: {hits}"));
    assert!(
        faq["text"]
            .as_str()
            .expect("text")
            .starts_with("Every  90 days."),
        "{faq}"
    );
    assert_eq!(after, clean_export(&env.docs));
}

#[test]
fn identical_files_are_one_document_with_two_sources() {
    let env = Env::sample();
    env.ingest();
    let hits = env.search("platform-help channel", 5);
    let first = &hits["hits"][0];
    assert_eq!(
        first["paths"],
        serde_json::json!(["handbook/support.md", "notes/support.md"]),
        "{hits}"
    );
    let status = env.json(&["status", "--json"]);
    assert_eq!(
        status["sources"].as_u64().expect("sources"),
        status["documents"].as_u64().expect("documents") + 1,
        "{status}"
    );
}

#[test]
fn shared_passage_in_two_documents_is_one_chunk() {
    let env = Env::empty();
    let shared =
        "Always run the migration in a transaction so that a failure leaves nothing half-done.";
    env.write(
        "a.md",
        &format!("Intro to service A.\n\n# Notes\n\n{shared}\n"),
    );
    env.write(
        "b.md",
        &format!("Service B is different.\n\n# Notes\n\n{shared}\n"),
    );
    env.ingest();
    let exported = env.export();
    let holders: Vec<_> = exported
        .values()
        .map(|chunk| &chunk.paths)
        .filter(|paths| paths.len() == 2)
        .collect();
    assert_eq!(holders, [&vec!["a.md".to_string(), "b.md".to_string()]]);
    // Removing one source keeps the chunk for the other.
    std::fs::remove_file(env.docs.join("b.md")).expect("delete");
    let report = env.ingest();
    assert_eq!(
        report["chunks"]["removed"], 1,
        "only b's own chunk goes: {report}"
    );
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn moved_passage_between_documents_stays_in_the_index() {
    let env = Env::empty();
    let passage = "# Shared\n\nThis passage moves from one file to another in a single run.\n";
    env.write("a.md", passage);
    env.write("b.md", "# Other\n\nSomething else.\n");
    env.ingest();
    env.write("a.md", "# Other A\n\nA keeps something.\n");
    env.write("b.md", passage);
    let report = env.ingest();
    assert_eq!(report["documents"]["changed"], 2, "{report}");
    assert_eq!(env.export(), clean_export(&env.docs));
    env.assert_verified();
}
