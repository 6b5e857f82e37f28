//! The ANN index against exact search on seeded random unit vectors: recall@10, build time,
//! query latency (p50/p99) of both, peak RSS, RSS the index adds, and the index file's size.
//!
//! `cargo bench --bench ann_recall -- [N] [EF_SEARCH,…]` (defaults 100000 and 64,128,256,512).
//! `ANN_M` and `ANN_EF_CONSTRUCTION` override the graph parameters, `ANN_DIMS` the dimensions
//! (384), `ANN_QUERIES` the number of queries (1000). Queries run one at a time, as an agent's
//! do; the build uses every core. Random vectors are the hard case for a graph index: they do
//! not cluster, so a neighbour's neighbours are barely nearer than anyone else.

// A benchmark prints its table on stdout.
#![allow(clippy::disallowed_macros)]

use std::time::{Duration, Instant};

use groundidx::ann::{AnnConfig, AnnIndex, dot, random_unit_rows};

const K: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let n: usize = args.first().map_or(100_000, |arg| parse(arg, "N"));
    let ef_list: Vec<usize> = args.get(1).map_or(vec![64, 128, 256, 512], |arg| {
        arg.split(',').map(|ef| parse(ef, "EF_SEARCH")).collect()
    });
    let dims: usize = env_or("ANN_DIMS", 384);
    let n_queries: usize = env_or("ANN_QUERIES", 1_000);
    let defaults = AnnConfig::default();
    let config = AnnConfig {
        connectivity: env_or("ANN_M", defaults.connectivity),
        ef_construction: env_or("ANN_EF_CONSTRUCTION", defaults.ef_construction),
        ef_search: ef_list[0],
    };
    println!(
        "ann_recall: n={n} dims={dims} queries={n_queries} M={} ef_construction={} threads={}",
        config.connectivity,
        config.ef_construction,
        rayon::current_num_threads()
    );

    let started = Instant::now();
    let vectors = random_unit_rows(n, dims, 42);
    let queries = random_unit_rows(n_queries, dims, 4242);
    println!("generated in {:.1} s", started.elapsed().as_secs_f64());

    let rss_before = status_kb("VmRSS");
    let started = Instant::now();
    let mut index = AnnIndex::build(dims, &vectors, config, 0).expect("build the ANN index");
    let build = started.elapsed();
    let rss_index = status_kb("VmRSS").saturating_sub(rss_before);
    println!(
        "build: {:.1} s ({:.0} vectors/s); RSS added {} MiB = {:.0} bytes a vector ({} bytes of f32 values)",
        build.as_secs_f64(),
        n as f64 / build.as_secs_f64(),
        rss_index / 1024,
        rss_index as f64 * 1024.0 / n as f64,
        dims * 4
    );

    let mut exact_latencies = Vec::with_capacity(n_queries);
    let truth: Vec<Vec<u64>> = queries
        .chunks_exact(dims)
        .map(|query| {
            let started = Instant::now();
            let hits = exact_top_k(&vectors, dims, query, K);
            exact_latencies.push(started.elapsed());
            hits
        })
        .collect();
    println!(
        "exact:       p50 {:>9.3} ms  p99 {:>9.3} ms",
        ms(percentile(&mut exact_latencies, 0.50)),
        ms(percentile(&mut exact_latencies, 0.99))
    );

    for &ef in &ef_list {
        index.set_ef_search(ef);
        let mut latencies = Vec::with_capacity(n_queries);
        let mut found = 0usize;
        for (query, truth) in queries.chunks_exact(dims).zip(&truth) {
            let started = Instant::now();
            let hits = index.search(query, K, None);
            latencies.push(started.elapsed());
            found += hits.iter().filter(|(key, _)| truth.contains(key)).count();
        }
        println!(
            "ef_search {ef:>5}: p50 {:>9.3} ms  p99 {:>9.3} ms  recall@10 {:.4}",
            ms(percentile(&mut latencies, 0.50)),
            ms(percentile(&mut latencies, 0.99)),
            found as f64 / (K * n_queries) as f64
        );
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ann");
    let started = Instant::now();
    index.save(&path).expect("save");
    let save = started.elapsed();
    let file_size = std::fs::metadata(&path).expect("stat the index file").len();
    let peak_before_load = status_kb("VmHWM");
    let answers: Vec<Vec<(u64, f32)>> = queries
        .chunks_exact(dims)
        .take(10)
        .map(|query| index.search(query, K, None))
        .collect();
    drop(index);
    let started = Instant::now();
    let loaded = AnnIndex::load(&path).expect("load");
    let load = started.elapsed();
    let same = queries
        .chunks_exact(dims)
        .zip(&answers)
        .all(|(query, answer)| loaded.search(query, K, None) == *answer);
    println!(
        "file: {} MiB ({:.0} bytes a vector); save {:.1} s, load {:.1} s (checksum included); loaded answers: {}",
        file_size / (1 << 20),
        file_size as f64 / n as f64,
        save.as_secs_f64(),
        load.as_secs_f64(),
        if same { "the same" } else { "DIFFERENT" }
    );
    println!(
        "peak RSS (VmHWM): {} MiB after build, search and save; {} MiB after load (the bench holds the {} MiB of raw vectors too)",
        peak_before_load / 1024,
        status_kb("VmHWM") / 1024,
        vectors.len() * 4 / (1 << 20)
    );
}

/// Exact search: the dot product with every vector, keeping the k best (keys are positions).
fn exact_top_k(vectors: &[f32], dims: usize, query: &[f32], k: usize) -> Vec<u64> {
    let mut best: Vec<(f32, u64)> = Vec::with_capacity(k + 1);
    for (i, vector) in vectors.chunks_exact(dims).enumerate() {
        let similarity = dot(query, vector);
        if best.len() < k || best.last().is_some_and(|(worst, _)| similarity > *worst) {
            let at = best.partition_point(|(s, _)| *s >= similarity);
            best.insert(at, (similarity, i as u64));
            best.truncate(k);
        }
    }
    best.into_iter().map(|(_, key)| key).collect()
}

fn percentile(latencies: &mut [Duration], p: f64) -> Duration {
    latencies.sort_unstable();
    latencies[((latencies.len() - 1) as f64 * p).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// A `/proc/self/status` field in KiB (0 where there is no such file).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let value = line.strip_prefix(field)?.strip_prefix(':')?;
                value.trim().trim_end_matches("kB").trim().parse().ok()
            })
        })
        .unwrap_or(0)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |value| parse(&value, name))
}

fn parse(value: &str, name: &str) -> usize {
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name} must be a whole number, not {value:?}"))
}
