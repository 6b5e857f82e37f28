//! Concurrent agents on one server while ingests commit: every answer is one whole generation
//! (its hits are exactly that generation's), and no client ever sees a generation go back.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::support::Env;
use crate::support::http::serve;

const CLIENTS: usize = 4;
const INGESTS: usize = 6;

fn marker(i: usize) -> String {
    format!("# Marker {i}\n\nThe quokkamarker number {i} of the census.\n")
}

#[test]
fn concurrent_clients_see_whole_generations_that_never_go_back() {
    let env = Env::sample();
    let start = env.ingest()["generation"].as_u64().expect("generation");
    let server = serve(&env, &["--rate-limit", "1000000/60s"]);
    // Each ingest adds one marker page: generation to the number of marker pages it holds.
    let markers = Mutex::new(BTreeMap::from([(start, 0usize)]));
    let stop = AtomicBool::new(false);
    let body = json!({"query": "quokkamarker", "top_k": 100}).to_string();
    let seen: Vec<Vec<(u64, usize)>> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                scope.spawn(|| {
                    let mut seen = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        let reply = server.search(None, &body);
                        assert_eq!(reply.status, 200, "{reply}");
                        let answer = reply.json();
                        let generation = answer["generation"].as_u64().expect("generation");
                        let hits = answer["hits"].as_array().expect("hits").len();
                        seen.push((generation, hits));
                    }
                    seen
                })
            })
            .collect();
        for i in 1..=INGESTS {
            env.write(&format!("markers/m{i}.md"), &marker(i));
            let generation = env.ingest()["generation"].as_u64().expect("generation");
            markers.lock().expect("markers").insert(generation, i);
            // Long enough for the server's reload (every 250 ms) to pick most of them up.
            std::thread::sleep(Duration::from_millis(400));
        }
        stop.store(true, Ordering::SeqCst);
        clients
            .into_iter()
            .map(|c| c.join().expect("a client thread"))
            .collect()
    });
    let markers = markers.into_inner().expect("markers");
    let mut generations = std::collections::BTreeSet::new();
    for (client, answers) in seen.iter().enumerate() {
        assert!(!answers.is_empty(), "client {client} got no answer");
        for pair in answers.windows(2) {
            assert!(
                pair[0].0 <= pair[1].0,
                "client {client} saw generation {} after {}",
                pair[1].0,
                pair[0].0
            );
        }
        for (generation, hits) in answers {
            let expected = markers.get(generation).unwrap_or_else(|| {
                panic!(
                    "client {client} got generation {generation}, which no ingest made: {markers:?}"
                )
            });
            assert_eq!(
                hits, expected,
                "client {client}: an answer claiming generation {generation} has {hits} marker hits, \
                 that generation has {expected}"
            );
            generations.insert(*generation);
        }
    }
    assert!(
        generations.len() >= 3,
        "the clients saw too few generations to test anything: {generations:?}"
    );
}
