//! The ingest, embedding and rebuild progress bar: on stderr, and only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use groundidx::ingest::Progress;

/// A progress bar that draws nothing unless stderr is a terminal and output is not quiet.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub fn new(quiet: bool) -> Bar {
        let bar = ProgressBar::hidden();
        if !quiet && std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Bar { bar }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn phase(&self, name: &str, total: u64) {
        self.bar.set_position(0);
        if total == 0 {
            self.bar.set_length(0);
            self.bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
        } else {
            self.bar.set_length(total);
            // indicatif's rate and ETA are measured from the phase's start.
            self.bar.reset_elapsed();
            self.bar.reset_eta();
            let unit = if name == "embed" { "passages" } else { "files" };
            self.bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{msg:>6}} [{{bar:30}}] {{pos}}/{{len}} {unit}, {{per_sec}}, eta {{eta}}"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
        }
        self.bar.set_message(name.to_string());
    }

    fn advance(&self, n: u64) {
        self.bar.inc(n);
    }
}
