//! Deletion without data loss: deletions wait for a walk that could read everything under
//! them, a run never empties a folder's documents by accident, and roots stay apart.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use crate::support::{Env, clean_export, is_root};

#[test]
fn mass_delete_is_refused_and_changes_nothing() {
    let env = Env::sample();
    env.ingest();
    let before = env.export();
    for entry in std::fs::read_dir(env.docs.join("handbook")).expect("read") {
        std::fs::remove_file(entry.expect("entry").path()).expect("delete");
    }
    std::fs::remove_file(env.docs.join("README.md")).expect("delete");
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&["ingest", docs, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--allow-mass-delete") && stderr.contains("refusing to remove"),
        "{stderr}"
    );
    assert_eq!(env.export(), before, "a refused run changed the store");

    let allowed = env.json(&["ingest", docs, "--json", "--allow-mass-delete"]);
    assert!(
        allowed["documents"]["removed"].as_u64().expect("removed") >= 5,
        "{allowed}"
    );
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn an_empty_folder_looks_like_a_mass_delete() {
    let env = Env::sample();
    env.ingest();
    let empty = env.tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    // The same root, now empty (an unmounted folder looks exactly like this).
    std::fs::rename(&env.docs, env.tmp.path().join("moved")).expect("move away");
    std::fs::rename(&empty, &env.docs).expect("replace");
    let output = env.run(&["ingest", env.docs.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!env.export().is_empty());
}

#[test]
fn moving_every_file_is_a_rename_not_a_mass_delete() {
    let env = Env::sample();
    env.ingest();
    let moved = env.docs.join("moved");
    std::fs::create_dir(&moved).expect("mkdir");
    for name in ["handbook", "notes", "README.md"] {
        std::fs::rename(env.docs.join(name), moved.join(name)).expect("move");
    }
    let report = env.ingest();
    assert_eq!(report["documents"]["removed"], 0, "{report}");
    assert_eq!(report["chunks"]["added"], 0, "{report}");
}

#[test]
fn a_run_over_one_root_never_touches_another() {
    let env = Env::sample();
    let other = env.tmp.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(
        other.join("other.md"),
        "# Other root\n\nA document in the other root.\n",
    )
    .expect("write");
    env.ingest();
    env.json(&["ingest", other.to_str().expect("utf-8"), "--json"]);
    // Ingesting the first root again does not delete the other root's document.
    let report = env.ingest();
    assert_eq!(report["documents"]["removed"], 0, "{report}");
    assert_eq!(
        env.search("document in the other root", 1)["hits"][0]["paths"][0],
        "other.md"
    );
}

/// Runs the test body's commands as an unprivileged user when the suite runs as root, so that
/// file permissions bite.
fn unprivileged(command: &mut std::process::Command) {
    if is_root() {
        command.uid(65534).gid(65534);
    }
}

#[test]
fn unreadable_folder_holds_back_deletions_under_it() {
    let env = Env::sample();
    // Everything must be usable by the unprivileged user first.
    std::fs::set_permissions(env.tmp.path(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let chmod_tree = |mode: u32| {
        for entry in walkdir::WalkDir::new(env.tmp.path()) {
            let entry = entry.expect("walk");
            let m = if entry.file_type().is_dir() {
                mode | 0o111
            } else {
                mode
            };
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(m))
                .expect("chmod");
        }
    };
    let mut first = env.command(&["ingest", &docs, "--json"]);
    unprivileged(&mut first);
    chmod_tree(0o666);
    let output = first.output().expect("run");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    chmod_tree(0o666);
    let before = env.export();

    // handbook/ becomes unreadable, and a file elsewhere is deleted.
    std::fs::set_permissions(
        env.docs.join("handbook"),
        std::fs::Permissions::from_mode(0o000),
    )
    .expect("chmod");
    std::fs::remove_file(env.docs.join("notes/faq.md")).expect("delete");
    let mut second = env.command(&["ingest", &docs, "--json"]);
    unprivileged(&mut second);
    let output = second.output().expect("run");
    std::fs::set_permissions(
        env.docs.join("handbook"),
        std::fs::Permissions::from_mode(0o777),
    )
    .expect("chmod");
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        report["documents"]["removed"], 1,
        "only notes/faq.md goes: {report}"
    );
    assert!(
        report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w["path"] == "handbook"),
        "{report}"
    );
    let after = env.export();
    let handbook_before = before
        .values()
        .filter(|chunk| chunk.paths.iter().any(|p| p.starts_with("handbook/")))
        .count();
    let handbook_after = after
        .values()
        .filter(|chunk| chunk.paths.iter().any(|p| p.starts_with("handbook/")))
        .count();
    assert_eq!(
        handbook_before, handbook_after,
        "chunks under the unreadable folder were deleted"
    );
}
