//! The ingest, embedding and rebuild progress bar: on stderr, and only when stderr is a terminal.
//!
//! Each phase gets its own bar, made with its final style before it is ever drawn, so the
//! terminal never shows indicatif's default bar. A phase that counts (files read, passages
//! embedded) ends as a line that stays, with its real totals, time and rate; a phase that does
//! not (the walk) is a spinner that is cleared when it ends.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use groundidx::ingest::Progress;

/// A progress bar that draws nothing unless stderr is a terminal and output is not quiet.
pub struct Bar {
    /// Where each phase's bar draws; `None` draws nothing.
    target: Option<fn() -> ProgressDrawTarget>,
    /// The phase in progress, if any.
    current: Mutex<Option<ProgressBar>>,
}

impl Bar {
    pub fn new(quiet: bool) -> Bar {
        let target = (!quiet && std::io::stderr().is_terminal())
            .then_some(ProgressDrawTarget::stderr as fn() -> ProgressDrawTarget);
        Bar::drawing_to(target)
    }

    /// A bar that draws each phase to a new target from `target` (none: draws nothing).
    fn drawing_to(target: Option<fn() -> ProgressDrawTarget>) -> Bar {
        Bar {
            target,
            current: Mutex::new(None),
        }
    }

    /// Ends the last phase, leaving its totals on the terminal.
    pub fn finish(&self) {
        if let Some(bar) = self.lock().take() {
            end(&bar);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        // A phase's bar holds no invariant a panic elsewhere could break.
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Progress for Bar {
    fn phase(&self, name: &str, total: u64) {
        let Some(target) = self.target else {
            return;
        };
        let mut current = self.lock();
        if let Some(bar) = current.take() {
            end(&bar);
        }
        let style = if total == 0 {
            spinner_style()
        } else {
            counting_style(name, RUNNING)
        };
        // Styled and named as it is made (making one draws nothing): its first frame is its own.
        let bar = ProgressBar::with_draw_target(Some(total), target())
            .with_style(style)
            .with_message(name.to_string());
        if total == 0 {
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
        }
        *current = Some(bar);
    }

    fn advance(&self, n: u64) {
        if let Some(bar) = self.lock().as_ref() {
            bar.inc(n);
        }
    }
}

/// Ends one phase: a counting phase stays on screen with its totals, a spinner goes.
fn end(bar: &ProgressBar) {
    match bar.length() {
        Some(total) if total > 0 => {
            let name = bar.message();
            bar.set_style(counting_style(&name, DONE));
            bar.finish();
        }
        _ => bar.finish_and_clear(),
    }
}

/// A counting phase while it runs: done/total, the rate and the time left.
const RUNNING: &str = "{msg:>6} [{bar:30}] {human_pos}/{human_len} {unit}, {rate}, eta {eta}";
/// A counting phase once it ended: what it did, how long it took and how fast.
const DONE: &str = "{msg:>6} [{bar:30}] {human_pos}/{human_len} {unit} in {elapsed}, {rate}";

/// What a phase counts, by its name.
fn unit(phase: &str) -> &'static str {
    if phase == "embed" {
        "passages"
    } else {
        "files"
    }
}

/// The style of a counting phase: `template` with its unit, and the rate as a whole number.
fn counting_style(phase: &str, template: &str) -> ProgressStyle {
    let template = template.replace("{unit}", unit(phase));
    ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("rate", rate)
        .progress_chars("=> ")
}

/// A phase with no count: a spinner, its name and the time so far.
fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// Steps per second as a whole number with thousands separated (`7,732/s`): indicatif's own
/// `{per_sec}` shows four decimals nobody reads.
fn rate(state: &ProgressState, out: &mut dyn std::fmt::Write) {
    let per_sec = state.per_sec();
    let whole = if per_sec.is_finite() && per_sec > 0.0 {
        per_sec.round() as u64
    } else {
        0
    };
    let _ = write!(out, "{}/s", HumanCount(whole));
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::{ProgressDrawTarget, TermLike};

    use super::Bar;
    use groundidx::ingest::Progress;

    /// A terminal that keeps every line drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    static SCREEN: std::sync::OnceLock<Screen> = std::sync::OnceLock::new();

    fn screen() -> Screen {
        SCREEN.get_or_init(Screen::default).clone()
    }

    fn to_screen() -> ProgressDrawTarget {
        ProgressDrawTarget::term_like(Box::new(screen()))
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            if !s.trim().is_empty() {
                self.0.lock().unwrap().push(s.to_string());
            }
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_frame_is_styled_rates_are_whole_and_the_end_shows_the_totals() {
        let bar = Bar::drawing_to(Some(to_screen));
        bar.phase("walk", 0);
        bar.phase("read", 1758);
        for _ in 0..1758 {
            bar.advance(1);
        }
        bar.phase("delete", 0);
        bar.finish();
        let lines = screen().0.lock().unwrap().clone();
        assert!(!lines.is_empty(), "nothing was drawn");
        for line in &lines {
            // indicatif's default bar has no phase name: every frame here has one.
            assert!(
                ["walk", "read", "delete"].iter().any(|p| line.contains(p)),
                "a frame without its phase's style: {line:?}\n{lines:#?}"
            );
            assert!(!line.contains("0/0"), "{line:?}");
            if let Some(rate) = line.split(", ").find(|part| part.ends_with("/s")) {
                assert!(
                    rate.trim_end_matches("/s")
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == ','),
                    "the rate is not a whole number: {line:?}"
                );
            }
        }
        let last = lines.last().unwrap();
        assert!(
            last.contains("read") && last.contains("1,758/1,758 files in "),
            "the last frame left on screen: {last:?}\n{lines:#?}"
        );
    }
}
