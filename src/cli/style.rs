//! Colour: on a terminal unless `NO_COLOR` is set or `--color never`; `--color always` forces it.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour a terminal, unless NO_COLOR is set or TERM is dumb
    Auto,
    /// Always colour, even into a pipe or with NO_COLOR
    Always,
    /// Never colour
    Never,
}

static STDOUT: AtomicBool = AtomicBool::new(false);
static STDERR: AtomicBool = AtomicBool::new(false);

/// Decides once, at start, whether stdout and stderr get colour.
pub fn init(choice: ColorChoice) {
    let auto = || {
        std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
    };
    let (out, err) = match choice {
        ColorChoice::Always => (true, true),
        ColorChoice::Never => (false, false),
        ColorChoice::Auto => (
            auto() && std::io::stdout().is_terminal(),
            auto() && std::io::stderr().is_terminal(),
        ),
    };
    STDOUT.store(out, Ordering::Relaxed);
    STDERR.store(err, Ordering::Relaxed);
}

pub fn stderr_has_colour() -> bool {
    STDERR.load(Ordering::Relaxed)
}

/// An ANSI style.
#[derive(Clone, Copy, Debug)]
pub enum Style {
    /// Paths.
    Path,
    /// Headings.
    Heading,
    /// Query terms inside a snippet.
    Match,
    /// Scores, line numbers and other secondary detail.
    Dim,
    /// `error:`.
    Error,
    /// `warning:`.
    Warning,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Path => "\x1b[35m",
            Style::Heading => "\x1b[1m",
            Style::Match => "\x1b[1;31m",
            Style::Dim => "\x1b[2m",
            Style::Error => "\x1b[1;31m",
            Style::Warning => "\x1b[1;33m",
        }
    }
}

/// `text` in `style` when stdout is coloured, else as it is.
pub fn out(style: Style, text: &str) -> String {
    paint(STDOUT.load(Ordering::Relaxed), style, text)
}

/// `text` in `style` when stderr is coloured, else as it is.
pub fn err(style: Style, text: &str) -> String {
    paint(stderr_has_colour(), style, text)
}

fn paint(on: bool, style: Style, text: &str) -> String {
    if on && !text.is_empty() {
        format!("{}{text}\x1b[0m", style.code())
    } else {
        text.to_string()
    }
}
