//! A damaged, missing or outdated index heals from the ledger: `rebuild` (and the next
//! `ingest`) build a new index in a new folder and swap it in, whatever state the old one is
//! in. Meanwhile the readers say that the index (not the store) is the problem, and the
//! commands that read the ledger alone keep working.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{Env, assert_no_leftovers, is_root};

/// The first segment file of the index with this extension.
fn segment_file(store: &Path, extension: &str) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(store.join("index"))
        .expect("read index")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect();
    files.sort();
    files
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no .{extension} file in the index"))
}

/// One way to break an index: its name and what it does to the store.
type Damage = (&'static str, fn(&Path));

/// The ways the index was found broken.
fn damages() -> Vec<Damage> {
    vec![
        ("a deleted .store file", |store| {
            std::fs::remove_file(segment_file(store, "store")).expect("delete .store");
        }),
        ("a truncated .idx file", |store| {
            let idx = segment_file(store, "idx");
            let len = std::fs::metadata(&idx).expect("stat").len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&idx)
                .and_then(|f| f.set_len(len / 2))
                .expect("truncate .idx");
        }),
        ("a truncated .fast file", |store| {
            let fast = segment_file(store, "fast");
            let len = std::fs::metadata(&fast).expect("stat").len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fast)
                .and_then(|f| f.set_len(len / 2))
                .expect("truncate .fast");
        }),
        ("garbage at the end of a .fast file", |store| {
            // The list of fast columns lies at the end of the file.
            let fast = segment_file(store, "fast");
            let mut bytes = std::fs::read(&fast).expect("read .fast");
            let len = bytes.len();
            for byte in &mut bytes[len.saturating_sub(64)..] {
                *byte ^= 0x5a;
            }
            std::fs::write(&fast, bytes).expect("write .fast");
        }),
        (
            "a .fast file whose list of columns claims more bytes than the file",
            claim_a_longer_column_list,
        ),
        ("garbage in meta.json", |store| {
            std::fs::write(store.join("index/meta.json"), b"{ not json \x00\xff").expect("write");
        }),
        ("a missing meta.json", |store| {
            std::fs::remove_file(store.join("index/meta.json")).expect("delete meta.json");
        }),
        ("a missing index folder", |store| {
            std::fs::remove_dir_all(store.join("index")).expect("delete index");
        }),
        ("an index schema that lacks a field", drop_text_key_field),
        (
            "an index made before the analyzer version was recorded",
            record_no_analyzer_version,
        ),
    ]
}

/// Spoils the length of a `.fast` file's list of columns, so it reaches past the file's
/// start. Tantivy asserts rather than fails on that (`FileSlice::split`): the damage that made
/// every reader panic instead of naming the index. The file is Tantivy's footer (a JSON
/// payload, its length as a u32, a magic u32) after the columnar file, which ends with the
/// list's length (u64), the row count (u32) and an 8-byte version footer.
fn claim_a_longer_column_list(store: &Path) {
    let fast = segment_file(store, "fast");
    let mut bytes = std::fs::read(&fast).expect("read .fast");
    let len = bytes.len();
    let payload = u32::from_le_bytes(bytes[len - 8..len - 4].try_into().expect("4 bytes")) as usize;
    let columnar_end = len - 8 - payload;
    let at = columnar_end - 8 - 4 - 8;
    bytes[at..at + 8].copy_from_slice(&(len as u64 * 2).to_le_bytes());
    std::fs::write(&fast, bytes).expect("write .fast");
}

/// The name the analyzer had before its version was recorded in the index.
const UNVERSIONED_ANALYZER: &str = "groundidx_words";

