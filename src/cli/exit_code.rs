//! The process's exit statuses, and the one place errors become them.

use groundidx::Error;

/// Exit statuses, as README.md documents them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Done. A `search` that ran and matched nothing is done too (its hits are `[]`): unlike
    /// grep and rg, 1 is kept for failures, so a script can tell "no hits" from "broken".
    Success = 0,
    /// Failed (or, for `verify`, ledger and index differ).
    Failure = 1,
    /// Bad usage: unknown flag, bad argument, a folder that does not exist.
    Usage = 2,
    /// Done, but some paths could not be read and deletions under them were held back.
    HeldBack = 3,
    /// Another process holds the store's writer lock, or kept the ledger busy past the wait
    /// (EX_TEMPFAIL): try again later.
    LockBusy = 75,
    /// Ended by SIGINT at a safe point (128 + 2).
    Interrupted = 130,
    /// Ended by SIGTERM at a safe point (128 + 15).
    Terminated = 143,
}

impl ExitCode {
    /// The status for an error that ended a command.
    pub fn of(error: &Error) -> ExitCode {
        match error {
            Error::LockBusy { .. }
            | Error::Busy { .. }
            | Error::LeaseBusy { .. }
            | Error::LeaseLost { .. }
            | Error::Shared {
                retryable: true, ..
            } => ExitCode::LockBusy,
            Error::Usage(_) => ExitCode::Usage,
            Error::Interrupted { signal, .. } => ExitCode::of_signal(*signal),
            _ => ExitCode::Failure,
        }
    }
}

impl ExitCode {
    /// The status of a run a signal ended cleanly.
    pub fn of_signal(signal: i32) -> ExitCode {
        if signal == signal_hook::consts::SIGINT {
            ExitCode::Interrupted
        } else {
            ExitCode::Terminated
        }
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}
