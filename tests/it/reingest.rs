//! Invariant 1: re-running ingest on unchanged documents writes zero chunks and creates no
//! Tantivy segment; the index folder is left untouched.

use crate::support::{Env, index_files};

#[test]
fn rerun_writes_zero_chunks_and_leaves_the_index_untouched() {
    let env = Env::sample();
    let first = env.ingest();
    assert!(
        first["chunks"]["added"].as_u64().expect("added") > 0,
        "{first}"
    );
    let before = index_files(&env.store);
    let generation = first["generation"].clone();

    for _ in 0..2 {
        let again = env.ingest();
        assert_eq!(again["chunks"]["added"], 0, "{again}");
        assert_eq!(again["chunks"]["removed"], 0, "{again}");
        assert_eq!(again["documents"]["added"], 0, "{again}");
        assert_eq!(again["documents"]["changed"], 0, "{again}");
        assert_eq!(again["generation"], generation, "{again}");
        assert_eq!(index_files(&env.store), before, "the index folder changed");
    }
    env.assert_verified();
}

#[test]
fn rehash_reads_everything_and_still_writes_nothing() {
    let env = Env::sample();
    let first = env.ingest();
    let before = index_files(&env.store);
    let docs = env.docs.to_str().expect("utf-8");
    let again = env.json(&["ingest", docs, "--json", "--rehash"]);
    assert_eq!(again["chunks"]["added"], 0);
    assert_eq!(
        again["documents"]["unchanged"], first["documents"]["added"],
        "{again}"
    );
    assert_eq!(index_files(&env.store), before);
}

#[test]
fn touched_but_unchanged_file_writes_nothing() {
    let env = Env::sample();
    env.ingest();
    let before = index_files(&env.store);
    let path = env.docs.join("handbook/backups.md");
    let text = std::fs::read(&path).expect("read");
    std::fs::write(&path, text).expect("rewrite the same bytes");
    let again = env.ingest();
    assert_eq!(again["chunks"]["added"], 0);
    assert_eq!(again["documents"]["changed"], 0);
    assert_eq!(index_files(&env.store), before);
}
