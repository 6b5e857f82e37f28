//! A relevance floor: every hit of a query that was embedded carries its `similarity` (the
//! cosine of the query's and the passage's embeddings, the same scale for every query and
//! mode), and `min_score` drops the hits below it, so "nothing relevant" is an empty answer and
//! not ten unrelated passages. A document the query names exactly always stays; a floor that
//! cannot be applied says so and drops nothing; a page cursor is bound to its floor.

use serde_json::{Value, json};

use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors, model_dir};
use crate::support::mcp::Mcp;

/// Every hit's similarity, best hit first; panics on a hit without one.
fn similarities(answer: &Value) -> Vec<f64> {
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| {
            hit["similarity"]
                .as_f64()
                .unwrap_or_else(|| panic!("a hit without similarity: {hit}"))
        })
        .collect()
}

fn ids(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| hit["chunk_id"].as_str().expect("chunk_id").to_string())
        .collect()
}

#[test]
fn the_floor_keeps_exactly_the_hits_at_or_above_it_with_the_real_model() {
    let Some(model) = model_dir() else { return };
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let model = model.to_str().expect("utf-8").to_string();
    env.json(&["ingest", &docs, "--json", "--embed-model", &model]);
    let question = "my update broke production, how can I go back";
    for mode in ["hybrid", "semantic", "lexical"] {
        // Every chunk of the sample is a hit at top-k 100, so the floor's effect is exact. A
        // floor of -1 drops nothing, and has a lexical search embed its query too.
        let all = env.json(&[
            "search",
            question,
            "--json",
            "-k",
            "100",
            "--mode",
            mode,
            "--min-score",
            "-1",
        ]);
        let scores = similarities(&all);
        assert!(scores.iter().all(|s| (-1.0..=1.0001).contains(s)), "{all}");
        let mut sorted = scores.clone();
        sorted.sort_by(f64::total_cmp);
        let floor = sorted[sorted.len() / 2];
        let kept = env.json(&[
            "search",
            question,
            "--json",
            "-k",
            "100",
            "--mode",
            mode,
            "--min-score",
            &floor.to_string(),
        ]);
        let expected: Vec<String> = ids(&all)
            .into_iter()
            .zip(&scores)
            // Compared as the server compares them: in f32, each parsed from its shortest
            // decimal form (an f32 widened to f64 is not the f64 of its decimal form).
            .filter(|(_, s)| **s as f32 >= floor as f32)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids(&kept), expected, "{mode}: floor {floor}\n{kept}");
        assert!(
            similarities(&kept)
                .iter()
                .all(|s| *s as f32 >= floor as f32),
            "{kept}"
        );
        // Above the best similarity, nothing is relevant: no hit at all.
        let best = sorted[sorted.len() - 1];
        let none = env.json(&[
            "search",
            question,
            "--json",
            "--mode",
            mode,
            "--min-score",
            &(best + 0.01).min(1.0).to_string(),
        ]);
        assert_eq!(none["hits"], json!([]), "{mode}: {none}");
    }
    // The rollback page is about this question, and a question about baking is about nothing
    // in the sample: the floor of 0.3 separates them.
    let deploys = env.json(&["search", question, "--json", "--min-score", "0.3"]);
    assert_eq!(
        deploys["hits"][0]["paths"][0], "handbook/deploys.md",
        "{deploys}"
    );
    let baking = env.json(&[
        "search",
        "how long should sourdough bread rise before baking",
        "--json",
        "--min-score",
        "0.3",
    ]);
    assert_eq!(baking["hits"], json!([]), "{baking}");
    // Out of range, the CLI refuses before it searches.
    let refused = env.run(&["search", question, "--min-score", "1.5"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("between -1 and 1"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_docs_applies_the_floor_and_binds_it_to_its_pages() {
    let server = EmbedServer::start(Vectors::Words);
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let flags = server.flags("words");
    let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
    args.extend(flags.iter().map(String::as_str));
    env.json(&args);
    let serve_args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mcp = Mcp::start(&env, &serve_args).await;
    let query = "rotate the signing key";
    let all = mcp
        .search("k-all", json!({"query": query, "top_k": 100}))
        .await;
    all.assert_fresh();
    let scores = similarities(&all.structured);
    let floor = scores[scores.len() / 2];
    let kept = mcp
        .search(
            "k-floor",
            json!({"query": query, "top_k": 100, "min_score": floor}),
        )
        .await;
    kept.assert_fresh();
    assert!(
        !kept.structured["hits"].as_array().expect("hits").is_empty()
            && similarities(&kept.structured)
                .iter()
                .all(|s| *s as f32 >= floor as f32),
        "{}",
        kept.raw
    );
    assert!(
        similarities(&kept.structured).len() < scores.len(),
        "{}",
        kept.raw
    );
    // A page cursor continues the floor it was cut with, and no other.
    let first = mcp
        .search(
            "k-page1",
            json!({"query": query, "top_k": 1, "min_score": floor}),
        )
        .await;
    let cursor = first.structured["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("a next_cursor: {}", first.raw))
        .to_string();
    let next = mcp
        .search(
            "k-page2",
            json!({"query": query, "top_k": 1, "min_score": floor, "cursor": cursor}),
        )
        .await;
    next.assert_fresh();
    assert_eq!(
        next.structured["hits"][0]["chunk_id"], kept.structured["hits"][1]["chunk_id"],
        "{}",
        next.raw
    );
    // In lexical mode the floor embeds the query too, and its pages keep the floor.
    let lexical = mcp
        .search(
            "k-lexical",
            json!({"query": query, "top_k": 100, "min_score": floor, "mode": "lexical"}),
        )
        .await;
    lexical.assert_fresh();
    let lexical_ids = ids(&lexical.structured);
    assert!(lexical_ids.len() >= 2, "{}", lexical.raw);
    let mut cursor = None::<String>;
    let mut paged: Vec<String> = Vec::new();
    for page in 0..lexical_ids.len() {
        let mut arguments =
            json!({"query": query, "top_k": 1, "min_score": floor, "mode": "lexical"});
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let called = mcp.search(&format!("k-lexical-{page}"), arguments).await;
        called.assert_fresh();
        assert!(
            called.structured.get("min_score_unapplied").is_none(),
            "{}",
            called.raw
        );
        paged.extend(ids(&called.structured));
        cursor = called.structured["next_cursor"]
            .as_str()
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(paged, lexical_ids, "pages of a lexical search with a floor");
    let other = mcp
        .search(
            "k-page2-other",
            json!({"query": query, "top_k": 1, "min_score": -1.0, "cursor": cursor}),
        )
        .await;
    other.assert_error("invalid_arguments");
    for bad in [json!(1.5), json!(-2), json!("0.3")] {
        let refused = mcp
            .search(
                &format!("k-bad-{bad}"),
                json!({"query": query, "min_score": bad}),
            )
            .await;
        refused.assert_error("invalid_arguments");
        assert!(refused.text.contains("min_score"), "{}", refused.raw);
    }
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_that_cannot_apply_says_so_and_drops_nothing() {
    // A store without vectors: no query is embedded, so no hit has a similarity.
    let env = Env::sample();
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    let plain = mcp.search("k-plain", json!({"query": "signing key"})).await;
    let floored = mcp
        .search(
            "k-floored",
            json!({"query": "signing key", "min_score": 0.9}),
        )
        .await;
    floored.assert_fresh();
    assert_eq!(
        ids(&floored.structured),
        ids(&plain.structured),
        "{}",
        floored.raw
    );
    assert!(
        floored.structured["min_score_unapplied"].is_string(),
        "{}",
        floored.raw
    );
    assert!(plain.structured.get("min_score_unapplied").is_none());
    mcp.stop().await;
    let cli = env.run(&["search", "signing key", "--min-score", "0.9"]);
    assert!(cli.status.success());
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("--min-score not applied"),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
}
