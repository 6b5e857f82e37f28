//! Printing: JSON for scripts on stdout, short aligned text for people, and warnings and
//! errors as log events on stderr (so `--log-format json` makes them JSON too).

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

/// True when `error` is a write to stdout after its reader went away (`EPIPE`).
pub fn is_closed_pipe(error: &Error) -> bool {
    matches!(error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Writes `bytes` to stdout as they are.
pub fn raw(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|err| Error::io("write to stdout", err))
}

/// Logs a warning about one path. The text log format shows its control characters escaped
/// (`style::visible`); JSON logs keep them exact.
pub fn warning(path: &str, message: &str) {
    tracing::warn!(path, "{message}");
}

/// Logs the error that ended a command, in the `error: …` / `hint: …` form.
pub fn error(error: &Error) {
    tracing::error!("{error}");
}

/// Logs a line that shows at every verbosity (not an error, not a warning).
pub fn notice(message: &str) {
    tracing::info!(target: crate::cli::logging::NOTICE, "{message}");
}
