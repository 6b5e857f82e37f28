//! The index deletes a chunk by the first 64 bits of its ID. Two chunks whose IDs share those
//! bits (a 64-bit collision, made here by hand) must each stay in the index exactly once while
//! the ledger holds them, whichever of the two is added or removed.

use std::collections::BTreeMap;

use groundidx::chunk::Chunk;
use groundidx::ids::{ChunkId, DocHash};
use groundidx::ledger::{Batch, NewDocument, SourceUpsert};
use groundidx::stat::FileStat;
use groundidx::store::{LockWait, Store, StoreReader};

/// A chunk ID whose first eight bytes are `key` and whose last byte is `tail`.
fn colliding_id(key: u8, tail: u8) -> ChunkId {
    let mut bytes = [key; 32];
    bytes[31] = tail;
    ChunkId::from_bytes(bytes)
}

fn upsert(path: &str, seed: u8, id: ChunkId, text: &str) -> SourceUpsert {
    SourceUpsert {
        path: path.to_string(),
        doc_hash: DocHash::from_bytes([seed; 32]),
        stat: FileStat {
            size: text.len() as u64,
            mtime_ns: 1,
            ctime_ns: 1,
            inode: u64::from(seed),
        },
        recorded_ns: 10_000_000_000,
        document: Some(NewDocument {
            title: None,
            tags: Vec::new(),
            fields: BTreeMap::new(),
            chunks: vec![Chunk {
                id,
                heading_path: vec!["Guide".to_string()],
                text: text.to_string(),
                lines: (1, 1),
                ordinal: 0,
                pages: None,
            }],
            recipe_version: groundidx::chunk::CHUNKER_VERSION,
            packed: None,
        }),
    }
}

fn index_ids(dir: &std::path::Path) -> Vec<String> {
    StoreReader::open(dir)
        .expect("open reader")
        .index()
        .chunk_ids()
        .expect("index ids")
}

#[test]
fn chunks_sharing_a_delete_key_each_stay_exactly_once() {
    let dir = tempfile::tempdir().expect("temp store");
    let (first, second) = (colliding_id(7, 1), colliding_id(7, 2));
    assert_eq!(first.short(), second.short());
    assert_ne!(first, second);
    let (mut store, _) = Store::open_writer(dir.path(), LockWait::NoWait, Default::default(), None)
        .expect("open store");
    let root = store.ensure_root("/corpus").expect("root");

    let mut both = Batch::new(root);
    both.upserts.push(upsert("a.md", 1, first, "alpha passage"));
    both.upserts.push(upsert("b.md", 2, second, "beta passage"));
    store.commit(&both).expect("commit both");
    let mut expected = vec![first.to_hex(), second.to_hex()];
    expected.sort();
    assert_eq!(index_ids(dir.path()), expected, "both chunks, once each");

    // Removing the first deletes its key, which the second shares: the second must come back.
    let mut remove_first = Batch::new(root);
    remove_first.deletes.push("a.md".to_string());
    store.commit(&remove_first).expect("remove a.md");
    assert_eq!(index_ids(dir.path()), vec![second.to_hex()]);

    // Adding it again must not add the second a second time.
    let mut add_again = Batch::new(root);
    add_again
        .upserts
        .push(upsert("a.md", 1, first, "alpha passage"));
    store.commit(&add_again).expect("add a.md again");
    assert_eq!(index_ids(dir.path()), expected, "both chunks, once each");
    store.close().expect("close");

    // A rebuild from the ledger agrees.
    let (store, _) =
        Store::open_writer_to_rebuild(dir.path(), LockWait::NoWait, Default::default())
            .expect("rebuild");
    store.close().expect("close");
    assert_eq!(index_ids(dir.path()), expected);
}
