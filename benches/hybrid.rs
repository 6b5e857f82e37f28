//! Hybrid against lexical search latency in process, on a generated store of N one-chunk
//! documents (`GROUNDIDX_BENCH_CHUNKS`, default 100,000) whose vectors come from a word-hashing
//! embedder of 384 dimensions (the query's embedding then costs microseconds, so the figures
//! are the search's own); with `GROUNDIDX_BENCH_MODEL=DIR` it also times the real model's query
//! embedding, reported apart. `GROUNDIDX_BENCH_STORE=DIR` keeps the store for the next run.
//!
//! Prints p50 and p99 of lexical, semantic and hybrid searches over the same 300 queries, each
//! mode measured in turn after one warm-up pass.

// A benchmark prints its table on stdout.
#![allow(
    clippy::disallowed_macros,
    reason = "a benchmark prints its table on stdout"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use groundidx::embed::{self, Embedder, Fingerprint, LocalConfig, ModelConfig};
use groundidx::ingest::embed::embed_missing_with;
use groundidx::ingest::{IngestConfig, Interrupt, NoProgress, ingest};
use groundidx::ledger::ChunkFilter;
use groundidx::search::{Mode, SearchRequest, search};
use groundidx::store::{LockWait, Store, StoreReader};

const DIMS: usize = 384;
const WORDS: &[&str] = &[
    "cluster",
    "index",
    "shard",
    "replica",
    "node",
    "query",
    "filter",
    "token",
    "analyzer",
    "snapshot",
    "restore",
    "backup",
    "security",
    "role",
    "user",
    "certificate",
    "plugin",
    "pipeline",
    "ingest",
    "mapping",
    "field",
    "vector",
    "score",
    "search",
    "alias",
    "template",
    "rollover",
    "policy",
    "retention",
    "metric",
    "alert",
    "monitor",
    "dashboard",
    "latency",
    "throughput",
    "memory",
    "disk",
    "heap",
    "thread",
    "pool",
    "cache",
    "refresh",
    "flush",
    "merge",
    "segment",
    "translog",
    "routing",
    "allocation",
    "rebalance",
    "recovery",
    "upgrade",
    "version",
];

/// Vectors from hashed words: deterministic, and documents sharing words are near each other.
struct WordHash;

impl Embedder for WordHash {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint([42; 32])
    }
    fn dims(&self) -> usize {
        DIMS
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({"kind": "bench-word-hash", "dims": DIMS})
    }
    fn embed_passages(&self, texts: &[&str]) -> groundidx::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| word_vector(t)).collect())
    }
    fn embed_query(&self, text: &str) -> groundidx::Result<Vec<f32>> {
        Ok(word_vector(text))
    }
}

fn word_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut h = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        for _ in 0..8 {
            h ^= h >> 33;
            h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
            v[(h % DIMS as u64) as usize] += if h & (1 << 40) == 0 { 1.0 } else { -1.0 };
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A word index, skewed toward the first words as in real text.
    fn word(&mut self) -> &'static str {
        let a = self.next() as usize % WORDS.len();
        let b = self.next() as usize % WORDS.len();
        WORDS[a.min(b)]
    }
}

fn generate(dir: &Path, n: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..n {
        let folder = dir.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&folder).expect("create folder");
        }
        let title: Vec<&str> = (0..3).map(|_| rng.word()).collect();
        let body: Vec<String> = (0..40)
            .map(|j| format!("{}{}", rng.word(), if j % 9 == 8 { "." } else { "" }))
            .collect();
        std::fs::write(
            folder.join(format!("page-{i}.md")),
            format!("# {} {i}\n\n{}\n", title.join(" "), body.join(" ")),
        )
        .expect("write page");
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let n: usize = std::env::var("GROUNDIDX_BENCH_CHUNKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let kept = std::env::var_os("GROUNDIDX_BENCH_STORE").map(PathBuf::from);
    let tmp = tempfile::tempdir().expect("temp dir");
    let store_dir = kept.clone().unwrap_or_else(|| tmp.path().join("store"));
    let embedder: Arc<dyn Embedder> = Arc::new(WordHash);
    if !store_dir.join("vectors.bin").exists() {
        let docs = tmp.path().join("docs");
        let started = Instant::now();
        generate(&docs, n);
        eprintln!(
            "generated {n} documents in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let (mut store, _) =
            Store::open_writer(&store_dir, LockWait::NoWait, Default::default(), None)
                .expect("open store");
        let started = Instant::now();
        ingest(&mut store, &[docs], &IngestConfig::default(), &NoProgress).expect("ingest");
        eprintln!("ingested in {:.1} s", started.elapsed().as_secs_f64());
        let started = Instant::now();
        let config = ModelConfig::Local(LocalConfig::default());
        embed_missing_with(
            &mut store,
            &config,
            embedder.as_ref(),
            &Interrupt::default(),
            &NoProgress,
        )
        .expect("embed");
        eprintln!(
            "embedded and wrote the vector index in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        store.close().expect("close");
    }
    let reader = StoreReader::open(&store_dir).expect("open reader");
    reader.set_embedder(Some(Arc::clone(&embedder)));
    let chunks = reader.index().snapshot().num_chunks();
    let mut rng = Rng(7);
    let queries: Vec<String> = (0..300)
        .map(|_| format!("{} {} {}", rng.word(), rng.word(), rng.word()))
        .collect();
    println!("| mode | p50 ms | p99 ms |  ({chunks} chunks, {DIMS} dimensions)");
    println!("|---|---|---|");
    for mode in [Mode::Lexical, Mode::Semantic, Mode::Hybrid] {
        let request = |q: &str| SearchRequest {
            query: q.to_string(),
            top_k: 10,
            filter: ChunkFilter::default(),
            mode: Some(mode),
            min_score: None,
        };
        for q in &queries[..20] {
            search(&reader, &request(q)).expect("warm up");
        }
        let mut times: Vec<f64> = queries
            .iter()
            .map(|q| {
                let started = Instant::now();
                let answer = search(&reader, &request(q)).expect("search");
                assert_eq!(answer.mode, mode);
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.2} | {:.2} |",
            mode.as_str(),
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );
    }
    if let Some(dir) = std::env::var_os("GROUNDIDX_BENCH_MODEL") {
        let model = embed::load(
            &ModelConfig::Local(LocalConfig {
                dir: PathBuf::from(dir),
                ..LocalConfig::default()
            }),
            &[],
        )
        .expect("load the model");
        let mut times: Vec<f64> = queries
            .iter()
            .take(100)
            .map(|q| {
                let started = Instant::now();
                model.embed_query(q).expect("embed");
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "| query embedding (the model, apart) | {:.2} | {:.2} |",
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );
    }
}
