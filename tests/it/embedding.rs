//! Every passage is embedded once: counted by the passages the model is given (a real HTTP
//! embeddings server the test starts counts them), across no-op runs, edits, renames, shared
//! passages, kills during embedding and a change of model; and the vector index is a
//! projection that `verify` checks and `rebuild` makes again without the model.

use serde_json::Value;

use crate::crash::assert_crashed_at;
use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors};

/// Crash points reached while embedding and writing the vector index.
pub const EMBED_POINTS: &[&str] = &[
    "embed.before_commit",
    "embed.after_commit",
    "vectors.before_rename",
    "vectors.after_rename",
];

/// `ARGS… --json` plus the server's flags for model `name`; must succeed.
fn with_model(env: &Env, server: &EmbedServer, name: &str, args: &[&str]) -> Value {
    let flags = server.flags(name);
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    all.extend(flags.iter().map(String::as_str));
    env.json(&all)
}

fn ingest(env: &Env, server: &EmbedServer) -> Value {
    let docs = env.docs.to_str().expect("utf-8").to_string();
    with_model(env, server, "words", &["ingest", &docs])
}

fn embedded(report: &Value) -> u64 {
    report["embedding"]["embedded"]
        .as_u64()
        .unwrap_or_else(|| panic!("no embedding count in {report}"))
}

fn chunk_count(env: &Env) -> u64 {
    env.json(&["status", "--json"])["chunks"]
        .as_u64()
        .expect("chunks")
}

/// The active model's coverage as `status` reports it: (fingerprint, vectors, chunks).
pub fn active_model(env: &Env) -> (String, u64, u64) {
    let status = env.json(&["status", "--json"]);
    let model = status["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["active"] == true)
        .unwrap_or_else(|| panic!("no active model in {status}"))
        .clone();
    (
        model["model"].as_str().expect("fingerprint").to_string(),
        model["vectors"].as_u64().expect("vectors"),
        model["chunks"].as_u64().expect("chunks"),
    )
}

/// `verify` passes, the vector index included: every chunk with one vector.
pub fn assert_vectors_verified(env: &Env) {
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["identical"], true, "verify: {report}");
    assert_eq!(report["vectors"]["identical"], true, "verify: {report}");
    assert_eq!(
        report["vectors"]["ledger_vectors"], report["ledger_chunks"],
        "every chunk has one vector: {report}"
    );
}

#[test]
fn a_no_op_run_embeds_nothing_and_loads_no_model() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    let first = ingest(&env, &server);
    let chunks = chunk_count(&env);
    assert!(chunks > 5);
    assert_eq!(embedded(&first), chunks, "{first}");
    assert_eq!(first["embedding"]["model_loaded"], true);
    // The client's one probe for the dimensions, then each chunk once.
    assert_eq!(server.inputs(), chunks + 1);
    let again = ingest(&env, &server);
    assert_eq!(embedded(&again), 0, "{again}");
    assert_eq!(again["embedding"]["model_loaded"], false, "{again}");
    assert_eq!(
        server.inputs(),
        chunks + 2,
        "a no-op run sent the model only the probe that tells which model it is"
    );
    assert_vectors_verified(&env);
}

#[test]
fn an_edited_paragraph_embeds_only_the_chunks_whose_ids_changed() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let before = server.inputs();
    let path = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.contains("90 days"));
    std::fs::write(&path, text.replacen("90 days", "45 days", 1)).expect("edit");
    let report = ingest(&env, &server);
    let added = report["chunks"]["added"].as_u64().expect("added");
    assert!(added >= 1, "{report}");
    assert_eq!(embedded(&report), added, "{report}");
    // The probe on loading, then exactly the new chunks.
    assert_eq!(server.inputs() - before, added + 1);
    let texts = server.texts.lock().expect("texts").clone();
    assert!(
        texts[texts.len() - added as usize..]
            .iter()
            .any(|t| t.contains("45 days")),
        "the edited passage was embedded"
    );
    assert_vectors_verified(&env);
}

