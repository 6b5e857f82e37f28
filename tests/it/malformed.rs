//! Invariant 6: no input file, however malformed, crashes a run or touches another document.
//! Each bad path gives a warning that names it; the good documents are indexed as usual.

use std::os::unix::fs::symlink;

use crate::support::{Env, clean_export, warnings};

fn assert_warned(report: &serde_json::Value, path: &str, words: &str) {
    let found = warnings(report);
    assert!(
        found.iter().any(|(p, m)| p == path && m.contains(words)),
        "no warning for {path} containing {words:?}: {found:?}"
    );
}

#[test]
fn hostile_files_warn_and_hurt_no_other_document() {
    let env = Env::sample();
    let good = env.ingest();
    let good_chunks = env.export();
    let outside = tempfile::tempdir().expect("outside dir");
    std::fs::write(
        outside.path().join("secret.md"),
        "# Secret\n\nThe outside secret is swordfish.\n",
    )
    .expect("write");

    std::fs::write(
        env.docs.join("binary.md"),
        b"# Title\n\x00\x01\x02 binary junk",
    )
    .expect("write");
    std::fs::write(env.docs.join("latin1.md"), b"# Caf\xe9\n\nna\xefve text\n").expect("write");
    std::fs::write(env.docs.join("empty.md"), b"").expect("write");
    std::fs::write(
        env.docs.join("only-front-matter.md"),
        b"---\ntitle: Nothing else\n---\n",
    )
    .expect("write");
    std::fs::write(
        env.docs.join("crlf-bom.md"),
        "\u{feff}# Windows\r\n\r\nLine endings from Windows.\r\n",
    )
    .expect("write");
    std::fs::write(
        env.docs.join("unclosed.md"),
        "# Fence\n\n```\nnever closed\n",
    )
    .expect("write");
    let fifo = env.docs.join("pipe.md");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    symlink(
        env.docs.join("does-not-exist.md"),
        env.docs.join("dangling.md"),
    )
    .expect("symlink");
    symlink(outside.path().join("secret.md"), env.docs.join("escape.md")).expect("symlink");
    symlink(outside.path(), env.docs.join("escape-dir")).expect("symlink");
    symlink(env.docs.join("loop-b.md"), env.docs.join("loop-a.md")).expect("symlink");
    symlink(env.docs.join("loop-a.md"), env.docs.join("loop-b.md")).expect("symlink");

    let report = env.ingest();
    assert_warned(&report, "binary.md", "binary");
    assert_warned(&report, "latin1.md", "UTF-8");
    assert_warned(&report, "empty.md", "no text");
    assert_warned(&report, "pipe.md", "FIFO");
    assert_warned(&report, "dangling.md", "dangling");
    assert_warned(&report, "escape.md", "out of the folder");
    assert_warned(&report, "escape-dir", "out of the folder");
    assert_warned(&report, "loop-a.md", "loops");
    assert_eq!(report["documents"]["changed"], 0, "{report}");
    assert_eq!(report["documents"]["removed"], 0, "{report}");

    // The good documents are all still there, unchanged.
    let after = env.export();
    for (id, chunk) in &good_chunks {
        assert_eq!(
            after.get(id),
            Some(chunk),
            "chunk {id} of a good document changed"
        );
    }
    assert!(good["chunks"]["added"].as_u64().expect("added") > 0);
    assert!(
        report["chunks"]["added"].as_u64().expect("added") >= 2,
        "{report}"
    );
    // Nothing from outside the folder is searchable.
    let secret = env.search("swordfish outside secret", 10);
    assert_eq!(secret["hits"], serde_json::json!([]), "{secret}");
    // The usable odd files were indexed.
    assert_eq!(
        env.search("line endings windows", 1)["hits"][0]["paths"][0],
        "crlf-bom.md"
    );
    assert_eq!(
        env.search("never closed", 1)["hits"][0]["paths"][0],
        "unclosed.md"
    );
    env.assert_verified();

    // A re-run writes nothing, and the bad files do not make the good ones go away.
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
    std::fs::remove_file(&fifo).expect("remove fifo");
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn a_file_that_turns_binary_keeps_its_old_chunks() {
    let env = Env::sample();
    env.ingest();
    let before = env.export();
    std::fs::write(env.docs.join("notes/faq.md"), b"\x00\x00garbage").expect("write");
    let report = env.ingest();
    assert_warned(&report, "notes/faq.md", "binary");
    assert_eq!(report["documents"]["removed"], 0, "{report}");
    assert_eq!(env.export(), before, "a decode failure is not a deletion");
}

#[test]
fn oversized_file_is_skipped_with_the_limit_named() {
    let env = Env::sample();
    env.write("big.md", &"word ".repeat(5_000));
    let docs = env.docs.to_str().expect("utf-8");
    let report = env.json(&["ingest", docs, "--json", "--max-file-size", "10000"]);
    assert_warned(&report, "big.md", "10000-byte limit");
}

#[test]
fn hostile_structures_give_chunks_or_a_warning_and_a_rerun_writes_nothing() {
    let env = Env::sample();
    env.write("quotes.md", &("> ".repeat(5_000) + "deep quote\n"));
    env.write(
        "lists.md",
        &(0..2_000)
            .map(|i| format!("{}- level {i}\n", "  ".repeat(i)))
            .collect::<String>(),
    );
    env.write("bullets.md", &("- ".repeat(5_000) + "x\n"));
    env.write("brackets.md", &("[".repeat(100_000) + "\n"));
    env.write("emphasis.md", &("*a".repeat(100_000) + "\n"));
    env.write(
        "name\nwith a newline.md",
        "# Newline\n\nA file whose name holds a newline.\n",
    );
    let deep: String = (0..60).map(|i| format!("n{i}/")).collect();
    env.write(&format!("{deep}deep.md"), "# Deep\n\nSixty folders down.\n");
    let socket =
        std::os::unix::net::UnixListener::bind(env.docs.join("socket.md")).expect("bind socket");
    // 100 MB, sparse: over the default 64 MiB limit, so it is skipped by its size alone.
    let big = std::fs::File::create(env.docs.join("big.md")).expect("create");
    big.set_len(100 * 1024 * 1024).expect("set_len");

    let report = env.ingest();
    assert_warned(&report, "socket.md", "socket");
    assert_warned(&report, "big.md", "67108864-byte limit");
    assert_eq!(report["documents"]["skipped"], 2, "{report}");
    assert_eq!(
        env.search("sixty folders down", 1)["hits"][0]["paths"][0],
        format!("{deep}deep.md")
    );
    assert_eq!(
        env.search("name holds a newline", 1)["hits"][0]["paths"][0],
        "name\nwith a newline.md"
    );
    assert!(
        !env.search("deep quote", 1)["hits"]
            .as_array()
            .expect("hits")
            .is_empty()
    );
    env.assert_verified();
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
    drop(socket);
}
