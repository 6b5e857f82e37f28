//! Jupyter notebooks (`.ipynb`, nbformat 4, and the `worksheets` of nbformat 3).
//!
//! The text is Markdown: each Markdown cell as written, each code cell as a fenced block in the
//! notebook's language (`metadata.kernelspec.language`, `metadata.language_info.name`, else
//! none), in cell order. Outputs (text, images, HTML) and raw cells are left out: an output is
//! what running the code printed, often megabytes of base64, not what the author wrote.
//! `metadata.title` (or a Markdown cell's first `#` heading) is the title.
//!
//! Every line of the text is placed on its line of the `.ipynb` file: nbformat writes one
//! element of a cell's `source` array per line, so line `i` of a cell is the line after its
//! `"source"` key plus `i`; a cell whose source is one string, or an array on one line, has all
//! its lines at its `"source"` line.
//!
//! The JSON is parsed with serde_json into the few fields read (the rest, outputs included, is
//! skipped without being kept), which refuses nesting over 128 levels. A file that is not a
//! notebook is unreadable.

use serde::Deserialize;

use super::{Deadline, Extracted, Limits, Location, Locations, Meta, Structure, Unreadable};

pub(crate) const VERSION: u32 = 1;

#[derive(Deserialize)]
struct Notebook {
    #[serde(default)]
    cells: Vec<Cell>,
    /// nbformat 3 keeps its cells in worksheets.
    #[serde(default)]
    worksheets: Vec<Worksheet>,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Worksheet {
    #[serde(default)]
    cells: Vec<Cell>,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    kernelspec: Option<Named>,
    #[serde(default)]
    language_info: Option<Named>,
}

#[derive(Deserialize, Default)]
struct Named {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct Cell {
    cell_type: String,
    /// nbformat 4 (and 3's Markdown cells).
    #[serde(default)]
    source: Option<Source>,
    /// nbformat 3's code cells.
    #[serde(default)]
    input: Option<Source>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Source {
    One(String),
    Lines(Vec<String>),
}

impl Source {
    fn text(&self) -> String {
        match self {
            Source::One(text) => text.clone(),
            Source::Lines(lines) => lines.concat(),
        }
    }
}

pub(crate) fn extract(
    text: &str,
    limits: &Limits,
    deadline: &Deadline,
) -> Result<Extracted, Unreadable> {
    let notebook: Notebook = serde_json::from_str(text)
        .map_err(|err| format!("not a Jupyter notebook (its JSON: {err}); skipped"))?;
    let language = notebook
        .metadata
        .kernelspec
        .as_ref()
        .and_then(|k| k.language.clone())
        .or_else(|| {
            notebook
                .metadata
                .language_info
                .as_ref()
                .and_then(|l| l.name.clone())
        })
        .unwrap_or_default();
    let language: String = language
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_'))
        .take(32)
        .collect();
    let cells: Vec<&Cell> = notebook
        .cells
        .iter()
        .chain(notebook.worksheets.iter().flat_map(|w| w.cells.iter()))
        .collect();
    let source_lines = SourceLines::new(text);
    let mut out = String::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut warnings = Vec::new();
    for (index, cell) in cells.iter().enumerate() {
        if index % 64 == 63 && deadline.passed() {
            warnings.push(format!(
                "took over {} s; the rest is left out",
                limits.time.as_secs()
            ));
            break;
        }
        let Some(source) = cell.source.as_ref().or(cell.input.as_ref()) else {
            continue;
        };
        let place = source_lines.place(index);
        let body = source.text();
        if body.trim().is_empty() {
            continue;
        }
        let code = match cell.cell_type.as_str() {
            "markdown" => false,
            "code" => true,
            _ => continue,
        };
        let size = body.len() + 2 * (language.len() + 16);
        if out.len() + size > limits.max_text_bytes {
            warnings.push(format!(
                "its text is over {} bytes; the rest is left out",
                limits.max_text_bytes
            ));
            break;
        }
        if !out.is_empty() {
            out.push('\n');
            locations.push(*locations.last().unwrap_or(&Location::default()));
        }
        let fence = code.then(|| fence_for(&body));
        if let Some(fence) = &fence {
            out.push_str(fence);
            out.push_str(&language);
            out.push('\n');
            locations.push(place.line(0));
        }
        let mut last = place.line(0);
        for (i, line) in body.split('\n').enumerate() {
            out.push_str(line.trim_end_matches('\r'));
            out.push('\n');
            last = place.line(i);
            locations.push(last);
        }
        if let Some(fence) = &fence {
            out.push_str(fence);
            out.push('\n');
            locations.push(last);
        }
    }
    Ok(Extracted {
        text: out,
        structure: Structure::Markdown,
        meta: Meta {
            title: notebook.metadata.title.filter(|t| !t.trim().is_empty()),
            ..Meta::default()
        },
        locations: Locations::Mapped(locations),
        warnings,
    })
}

/// A fence longer than any run of backticks in the code.
fn fence_for(code: &str) -> String {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat((longest + 1).max(3))
}

/// Where each cell's `"source"` (or `"input"`) key is in the file, in order.
struct SourceLines {
    /// Per cell, in order: the 1-based line of its key, and whether its array has one element
    /// per line after it.
    cells: Vec<(usize, bool)>,
}

/// Where a cell's lines are.
#[derive(Clone, Copy)]
struct Place {
    key_line: usize,
    one_per_line: bool,
}

impl Place {
    fn line(self, index: usize) -> Location {
        let line = if self.one_per_line {
            self.key_line + 1 + index
        } else {
            self.key_line
        };
        super::line(line)
    }
}

impl SourceLines {
    /// Finds the keys by their text: a quote inside a JSON string is escaped, so `"source":`
    /// outside one is a key. A notebook whose keys are not one per cell gets no places.
    fn new(text: &str) -> SourceLines {
        let lines: Vec<&str> = text.split('\n').collect();
        let mut cells = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let is_key = ["\"source\"", "\"input\""].iter().any(|key| {
                trimmed
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            });
            if !is_key {
                continue;
            }
            let value = trimmed.split_once(':').map_or("", |(_, v)| v.trim());
            let one_per_line = value == "["
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.trim_start().starts_with('"'));
            cells.push((i + 1, one_per_line));
        }
        SourceLines { cells }
    }

