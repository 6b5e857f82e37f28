//! Invariant 2 under real kills: SIGKILL running `groundidx` writers at random moments, change
//! files between rounds, and check that the store always heals to what a clean ingest holds.
//!
//! Three soaks share one loop. One ingests a real corpus (skipped with a message when it is
//! absent, failing when `CI` is set); one does the same to a generated folder of every text
//! format (Markdown, MDX, reStructuredText, AsciiDoc, HTML, notebooks) and two PDFs; the other
//! makes small incremental ingests of a generated folder (a line appended to a hundred files, a
//! few small batches per run, so the kills land inside Tantivy's commits and merges too) and sometimes kills a `rebuild`. Every check runs a
//! plain ingest (which must succeed: a killed writer must never wedge the store), `verify`, and
//! compares with a clean ingest; the index must hold no file that its commit does not use.
//! Each soak asserts that a good share of its rounds were killed while the process ran.
//!
//! The short versions run in the suite. `GROUNDIDX_SOAK_ROUNDS=N` makes them longer,
//! `GROUNDIDX_SOAK_SECS=S` runs rounds until S seconds have passed, and
//! `GROUNDIDX_SOAK_CHECK_EVERY=K` heals and compares with a clean ingest every K rounds
//! (default 4). Run one alone with its name as the test filter.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{Env, Rng, assert_no_leftovers, clean_export, corpus, tree_bytes};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// What a soak did.
#[derive(Debug, Default)]
struct Figures {
    rounds: u64,
    /// Rounds whose process was still running when it was killed.
    killed: u64,
    /// Rounds whose process ended before the kill (and succeeded).
    finished: u64,
    checks: u64,
}

/// How one soak runs its rounds.
struct Soak<'a> {
    name: &'a str,
    env: &'a Env,
    /// The writer to start and kill each round, as `groundidx` arguments.
    ingest: Vec<String>,
    /// Every how many rounds to kill a `rebuild` instead (0: never).
    rebuild_every: u64,
    default_rounds: u64,
}

