//! A bounded pool of read-only ledger connections, so that readers on many threads (a server's
//! concurrent searches) each read on a connection of their own: a SQLite connection serves one
//! thread at a time, and one shared connection behind a lock made every search wait for the
//! one before it.
//!
//! It is our own, in a few lines, rather than r2d2: r2d2 starts helper threads for every pool,
//! which a one-shot CLI search does not want, and needs a manager type for what is just
//! `Ledger::open`. This pool opens a connection when none is idle, keeps the ones handed back,
//! and makes a caller wait when `max` are in use.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use super::Ledger;
use crate::error::Result;
use crate::ledger::Access;

/// The most read-only connections one reader or agent opens: reads beyond that many at once
/// wait for a connection.
pub(crate) const READ_CONNECTIONS: usize = 16;

/// Read-only connections to one ledger.
pub(crate) struct LedgerPool {
    path: PathBuf,
    max: usize,
    /// Whether its connections read through a memory map (`Ledger::open`'s default for
    /// readers), or by `pread` (`open_unmapped`).
    mapped: bool,
    state: Mutex<PoolState>,
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Ledger>,
    /// Connections open, idle or handed out.
    open: usize,
}

/// A connection from the pool; it goes back when dropped.
pub struct PooledLedger<'a> {
    pool: &'a LedgerPool,
    ledger: Option<Ledger>,
}

impl LedgerPool {
    /// Opens the first connection now, so that a missing ledger or an unknown schema is an
    /// error here, not at the first read. At most `max` (at least 1) are ever open.
    pub fn open(path: &Path, max: usize) -> Result<LedgerPool> {
        LedgerPool::open_mapped(path, max, true)
    }

    /// A pool for a ledger that changes all the time (a server's: the agent's key lookups and
    /// quota counts, and its searches, `StoreReader::open_for_serving`): a connection reading
    /// through a memory map unmaps the whole file at its first read after any commit (an unmap
    /// is a TLB shootdown on every core), which cost a keyed call more than the map saved.
    pub fn open_unmapped(path: &Path, max: usize) -> Result<LedgerPool> {
        LedgerPool::open_mapped(path, max, false)
    }

    fn open_mapped(path: &Path, max: usize, mapped: bool) -> Result<LedgerPool> {
        let first = Self::connect(path, mapped)?;
        Ok(LedgerPool {
            path: path.to_path_buf(),
            max: max.max(1),
            mapped,
            state: Mutex::new(PoolState {
                idle: vec![first],
                open: 1,
            }),
            returned: Condvar::new(),
        })
    }

    fn connect(path: &Path, mapped: bool) -> Result<Ledger> {
        let ledger = Ledger::open(path, Access::ReadOnly)?;
        if !mapped {
            ledger.unmap()?;
        }
        Ok(ledger)
    }

    /// An idle connection, a new one while fewer than `max` are open, or the next one handed
    /// back.
    pub fn get(&self) -> Result<PooledLedger<'_>> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(ledger) = state.idle.pop() {
                if ledger.still_safe() {
                    return Ok(self.lend(ledger));
                }
                // An immutable connection whose file system became writable: a writer may now
                // change the file under it, so it is closed and the ledger opened again.
                state.open -= 1;
                drop(ledger);
                continue;
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return match Self::connect(&self.path, self.mapped) {
                    Ok(ledger) => Ok(self.lend(ledger)),
                    Err(err) => {
                        self.state
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .open -= 1;
                        self.returned.notify_one();
                        Err(err)
                    }
                };
            }
            state = self
                .returned
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn lend(&self, ledger: Ledger) -> PooledLedger<'_> {
        PooledLedger {
            pool: self,
            ledger: Some(ledger),
        }
    }
}

impl Deref for PooledLedger<'_> {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        self.ledger
            .as_ref()
            .expect("a pooled connection is only taken back on drop")
    }
}

impl Drop for PooledLedger<'_> {
    fn drop(&mut self) {
        if let Some(ledger) = self.ledger.take() {
            let mut state = self
                .pool
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.idle.push(ledger);
            drop(state);
            self.pool.returned.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Ledger;
    use super::LedgerPool;
    use crate::ledger::Access;

    #[test]
    fn never_more_than_max_connections_are_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ledger.sqlite");
        drop(Ledger::open(&path, Access::ReadWrite).expect("create a ledger"));
        let pool = LedgerPool::open(&path, 2).expect("open the pool");
        let out = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..6 {
                scope.spawn(|| {
                    for _ in 0..20 {
                        let ledger = pool.get().expect("a connection");
                        let now = out.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        ledger.generation().expect("read the generation");
                        out.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 2, "more than max were out");
        assert!(pool.state.lock().expect("state").open <= 2);
    }
}
