//! Search benchmarks on `sample_docs/` (or `GROUNDIDX_BENCH_DOCS`): query latency in process,
//! without and with a path filter.

use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};

use groundidx::ingest::{IngestConfig, NoProgress, ingest};
use groundidx::ledger::ChunkFilter;
use groundidx::search::{SearchRequest, search};
use groundidx::store::{LockWait, Store, StoreReader};

fn docs() -> PathBuf {
    std::env::var_os("GROUNDIDX_BENCH_DOCS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_docs"))
}

fn benches(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (mut store, _) = Store::open_writer(tmp.path(), LockWait::NoWait, Default::default(), None)
        .expect("open store");
    ingest(&mut store, &[docs()], &IngestConfig::default(), &NoProgress).expect("ingest");
    store.close().expect("close");
    let reader = StoreReader::open(tmp.path()).expect("open reader");

    let request = |filter: ChunkFilter| SearchRequest {
        query: "rotate the signing key".to_string(),
        top_k: 10,
        filter,
        mode: None,
        min_score: None,
    };
    let plain = request(ChunkFilter::default());
    c.bench_function("search/top10", |b| {
        b.iter(|| search(&reader, &plain).expect("search"));
    });
    let filtered = request(ChunkFilter {
        path_prefix: Some("handbook/".to_string()),
        ..ChunkFilter::default()
    });
    c.bench_function("search/top10-path-filter", |b| {
        b.iter(|| search(&reader, &filtered).expect("search"));
    });
}

criterion_group!(search_benches, benches);
criterion_main!(search_benches);
