//! The Python package in `contrib/python/` (a client for the JSON API, LangChain and LlamaIndex
//! retrievers, idempotency keys) passes its pytest suite against this build's `groundidx`:
//! the suite ingests a folder it writes, starts `serve` with a tokens file and drives it.
//!
//! The venv `contrib/python/.venv` is installed by `.ci/run`; without it the test skips with a
//! message, and fails when `CI` is set.

use std::path::Path;
use std::process::Command;

#[test]
fn python_package_passes_its_tests_against_this_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("contrib/python/.venv/bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import groundidx, pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        let fix = "run `python3 -m venv contrib/python/.venv && contrib/python/.venv/bin/pip install -r contrib/python/requirements-test.txt -e contrib/python` (.ci/run does)";
        if std::env::var_os("CI").is_some() {
            panic!(
                "the Python package's venv (contrib/python/.venv) is missing and CI is set; {fix}"
            );
        }
        eprintln!("skipped: the Python package's venv (contrib/python/.venv) is missing; {fix}");
        return;
    }
    let output = Command::new(&python)
        .args(["-m", "pytest", "contrib/python/tests", "-q"])
        .args(["-p", "no:cacheprovider"])
        .current_dir(root)
        .env("GROUNDIDX_BIN", env!("CARGO_BIN_EXE_groundidx"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest in contrib/python/.venv");
    assert!(
        output.status.success(),
        "pytest contrib/python/tests failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
