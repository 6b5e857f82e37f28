//! What the stat cache compares: a file's stat as groundidx records it. The walk takes it, the
//! ledger keeps it with each source, and a file whose stat is unchanged is not read again.

use std::os::unix::fs::MetadataExt;

/// The stat fields the ledger's cache compares to decide whether a file must be read.
///
/// Times are ns since the epoch, saturated at the ends of `i64` (the years 1677 and 2262): a
/// file system may hold any 64-bit second count. The ctime is there because a user can set
/// the mtime back (`touch -d`) but not the ctime, which moves on every write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub inode: u64,
}

impl FileStat {
    /// The fields of a `stat(2)` answer.
    #[allow(
        clippy::unnecessary_cast,
        reason = "the stat fields' types differ between platforms"
    )]
    pub fn of(stat: &rustix::fs::Stat) -> FileStat {
        FileStat {
            size: stat.st_size as u64,
            mtime_ns: time_ns(stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            ctime_ns: time_ns(stat.st_ctime as i64, stat.st_ctime_nsec as i64),
            inode: stat.st_ino as u64,
        }
    }
}

/// The stat fields the ledger's cache keeps.
pub(crate) fn stat_of(meta: &std::fs::Metadata) -> FileStat {
    FileStat {
        size: meta.len(),
        mtime_ns: time_ns(meta.mtime(), meta.mtime_nsec()),
        ctime_ns: time_ns(meta.ctime(), meta.ctime_nsec()),
        inode: meta.ino(),
    }
}

/// Seconds and nanoseconds as ns since the epoch, saturated: an mtime in the year 2400 is
/// legal on ext4 and would overflow an `i64` of ns. A saturated mtime lies after every
/// recording, so the racy-clean rule reads such a file on every run rather than trust it.
pub(crate) fn time_ns(secs: i64, nsecs: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}
