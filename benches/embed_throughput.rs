//! Embedding throughput of the local model: chunks per second over a file of texts, the
//! forward pass as an ingest runs it (`embed_passages` on batches of passages).
//! Driven by `benches/embed_throughput.sh`, which runs the reference implementation beside it.
//!
//! Usage: `cargo bench --bench embed_throughput -- MODEL_DIR TEXTS.jsonl THREADS RUNS [MAX_TOKENS]`
//! (`TEXTS.jsonl`: one JSON object with a `text` field per line, as `groundidx export` writes).
//! Prints one JSON line per run: `{"run", "chunks", "seconds", "chunks_per_s"}`.
//! `--cosine` instead embeds the texts at both precisions (`auto`, then `float32`) and prints
//! one line of the kernel `auto` ran and the cosine of each text's two vectors (minimum, median,
//! mean).
//! Without arguments (as `cargo bench` runs every bench) it says so and measures nothing.

use std::io::Write;
use std::time::Instant;

use groundidx::embed::Embedder;
use groundidx::embed::LocalConfig;
use groundidx::embed::local::LocalModel;

/// Passages per `embed_passages` call, as an ingest batch hands them over.
const CALL_CHUNKS: usize = 256;

fn main() {
    let args = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect::<Vec<_>>();
    let [model_dir, texts, threads, runs, rest @ ..] = args.as_slice() else {
        eprintln!(
            "embed_throughput: no arguments, nothing measured (see benches/embed_throughput.sh)"
        );
        return;
    };
    let texts = std::fs::read_to_string(texts)
        .expect("read the texts file")
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            value["text"].as_str().expect("a text field").to_owned()
        })
        .collect::<Vec<_>>();
    let config = LocalConfig {
        dir: model_dir.into(),
        threads: Some(threads.parse().expect("THREADS is a number")),
        max_tokens: rest
            .first()
            .map(|max| max.parse().expect("MAX_TOKENS is a number")),
        // The precision a run measures: `auto` (the default) or `float32`.
        precision: std::env::var("GROUNDIDX_EMBED_PRECISION")
            .map_or(Ok(groundidx::embed::Precision::Auto), |text| text.parse())
            .expect("GROUNDIDX_EMBED_PRECISION is auto or float32"),
        ..LocalConfig::default()
    };
    if std::env::args().any(|arg| arg == "--cosine") {
        cosine_of_precisions(&config, &texts);
        return;
    }
    let model = LocalModel::load(&config).expect("load the model");
    let runs: usize = runs.parse().expect("RUNS is a number");
    for run in 0..runs {
        let start = Instant::now();
        let mut n_vectors = 0;
        for call in texts.chunks(CALL_CHUNKS) {
            let call = call.iter().map(String::as_str).collect::<Vec<_>>();
            n_vectors += model.embed_passages(&call).expect("embed").len();
        }
        let seconds = start.elapsed().as_secs_f64();
        assert_eq!(n_vectors, texts.len());
        writeln!(
            std::io::stdout().lock(),
            "{}",
            serde_json::json!({
                "run": run,
                "chunks": texts.len(),
                "seconds": seconds,
                "chunks_per_s": texts.len() as f64 / seconds,
            })
        )
        .expect("write to stdout");
    }
}

/// The cosine between each text's vector at `auto` precision and at `float32`.
fn cosine_of_precisions(config: &LocalConfig, texts: &[String]) {
    let texts = texts.iter().map(String::as_str).collect::<Vec<_>>();
    let embed = |precision| {
        let model = LocalModel::load(&LocalConfig {
            precision,
            ..config.clone()
        })
        .expect("load the model");
        let vectors = texts
            .chunks(CALL_CHUNKS)
            .flat_map(|call| model.embed_passages(call).expect("embed"))
            .collect::<Vec<_>>();
        (model.describe()["kernel"].clone(), vectors)
    };
    let (kernel, auto) = embed(groundidx::embed::Precision::Auto);
    let (_, float32) = embed(groundidx::embed::Precision::Float32);
    let mut cosines = auto
        .iter()
        .zip(&float32)
        .map(|(a, b)| {
            let dot: f64 = a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            dot / (norm(a) * norm(b))
        })
        .collect::<Vec<_>>();
    cosines.sort_by(f64::total_cmp);
    writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::json!({
            "kernel": kernel,
            "texts": cosines.len(),
            "cosine_min": cosines.first(),
            "cosine_median": cosines.get(cosines.len() / 2),
            "cosine_mean": cosines.iter().sum::<f64>() / cosines.len() as f64,
        })
    )
    .expect("write to stdout");
}
