//! SIGKILL at random moments (seeded: `GROUNDIDX_TEST_SEED`, printed) during embedding runs and
//! switches between two models, with edits between the runs: after one clean run, `verify`
//! passes and every chunk has exactly one vector under the active model, and no passage reached
//! a model more often than the pages the kills lost allow.

use std::collections::HashMap;

use crate::support::embed_server::{EmbedServer, Vectors};
use crate::support::{Env, Rng};

const ROUNDS: usize = 8;

fn notes(env: &Env, n: usize, round: usize) {
    for i in 0..n {
        // Every third note changes each round; the rest keep their text.
        let version = if i % 3 == 0 { round } else { 0 };
        env.write(
            &format!("notes/note-{i:04}.md"),
            &format!(
                "# Note {i}\n\nNote {i}, version {version}, about subject {}.\n",
                i % 13
            ),
        );
    }
}

#[test]
fn random_kills_during_embedding_and_model_switches_heal_to_one_vector_per_chunk() {
    let mut rng = Rng::from_env("random_kills_during_embedding_and_model_switches");
    let env = Env::empty();
    let servers = [
        (EmbedServer::start(Vectors::Words), "words"),
        (EmbedServer::start(Vectors::Words), "other"),
    ];
    let docs = env.docs.to_str().expect("utf-8").to_string();
    // The store exists before the first `embed`.
    notes(&env, 300, 0);
    env.ingest();
    let mut kills = 0;
    for round in 1..=ROUNDS {
        notes(&env, 300, round);
        let (server, name) = &servers[rng.below(2) as usize];
        let flags = server.flags(name);
        let command = if rng.below(2) == 0 { "ingest" } else { "embed" };
        let mut args: Vec<&str> = vec![command];
        if command == "ingest" {
            args.push(&docs);
        }
        args.extend(flags.iter().map(String::as_str));
        args.push("--quiet");
        let mut child = env
            .command(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(rng.below(600)));
        if child.try_wait().expect("poll").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let status = child.wait().expect("wait");
        // A run that ended by itself succeeded.
        assert!(
            status.success() || status.code().is_none(),
            "round {round}: {status}"
        );
    }
    // One clean run with each model: the last one's vectors cover every chunk, and it is active.
    let (server, name) = &servers[rng.below(2) as usize];
    let flags = server.flags(name);
    let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
    args.extend(flags.iter().map(String::as_str));
    env.json(&args);
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["identical"], true, "verify: {report}");
    assert_eq!(report["vectors"]["identical"], true, "verify: {report}");
    assert_eq!(
        report["vectors"]["ledger_vectors"], report["ledger_chunks"],
        "every chunk has one vector: {report}"
    );
    let status = env.json(&["status", "--json"]);
    let active: Vec<_> = status["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter(|m| m["active"] == true)
        .collect();
    assert_eq!(active.len(), 1, "{status}");
    assert_eq!(active[0]["vectors"], active[0]["chunks"], "{status}");
    for (server, name) in &servers {
        let texts = server.texts.lock().expect("texts").clone();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for text in texts.iter().filter(|t| t.contains("version")) {
            *seen.entry(text.as_str()).or_insert(0) += 1;
        }
        let again: usize = seen.values().map(|n| n - 1).sum();
        assert!(
            again <= kills * groundidx::ingest::embed::EMBED_PAGE,
            "{name}: {again} passages embedded again after {kills} kills"
        );
    }
}
