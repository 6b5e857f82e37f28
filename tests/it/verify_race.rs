//! `verify` while a writer commits: it may see the index behind the ledger (a lag the next
//! writer replays), but never a difference that is not there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::support::Env;

#[test]
fn verify_during_commits_reports_only_real_differences() {
    let env = Arc::new(Env::sample());
    env.ingest();
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writer = {
        let env = Arc::clone(&env);
        let stop = Arc::clone(&stop);
        let commits = Arc::clone(&commits);
        std::thread::spawn(move || {
            let docs = env.docs.to_str().expect("utf-8").to_string();
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                // Every run changes the set of chunks, so every run is a new generation.
                env.write(
                    &format!("race/page-{}.md", round % 5),
                    &format!("# Race {round}\n\nRound {round} of commits under verify.\n"),
                );
                let output = env.run(&["ingest", &docs, "--json", "--batch-files", "1"]);
                assert!(
                    output.status.success(),
                    "{}",
                    String::from_utf8_lossy(&output.stderr)
                );
                round += 1;
                commits.store(round, Ordering::Relaxed);
            }
            round
        })
    };
    let mut generations = std::collections::BTreeSet::new();
    let mut lagging = 0;
    // Until the writer has committed a dozen generations (or a bound on the verifies).
    let mut verifies = 0;
    while commits.load(Ordering::Relaxed) < 12 && verifies < 5_000 {
        verifies += 1;
        let output = env.run(&["verify", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
        assert!(
            report["identical"] == true || report["lag_only"] == true,
            "verify reported a difference while a writer committed: {report}"
        );
        if report["lag_only"] == true {
            lagging += 1;
        }
        generations.insert(report["ledger_generation"].as_u64().expect("generation"));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().expect("the writer thread");
    eprintln!(
        "verify race: {verifies} verifies beside {rounds} commits, {} generations seen, {lagging} lags",
        generations.len()
    );
    assert!(
        generations.len() >= 5,
        "verify ran beside too few commits to test anything: {generations:?}"
    );
    env.assert_verified();
}
