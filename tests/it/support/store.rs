//! Looking inside a store's folders: the index's files and what a killed writer may leave.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Every file in the index folder with its length and modification time.
pub fn index_files(store: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(store.join("index")).expect("read index folder") {
        let entry = entry.expect("index entry");
        let meta = entry.metadata().expect("index file metadata");
        files.insert(
            entry.file_name().to_string_lossy().to_string(),
            (meta.len(), meta.modified().expect("mtime")),
        );
    }
    files
}

/// Asserts that the store's index folder holds only what its last commit uses: `meta.json`,
/// `.managed.json`, Tantivy's lock files, and the files of the segments (and of their deletes)
/// that `meta.json` names; no file a killed writer left, no temporary file.
pub fn assert_no_leftovers(store: &Path) {
    let index = store.join("index");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(index.join("meta.json")).expect("read meta.json"))
            .expect("meta.json is JSON");
    let mut living: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for segment in meta["segments"].as_array().expect("segments") {
        let id = segment["segment_id"].as_str().expect("segment_id");
        living.insert(id.replace('-', ""), segment["deletes"]["opstamp"].as_u64());
    }
    for entry in std::fs::read_dir(&index).expect("read index folder") {
        let name = entry.expect("index entry").file_name();
        let name = name.to_string_lossy();
        if name == "meta.json" || name == ".managed.json" || name.starts_with(".tantivy-") {
            continue;
        }
        let (id, rest) = name.split_once('.').unwrap_or((&name, ""));
        let Some(deletes) = living.get(id) else {
            panic!(
                "{name} in {} belongs to no committed segment",
                index.display()
            );
        };
        if rest.ends_with("del") {
            assert_eq!(
                Some(rest.to_string()),
                deletes.map(|opstamp| format!("{opstamp}.del")),
                "{name} is not the delete file the commit uses"
            );
        }
    }
}

/// The bytes of every file under `dir`.
pub fn tree_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|meta| meta.len())
        .sum()
}