#[test]
fn a_rename_a_copy_and_a_shared_passage_are_embedded_once() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let before = server.inputs();
    std::fs::rename(
        env.docs.join("handbook/deploys.md"),
        env.docs.join("notes/deploying.md"),
    )
    .expect("rename");
    let copy = std::fs::read_to_string(env.docs.join("handbook/backups.md")).expect("read");
    env.write("archive/backups-copy.md", &copy);
    let renamed = ingest(&env, &server);
    assert_eq!(renamed["documents"]["renamed"], 1, "{renamed}");
    assert_eq!(embedded(&renamed), 0, "{renamed}");
    assert_eq!(
        server.inputs(),
        before + 1,
        "nothing but the probe reached the model"
    );

    // Two new files holding the same passage under the same heading path: one chunk.
    let shared = "# Shared\n\nThe quarterly audit checks every signing key.\n";
    env.write("team-a/audit.md", &format!("{shared}\nTeam A notes.\n"));
    env.write("team-b/audit.md", &format!("{shared}\nTeam B notes.\n"));
    let report = ingest(&env, &server);
    let added = report["chunks"]["added"].as_u64().expect("added");
    assert_eq!(embedded(&report), added, "{report}");
    let texts = server.texts.lock().expect("texts").clone();
    let quarterly = texts
        .iter()
        .filter(|t| t.contains("quarterly audit"))
        .count();
    assert!(quarterly >= 1);
    assert_eq!(
        texts.iter().filter(|t| t.contains("Team A notes")).count(),
        texts.iter().filter(|t| t.contains("Team B notes")).count()
    );
    assert_vectors_verified(&env);
}

/// A folder of `n` one-chunk documents, `notes/note-0000.md` on, the i-th holding `text(i)`.
pub fn notes_env(n: usize, text: impl Fn(usize) -> String) -> Env {
    let env = Env::empty();
    for i in 0..n {
        env.write(&format!("notes/note-{i:04}.md"), &text(i));
    }
    env
}

/// A folder of `n` one-chunk documents, more than one embedding page.
fn many_env(n: usize) -> Env {
    notes_env(n, |i| {
        format!(
            "# Note {i}\n\nThis is note number {i} about subject {}.\n",
            i % 17
        )
    })
}

#[test]
fn a_run_killed_during_embedding_embeds_only_what_was_missing() {
    let env = many_env(600);
    let server = EmbedServer::start(Vectors::Words);
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let flags = server.flags("words");
    let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
    args.extend(flags.iter().map(String::as_str));
    // Killed after the first page of vectors committed, then before the second one's commit.
    for point in ["embed.after_commit:1", "embed.before_commit:1"] {
        let output = env
            .command(&args)
            .env(groundidx::crash::CRASH_ENV, point)
            .output()
            .expect("run");
        assert_crashed_at(&output, point);
    }
    // Lexical search never waited for the embedding: the chunks are all searchable.
    let chunks = chunk_count(&env);
    assert_eq!(chunks, 600);
    let hits = env.json(&["search", "note number 599", "--json", "--mode", "lexical"]);
    assert_eq!(hits["hits"][0]["paths"][0], "notes/note-0599.md", "{hits}");
    let (_, vectors, _) = active_model(&env);
    assert!(vectors > 0 && vectors < chunks, "{vectors} of {chunks}");
    let before = server.inputs();
    let report = ingest(&env, &server);
    assert_eq!(
        embedded(&report),
        chunks - vectors,
        "only the missing passages: {report}"
    );
    assert_eq!(server.inputs() - before, chunks - vectors + 1);
    let (_, vectors, all) = active_model(&env);
    assert_eq!((vectors, all), (chunks, chunks));
    // No passage reached the model twice but for the page the second kill lost.
    let texts = server.texts.lock().expect("texts").clone();
    let mut seen = std::collections::HashMap::new();
    for text in texts.iter().filter(|t| t.contains("note number")) {
        *seen.entry(text.clone()).or_insert(0) += 1;
    }
    let twice = seen.values().filter(|n| **n > 1).count();
    assert!(
        twice <= groundidx::ingest::embed::EMBED_PAGE,
        "{twice} passages embedded twice"
    );
    assert!(seen.values().all(|n| *n <= 2));
    assert_vectors_verified(&env);
}

