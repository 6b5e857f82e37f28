//! Links the `groundidx` executable at a fixed address on x86-64 Linux (`-no-pie`).
//!
//! A position-independent executable of this size carries about 75,000 relative relocations,
//! which the loader applies, page by page, before `main`: about 0.8 ms of every process here
//! (1.5 ms for `groundidx --version` against 2.3 ms), paid by every `search` and `ingest`
//! that a script or an agent runs as a process (docs/BENCHMARKS.md). The libraries it loads
//! stay position-independent and placed at random; only the executable's own image is not.

// A build script speaks to cargo on stdout; `cli::output`'s rule is the binary's.
#[allow(
    clippy::disallowed_macros,
    reason = "cargo reads a build script's instructions from its stdout"
)]
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && arch == "x86_64" && env == "gnu" {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
}
