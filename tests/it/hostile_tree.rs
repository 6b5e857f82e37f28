//! A tree that changes or misbehaves under a run: folders swapped for links between the walk
//! and the read, the root swapped before and during the walk, links to hidden or excluded files, NUL bytes
//! past the first kilobytes, a root that cannot be read, times far in the future. No text from outside the folder is ever indexed, and every warning names a path.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::CommandExt;
use std::time::{Duration, SystemTime};

use crate::support::{Env, is_root, warnings};

/// Starts `ingest --json` on the env's folder, held at pause point `point`, and waits until it
/// is there; the test acts, then writes `PAUSE/resume`.
fn ingest_held_at(env: &Env, point: &str) -> (std::process::Child, std::path::PathBuf) {
    let pause = env.tmp.path().join("pause");
    std::fs::create_dir(&pause).expect("mkdir pause");
    let docs = env.docs.to_str().expect("utf-8");
    let mut child = env
        .command(&["ingest", docs, "--json"])
        .env("GROUNDIDX_PAUSE_AT", format!("{point}@{}", pause.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ingest");
    crate::support::wait_paused(&pause, &mut child);
    (child, pause)
}

#[test]
fn a_folder_swapped_for_a_link_after_the_walk_is_never_read_through() {
    let env = Env::empty();
    for i in 0..30 {
        env.write(
            &format!("d/file-{i:02}.md"),
            &format!("# File {i}\n\nPlain text {i}.\n"),
        );
    }
    env.write(
        "d/zz/notes.md",
        "# Notes\n\nThe inside notes are harmless.\n",
    );
    env.write("top/a.md", "# Top\n\nThe inside top page.\n");
    let elsewhere = env.tmp.path().join("elsewhere");
    for (rel, text) in [
        (
            "zz/notes.md",
            "# Notes\n\nThe outside secret is swordfish.\n",
        ),
        ("top/a.md", "# Top\n\nThe outside secret is marlin.\n"),
    ] {
        let path = elsewhere.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write outside file");
    }
    let (child, pause) = ingest_held_at(&env, "ingest.after_plan");
    // Planned, not read yet: swap a folder deep down and one right under the root.
    std::fs::rename(env.docs.join("d/zz"), env.docs.join("d/zz-orig")).expect("move");
    symlink(elsewhere.join("zz"), env.docs.join("d/zz")).expect("link");
    std::fs::rename(env.docs.join("top"), env.docs.join("top-orig")).expect("move");
    symlink(elsewhere.join("top"), env.docs.join("top")).expect("link");
    std::fs::write(pause.join("resume"), "").expect("resume");
    let output = child.wait_with_output().expect("wait for ingest");
    let export = String::from_utf8_lossy(&env.run(&["export"]).stdout).to_string();
    for secret in ["swordfish", "marlin"] {
        let leaked: Vec<&str> = export.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaked.is_empty(), "outside text was indexed: {leaked:?}");
        assert_eq!(env.search(secret, 5)["hits"], serde_json::json!([]));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "a file that could not be read safely holds deletions back: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json report");
    let found = warnings(&report);
    for path in ["d/zz/notes.md", "top/a.md"] {
        assert!(
            found
                .iter()
                .any(|(p, m)| p == path && m.contains("symbolic link")),
            "no warning for {path}: {found:?}"
        );
    }
    assert!(
        export.contains("Plain text 7"),
        "the other files are indexed"
    );
    env.assert_verified();
}

#[test]
fn a_nul_byte_anywhere_makes_a_file_binary() {
    let env = Env::sample();
    let mut late = b"# Late binary\n\n".to_vec();
    while late.len() < 9_000 {
        late.extend_from_slice(b"plain words before the zero byte. ");
    }
    late.extend_from_slice(b"\x00 and after it, lateword.\n");
    std::fs::write(env.docs.join("late-nul.md"), &late).expect("write");
    let report = env.ingest();
    let found = warnings(&report);
    assert!(
        found
            .iter()
            .any(|(p, m)| p == "late-nul.md" && m.contains("binary")),
        "{found:?}"
    );
    let export = env.run(&["export"]);
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(!text.contains("\\u0000"), "a NUL reached chunk text");
    assert!(!text.contains("lateword"), "the binary file was indexed");
}

#[test]
fn an_unreadable_root_is_named_in_its_warning() {
    let env = Env::sample();
    std::fs::set_permissions(env.tmp.path(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    std::fs::set_permissions(&env.docs, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let docs = env.docs.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        let mut command = env.command(args);
        if is_root() {
            // Permissions do not bite root: run as nobody.
            command.uid(65534).gid(65534);
        }
        command.output().expect("run")
    };
    let output = run(&["ingest", docs, "--json"]);
    let text = run(&["ingest", docs]);
    std::fs::set_permissions(&env.docs, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(!stderr.contains("warning: : "), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let found = warnings(&report);
    assert!(
        found.iter().all(|(p, _)| !p.is_empty()),
        "a warning without a path: {found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(p, m)| p == docs && m.contains("cannot read")),
        "{found:?}"
    );
    assert!(stderr.contains(&format!("warning: {docs}: ")), "{stderr}");
}

#[test]
fn an_mtime_in_the_year_2400_overflows_nothing() {
    let env = Env::sample();
    let path = env.docs.join("future.md");
    std::fs::write(
        &path,
        "# Future\n\nWritten in the year twentyfour-hundred.\n",
    )
    .expect("write");
    let year_2400 = SystemTime::UNIX_EPOCH + Duration::from_secs(13_569_465_600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open")
        .set_modified(year_2400)
        .expect("set mtime");
    assert_eq!(
        std::fs::metadata(&path)
            .expect("stat")
            .modified()
            .expect("mtime"),
        year_2400,
        "the file system keeps the year 2400"
    );
    let first = env.ingest();
    assert!(
        first["documents"]["added"].as_u64().expect("added") > 0,
        "{first}"
    );
    let hits = env.search("twentyfour", 1);
    assert_eq!(hits["hits"][0]["paths"][0], "future.md", "{hits}");
    // An mtime after every recording is never trusted: read again, and found unchanged.
    let second = env.ingest();
    assert_eq!(second["documents"]["changed"], 0, "{second}");
    assert_eq!(second["chunks"]["added"], 0, "{second}");
    env.assert_verified();
}

#[test]
fn a_root_swapped_for_a_link_before_the_walk_is_never_read_through() {
    let env = Env::empty();
    env.write("a.md", "# Inside\n\nThe inside page is harmless.\n");
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(
        elsewhere.join("secret.md"),
        "# Secret\n\nThe outside secret is barracuda.\n",
    )
    .expect("write outside file");
    let (child, pause) = ingest_held_at(&env, "plan.before_walk");
    // The root's name is resolved, its folder not opened yet: swap the root itself.
    std::fs::rename(&env.docs, env.tmp.path().join("docs-orig")).expect("move");
    symlink(&elsewhere, &env.docs).expect("link");
    std::fs::write(pause.join("resume"), "").expect("resume");
    let output = child.wait_with_output().expect("wait for ingest");
    let export = String::from_utf8_lossy(&env.run(&["export"]).stdout).to_string();
    let leaked: Vec<&str> = export.lines().filter(|l| l.contains("barracuda")).collect();
    assert!(leaked.is_empty(), "outside text was indexed: {leaked:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "a root that could not be opened safely is a warning: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json report");
    let found = warnings(&report);
    assert!(
        found
            .iter()
            .any(|(p, m)| p == env.docs.to_str().expect("utf-8") && m.contains("symbolic link")),
        "no warning for the root: {found:?}"
    );
}

#[test]
fn a_link_never_brings_in_a_hidden_or_excluded_file() {
    let env = Env::empty();
    env.write("a.md", "# Inside\n\nThe inside page is harmless.\n");
    env.write(".private/key.md", "# Key\n\nThe hidden key is walrus.\n");
    env.write(
        "secret/plan.md",
        "# Plan\n\nThe excluded plan is narwhal.\n",
    );
    env.write(
        "ok/page.md",
        "# Page\n\nA page linked to is fine, puffin.\n",
    );
    symlink(".private/key.md", env.docs.join("key.md")).expect("link");
    symlink("secret/plan.md", env.docs.join("plan.md")).expect("link");
    symlink("ok/page.md", env.docs.join("page.md")).expect("link");
    let docs = env.docs.to_str().expect("utf-8");
    let report = env.json(&["ingest", docs, "--exclude", "secret/**", "--json"]);
    let export = String::from_utf8_lossy(&env.run(&["export"]).stdout).to_string();
    for secret in ["walrus", "narwhal"] {
        let leaked: Vec<&str> = export.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaked.is_empty(), "a link brought in {secret}: {leaked:?}");
    }
    assert!(
        export.contains("puffin"),
        "a link to a plain file is indexed"
    );
    let found = warnings(&report);
    for path in ["key.md", "plan.md"] {
        assert!(
            found
                .iter()
                .any(|(p, m)| p == path && m.contains("hidden or excluded")),
            "no warning for {path}: {found:?}"
        );
    }
}

#[test]
fn a_root_swapped_for_a_link_during_the_walk_deletes_nothing() {
    let env = Env::empty();
    env.write(
        "a/inside.md",
        "# Inside\n\nThe inside page is kept, heron.\n",
    );
    env.write("b.md", "# B\n\nA second page.\n");
    env.write("c.md", "# C\n\nA third page.\n");
    env.ingest();
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("a")).expect("mkdir");
    std::fs::write(
        elsewhere.join("a/other.md"),
        "# Other\n\nThe outside page.\n",
    )
    .expect("write outside file");
    let (child, pause) = ingest_held_at(&env, "walk.first_entry");
    // The root's listing is read, its folders not entered yet: swap the root itself.
    let orig = env.tmp.path().join("docs-orig");
    std::fs::rename(&env.docs, &orig).expect("move");
    symlink(&elsewhere, &env.docs).expect("link");
    std::fs::write(pause.join("resume"), "").expect("resume");
    let output = child.wait_with_output().expect("wait for ingest");
    std::fs::remove_file(&env.docs).expect("unlink");
    std::fs::rename(&orig, &env.docs).expect("move back");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    let export = env.export();
    assert!(
        export
            .values()
            .any(|chunk| chunk.paths.iter().any(|p| p == "a/inside.md")),
        "a document under the swapped root was deleted: {export:?}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json report");
    let found = warnings(&report);
    assert!(
        found
            .iter()
            .any(|(p, m)| p == env.docs.to_str().expect("utf-8")
                && m.contains("changed during the walk")),
        "no warning for the root: {found:?}"
    );
    assert!(
        found.iter().all(|(p, _)| !p.contains("other.md")),
        "outside names reached the report: {found:?}"
    );
}
