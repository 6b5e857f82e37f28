//! Plain text to units: one unit per paragraph, paragraphs being separated by blank lines.

use crate::chunk::Unit;

/// The paragraphs of `text`, as byte ranges without their trailing blank lines.
pub(crate) fn units(text: &str) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            if let Some(s) = start.take() {
                units.push(Unit::Body { range: s..end });
            }
        } else {
            start.get_or_insert(offset);
            end = offset + line.len();
        }
        offset += line.len();
    }
    if let Some(s) = start {
        units.push(Unit::Body { range: s..end });
    }
    units
}

#[cfg(test)]
mod tests {
    use super::units;
    use crate::chunk::Unit;

    #[test]
    fn paragraphs() {
        let text = "\n\na\nb\n \nc";
        let got: Vec<&str> = units(text)
            .into_iter()
            .map(|unit| match unit {
                Unit::Body { range } => &text[range],
                Unit::Heading { .. } | Unit::Markup { .. } => {
                    unreachable!("plain text has no headings or markup")
                }
            })
            .collect();
        assert_eq!(got, ["a\nb\n", "c"]);
    }
}