#[test]
fn every_embedding_crash_point_heals_to_one_vector_per_chunk() {
    for point in EMBED_POINTS {
        let env = Env::sample();
        let server = EmbedServer::start(Vectors::Words);
        let docs = env.docs.to_str().expect("utf-8").to_string();
        let flags = server.flags("words");
        let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
        args.extend(flags.iter().map(String::as_str));
        let output = env
            .command(&args)
            .env(groundidx::crash::CRASH_ENV, point)
            .output()
            .expect("run");
        assert_crashed_at(&output, point);
        let report = ingest(&env, &server);
        let chunks = chunk_count(&env);
        assert!(embedded(&report) <= chunks, "{point}: {report}");
        let (_, vectors, all) = active_model(&env);
        assert_eq!((vectors, all), (chunks, chunks), "{point}");
        assert_vectors_verified(&env);
        assert!(
            !env.store.join("vectors.bin.tmp").exists(),
            "{point}: the killed write's file was left"
        );
    }
}

#[test]
fn a_new_model_takes_over_only_once_its_vectors_cover_every_chunk() {
    let env = many_env(300);
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let (old, _, _) = active_model(&env);
    // The new model is killed after its first page: search keeps the old model's vectors.
    let mut args: Vec<String> = vec!["embed".into(), "--json".into()];
    args.extend(server.flags("words-v2"));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = env
        .command(&argv)
        .env(groundidx::crash::CRASH_ENV, "embed.after_commit:1")
        .output()
        .expect("run");
    assert_crashed_at(&output, "embed.after_commit:1");
    let (active, vectors, chunks) = active_model(&env);
    assert_eq!(
        active, old,
        "search switched before the new set was complete"
    );
    assert_eq!(vectors, chunks);
    let status = env.json(&["status", "--json"]);
    let new = status["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["active"] == false)
        .unwrap_or_else(|| panic!("the new model is not listed: {status}"))
        .clone();
    assert!(new["vectors"].as_u64().expect("vectors") < chunks);
    let hits = with_model(
        &env,
        &server,
        "words",
        &["search", "subject 3", "--mode", "hybrid"],
    );
    assert_eq!(hits["mode"], "hybrid");
    assert_eq!(hits["semantic_coverage"]["vectors"], chunks);

    let finished = with_model(&env, &server, "words-v2", &["embed"]);
    assert_eq!(finished["active"], true, "{finished}");
    let (active, _, _) = active_model(&env);
    assert_ne!(active, old);
    assert_eq!(active, new["model"].as_str().expect("fingerprint"));
    assert_vectors_verified(&env);
    // The old vectors stay until an explicit gc.
    let status = env.json(&["status", "--json"]);
    assert_eq!(status["models"].as_array().expect("models").len(), 2);
    let gc = env.json(&["gc", "--json"]);
    assert_eq!(gc["vectors_removed"]["replaced_models"], chunks, "{gc}");
    let status = env.json(&["status", "--json"]);
    assert_eq!(status["models"].as_array().expect("models").len(), 1);
    assert_vectors_verified(&env);
}

#[test]
fn verify_finds_a_damaged_vector_index_and_rebuild_makes_it_without_the_model() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    let file = env.store.join("vectors.bin");
    let mut bytes = std::fs::read(&file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, &bytes).expect("damage");
    let output = env.run(&["verify", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert!(
        report["vectors"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("vectors.bin")),
        "{report}"
    );
    // Lexical search still answers.
    let hits = env.json(&["search", "rotate keys", "--json", "--mode", "lexical"]);
    assert!(!hits["hits"].as_array().expect("hits").is_empty());
    // The model is gone: rebuild reads the stored vectors, and calls nothing.
    let inputs = server.inputs();
    drop(server);
    env.json(&["rebuild", "--json"]);
    assert_vectors_verified(&env);
    let server = EmbedServer::start(Vectors::Words);
    let hits = with_model(
        &env,
        &server,
        "words",
        &["search", "rotate keys", "--mode", "semantic"],
    );
    assert_eq!(hits["mode"], "semantic");
    assert!(!hits["hits"].as_array().expect("hits").is_empty());
    assert!(inputs > 0);
    // The query alone reached the new server (and its probe).
    assert_eq!(server.inputs(), 2);
}

#[test]
fn filters_restrict_both_legs_and_a_passage_comes_back_once() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    ingest(&env, &server);
    for mode in ["hybrid", "semantic", "lexical"] {
        let hits = with_model(
            &env,
            &server,
            "words",
            &[
                "search",
                "keys backups deploys",
                "--mode",
                mode,
                "--path",
                "handbook/",
                "-k",
                "20",
            ],
        );
        assert_eq!(hits["mode"], mode);
        let hits = hits["hits"].as_array().expect("hits");
        assert!(!hits.is_empty(), "{mode}");
        let mut ids = std::collections::HashSet::new();
        for hit in hits {
            assert!(
                hit["paths"]
                    .as_array()
                    .expect("paths")
                    .iter()
                    .any(|p| p.as_str().expect("path").starts_with("handbook/")),
                "{mode}: {hit}"
            );
            assert!(ids.insert(hit["chunk_id"].clone()), "{mode}: a chunk twice");
        }
    }
}

#[test]
fn an_unreachable_model_fails_the_embedding_with_its_address_and_lexical_search_works() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    let url = server.url();
    drop(server);
    // Give the dropped listener a moment to close.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let docs = env.docs.to_str().expect("utf-8");
    let output = env.run(&[
        "ingest",
        docs,
        "--embed-url",
        &url,
        "--embed-remote-model",
        "words",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&url), "{stderr}");
    assert!(stderr.contains("lexical search works"), "{stderr}");
    let hits = env.search("rotate keys", 3);
    assert_eq!(hits["mode"], "lexical");
    assert!(!hits["hits"].as_array().expect("hits").is_empty());
    let refused = env.run(&["search", "rotate keys", "--mode", "semantic"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--embed-model"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn a_failing_server_is_retried_by_one_layer() {
    let env = Env::sample();
    let server = EmbedServer::start(Vectors::Words);
    server
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let failing = std::sync::Arc::clone(&server.failing);
    let healer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        failing.store(false, std::sync::atomic::Ordering::SeqCst);
    });
    let report = ingest(&env, &server);
    healer.join().expect("healer");
    assert_eq!(embedded(&report), chunk_count(&env), "{report}");
    assert_vectors_verified(&env);
}

#[test]
fn a_broken_answer_stores_no_vector_and_says_what_was_wrong() {
    for (kind, expected) in [
        ("fewer", "vectors for"),
        ("ragged", "different lengths"),
        ("garbage", "not an embeddings list"),
    ] {
        let env = Env::sample();
        let server = EmbedServer::start(Vectors::Broken(kind));
        let docs = env.docs.to_str().expect("utf-8");
        let flags = server.flags("broken");
        let mut args: Vec<&str> = vec!["ingest", docs];
        args.extend(flags.iter().map(String::as_str));
        let output = env.run(&args);
        assert_eq!(output.status.code(), Some(1), "{kind}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{kind}: {stderr}");
        assert!(stderr.contains(&server.url()), "{kind}: {stderr}");
        let status = env.json(&["status", "--json"]);
        for model in status["models"].as_array().expect("models") {
            assert_eq!(model["vectors"], 0, "{kind}: {status}");
        }
        // The lexical part is whole and searchable.
        assert!(
            !env.search("rotate keys", 3)["hits"]
                .as_array()
                .expect("hits")
                .is_empty()
        );
        env.assert_verified();
    }
}
