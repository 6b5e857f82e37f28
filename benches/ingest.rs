//! Ingest benchmarks on `sample_docs/` (or `GROUNDIDX_BENCH_DOCS`): a cold ingest into an empty
//! store, a no-op re-ingest (about the cost of a walk), and a re-ingest after one edited file.

use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};

use groundidx::ingest::{IngestConfig, NoProgress, ingest};
use groundidx::store::{LockWait, Store};

fn docs() -> PathBuf {
    std::env::var_os("GROUNDIDX_BENCH_DOCS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_docs"))
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.expect("walk");
        let target = to.join(entry.path().strip_prefix(from).expect("under from"));
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
        } else if entry.file_type().is_file() {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn run_ingest(store_dir: &Path, docs: &Path) {
    let (mut store, _) = Store::open_writer(store_dir, LockWait::NoWait, Default::default(), None)
        .expect("open store");
    ingest(
        &mut store,
        &[docs.to_path_buf()],
        &IngestConfig::default(),
        &NoProgress,
    )
    .expect("ingest");
    store.close().expect("close");
}

fn benches(c: &mut Criterion) {
    let source = docs();
    let tmp = tempfile::tempdir().expect("temp dir");
    let docs = tmp.path().join("docs");
    copy_tree(&source, &docs);

    c.bench_function("ingest/cold", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp store"),
            |store| run_ingest(store.path(), &docs),
            criterion::BatchSize::PerIteration,
        );
    });

    let store = tmp.path().join("store");
    run_ingest(&store, &docs);
    // Let the racy-clean window pass so the no-op run trusts the stat cache.
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    run_ingest(&store, &docs);
    c.bench_function("ingest/no-op", |b| b.iter(|| run_ingest(&store, &docs)));

    let edited = walkdir::WalkDir::new(&docs)
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.path().extension().is_some_and(|x| x == "md"))
        .expect("a Markdown file")
        .into_path();
    let original = std::fs::read_to_string(&edited).expect("read");
    let mut round = 0u64;
    c.bench_function("ingest/one-edit", |b| {
        b.iter(|| {
            round += 1;
            std::fs::write(&edited, format!("{original}\n\nEdit number {round}.\n")).expect("edit");
            run_ingest(&store, &docs);
        });
    });
}

criterion_group! {
    name = ingest_benches;
    config = Criterion::default().sample_size(10);
    targets = benches
}
criterion_main!(ingest_benches);
