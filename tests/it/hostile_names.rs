//! File names and document text come from whoever wrote the tree: a name or a passage with
//! control characters (a newline, an escape sequence that retitles the window or clears the
//! screen, a bidirectional override) must not reach a terminal as it is. In the text output
//! for people each is shown escaped, so one warning is one line and nothing moves the cursor;
//! `--json` keeps the exact names.

use crate::support::Env;

/// The characters a terminal acts on, other than the newline that ends each line of output.
fn terminal_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            (c.is_control() && *c != '\n')
                || ('\u{202a}'..='\u{202e}').contains(c)
                || ('\u{2066}'..='\u{2069}').contains(c)
        })
        .collect()
}

#[test]
fn names_and_text_with_control_characters_print_as_harmless_lines() {
    let env = Env::empty();
    let forged = "evil\u{1b}]0;owned\u{7}\nwarning: forged line.md";
    std::fs::write(env.docs.join(forged), b"bin\0ary").expect("write binary file");
    let shown = "red\u{1b}[31m\u{202e}dm.txt.md";
    std::fs::write(
        env.docs.join(shown),
        "# Title \u{1b}]0;heading\u{7}\n\nzebra \u{1b}[2J\u{1b}[31m clears the screen\n",
    )
    .expect("write text file");
    let docs = env.docs.to_str().expect("utf-8");

    let ingest = env.run(&["ingest", docs]);
    let stderr = String::from_utf8_lossy(&ingest.stderr);
    assert!(ingest.status.success(), "{stderr}");
    assert_eq!(terminal_controls(&stderr), Vec::<char>::new(), "{stderr:?}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning is one line: {stderr:?}");
    assert!(warnings[0].contains("binary data"), "{stderr:?}");

    let search = env.run(&["search", "zebra"]);
    let stdout = String::from_utf8_lossy(&search.stdout);
    assert!(search.status.success(), "{stdout}");
    assert!(stdout.contains("zebra"), "{stdout}");
    assert_eq!(terminal_controls(&stdout), Vec::<char>::new(), "{stdout:?}");

    // The JSON output keeps the names exactly (escaped by JSON itself).
    let hits = env.search("zebra", 1);
    assert_eq!(hits["hits"][0]["paths"][0], shown, "{hits}");
}
