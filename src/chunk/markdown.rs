//! Markdown to units, with pulldown-cmark (the only module that imports it).
//!
//! Top-level blocks become body units, except lists, whose items become one unit each so a long
//! list can be cut between items and never inside one. Headings become heading units. Code
//! blocks, tables, block quotes and HTML blocks stay whole.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::chunk::Unit;

/// The units of the Markdown body that starts at byte `body_start` of `text`.
pub(crate) fn units(text: &str, body_start: usize) -> Vec<Unit> {
    let body = &text[body_start..];
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS;
    let mut units = Vec::new();
    let mut depth = 0usize;
    // Depth of the top-level list whose items are being collected, if any.
    let mut in_top_list = false;
    let mut heading: Option<(u8, String)> = None;
    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let range = range.start + body_start..range.end + body_start;
        match event {
            Event::Start(tag) => {
                match &tag {
                    Tag::Heading { level, .. } if depth == 0 => {
                        heading = Some((*level as u8, String::new()));
                    }
                    Tag::List(_) if depth == 0 => in_top_list = true,
                    Tag::Item if depth == 1 && in_top_list => units.push(Unit::Body { range }),
                    _ if depth == 0 => units.push(Unit::Body { range }),
                    _ => {}
                }
                depth += 1;
            }
            Event::End(tag_end) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    match tag_end {
                        TagEnd::Heading(_) => {
                            if let Some((level, text)) = heading.take() {
                                units.push(Unit::Heading {
                                    level,
                                    text: text.trim().to_string(),
                                });
                            }
                        }
                        TagEnd::List(_) => in_top_list = false,
                        _ => {}
                    }
                }
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some((_, heading_text)) = heading.as_mut() {
                    heading_text.push_str(&text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, heading_text)) = heading.as_mut() {
                    heading_text.push(' ');
                }
            }
            // Top-level leaves that are not inside a Start/End pair.
            Event::Rule | Event::Html(_) | Event::InlineHtml(_) if depth == 0 => {
                units.push(Unit::Body { range });
            }
            _ => {}
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::units;
    use crate::chunk::Unit;

    fn check(text: &str, expect: &[&str]) {
        let got: Vec<String> = units(text, 0)
            .into_iter()
            .map(|unit| match unit {
                Unit::Heading { level, text } => format!("h{level} {text}"),
                Unit::Body { range } => text[range].trim_end().to_string(),
            })
            .collect();
        assert_eq!(got, expect, "input: {text:?}");
    }

    #[test]
    fn blocks_and_headings() {
        check(
            "# A `b`\n\npara\n\n```\ncode\n```\n",
            &["h1 A b", "para", "```\ncode\n```"],
        );
        check("Title\n=====\n\ntext\n", &["h1 Title", "text"]);
    }

    #[test]
    fn list_items_are_separate_units_but_nested_lists_are_not() {
        check("- a\n  - a1\n- b\n", &["- a\n  - a1", "- b"]);
    }

    #[test]
    fn table_and_quote_stay_whole() {
        check(
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n> q\n> r\n",
            &["| a | b |\n|---|---|\n| 1 | 2 |", "> q\n> r"],
        );
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        check(
            "text\n\n```\nnever closed\n",
            &["text", "```\nnever closed"],
        );
    }
}