impl Soak<'_> {
    /// Rounds of: start a writer, SIGKILL it after a random delay within how long an unkilled
    /// run last took (a quarter more, so some runs finish and keep that estimate fresh), then
    /// `change` the folder; every few rounds, heal and compare.
    fn run(&self, rng: &mut Rng, mut change: impl FnMut(&mut Rng, u64)) -> Figures {
        let secs = setting("GROUNDIDX_SOAK_SECS", 0);
        let rounds = setting(
            "GROUNDIDX_SOAK_ROUNDS",
            if secs > 0 {
                u64::MAX
            } else {
                self.default_rounds
            },
        );
        let check_every = setting("GROUNDIDX_SOAK_CHECK_EVERY", 4).max(1);
        let started = Instant::now();
        let mut figures = Figures::default();
        let mut ingest_ms: u64 = 2_000;
        let mut rebuild_ms: u64 = 2_000;
        while figures.rounds < rounds && (secs == 0 || started.elapsed().as_secs() < secs) {
            let rebuild = self.rebuild_every > 0 && figures.rounds % self.rebuild_every == 1;
            let args: Vec<&str> = if rebuild {
                vec!["rebuild", "--json"]
            } else {
                self.ingest.iter().map(String::as_str).collect()
            };
            let run_ms = if rebuild {
                &mut rebuild_ms
            } else {
                &mut ingest_ms
            };
            let mut child = self
                .env
                .command(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn groundidx");
            let spawned = Instant::now();
            let delay = Duration::from_millis(rng.below(*run_ms * 5 / 4 + 10));
            // Poll, so that a run which ends first tells how long runs take now.
            loop {
                if let Some(status) = child.try_wait().expect("poll child") {
                    assert!(
                        status.success(),
                        "{}: round {}: groundidx {args:?} failed on its own: {status:?}",
                        self.name,
                        figures.rounds
                    );
                    *run_ms = spawned.elapsed().as_millis() as u64;
                    figures.finished += 1;
                    break;
                }
                if spawned.elapsed() >= delay {
                    child.kill().expect("SIGKILL");
                    figures.killed += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            child.wait().expect("reap child");
            change(rng, figures.rounds);
            figures.rounds += 1;
            if figures.rounds % check_every == 0 {
                self.heal_and_compare(figures.rounds);
                figures.checks += 1;
                if secs > 0 || rounds > 100 {
                    eprintln!("{}: {figures:?}, {:.0?}", self.name, started.elapsed());
                }
            }
        }
        if figures.rounds % check_every != 0 || figures.rounds == 0 {
            self.heal_and_compare(figures.rounds);
            figures.checks += 1;
        }
        let clean = Env::copy_of(&self.env.docs);
        clean
            .command(&["ingest", clean.docs.to_str().expect("utf-8"), "--json"])
            .output()
            .expect("clean ingest");
        eprintln!(
            "{}: {} rounds in {:.0?}, {} killed mid-run, {} finished, {} checks against a clean ingest passed; store {} KB, a clean store {} KB",
            self.name,
            figures.rounds,
            started.elapsed(),
            figures.killed,
            figures.finished,
            figures.checks,
            tree_bytes(&self.env.store) / 1024,
            tree_bytes(&clean.store) / 1024,
        );
        assert!(
            figures.killed * 3 >= figures.rounds,
            "{}: only {} of {} rounds were killed while running: the soak tested little",
            self.name,
            figures.killed,
            figures.rounds
        );
        figures
    }

    /// Runs to completion, then demands exactly what a clean ingest of the same folder holds.
    fn heal_and_compare(&self, round: u64) {
        let args: Vec<&str> = self.ingest.iter().map(String::as_str).collect();
        let healed = self.env.json(&args);
        assert_eq!(healed["documents"]["skipped"], 0, "round {round}: {healed}");
        self.env.assert_verified();
        assert_no_leftovers(&self.env.store);
        assert_eq!(
            self.env.export(),
            clean_export(&self.env.docs),
            "round {round}: the healed store differs from a clean ingest"
        );
        let again = self.env.json(&args);
        assert_eq!(again["chunks"]["added"], 0, "round {round}: {again}");
    }
}

#[test]
fn sigkill_during_small_incremental_ingests_never_wedges_the_store() {
    let mut rng = Rng::from_env("small ingest soak");
    let env = Env::empty();
    let mut files: Vec<PathBuf> = Vec::new();
    for i in 0..300 {
        let rel = format!("part-{}/note-{i}.md", i % 10);
        let mut text = format!("# Note {i}\n\nThe opening of note {i}.\n");
        for section in 0..(1 + rng.below(4)) {
            text.push_str(&format!(
                "\n## Section {section}\n\nWords {} and {} in note {i}.\n",
                rng.below(1000),
                rng.below(1000)
            ));
        }
        env.write(&rel, &text);
        files.push(env.docs.join(rel));
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    env.json(&["ingest", &docs, "--json"]);
    let soak = Soak {
        name: "small ingest soak",
        env: &env,
        ingest: ["ingest", &docs, "--json", "--batch-files", "25"]
            .map(String::from)
            .to_vec(),
        rebuild_every: 7,
        default_rounds: 12,
    };
    soak.run(&mut rng, |rng, round| {
        for _ in 0..100 {
            let file = &files[rng.below(files.len() as u64) as usize];
            let mut text = std::fs::read_to_string(file).expect("read note");
            text.push_str(&format!("\nRound {round} appended line {}.\n", rng.next()));
            std::fs::write(file, text).expect("append");
        }
    });
}

#[test]
fn sigkill_at_random_moments_on_a_real_corpus_heals() {
    let Some(corpus) = corpus("opensearch-docs") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but the corpus is missing"
        );
        return;
    };
    let mut rng = Rng::from_env("sigkill soak");
    let env = Env::copy_of(&corpus);
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let mut files: Vec<std::path::PathBuf> = walkdir::WalkDir::new(&env.docs)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .map(walkdir::DirEntry::into_path)
        .collect();
    files.sort();
    let soak = Soak {
        name: "sigkill soak",
        env: &env,
        ingest: ["ingest", &docs, "--json", "--batch-files", "200"]
            .map(String::from)
            .to_vec(),
        rebuild_every: 0,
        default_rounds: 4,
    };
    soak.run(&mut rng, |rng, round| {
        // Change some files: ten edits, a deletion, a new file and a rename.
        let pick = |rng: &mut Rng| files[rng.below(files.len() as u64) as usize].clone();
        for _ in 0..10 {
            let edited = pick(rng);
            if let Ok(text) = std::fs::read_to_string(&edited) {
                std::fs::write(
                    &edited,
                    format!("{text}\n\nRound {round} added this line.\n"),
                )
                .expect("edit");
            }
        }
        let deleted = pick(rng);
        let _ = std::fs::remove_file(&deleted);
        env.write(
            &format!("soak/new-{round}.md"),
            &format!("# Round {round}\n\nNew in round {round}.\n"),
        );
        let renamed = pick(rng);
        let target = renamed.with_extension(format!("r{round}.md"));
        if std::fs::rename(&renamed, &target).is_ok() {
            files.push(target);
        }
        files.push(env.docs.join(format!("soak/new-{round}.md")));
        // The folder keeps its size: a long soak never runs out of files to change.
        files.retain(|f| f.exists());
    });
}

/// A document of `format` (an extension) holding note `i` and the `extra` lines appended to it.
fn document_of(format: &str, i: usize, extra: &[String]) -> String {
    let paragraphs =
        |wrap: &dyn Fn(&str) -> String| extra.iter().map(|line| wrap(line)).collect::<String>();
    match format {
        "mdx" => format!(
            "---\ntitle: Note {i}\n---\nimport {{ Aside }} from 'x';\n\n# Note {i}\n\n<Aside>The opening of note {i}.</Aside>\n{}",
            paragraphs(&|line| format!("\n{line}\n"))
        ),
        "rst" => format!(
            "Note {i}\n=======\n\nThe opening of :ref:`note {i} <n{i}>`.\n{}",
            paragraphs(&|line| format!("\n{line}\n"))
        ),
        "adoc" => format!(
            "= Note {i}\n\n== Part\n\nThe opening of note {i}.\n{}",
            paragraphs(&|line| format!("\n{line}\n"))
        ),
        "html" => format!(
            "<!DOCTYPE html><html><head><title>Note {i}</title></head><body><h1>Note {i}</h1><p>The opening of note {i}.</p>{}</body></html>\n",
            paragraphs(&|line| format!("\n<p>{line}</p>"))
        ),
        "ipynb" => {
            let mut cells = vec![serde_json::json!({
                "cell_type": "markdown", "metadata": {},
                "source": [format!("# Note {i}\n"), "\n".to_string(), format!("The opening of note {i}.")]
            })];
            for line in extra {
                cells.push(serde_json::json!({
                    "cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
                    "source": [format!("print({line:?})")]
                }));
            }
            serde_json::to_string_pretty(&serde_json::json!({
                "cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5
            }))
            .expect("json")
        }
        _ => format!(
            "# Note {i}\n\nThe opening of note {i}.\n{}",
            paragraphs(&|line| format!("\n{line}\n"))
        ),
    }
}

#[test]
fn sigkill_during_a_mixed_format_ingest_heals() {
    const FORMATS: [&str; 6] = ["md", "mdx", "rst", "adoc", "html", "ipynb"];
    let mut rng = Rng::from_env("mixed format soak");
    let env = Env::empty();
    let mut notes: Vec<(String, Vec<String>)> = Vec::new();
    for i in 0..240 {
        let format = FORMATS[i % FORMATS.len()];
        let rel = format!("part-{}/note-{i}.{format}", i % 8);
        env.write(&rel, &document_of(format, i, &[]));
        notes.push((rel, Vec::new()));
    }
    // Two PDFs, so that kills land while the PDF worker reads too.
    let Some(papers) = corpus("pdf-jose-papers") else {
        return;
    };
    for (i, paper) in [
        "jose.00013/10.21105.jose.00013.pdf",
        "jose.00015/10.21105.jose.00015.pdf",
    ]
    .iter()
    .enumerate()
    {
        std::fs::copy(papers.join(paper), env.docs.join(format!("paper-{i}.pdf")))
            .expect("copy a paper");
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let first = env.json(&["ingest", &docs, "--json"]);
    assert_eq!(first["documents"]["added"], 242, "{first}");
    let soak = Soak {
        name: "mixed format soak",
        env: &env,
        ingest: ["ingest", &docs, "--json", "--batch-files", "20"]
            .map(String::from)
            .to_vec(),
        rebuild_every: 0,
        default_rounds: 24,
    };
    soak.run(&mut rng, |rng, round| {
        for _ in 0..60 {
            let i = rng.below(notes.len() as u64) as usize;
            let (rel, extra) = &mut notes[i];
            extra.push(format!("Round {round} added words {}.", rng.next()));
            let format = rel.rsplit('.').next().unwrap_or("md").to_string();
            env.write(rel, &document_of(&format, i, extra));
        }
    });
}
