//! The process's exit statuses, and the one place errors become them.

use groundidx::Error;

/// Exit statuses, as README.md documents them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Done.
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
}

impl ExitCode {
    /// The status for an error that ended a command.
    pub fn of(error: &Error) -> ExitCode {
        match error {
            Error::LockBusy { .. } | Error::Busy { .. } => ExitCode::LockBusy,
            Error::Usage(_) => ExitCode::Usage,
            _ => ExitCode::Failure,
        }
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}