/// Rewrites `meta.json` as a groundidx that recorded no analyzer version wrote it: its words
/// may have been made by another stemmer, so the index cannot be trusted to match a query.
fn record_no_analyzer_version(store: &Path) {
    let path = store.join("index/meta.json");
    let mut meta: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read meta.json")).expect("json");
    let mut n_text_fields = 0;
    for field in meta["schema"].as_array_mut().expect("schema fields") {
        if field["type"] != "text" {
            continue;
        }
        if let Some(tokenizer) = field.pointer_mut("/options/indexing/tokenizer")
            && tokenizer != "raw"
        {
            *tokenizer = Value::from(UNVERSIONED_ANALYZER);
            n_text_fields += 1;
        }
    }
    assert!(n_text_fields > 0, "the schema has analyzed text fields");
    std::fs::write(&path, serde_json::to_vec(&meta).expect("json")).expect("write meta.json");
}

/// The analyzer each analyzed text field of the store's index names.
fn analyzers(store: &Path) -> Vec<String> {
    let meta: Value = serde_json::from_slice(
        &std::fs::read(store.join("index/meta.json")).expect("read meta.json"),
    )
    .expect("json");
    meta["schema"]
        .as_array()
        .expect("schema fields")
        .iter()
        .filter_map(|field| field.pointer("/options/indexing/tokenizer")?.as_str())
        .filter(|tokenizer| *tokenizer != "raw")
        .map(str::to_string)
        .collect()
}

/// Rewrites `meta.json` as an older groundidx would have written it: without the `text_key`
/// field, which indexes before the text left the index lacked.
fn drop_text_key_field(store: &Path) {
    let path = store.join("index/meta.json");
    let mut meta: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read meta.json")).expect("json");
    let fields = meta["schema"].as_array_mut().expect("schema fields");
    let before = fields.len();
    fields.retain(|field| field["name"] != "text_key");
    assert_eq!(fields.len() + 1, before, "the schema had a text_key field");
    std::fs::write(&path, serde_json::to_vec(&meta).expect("json")).expect("write meta.json");
}

/// A reader on a store whose index cannot be used exits 1 and says so, naming the index and
/// the fix, not that there is no store.
fn assert_index_reported(env: &Env, args: &[&str], damage: &str) {
    let output = env.run(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?} with {damage}: {stderr}"
    );
    assert!(
        stderr.contains("cannot be used") && stderr.contains("groundidx rebuild"),
        "{args:?} with {damage}: {stderr}"
    );
    assert!(!stderr.contains("no groundidx store"), "{args:?}: {stderr}");
}

