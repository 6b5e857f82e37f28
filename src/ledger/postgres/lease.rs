//! The writer lease: one writer at a time on the shared ledger, whatever host it runs on.
//!
//! Taking the lease moves its epoch and writes that epoch into the counter row under the
//! row's lock; every write a writer makes then checks the epoch under the same lock
//! (`log::fence`), so once another writer has taken the lease, nothing of the old one commits.
//! Expiry only says when another may take it: a writer whose lease expired but was not taken
//! loses nothing.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::ledger::postgres::{Budget, PgLedger};

/// A lease taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGrant {
    pub holder: String,
    pub epoch: i64,
}

/// Who holds the lease, for `status` and for the message of a busy lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseInfo {
    pub holder: Option<String>,
    pub epoch: i64,
    /// Milliseconds until it may be taken (0 or less: free).
    pub expires_in_ms: i64,
}

impl PgLedger {
    /// Takes the lease for `ttl_secs` if it is free or expired; `None` when another holds it.
    pub fn take_lease(&self, holder: &str, ttl_secs: u64) -> Result<Option<LeaseGrant>> {
        let ttl = ttl_secs as f64;
        self.run("take the writer lease", Budget::Writer, async |conn| {
            let tx = conn.transaction().await?;
            tx.batch_execute(super::LOCK_TIMEOUT).await?;
            // Waits for a write in flight, so the new epoch is set after it; a write that does
            // not end (its process frozen) counts as a held lease until the server ends it.
            let locked = tx
                .query_one(
                    "SELECT writer_epoch FROM ledger_meta WHERE id = 1 FOR UPDATE",
                    &[],
                )
                .await;
            match locked {
                Ok(_) => {}
                Err(err)
                    if err.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
                {
                    return Ok(None);
                }
                Err(err) => return Err(err.into()),
            }
            let taken = tx
                .query_opt(
                    "UPDATE writer_lease
                        SET holder = $1, epoch = epoch + 1, taken_at = clock_timestamp(),
                            expires_at = clock_timestamp() + make_interval(secs => $2)
                      WHERE name = 'writer'
                        AND (holder IS NULL OR expires_at <= clock_timestamp() OR holder = $1)
                  RETURNING epoch",
                    &[&holder, &ttl],
                )
                .await?;
            let Some(row) = taken else {
                return Ok(None);
            };
            let epoch: i64 = row.get(0);
            tx.execute(
                "UPDATE ledger_meta SET writer_epoch = $1 WHERE id = 1",
                &[&epoch],
            )
            .await?;
            tx.commit().await?;
            Ok(Some(LeaseGrant {
                holder: holder.to_string(),
                epoch,
            }))
        })
    }

    /// Extends the lease; `false` when it is no longer this holder's (taken by another).
    pub fn renew_lease(&self, grant: &LeaseGrant, ttl_secs: u64) -> Result<bool> {
        let ttl = ttl_secs as f64;
        self.run("renew the writer lease", Budget::Command, async |conn| {
            let renewed = conn
                .query_opt(
                    "UPDATE writer_lease
                        SET expires_at = clock_timestamp() + make_interval(secs => $3)
                      WHERE name = 'writer' AND holder = $1 AND epoch = $2
                  RETURNING epoch",
                    &[&grant.holder, &grant.epoch, &ttl],
                )
                .await?;
            Ok(renewed.is_some())
        })
    }

    /// Gives the lease back, if still this holder's.
    pub fn release_lease(&self, grant: &LeaseGrant) -> Result<()> {
        self.run("release the writer lease", Budget::Command, async |conn| {
            conn.execute(
                "UPDATE writer_lease SET holder = NULL, expires_at = clock_timestamp()
                  WHERE name = 'writer' AND holder = $1 AND epoch = $2",
                &[&grant.holder, &grant.epoch],
            )
            .await?;
            Ok(())
        })
    }

    /// Who holds the lease now.
    pub fn lease(&self) -> Result<LeaseInfo> {
        self.run("read the writer lease", Budget::Command, async |conn| {
            let row = conn
                .query_one(
                    "SELECT holder, epoch,
                            coalesce((extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, 0)
                       FROM writer_lease WHERE name = 'writer'",
                    &[],
                )
                .await?;
            Ok(LeaseInfo {
                holder: row.get(0),
                epoch: row.get(1),
                expires_in_ms: row.get(2),
            })
        })
    }
}

/// The error of a lease another holder keeps past the wait.
pub(crate) fn lease_busy(info: &LeaseInfo) -> Error {
    Error::LeaseBusy {
        holder: info.holder.clone().unwrap_or_default(),
        expires_in_ms: info.expires_in_ms.max(0),
    }
}
