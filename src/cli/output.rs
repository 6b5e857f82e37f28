//! Printing: JSON for scripts on stdout, short aligned text for people, and warnings and
//! errors as log events on stderr (so `--log-format json` makes them JSON too).

use std::borrow::Cow;
use std::io::Write;

use serde::Serialize;

use groundidx::{Error, Result};

/// Prints one value as a JSON document on its own line.
pub fn json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)
        .map_err(|err| Error::io("write JSON to stdout", err.into()))?;
    writeln!(out).map_err(|err| Error::io("write to stdout", err))
}

/// Prints a line for people on stdout.
pub fn line(text: impl AsRef<str>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.as_ref()).map_err(|err| Error::io("write to stdout", err))
}

/// Logs a warning about one path. Both come from the tree (a message may name a folder), so
/// both are made printable: a warning is one line whatever the file names hold.
pub fn warning(path: &str, message: &str) {
    let (path, message) = (printable(path), printable(message));
    tracing::warn!(path = %path, "{message}");
}

/// `text` safe to show on a terminal: a file name or a document may hold control characters
/// or bidirectional overrides that would forge a line of output, move the cursor, retitle the
/// window or reorder what is read; each is shown escaped (`\n`, `\u{1b}`).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_terminal_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Document text on one line: line breaks and tabs become a space, and anything else a
/// terminal acts on is escaped as by `printable`.
pub fn printable_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let spaced: String = text
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect();
    Cow::Owned(printable(&spaced).into_owned())
}

fn is_terminal_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Logs the error that ended a command, in the `error: …` / `hint: …` form.
pub fn error(error: &Error) {
    tracing::error!("{error}");
}

/// Logs a line that shows at every verbosity (not an error, not a warning).
pub fn notice(message: &str) {
    tracing::info!(target: crate::cli::logging::NOTICE, "{message}");
}