/// The commands that read the ledger alone work whatever the index's state.
fn assert_ledger_commands_work(env: &Env, damage: &str) {
    for args in [
        &["export"][..],
        &["status", "--json"],
        &["status"],
        &["audit", "--json"],
        &["usage", "--json"],
    ] {
        let output = env.run(args);
        assert!(
            output.status.success(),
            "{args:?} with {damage}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn rebuild_heals_every_damage_and_readers_name_the_index() {
    for (damage, break_index) in damages() {
        let env = Env::sample();
        env.ingest();
        let before = env.export();
        break_index(&env.store);
        assert_index_reported(&env, &["verify", "--json"], damage);
        assert_index_reported(&env, &["search", "rotation", "--json"], damage);
        assert_ledger_commands_work(&env, damage);
        let status = env.json(&["status", "--json"]);
        if damage.contains("meta.json") || damage.contains("folder") {
            assert!(status["index_generation"].is_null(), "{damage}: {status}");
        }
        assert!(
            status["generation"].as_u64() > Some(0),
            "{damage}: {status}"
        );

        let rebuilt = env.json(&["rebuild", "--json"]);
        assert_eq!(
            rebuilt["chunks"].as_u64(),
            Some(before.len() as u64),
            "{damage}"
        );
        env.assert_verified();
        assert_no_leftovers(&env.store);
        assert_eq!(env.export(), before, "{damage}");
        let hits = env.search("rotation", 3);
        assert!(
            !hits["hits"].as_array().expect("hits").is_empty(),
            "{damage}"
        );
        let status = env.json(&["status", "--json"]);
        assert_eq!(status["index_generation"], status["generation"], "{damage}");
    }
}

#[test]
fn ingest_heals_every_damage_on_its_way() {
    for (damage, break_index) in damages() {
        let env = Env::sample();
        env.ingest();
        break_index(&env.store);
        env.write("new/after.md", "# After\n\nWritten after the damage.\n");
        let report = env.ingest();
        assert_eq!(report["documents"]["added"], 1, "{damage}: {report}");
        env.assert_verified();
        assert_no_leftovers(&env.store);
        assert_eq!(
            env.export(),
            crate::support::clean_export(&env.docs),
            "{damage}"
        );
    }
}

/// An index whose words another analyzer made (another stemmer, another tokenizer) would
/// silently miss the queries whose tokens changed: readers refuse it and say to rebuild, and
/// the next ingest rebuilds it, though no document changed.
#[test]
fn an_index_of_another_analyzer_is_refused_by_readers_and_rebuilt_by_the_next_ingest() {
    let env = Env::sample();
    env.ingest();
    let current = analyzers(&env.store);
    record_no_analyzer_version(&env.store);
    assert_index_reported(&env, &["search", "rotation", "--json"], "another analyzer");
    let stderr = String::from_utf8_lossy(&env.run(&["search", "rotation"]).stderr).into_owned();
    assert!(
        stderr.contains(&format!("another analyzer ({UNVERSIONED_ANALYZER}, not")),
        "{stderr}"
    );
    let report = env.ingest();
    assert_eq!(report["documents"]["added"], 0, "{report}");
    assert_eq!(analyzers(&env.store), current);
    assert!(
        !env.search("rotation", 3)["hits"]
            .as_array()
            .expect("hits")
            .is_empty()
    );
    env.assert_verified();
    assert_no_leftovers(&env.store);
}

/// A store the previous index schema made: the committed fixture was written by this
/// groundidx, so when the schema changes, this test proves that an upgrade rebuilds it.
#[test]
fn a_store_of_the_previous_schema_is_rebuilt_by_the_next_writer() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1");
    let env = Env::empty();
    crate::support::copy_tree(&fixture.join("store"), &env.store);
    let expected = crate::support::parse_export(
        &std::fs::read_to_string(fixture.join("export.jsonl")).expect("read the fixture export"),
    );
    assert_eq!(env.export(), expected, "the ledger reads as it was written");
    // `rebuild` on a store whose index is of another (or the same) schema.
    env.json(&["rebuild", "--json"]);
    // The index holds the ledger's chunks; the chunks themselves are of an older recipe (IDs of
    // whitespace-folded text), which `verify` names until an ingest of their folder.
    let output = env.run(&["verify", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("verify JSON");
    assert_eq!(output.status.code(), Some(1), "{report}");
    for difference in [
        "missing_from_index",
        "extra_in_index",
        "duplicated_in_index",
    ] {
        assert_eq!(report[difference], serde_json::json!([]), "{report}");
    }
    assert_eq!(report["outdated_in_ledger"], 2, "{report}");
    assert_eq!(env.export(), expected);
    assert!(
        !env.search("fixture", 3)["hits"]
            .as_array()
            .expect("hits")
            .is_empty()
    );
}

#[test]
fn an_unreadable_index_folder_is_an_io_failure_not_a_usage_error() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::sample();
    let as_user = |args: &[&str]| {
        let mut command = env.command(args);
        if is_root() {
            command.uid(65534).gid(65534);
        }
        command.output().expect("run groundidx")
    };
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    for entry in walkdir::WalkDir::new(env.tmp.path()) {
        let entry = entry.expect("walk");
        chmod(
            entry.path(),
            if entry.file_type().is_dir() {
                0o777
            } else {
                0o666
            },
        );
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let ingest = ["ingest", docs.as_str(), "--json"];
    assert!(as_user(&ingest).status.success());

    let index = env.store.join("index");
    chmod(&index, 0o000);
    for args in [&ingest[..], &["verify", "--json"], &["search", "rotation"]] {
        let output = as_user(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.to_lowercase().contains("permission denied")
                && stderr.contains(index.to_str().expect("utf-8")),
            "{args:?}: {stderr}"
        );
    }
    chmod(&index, 0o777);
    assert!(as_user(&ingest).status.success());
    let output = as_user(&["verify", "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
