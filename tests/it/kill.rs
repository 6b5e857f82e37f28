//! Invariant 2 under real kills: SIGKILL a running `groundidx ingest` on a real corpus at random
//! moments, change a few files between rounds, and check that the store always heals to what a
//! clean ingest holds.
//!
//! The short version runs in the suite. `GROUNDIDX_SOAK_ROUNDS=N` makes it longer,
//! `GROUNDIDX_SOAK_SECS=S` runs rounds until S seconds have passed, and
//! `GROUNDIDX_SOAK_CHECK_EVERY=K` heals and compares with a clean ingest every K rounds (default 4).

use std::time::Duration;

use crate::support::{Env, Rng, clean_export, corpus};

#[test]
fn sigkill_at_random_moments_on_a_real_corpus_heals() {
    let Some(corpus) = corpus("opensearch-docs") else {
        return;
    };
    let setting = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let secs = setting("GROUNDIDX_SOAK_SECS", 0);
    let rounds = setting("GROUNDIDX_SOAK_ROUNDS", if secs > 0 { u64::MAX } else { 4 });
    let check_every = setting("GROUNDIDX_SOAK_CHECK_EVERY", 4).max(1);
    let soak_started = std::time::Instant::now();
    let mut rng = Rng::from_env("sigkill soak");
    let env = Env::copy_of(&corpus);
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let mut files: Vec<std::path::PathBuf> = walkdir::WalkDir::new(&env.docs)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.into_path())
        .collect();
    files.sort();

    let mut killed = 0;
    let mut checks = 0;
    // Kill at a random moment within how long an unkilled run last took, so later (shorter)
    // runs are hit mid-run too, not only the cold first one.
    let mut run_ms: u64 = 3_000;
    let mut round = 0;
    while round < rounds && (secs == 0 || soak_started.elapsed().as_secs() < secs) {
        let mut child = env
            .command(&["ingest", &docs, "--json", "--batch-files", "200"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn ingest");
        let started = std::time::Instant::now();
        let delay = Duration::from_millis(5 + rng.below(run_ms.max(10)));
        // Poll, so that a run which ends first tells how long runs take now.
        loop {
            if child.try_wait().expect("poll child").is_some() {
                run_ms = started.elapsed().as_millis() as u64;
                break;
            }
            if started.elapsed() >= delay {
                child.kill().expect("SIGKILL");
                killed += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        child.wait().expect("reap child");

        // Change some files: ten edits, a deletion, a new file and a rename.
        let pick = |rng: &mut Rng| files[rng.below(files.len() as u64) as usize].clone();
        for _ in 0..10 {
            let edited = pick(&mut rng);
            if let Ok(text) = std::fs::read_to_string(&edited) {
                std::fs::write(
                    &edited,
                    format!("{text}\n\nRound {round} added this line.\n"),
                )
                .expect("edit");
            }
        }
        let deleted = pick(&mut rng);
        let _ = std::fs::remove_file(&deleted);
        env.write(
            &format!("soak/new-{round}.md"),
            &format!("# Round {round}\n\nNew in round {round}.\n"),
        );
        let renamed = pick(&mut rng);
        let target = renamed.with_extension(format!("r{round}.md"));
        if std::fs::rename(&renamed, &target).is_ok() {
            files.push(target);
        }
        files.push(env.docs.join(format!("soak/new-{round}.md")));
        // The folder keeps its size: a long soak never runs out of files to change.
        files.retain(|f| f.exists());
        round += 1;
        if round % check_every == 0 {
            heal_and_compare(&env, &docs, round);
            checks += 1;
            if secs > 0 {
                eprintln!(
                    "sigkill soak: {round} rounds, {killed} killed mid-run, {checks} checks passed, {:.0?}",
                    soak_started.elapsed()
                );
            }
        }
    }
    if round == 0 || round % check_every != 0 {
        heal_and_compare(&env, &docs, round);
        checks += 1;
    }
    eprintln!(
        "sigkill soak: {round} rounds in {:.0?}, {killed} killed mid-run, {checks} checks against a clean ingest",
        soak_started.elapsed(),
    );
}

/// Run to completion, then demand exactly what a clean ingest of the same folder holds.
fn heal_and_compare(env: &Env, docs: &str, round: u64) {
    let healed = env.json(&["ingest", docs, "--json"]);
    assert_eq!(healed["documents"]["skipped"], 0, "round {round}: {healed}");
    env.assert_verified();
    assert_eq!(
        env.export(),
        clean_export(&env.docs),
        "round {round}: the healed store differs from a clean ingest"
    );
    let again = env.json(&["ingest", docs, "--json"]);
    assert_eq!(again["chunks"]["added"], 0, "round {round}: {again}");
}
