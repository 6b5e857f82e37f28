//! Fuzz findings stay fixed: every input stored under `tests/fuzz_regressions/<target>/` goes
//! through the property checks of the fuzz target of that name (`fuzz/src/lib.rs`, compiled in
//! here as it is), in the ordinary test run.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
pub(crate) mod checks;

/// The stored inputs of `target`, sorted by name.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
        .map(|entry| entry.expect("read entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no stored inputs in {}", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read input");
            (path, bytes)
        })
        .collect()
}

/// Runs `check` on every stored input of `target`, naming the input that fails.
fn run(target: &str, check: impl Fn(&[u8])) {
    for (path, bytes) in inputs(target) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&bytes))) {
            eprintln!("fuzz regression {} fails", path.display());
            resume_unwind(panic);
        }
    }
}

#[test]
fn chunker() {
    run("chunker", checks::chunker);
}

#[test]
fn normalise() {
    run("normalise", checks::normalise);
}

#[test]
fn query() {
    let fixture = checks::QueryFixture::new();
    run("query", |data| checks::query(&fixture, data));
}

#[test]
fn request() {
    run("request", checks::request);
}

#[test]
fn front_matter() {
    run("front_matter", checks::front_matter);
}

#[test]
fn mdx() {
    run("mdx", checks::mdx);
}

#[test]
fn notebook() {
    run("notebook", checks::notebook);
}

#[test]
fn html() {
    run("html", checks::check_html);
}

#[test]
fn rst() {
    run("rst", checks::check_rst);
}
