//! The formats groundidx reads, each chosen by a file's extension, and a set of them (what a run
//! reads). The walk picks files by format; `extract` reads each one.

use serde::{Deserialize, Serialize};

/// A format groundidx reads, chosen by a file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Format {
    Markdown,
    PlainText,
    Mdx,
    Rst,
    AsciiDoc,
    Html,
    Pdf,
    Notebook,
}

impl Format {
    /// Every format, in the order `--formats` lists them.
    pub(crate) const ALL: [Format; 8] = [
        Format::Markdown,
        Format::PlainText,
        Format::Mdx,
        Format::Rst,
        Format::AsciiDoc,
        Format::Html,
        Format::Pdf,
        Format::Notebook,
    ];

    /// The name `--formats` and `formats = [...]` take, and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::PlainText => "txt",
            Format::Mdx => "mdx",
            Format::Rst => "rst",
            Format::AsciiDoc => "adoc",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Notebook => "ipynb",
        }
    }

    /// The file extensions of the format, lower case, without the dot.
    pub(crate) fn extensions(self) -> &'static [&'static str] {
        match self {
            Format::Markdown => &["md", "markdown"],
            Format::PlainText => &["txt"],
            Format::Mdx => &["mdx"],
            Format::Rst => &["rst", "rest"],
            Format::AsciiDoc => &["adoc", "asciidoc", "asc"],
            Format::Html => &["html", "htm", "xhtml"],
            Format::Pdf => &["pdf"],
            Format::Notebook => &["ipynb"],
        }
    }

    /// The format of a file name, by its extension (any case); `None` when groundidx reads no
    /// such files.
    pub(crate) fn from_file_name(name: &str) -> Option<Format> {
        let (_, extension) = name.rsplit_once('.')?;
        let extension = extension.to_ascii_lowercase();
        Format::ALL
            .into_iter()
            .find(|format| format.extensions().contains(&extension.as_str()))
    }

    /// The format `--formats` names: its name, or any of its extensions.
    pub fn parse(name: &str) -> Option<Format> {
        let name = name.trim().trim_start_matches('.').to_ascii_lowercase();
        let alias = match name.as_str() {
            "markdown" => Some(Format::Markdown),
            "text" | "plain" => Some(Format::PlainText),
            "asciidoc" => Some(Format::AsciiDoc),
            "restructuredtext" => Some(Format::Rst),
            "notebook" | "jupyter" => Some(Format::Notebook),
            _ => None,
        };
        alias.or_else(|| {
            Format::ALL.into_iter().find(|format| {
                format.name() == name || format.extensions().contains(&name.as_str())
            })
        })
    }

    /// Whether files of the format are bytes rather than UTF-8 text: a NUL byte or invalid
    /// UTF-8 does not make such a file unreadable.
    pub(crate) fn is_binary(self) -> bool {
        matches!(self, Format::Pdf)
    }

    /// The context a document of this format is hashed in (`ids::doc_hash_in`), so the same
    /// bytes as an `.html` and a `.txt` file are two documents: each is its own text. `None`
    /// for Markdown and plain text, whose hashes are the plain hash of their bytes, as
    /// groundidx has always recorded them.
    pub(crate) fn hash_context(self) -> Option<&'static str> {
        match self {
            Format::Markdown | Format::PlainText => None,
            Format::Mdx => Some("groundidx document mdx"),
            Format::Rst => Some("groundidx document rst"),
            Format::AsciiDoc => Some("groundidx document adoc"),
            Format::Html => Some("groundidx document html"),
            Format::Pdf => Some("groundidx document pdf"),
            Format::Notebook => Some("groundidx document ipynb"),
        }
    }

    /// Whether the format's extractor is a third-party parser that runs in a child process
    /// when one can be started (`isolate`).
    pub(crate) fn runs_isolated(self) -> bool {
        matches!(self, Format::Pdf)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The formats a run reads (`--formats`, `formats = [...]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FormatSet(u16);

impl Default for FormatSet {
    /// Every format.
    fn default() -> Self {
        FormatSet::of(&Format::ALL)
    }
}

impl FormatSet {
    pub fn of(formats: &[Format]) -> FormatSet {
        FormatSet(formats.iter().fold(0, |set, f| set | (1 << *f as u16)))
    }

    /// Parses names as `--formats` takes them (`md,rst,pdf`, or a list); an unknown name is an
    /// error that lists the known ones.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<FormatSet, String> {
        let mut formats = Vec::new();
        for name in names.iter().flat_map(|n| n.as_ref().split(',')) {
            if name.trim().is_empty() {
                continue;
            }
            if name.trim().eq_ignore_ascii_case("all") {
                return Ok(FormatSet::default());
            }
            match Format::parse(name) {
                Some(format) => formats.push(format),
                None => {
                    return Err(format!(
                        "unknown format {:?}; the formats are {} (or all)",
                        name.trim(),
                        Format::ALL.map(Format::name).join(", ")
                    ));
                }
            }
        }
        if formats.is_empty() {
            return Err(format!(
                "no format named; the formats are {} (or all)",
                Format::ALL.map(Format::name).join(", ")
            ));
        }
        Ok(FormatSet::of(&formats))
    }

    pub fn contains(self, format: Format) -> bool {
        self.0 & (1 << format as u16) != 0
    }

    pub fn formats(self) -> Vec<Format> {
        Format::ALL
            .into_iter()
            .filter(|f| self.contains(*f))
            .collect()
    }

    /// The names, comma-separated, as `--formats` takes them.
    pub fn names(self) -> String {
        self.formats()
            .into_iter()
            .map(Format::name)
            .collect::<Vec<_>>()
            .join(",")
    }
}