    fn place(&self, cell: usize) -> Place {
        match self.cells.get(cell) {
            Some(&(key_line, one_per_line)) => Place {
                key_line,
                one_per_line,
            },
            None => Place {
                key_line: 1,
                one_per_line: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::extract;
    use crate::extract::{Deadline, Limits, Locations};

    const NOTEBOOK: &str = r##"{
 "cells": [
  {
   "cell_type": "markdown",
   "metadata": {},
   "source": [
    "# Training\n",
    "\n",
    "Fit the model."
   ]
  },
  {
   "cell_type": "code",
   "execution_count": 1,
   "metadata": {},
   "outputs": [
    {
     "data": {"image/png": "iVBORw0KGgoAAAANSUhEUgAAA", "text/plain": ["<Figure>"]},
     "output_type": "display_data"
    }
   ],
   "source": [
    "model.fit(X, y)\n",
    "print(```)"
   ]
  },
  {"cell_type": "raw", "metadata": {}, "source": ["raw stuff"]}
 ],
 "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
 "nbformat": 4,
 "nbformat_minor": 5
}"##;

    #[test]
    fn markdown_and_code_cells_in_order_outputs_left_out() {
        let limits = Limits::default();
        let got = extract(NOTEBOOK, &limits, &Deadline::after(limits.time)).expect("notebook");
        assert_eq!(
            got.text,
            "# Training\n\nFit the model.\n\n````python\nmodel.fit(X, y)\nprint(```)\n````\n"
        );
        let Locations::Mapped(locations) = &got.locations else {
            panic!("mapped")
        };
        assert_eq!(locations.len(), got.text.lines().count());
        let firsts: Vec<u32> = locations.iter().map(|l| l.first).collect();
        // The Markdown cell's lines are lines 7 to 9 of the file; the code's 23 and 24.
        assert_eq!(firsts, [7, 8, 9, 9, 23, 23, 24, 24]);
        assert!(!got.text.contains("iVBOR") && !got.text.contains("raw stuff"));
    }

    #[test]
    fn not_a_notebook_is_unreadable() {
        let limits = Limits::default();
        let deadline = Deadline::after(limits.time);
        assert!(extract("{\"cells\": 3}", &limits, &deadline).is_err());
        assert!(extract("not json", &limits, &deadline).is_err());
        let deep = "[".repeat(100_000);
        assert!(extract(&deep, &limits, &deadline).is_err());
    }

    #[test]
    fn one_string_sources_and_version_3() {
        let limits = Limits::default();
        let v3 = r#"{"worksheets": [{"cells": [{"cell_type": "code", "input": "x = 1"}, {"cell_type": "markdown", "source": "Done."}]}], "metadata": {}}"#;
        let got = extract(v3, &limits, &Deadline::after(limits.time)).expect("v3");
        assert_eq!(got.text, "```\nx = 1\n```\n\nDone.\n");
    }
}
