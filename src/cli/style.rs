//! Colour: on a terminal unless `NO_COLOR` is set or `--color never`; `--color always` forces it.
//! And the one escape of untrusted text (file names, document text) for terminals and text logs.

use std::borrow::Cow;
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

/// `text` safe for a terminal or a text log: every control character (C0, DEL, C1) and every
/// bidirectional override is shown as an escape (`\n`, `\x1b`, `\u{202e}`), so a file name can
/// neither start a forged `error:` line nor send the terminal an escape sequence.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && u32::from(c) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A message for people, escaped as `visible` does except for the line breaks before its
/// `hint:` lines, the one multi-line form messages take.
pub fn visible_message(text: &str) -> String {
    text.split("\nhint: ")
        .map(visible)
        .collect::<Vec<_>>()
        .join("\nhint: ")
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::{visible, visible_message};

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(visible("plain/name.md"), "plain/name.md");
        assert_eq!(visible("a\nerror: b"), "a\\nerror: b");
        assert_eq!(
            visible("\u{1b}]0;t\u{7}x\u{9b}\u{202e}\t"),
            "\\x1b]0;t\\x07x\\u{9b}\\u{202e}\\t"
        );
        assert_eq!(
            visible_message("cannot read a\nerror: x\nhint: do y"),
            "cannot read a\\nerror: x\nhint: do y"
        );
    }
}
