//! Approximate vector search (`ann::SignCodes`) against exact search on seeded random unit
//! vectors: recall@10, query latency (p50/p99) of both, the time to compute the codes, and the
//! memory they add.
//!
//! `cargo bench --bench ann_recall -- [N] [COARSE:DIVISOR,…]` (defaults 100000 and the sizes
//! `ann::candidates` gives, then 64:10,64:5,128:8). Each COARSE:DIVISOR sets pass 1's shortlist
//! to COARSE rows per √N and pass 2's to that divided by DIVISOR. `ANN_DIMS` sets the dimensions (384), `ANN_QUERIES`
//! the number of queries (300). Queries run one at a time, as an agent's do, each on every core
//! of the rayon pool. Random vectors are the hard case for any approximate method: they do not
//! cluster, so nothing but the vectors' own values tells near from far.

// A benchmark prints its table on stdout.
#![allow(
    clippy::disallowed_macros,
    reason = "a benchmark prints its table on stdout"
)]

use std::time::{Duration, Instant};

use groundidx::vectors::ann::{Candidates, SignCodes, candidates, dots, dots_at, random_unit_rows};
use rayon::prelude::*;

const K: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let n: usize = args.first().map_or(100_000, |arg| parse(arg, "N"));
    let settings: Vec<(usize, usize)> =
        args.get(1)
            .map_or(vec![(64, 10), (64, 5), (128, 8)], |arg| {
                arg.split(',')
                    .map(|pair| {
                        let (coarse, divisor) = pair.split_once(':').unwrap_or((pair, "10"));
                        (parse(coarse, "COARSE"), parse(divisor, "DIVISOR"))
                    })
                    .collect()
            });
    let dims: usize = env_or("ANN_DIMS", 384);
    let n_queries: usize = env_or("ANN_QUERIES", 300);
    println!(
        "ann_recall: n={n} dims={dims} queries={n_queries} threads={} default shortlist {:?}",
        rayon::current_num_threads(),
        candidates(n)
    );

    let started = Instant::now();
    let vectors = random_unit_rows(n, dims, 42);
    let queries = random_unit_rows(n_queries, dims, 4242);
    println!("generated in {:.1} s", started.elapsed().as_secs_f64());

    let rss_before = status_kb("VmRSS");
    let started = Instant::now();
    let codes = SignCodes::build(dims, &vectors);
    let build = started.elapsed();
    println!(
        "codes: {:.2} s ({:.0} vectors/s); {} bytes ({:.0} a vector, RSS added {} KiB) beside {} bytes of f32 values",
        build.as_secs_f64(),
        n as f64 / build.as_secs_f64(),
        codes.memory_bytes(),
        codes.memory_bytes() as f64 / n as f64,
        status_kb("VmRSS").saturating_sub(rss_before),
        n * dims * 4
    );

    // Exact search as `vectors` runs it: every row scored, on every core.
    let mut exact_times = Vec::with_capacity(n_queries);
    let truth: Vec<Vec<usize>> = queries
        .chunks_exact(dims)
        .map(|query| {
            let started = Instant::now();
            let top = exact_top(&vectors, dims, query);
            exact_times.push(started.elapsed());
            top
        })
        .collect();
    let (p50, p99) = percentiles(&mut exact_times);
    println!("exact: p50 {:.2} ms, p99 {:.2} ms", ms(p50), ms(p99));

    println!("| coarse | fine | recall@10 | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    let fixed = |wanted: Candidates| move |_rows: usize| wanted;
    let mut sizes_list: Vec<Box<dyn Fn(usize) -> Candidates>> =
        vec![Box::new(fixed(candidates(n)))];
    for (per_root, divisor) in settings {
        sizes_list.push(Box::new(move |rows: usize| {
            let coarse = ((per_root as f64 * (rows as f64).sqrt()) as usize).clamp(K, rows);
            Candidates {
                coarse,
                fine: (coarse / divisor.max(1)).max(K),
            }
        }));
    }
    for sizes in &sizes_list {
        let mut times = Vec::with_capacity(n_queries);
        let mut found = 0usize;
        for (query, truth) in queries.chunks_exact(dims).zip(&truth) {
            let started = Instant::now();
            let shortlist = codes.shortlist_sized(query, None, sizes);
            let top = rank(&vectors, query, shortlist);
            times.push(started.elapsed());
            found += top.iter().filter(|row| truth.contains(row)).count();
        }
        let (p50, p99) = percentiles(&mut times);
        let wanted = sizes(n);
        println!(
            "| {} | {} | {:.4} | {:.2} | {:.2} |",
            wanted.coarse,
            wanted.fine,
            found as f64 / (n_queries * K) as f64,
            ms(p50),
            ms(p99)
        );
    }
    println!("peak RSS {} MiB", status_kb("VmHWM") / 1024);
}

/// The exact top `K` rows: every row scored, in blocks over the rayon pool.
fn exact_top(vectors: &[f32], dims: usize, query: &[f32]) -> Vec<usize> {
    let block = 16_384;
    let mut best: Vec<(f32, usize)> = vectors
        .par_chunks(block * dims)
        .enumerate()
        .flat_map_iter(|(task, rows)| {
            let mut scores = vec![0f32; rows.len() / dims];
            dots(rows, query, &mut scores);
            let mut scored: Vec<(f32, usize)> = scores
                .into_iter()
                .enumerate()
                .map(|(i, score)| (score, task * block + i))
                .collect();
            let keep = K.min(scored.len());
            scored.select_nth_unstable_by(keep.saturating_sub(1), order);
            scored.truncate(keep);
            scored
        })
        .collect();
    best.sort_by(order);
    best.into_iter().take(K).map(|(_, row)| row).collect()
}

/// The `K` best rows of `shortlist` by exact dot product, as `vectors` ranks a shortlist
/// (in blocks over the rayon pool).
fn rank(vectors: &[f32], query: &[f32], shortlist: Vec<usize>) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = shortlist
        .par_chunks(1_024)
        .flat_map_iter(|rows| {
            let mut scores = vec![0f32; rows.len()];
            dots_at(vectors, rows, query, &mut scores);
            scores.into_iter().zip(rows.iter().copied())
        })
        .collect();
    scored.sort_by(order);
    scored.into_iter().take(K).map(|(_, row)| row).collect()
}

fn order(a: &(f32, usize), b: &(f32, usize)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn parse(value: &str, what: &str) -> usize {
    value
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what} must be a whole number, not {value:?}"))
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |value| parse(&value, name))
}

/// A field of /proc/self/status in KiB (0 where there is none).
fn status_kb(field: &str) -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
