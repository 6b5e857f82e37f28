//! The references groundidx's indexing and search are measured against: Tantivy alone.
//!
//! Two uses:
//!
//! - `cargo bench --bench tantivy_reference`: criterion, on `sample_docs/` (or
//!   `GROUNDIDX_BENCH_DOCS`): a raw Tantivy index of the corpus next to a groundidx cold ingest of
//!   the same folder, and Tantivy's own query next to `groundidx::search::search` on the same
//!   index.
//! - Whole-corpus runs, driven by `benches/compare.sh`, with the bench executable called directly
//!   (a run of seconds to minutes is timed as a whole process, alternating with the `groundidx`
//!   binary, which criterion's sampling cannot do):
//!   - `tantivy_reference index CORPUS INDEX_DIR`: reads every `.md`, `.markdown` and `.txt`
//!     file (in parallel, as ingest does), cuts the text into pieces of about 1,000 characters at
//!     blank lines, and indexes them with one writer (2 threads, 96 MB, as groundidx's writer) into
//!     a schema of a stemmed text field with positions and a stored string ID; one commit, no
//!     ledger, no hashing, no Markdown parsing. Prints one JSON line.
//!   - `tantivy_reference search STORE QUERIES [ROUNDS]`: for every query line, alternately,
//!     `groundidx::search::search` (top 10) and Tantivy's own query on the store's index: the
//!     same BooleanQuery of term queries groundidx builds (every token on the body, and boosted
//!     on the heading), `TopDocs` top 10, with and without loading the ten stored documents.
//!     Prints one JSON line with p50 and p99 of each, in microseconds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Criterion;
use rayon::prelude::*;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::TokenStream;
use tantivy::{Index, TantivyDocument, Term, doc};

use groundidx::ingest::{IngestConfig, NoProgress, ingest};
use groundidx::ledger::ChunkFilter;
use groundidx::search::{SearchRequest, search};
use groundidx::store::{LockWait, Store, StoreReader};

const PIECE_CHARS: usize = 1_000;

/// Every indexable file under `root`, as ingest's walk picks them (hidden entries skipped).
fn corpus_files(root: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            e.path()
                .extension()
                .is_some_and(|x| x == "md" || x == "markdown" || x == "txt")
        })
        .map(walkdir::DirEntry::into_path)
        .collect()
}

/// The text cut at blank lines and packed into pieces of about `PIECE_CHARS` characters.
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for paragraph in text.split("\n\n") {
        if !current.is_empty() && current.len() + paragraph.len() > PIECE_CHARS {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(paragraph);
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

/// Raw Tantivy indexing of `corpus` into `index_dir`. Returns (files, pieces, bytes).
fn index_raw(corpus: &Path, index_dir: &Path) -> (usize, usize, usize) {
    let mut builder = Schema::builder();
    let id = builder.add_text_field("id", STRING | STORED);
    let body = builder.add_text_field(
        "body",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        ),
    );
    std::fs::create_dir_all(index_dir).expect("create index folder");
    let index = Index::create_in_dir(index_dir, builder.build()).expect("create index");
    let mut writer = index
        .writer_with_num_threads::<TantivyDocument>(2, 96 * 1024 * 1024)
        .expect("writer");
    let files = corpus_files(corpus);
    let mut n_pieces = 0;
    let mut bytes = 0;
    // Read a batch of files in parallel, then hand the pieces to the writer: the shape of
    // ingest's loop, without hashing, parsing, ledger or IDs.
    for batch in files.chunks(2_000) {
        let texts: Vec<(usize, String)> = batch
            .par_iter()
            .enumerate()
            .filter_map(|(i, path)| {
                let bytes = std::fs::read(path).ok()?;
                String::from_utf8(bytes).ok().map(|text| (i, text))
            })
            .collect();
        for (i, text) in texts {
            bytes += text.len();
            for (j, piece) in pieces(&text).into_iter().enumerate() {
                writer
                    .add_document(doc!(id => format!("{}#{j}", batch[i].display()), body => piece))
                    .expect("add");
                n_pieces += 1;
            }
        }
    }
    writer.commit().expect("commit");
    writer.wait_merging_threads().expect("merges");
    (files.len(), n_pieces, bytes)
}

/// Tantivy's own query on a groundidx index: the term queries groundidx's `index::query`
/// builds (no phrase: the benchmark queries have no quotes).
struct RawSearcher {
    index: Index,
    reader: tantivy::IndexReader,
    body: tantivy::schema::Field,
    heading: tantivy::schema::Field,
}

impl RawSearcher {
    fn open(store: &Path) -> RawSearcher {
        let index = Index::open_in_dir(store.join("index")).expect("open index");
        index.tokenizers().register(
            &groundidx::index::analyzer_name(),
            groundidx::index::analyzer(),
        );
        let schema = index.schema();
        let body = schema.get_field("body").expect("body field");
        let heading = schema.get_field("heading").expect("heading field");
        let reader = index.reader().expect("reader");
        RawSearcher {
            index,
            reader,
            body,
            heading,
        }
    }

    fn query(&self, text: &str) -> BooleanQuery {
        let mut analyzer = self.index.tokenizer_for_field(self.body).expect("analyzer");
        let mut stream = analyzer.token_stream(text);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        while stream.advance() {
            let token = &stream.token().text;
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(self.body, token),
                    IndexRecordOption::WithFreqs,
                )),
            ));
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(
                        Term::from_field_text(self.heading, token),
                        IndexRecordOption::WithFreqs,
                    )),
                    0.25,
                )),
            ));
        }
        BooleanQuery::new(clauses)
    }

    /// Top 10; with `load`, the ten stored documents too. Returns the number of hits.
    fn search(&self, text: &str, load: bool) -> usize {
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&self.query(text), &TopDocs::with_limit(10).order_by_score())
            .expect("search");
        if load {
            for (_, address) in &top {
                let doc: TantivyDocument = searcher.doc(*address).expect("doc");
                std::hint::black_box(doc);
            }
        }
        top.len()
    }
}

