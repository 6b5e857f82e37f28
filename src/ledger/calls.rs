//! The agent path's records as both ledgers hold them: a keyed call's stored answer and how a
//! lookup found its key, a new call to record, and the audit, usage and spooled rows.

/// A stored answer to a keyed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    pub tool: String,
    pub fingerprint: Vec<u8>,
    /// The exact bytes of the structured result.
    pub response: Vec<u8>,
    pub is_error: bool,
    pub index_generation: u64,
    pub created_at: i64,
    pub expires_at: i64,
}

/// What the ledger knows of a `(scope, key)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyLookup {
    /// Never used.
    Unused,
    /// Used, and its answer is kept.
    Stored(KeyRecord),
    /// Used, its key record pruned by `gc`, its audit row kept with this fingerprint.
    Pruned { fingerprint: Vec<u8> },
}

/// One executed call to record.
#[derive(Clone, Debug)]
pub struct NewCall<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    /// `caller` or `server`.
    pub key_source: &'a str,
    pub tool: &'a str,
    pub fingerprint: &'a [u8],
    /// The canonical JSON of the arguments, for the audit row.
    pub arguments: &'a str,
    pub response: &'a [u8],
    pub is_error: bool,
    pub outcome: &'a str,
    pub n_hits: u64,
    pub index_generation: u64,
    pub now_ms: i64,
    pub expires_at: i64,
    pub window_start: i64,
    pub window_secs: u64,
    /// The most units the scope may use in one window.
    pub quota: u64,
}

/// What `record_call` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The key, audit and usage rows were written.
    Recorded,
    /// Another call with the same key committed first; nothing was written.
    Existing(KeyLookup),
    /// The caller gave up before the commit; nothing was written.
    Cancelled,
    /// The window's quota is used up; nothing was written.
    OverQuota,
}

/// An audit row, for `groundidx audit`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AuditRow {
    pub created_at: i64,
    pub scope: String,
    pub key: String,
    pub key_source: String,
    pub tool: String,
    pub outcome: String,
    pub n_hits: u64,
    pub index_generation: u64,
    pub arguments: String,
}

/// Units a client used in one window, for `groundidx usage`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UsageRow {
    pub client: String,
    pub window_start: i64,
    pub window_seconds: u64,
    pub units: u64,
}

/// A call answered while the shared ledger could not be reached, as this host's replica spooled
/// it: its audit row and usage unit, to forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpooledCall {
    pub scope: String,
    pub key: String,
    pub key_source: String,
    pub tool: String,
    pub fingerprint: Vec<u8>,
    pub arguments: String,
    pub outcome: String,
    pub n_hits: i64,
    pub index_generation: i64,
    pub created_at: i64,
    pub window_start: i64,
    pub window_secs: i64,
}
