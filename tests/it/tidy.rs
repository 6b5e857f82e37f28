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