fn groundidx_search(reader: &StoreReader, text: &str) -> usize {
    let request = SearchRequest {
        query: text.to_string(),
        top_k: 10,
        filter: ChunkFilter::default(),
        mode: None,
        min_score: None,
    };
    search(reader, &request).expect("search").hits.len()
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let k = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[k.min(values.len() - 1)]
}

fn search_mode(store: &Path, queries: &Path, rounds: usize) {
    let queries: Vec<String> = std::fs::read_to_string(queries)
        .expect("read queries")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let reader = StoreReader::open(store).expect("open store");
    let raw = RawSearcher::open(store);
    // Warm the page cache and both code paths.
    for q in &queries {
        groundidx_search(&reader, q);
        raw.search(q, true);
    }
    let (mut ours, mut alone, mut loaded) = (Vec::new(), Vec::new(), Vec::new());
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    for round in 0..rounds {
        for (i, q) in queries.iter().enumerate() {
            // Rotate the order so neither side always runs first (on a warmer cache).
            let mut order = [0, 1, 2];
            order.rotate_left((round + i) % 3);
            for which in order {
                let started = Instant::now();
                match which {
                    0 => std::hint::black_box(groundidx_search(&reader, q)),
                    1 => std::hint::black_box(raw.search(q, false)),
                    _ => std::hint::black_box(raw.search(q, true)),
                };
                let t = micros(started.elapsed());
                [&mut ours, &mut alone, &mut loaded][which].push(t);
            }
        }
    }
    let stats = |v: &mut Vec<f64>| serde_json::json!({"p50_us": percentile(v, 50.0), "p99_us": percentile(v, 99.0), "n": v.len()});
    emit(serde_json::json!({
        "chunks": reader.index().num_chunks(),
        "queries": queries.len(),
        "rounds": rounds,
        "groundidx_search": stats(&mut ours),
        "tantivy_top10": stats(&mut alone),
        "tantivy_top10_load_docs": stats(&mut loaded),
    }));
}

fn docs() -> PathBuf {
    std::env::var_os("GROUNDIDX_BENCH_DOCS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_docs"))
}

fn criterion_benches(c: &mut Criterion) {
    let docs = docs();
    let mut group = c.benchmark_group("cold-index");
    group.sample_size(10);
    group.bench_function("tantivy-alone", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp index"),
            |dir| index_raw(&docs, dir.path()),
            criterion::BatchSize::PerIteration,
        );
    });
    group.bench_function("groundidx-ingest", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp store"),
            |dir| {
                let (mut store, _) =
                    Store::open_writer(dir.path(), LockWait::NoWait, Default::default(), None)
                        .expect("open");
                ingest(
                    &mut store,
                    std::slice::from_ref(&docs),
                    &IngestConfig::default(),
                    &NoProgress,
                )
                .expect("ingest");
                store.close().expect("close");
            },
            criterion::BatchSize::PerIteration,
        );
    });
    group.finish();

    let tmp = tempfile::tempdir().expect("temp store");
    let (mut store, _) =
        Store::open_writer(tmp.path(), LockWait::NoWait, Default::default(), None).expect("open");
    ingest(
        &mut store,
        std::slice::from_ref(&docs),
        &IngestConfig::default(),
        &NoProgress,
    )
    .expect("ingest");
    store.close().expect("close");
    let reader = StoreReader::open(tmp.path()).expect("reader");
    let raw = RawSearcher::open(tmp.path());
    let query = "rotate the signing key";
    let mut group = c.benchmark_group("search");
    group.bench_function("tantivy-top10", |b| b.iter(|| raw.search(query, false)));
    group.bench_function("tantivy-top10-load-docs", |b| {
        b.iter(|| raw.search(query, true));
    });
    group.bench_function("groundidx-search", |b| {
        b.iter(|| groundidx_search(&reader, query));
    });
    group.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("index") if args.len() == 3 => {
            let started = Instant::now();
            let (files, pieces, bytes) = index_raw(Path::new(&args[1]), Path::new(&args[2]));
            emit(
                serde_json::json!({"files": files, "pieces": pieces, "bytes": bytes,
                    "ms": started.elapsed().as_millis() as u64}),
            );
        }
        Some("search") if args.len() >= 3 => {
            let rounds = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(3);
            search_mode(Path::new(&args[1]), Path::new(&args[2]), rounds);
        }
        _ => {
            let mut c = Criterion::default().configure_from_args();
            criterion_benches(&mut c);
            c.final_summary();
        }
    }
}

/// One JSON line on standard output, for the script that runs this bench.
fn emit(value: serde_json::Value) {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{value}").expect("write to stdout");
}
