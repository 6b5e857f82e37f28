//! Tidiness the compiler cannot check: every source file says what it owns in a `//!` comment,
//! and every module is on ARCHITECTURE.md's code map.

use std::path::Path;

#[test]
fn every_source_file_documents_itself_and_is_on_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    for entry in walkdir::WalkDir::new(root.join("src")) {
        let entry = entry.expect("walk src");
        if entry.path().extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let rel = entry
            .path()
            .strip_prefix(root)
            .expect("under root")
            .to_string_lossy()
            .to_string();
        assert!(
            text.starts_with("//!"),
            "{rel} does not start with a //! comment"
        );
        assert!(
            architecture.contains(&format!("`{rel}`")),
            "{rel} is not on ARCHITECTURE.md's code map"
        );
    }
}

/// The numbers ARCHITECTURE.md quotes are the code's: a schema bump or a new page size that
/// leaves the map saying the old number fails here, not in a newcomer's head.
#[test]
fn the_figures_the_map_quotes_are_the_codes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let quoted = [
        format!(
            "The SQLite ledger's schema version is {} and the shared ledger's is {} (`SCHEMA_VERSION`,",
            groundidx::ledger::SCHEMA_VERSION,
            groundidx::ledger::postgres::PG_SCHEMA_VERSION,
        ),
        format!(
            "a page of `EMBED_PAGE` ({}) chunks",
            groundidx::ingest::embed::EMBED_PAGE
        ),
    ];
    // One sentence per line in Markdown, but a sentence may wrap: compare with line breaks as spaces.
    let flat = architecture
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for phrase in quoted {
        assert!(
            flat.contains(&phrase),
            "ARCHITECTURE.md must say, as the code has it: {phrase}"
        );
    }
}

/// Every rule ID a test name starts with (`k4_…`, `c6_…`) is defined in docs/AGENT-TOOL-RULES.md,
/// so a test never cites a rule the repository does not hold.
#[test]
fn every_rule_a_test_name_cites_is_defined() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::read_to_string(root.join("docs/AGENT-TOOL-RULES.md"))
        .expect("docs/AGENT-TOOL-RULES.md");
    let defined: std::collections::BTreeSet<String> = rules
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" |").next())
        .filter(|id| rule_id(id))
        .map(str::to_lowercase)
        .collect();
    let mut cited = std::collections::BTreeMap::<String, String>::new();
    for entry in std::fs::read_dir(root.join("tests/it")).expect("tests/it") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for name in text.split("fn ").skip(1) {
            let Some((id, _)) = name.split_once('_') else {
                continue;
            };
            if rule_id(id) && id == id.to_lowercase() {
                let file = path.file_name().expect("name").to_string_lossy();
                cited.entry(id.to_string()).or_insert(file.to_string());
            }
        }
    }
    assert!(
        !cited.is_empty(),
        "no test name cites a rule: is the scan broken?"
    );
    for (id, file) in &cited {
        assert!(
            defined.contains(id),
            "{file}: a test name cites rule {}, which docs/AGENT-TOOL-RULES.md does not define",
            id.to_uppercase()
        );
    }
}

/// `[a-zA-Z]+[0-9]+`: letters, then digits, nothing else.
fn rule_id(text: &str) -> bool {
    let digits = text.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    digits.len() < text.len() && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// `unsafe` is denied crate-wide and allowed in one module, the AMX kernel, which
/// ARCHITECTURE.md names: a second module that allows it fails here, as does the lint's level
/// falling below `deny`.
#[test]
fn unsafe_code_is_allowed_in_one_module_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        manifest.contains("unsafe_code = \"deny\"")
            || manifest.contains("unsafe_code = \"forbid\""),
        "Cargo.toml must deny unsafe_code"
    );
    let mut allowing = Vec::new();
    for dir in ["src", "tests", "benches", "fuzz"] {
        // Build outputs (`fuzz/target`) are not the project's sources.
        let walk = walkdir::WalkDir::new(root.join(dir))
            .into_iter()
            .filter_entry(|entry| entry.file_name() != "target");
        for entry in walk {
            let entry = entry.expect("walk");
            if entry.path().extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).expect("read");
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            if [
                "allow(unsafe_code",
                "expect(unsafe_code",
                "warn(unsafe_code",
            ]
            .iter()
            .any(|attr| compact.contains(attr))
            {
                let rel = entry.path().strip_prefix(root).expect("under root");
                allowing.push(rel.to_string_lossy().to_string());
            }
        }
    }
    // This file names the attributes it looks for, so it is found too.
    allowing.retain(|path| path != "tests/it/tidy.rs");
    assert_eq!(
        allowing,
        ["src/embed/kernels/mod.rs"],
        "files that allow unsafe code"
    );
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(
        architecture.contains("`src/embed/kernels/`") && architecture.contains("unsafe"),
        "ARCHITECTURE.md must name the one module with unsafe code"
    );
}
