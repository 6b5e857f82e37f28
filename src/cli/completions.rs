//! `groundidx completions SHELL` and `groundidx man`: generated from the clap definition, so
//! they never drift from `--help`.

use clap::CommandFactory;

use groundidx::{Error, Result};

use crate::cli::output;
use crate::cli::{Cli, ExitCode};

/// Print a shell completion script, e.g. `groundidx completions bash > /etc/bash_completion.d/groundidx`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Print the man page (roff), e.g. `groundidx man > /usr/local/share/man/man1/groundidx.1`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {}

pub fn run_completions(args: &CompletionArgs) -> Result<ExitCode> {
    let mut command = Cli::command();
    // Generated into memory first: clap_complete panics on a failed write, and a closed pipe
    // (`completions bash | head`) must end quietly instead.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "groundidx", &mut script);
    output::raw(&script)?;
    Ok(ExitCode::Success)
}

pub fn run_man(_args: &ManArgs) -> Result<ExitCode> {
    let page = clap_mangen::Man::new(Cli::command());
    page.render(&mut std::io::stdout())
        .map_err(|err| Error::io("write the man page to stdout", err))?;
    Ok(ExitCode::Success)
}
