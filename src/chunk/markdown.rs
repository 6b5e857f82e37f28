//! Markdown to units, with pulldown-cmark (the only module that imports it).
//!
//! Top-level blocks become body units, except lists, whose items become one unit each so a long
//! list can be cut between items and never inside one. Headings become heading units. Code
//! blocks, tables, block quotes and HTML blocks stay whole. A block that is only markup (a
//! thematic break, HTML tags and comments, kramdown attribute lists, Liquid tags) becomes a
//! markup unit: it renders no words of its own, so it is kept with the text beside it.

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
    let mut heading: Option<(u8, String, usize)> = None;
    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let range = range.start + body_start..range.end + body_start;
        match event {
            Event::Start(tag) => {
                match &tag {
                    Tag::Heading { level, .. } if depth == 0 => {
                        heading = Some((*level as u8, String::new(), range.start));
                    }
                    Tag::List(_) if depth == 0 => in_top_list = true,
                    Tag::Item if depth == 1 && in_top_list => units.push(Unit::Body { range }),
                    // Code is text, whatever it looks like.
                    Tag::CodeBlock(_) if depth == 0 => units.push(Unit::Body { range }),
                    _ if depth == 0 => units.push(block(text, range)),
                    _ => {}
                }
                depth += 1;
            }
            Event::End(tag_end) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    match tag_end {
                        TagEnd::Heading(_) => {
                            if let Some((level, heading_text, start)) = heading.take() {
                                units.push(Unit::Heading {
                                    level,
                                    text: heading_text.trim().to_string(),
                                    range: start..range.end,
                                });
                            }
                        }
                        TagEnd::List(_) => in_top_list = false,
                        _ => {}
                    }
                }
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some((_, heading_text, _)) = heading.as_mut() {
                    heading_text.push_str(&text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, heading_text, _)) = heading.as_mut() {
                    heading_text.push(' ');
                }
            }
            // Top-level leaves that are not inside a Start/End pair.
            Event::Rule if depth == 0 => units.push(Unit::Markup { range }),
            Event::Html(_) | Event::InlineHtml(_) if depth == 0 => units.push(block(text, range)),
            _ => {}
        }
    }
    units
}

/// A top-level block: a markup unit when it is only markup, a body unit otherwise.
fn block(text: &str, range: std::ops::Range<usize>) -> Unit {
    if markup_only(&text[range.clone()]) {
        Unit::Markup { range }
    } else {
        Unit::Body { range }
    }
}

/// True when `text` is nothing but markup that renders no words: HTML tags and comments
/// (`</details>`, `<br>`, `<!-- vale off -->`), kramdown attribute lists (`{: .note}`,
/// `{:toc}`) and Liquid tags (`{% include copy.html %}`). Anything else, or a construct left
/// open, makes it text: a block wrongly taken for text stays a passage, while one wrongly taken
/// for markup would only be kept beside its neighbour.
pub(crate) fn markup_only(text: &str) -> bool {
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let end = if rest.starts_with("<!--") {
            rest.find("-->").map(|i| i + "-->".len())
        } else if rest.starts_with("{%") {
            rest.find("%}").map(|i| i + "%}".len())
        } else if rest.starts_with("{:") {
            rest.find('}').map(|i| i + 1)
        } else if rest.starts_with('<')
            && rest[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '/' || c == '!')
        {
            // An autolink (`<https://…>`, `<ops@example.com>`) is text, not a tag.
            rest.find('>')
                .filter(|&i| {
                    let inside = &rest[..i];
                    !inside.contains([':', '@']) || inside.contains(char::is_whitespace)
                })
                .map(|i| i + 1)
        } else {
            None
        };
        let Some(end) = end else {
            return false;
        };
        rest = rest[end..].trim_start();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{markup_only, units};
    use crate::chunk::Unit;

    fn check(text: &str, expect: &[&str]) {
        let got: Vec<String> = units(text, 0)
            .into_iter()
            .map(|unit| match unit {
                Unit::Heading { level, text, .. } => format!("h{level} {text}"),
                Unit::Body { range } => text[range].trim_end().to_string(),
                Unit::Markup { range } => format!("markup {}", text[range].trim_end()),
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

    #[test]
    fn blocks_of_markup_alone_are_markup_units() {
        check(
            "text\n\n</details>\n\n---\n\n{: .note}\n\n{% include copy.html %}\n\n```\n<br>\n```\n",
            &[
                "text",
                "markup </details>",
                "markup ---",
                "markup {: .note}",
                "markup {% include copy.html %}",
                "```\n<br>\n```",
            ],
        );
    }

    #[test]
    fn markup_only_wants_every_word_inside_markup() {
        for markup in [
            "<br>",
            " </details>\n",
            "<!-- a -->\n<!-- b -->",
            "- TOC",
            "{:toc}",
            "<img src=\"a.png\">",
        ] {
            let expect = markup != "- TOC";
            assert_eq!(markup_only(markup), expect, "{markup:?}");
        }
        for text in [
            "<summary>Response</summary>",
            "a < b",
            "<!-- never closed",
            "<https://example.com/download>",
            "<ops@example.com>",
            "{% raw",
            "1 <2>",
        ] {
            assert!(!markup_only(text), "{text:?}");
        }
    }
}
