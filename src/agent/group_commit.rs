//! Group commit of the agent path's writes to a store's own ledger.
//!
//! Every keyed call ends in a commit, and a commit waits for the disk (`synchronous = FULL`):
//! one fsync per call would bound the calls a server answers to the fsyncs a disk makes. Calls
//! that arrive while a commit runs are recorded together instead: the first to get the writer
//! leads, opens one transaction and waits for the calls that were already waiting (its seats);
//! each of them records its rows under a savepoint of its own (all or none, whatever the others
//! do: `Ledger::record_in_group`) and asks its own cancellation last, as a call alone would;
//! then the leader commits once for all. No call is answered before that commit returns, and a
//! failed commit fails every call of the group, none of whose rows stay.
//!
//! A call alone (no one waiting) commits at once, as before: nothing waits for calls that have
//! not arrived. A group holds at most `MAX_GROUP` calls.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::ledger::sqlite::UnitCounts;
use crate::ledger::{Ledger, NewCall, RecordOutcome};

/// The most calls one transaction records.
pub(crate) const MAX_GROUP: usize = 64;

/// The ledger's writer connection, shared by the calls that record through it.
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    /// Signalled when a call has recorded its rows in the open group: its leader waits on it.
    seated: Condvar,
    /// Signalled when a group ends: its calls, and the calls waiting for the next, wait on it.
    ended: Condvar,
    /// Calls that want to record and have not taken the state's lock yet: the seats a new
    /// group waits for.
    arriving: AtomicUsize,
    /// Groups committed, for the tests.
    #[cfg(test)]
    commits: AtomicUsize,
    /// Run by a leader just after its commit, before any call of the group returns, for the
    /// tests.
    #[cfg(test)]
    after_commit: Option<Box<dyn Fn() + Send + Sync>>,
}

struct State {
    ledger: Ledger,
    units: UnitCounts,
    open: Option<Group>,
}

/// The group whose transaction is open.
struct Group {
    /// Calls the leader waits for before it commits.
    seats: usize,
    joined: usize,
    /// Why the transaction cannot be committed (a call broke it, or panicked inside it): the
    /// leader rolls the whole group back.
    broken: Option<String>,
    outcome: Arc<GroupOutcome>,
}

/// How a group's commit ended: `Err` holds the leader's error in words, for the other calls.
type GroupOutcome = OnceLock<std::result::Result<(), (bool, String)>>;

impl GroupCommit {
    pub fn new(ledger: Ledger) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(State {
                ledger,
                units: UnitCounts::default(),
                open: None,
            }),
            seated: Condvar::new(),
            ended: Condvar::new(),
            arriving: AtomicUsize::new(0),
            #[cfg(test)]
            commits: AtomicUsize::new(0),
            #[cfg(test)]
            after_commit: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, on: &Condvar, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        on.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one call and returns once the transaction holding its rows has committed (or
    /// failed, or held nothing of it: a key already used, a quota spent, a cancellation).
    pub fn record(
        &self,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RecordOutcome> {
        self.arriving.fetch_add(1, Ordering::SeqCst);
        let mut state = self.lock();
        loop {
            match &mut state.open {
                None => return self.lead(state, call, cancelled),
                Some(group) if group.joined < group.seats => {
                    group.joined += 1;
                    let outcome = Arc::clone(&group.outcome);
                    self.arriving.fetch_sub(1, Ordering::SeqCst);
                    return self.join(state, &outcome, call, cancelled);
                }
                // The open group is full: wait for the next.
                Some(_) => state = self.wait(&self.ended, state),
            }
        }
    }

    /// Opens a group, records this call, waits for the calls already waiting to record
    /// theirs, and commits.
    fn lead(
        &self,
        state: MutexGuard<'_, State>,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RecordOutcome> {
        let waiting = self.arriving.fetch_sub(1, Ordering::SeqCst) - 1;
        let mut state = state;
        let State { ledger, units, .. } = &mut *state;
        ledger.begin_calls(units)?;
        let mut lead = Leading {
            commit: self,
            state: Some(state),
            outcome: Arc::new(GroupOutcome::new()),
        };
        let seats = waiting.min(MAX_GROUP - 1);
        let group = Group {
            seats,
            joined: 0,
            broken: None,
            outcome: Arc::clone(&lead.outcome),
        };
        lead.state().open = Some(group);
        let own = {
            let State {
                ledger,
                units,
                open,
            } = lead.state();
            let recorded = ledger.record_in_group(call, units, cancelled);
            settle(recorded, open)
        };
        if seats > 0 {
            let mut state = lead.state.take().expect("the leader holds the state");
            while state.open.as_ref().is_some_and(|g| g.joined < g.seats) {
                state = self.wait(&self.seated, state);
            }
            lead.state = Some(state);
        }
        let broken = lead.state().open.as_mut().and_then(|g| g.broken.take());
        let committed = match broken {
            None => {
                let State { ledger, units, .. } = lead.state();
                ledger.commit_calls(units)
            }
            Some(why) => {
                let State { ledger, units, .. } = lead.state();
                ledger.rollback_calls(units);
                Err(Error::io(
                    "record this call's group",
                    std::io::Error::other(format!("nothing of the group was recorded: {why}")),
                ))
            }
        };
        #[cfg(test)]
        if let Some(hook) = &self.after_commit {
            hook();
        }
        #[cfg(test)]
        self.commits.fetch_add(1, Ordering::SeqCst);
        tracing::trace!(
            calls = seats + 1,
            committed = committed.is_ok(),
            "keyed calls' group ended"
        );
        lead.end(match &committed {
            Ok(()) => Ok(()),
            Err(err) => Err((matches!(err, Error::Busy { .. }), err.to_string())),
        });
        committed?;
        crash_point("keys.after_commit");
        own
    }

    /// Records this call in the open group and waits for the group's commit.
    fn join(
        &self,
        mut state: MutexGuard<'_, State>,
        outcome: &GroupOutcome,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RecordOutcome> {
        let recorded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let State { ledger, units, .. } = &mut *state;
            ledger.record_in_group(call, units, cancelled)
        }));
        let own = match recorded {
            Ok(recorded) => settle(recorded, &mut state.open),
            Err(panic) => {
                // The call's savepoint may hold part of its rows: the group is rolled back.
                if let Some(group) = &mut state.open {
                    group.broken = Some("a call panicked while recording".into());
                }
                drop(state);
                self.seated.notify_one();
                std::panic::resume_unwind(panic);
            }
        };
        // The leader waits for the last seat only: waking it at every call costs a context
        // switch each.
        if state.open.as_ref().is_some_and(|g| g.joined >= g.seats) {
            self.seated.notify_one();
        }
        while outcome.get().is_none() {
            state = self.wait(&self.ended, state);
        }
        drop(state);
        match outcome.get().expect("the group ended") {
            Ok(()) => {
                crash_point("keys.after_commit");
                own
            }
            Err((true, message)) => Err(Error::Busy {
                context: format!("the commit of this call's group: {message}"),
            }),
            Err((false, message)) => Err(Error::io(
                "commit this call's group",
                std::io::Error::other(message.clone()),
            )),
        }
    }

    /// The units `scope` used in the window that starts at `window_start`, from the count the
    /// writer keeps (`Ledger::counted_units`), when it is exact and no group is open (an open
    /// group's units are not committed yet); `None` when it is not known so. A server gives the
    /// quota left in every answer's headers: summing the window's usage rows for it cost each
    /// answer as many rows as calls in the window.
    pub fn units_used(&self, scope: &str, window_start: i64) -> Result<Option<u64>> {
        let state = self.lock();
        if state.open.is_some() {
            return Ok(None);
        }
        state
            .ledger
            .counted_units(&state.units, scope, window_start)
    }

    /// Runs `f` on the writer with no group open (pruning keys, which must not join a
    /// group's transaction).
    pub fn exclusive<T>(&self, f: impl FnOnce(&mut Ledger) -> Result<T>) -> Result<T> {
        let mut state = self.lock();
        while state.open.is_some() {
            state = self.wait(&self.ended, state);
        }
        // What `f` writes is this connection's own, which `PRAGMA data_version` does not see.
        state.units = UnitCounts::default();
        f(&mut state.ledger)
    }
}

/// A call's outcome from `record_in_group`; a group transaction the call broke is marked so,
/// for its leader to roll back, and the call fails.
fn settle(
    recorded: Result<Result<RecordOutcome>>,
    open: &mut Option<Group>,
) -> Result<RecordOutcome> {
    match recorded {
        Ok(outcome) => outcome,
        Err(err) => {
            if let Some(group) = open {
                group.broken.get_or_insert_with(|| err.to_string());
            }
            Err(err)
        }
    }
}

/// A leader's hold on the open group: ending it (or unwinding past it) closes the group,
/// rolling its transaction back unless it committed, and wakes the calls waiting on it.
struct Leading<'a> {
    commit: &'a GroupCommit,
    state: Option<MutexGuard<'a, State>>,
    outcome: Arc<GroupOutcome>,
}

impl Leading<'_> {
    fn state(&mut self) -> &mut State {
        self.state.as_mut().expect("the leader holds the state")
    }

    fn end(&mut self, outcome: std::result::Result<(), (bool, String)>) {
        let _ = self.outcome.set(outcome);
        if let Some(mut state) = self.state.take() {
            state.open = None;
        }
        self.commit.ended.notify_all();
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.outcome.get().is_some() {
            return;
        }
        let mut state = match self.state.take() {
            Some(state) => state,
            None => self.commit.lock(),
        };
        let State { ledger, units, .. } = &mut *state;
        ledger.rollback_calls(units);
        state.open = None;
        let _ = self
            .outcome
            .set(Err((false, "the call leading the group failed".into())));
        drop(state);
        self.commit.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ledger::{Access, KeyLookup};

    fn writer(dir: &tempfile::TempDir) -> GroupCommit {
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite"), Access::ReadWrite)
            .expect("create a ledger");
        GroupCommit::new(ledger)
    }

    /// Records `call(i)` for `i` in `0..n`, every call arriving before any records, so they
    /// form groups as calls arriving during a commit do; returns how each call's thread ended.
    fn gathered(
        commit: &GroupCommit,
        n: usize,
        record: impl Fn(usize) -> Result<RecordOutcome> + Sync,
    ) -> Vec<std::thread::Result<Result<RecordOutcome>>> {
        std::thread::scope(|scope| {
            let record = &record;
            let mut calls = Vec::new();
            commit
                .exclusive(|_| {
                    calls = (0..n).map(|i| scope.spawn(move || record(i))).collect();
                    while commit.arriving.load(Ordering::SeqCst) < n {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                })
                .expect("hold the writer while the calls arrive");
            calls
                .into_iter()
                .map(std::thread::ScopedJoinHandle::join)
                .collect()
        })
    }

    /// `gathered`, where every call records.
    fn together(
        commit: &GroupCommit,
        n: usize,
        record: impl Fn(usize) -> Result<RecordOutcome> + Sync,
    ) -> Vec<RecordOutcome> {
        gathered(commit, n, record)
            .into_iter()
            .map(|call| call.expect("a call").expect("recorded"))
            .collect()
    }

    fn record(
        commit: &GroupCommit,
        key: &str,
        quota: u64,
        cancelled: bool,
    ) -> Result<RecordOutcome> {
        record_asking(commit, key, quota, &|| cancelled)
    }

    /// Records a call of `key` that asks `cancelled` before its savepoint ends.
    fn record_asking(
        commit: &GroupCommit,
        key: &str,
        quota: u64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RecordOutcome> {
        let response = format!("{{\"answer for\":\"{key}\"}}");
        let call = NewCall {
            scope: "local",
            key,
            key_source: "caller",
            tool: "search_docs",
            fingerprint: b"fingerprint",
            arguments: "{}",
            response: response.as_bytes(),
            is_error: false,
            outcome: "ok",
            n_hits: 1,
            index_generation: 1,
            now_ms: 1_000,
            expires_at: 2_000,
            window_start: 0,
            window_secs: 60,
            quota,
        };
        commit.record(&call, cancelled)
    }

    fn audited(commit: &GroupCommit) -> Vec<String> {
        let rows = commit
            .exclusive(|ledger| ledger.audit_rows(0, None))
            .expect("read the audit rows");
        rows.into_iter().map(|row| row.key).collect()
    }

    fn units(commit: &GroupCommit) -> u64 {
        commit
            .exclusive(|ledger| ledger.units_used("local", 0))
            .expect("read the units")
    }

    #[test]
    fn calls_arriving_together_commit_once_each_with_its_rows() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let outcomes = together(&commit, 8, |i| {
            record(&commit, &format!("k{i}"), 100, false)
        });
        assert!(outcomes.iter().all(|o| *o == RecordOutcome::Recorded));
        assert_eq!(
            commit.commits.load(Ordering::SeqCst),
            1,
            "one commit for 8 calls"
        );
        let mut keys = audited(&commit);
        keys.sort();
        assert_eq!(keys, (0..8).map(|i| format!("k{i}")).collect::<Vec<_>>());
        assert_eq!(units(&commit), 8);
    }

    #[test]
    fn no_call_of_a_group_returns_before_its_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let returned = std::sync::Arc::new(AtomicUsize::new(0));
        let seen_at_commit = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut commit = writer(&dir);
        commit.after_commit = Some(Box::new({
            let (returned, seen) = (returned.clone(), seen_at_commit.clone());
            move || {
                // Time for a call that would not wait for the commit to return.
                std::thread::sleep(Duration::from_millis(100));
                seen.lock().unwrap().push(returned.load(Ordering::SeqCst));
            }
        }));
        let outcomes = together(&commit, 8, |i| {
            let outcome = record(&commit, &format!("w{i}"), 100, false);
            returned.fetch_add(1, Ordering::SeqCst);
            outcome
        });
        assert!(outcomes.iter().all(|o| *o == RecordOutcome::Recorded));
        assert_eq!(commit.commits.load(Ordering::SeqCst), 1);
        assert_eq!(
            *seen_at_commit.lock().unwrap(),
            [0],
            "calls returned before the commit that holds their rows"
        );
    }

    /// Six calls gathered into one group, the `turn`-th to record panicking inside its
    /// savepoint (the leader records first, holding the writer until its seats are filled, so
    /// turn 0 is the leader and any other a joiner); returns how each call ended, by turn.
    fn one_panicking(
        commit: &GroupCommit,
        turn: usize,
    ) -> Vec<std::thread::Result<Result<RecordOutcome>>> {
        let asked = AtomicUsize::new(0);
        let turns: Mutex<Vec<usize>> = Mutex::new(vec![usize::MAX; 6]);
        let returned = gathered(commit, 6, |i| {
            record_asking(commit, &format!("p{i}"), 100, &|| {
                let now = asked.fetch_add(1, Ordering::SeqCst);
                turns.lock().unwrap()[i] = now;
                assert_ne!(now, turn, "this call panics inside its savepoint");
                false
            })
        });
        let turns = turns.into_inner().unwrap();
        let mut by_turn: Vec<_> = turns.into_iter().zip(returned).collect();
        by_turn.sort_by_key(|(turn, _)| *turn);
        by_turn.into_iter().map(|(_, returned)| returned).collect()
    }

    #[test]
    fn a_joining_call_that_panics_rolls_its_whole_group_back_and_wedges_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let by_turn = one_panicking(&commit, 3);
        assert!(by_turn[3].is_err(), "the call of turn 3 panicked");
        for (turn, returned) in by_turn.iter().enumerate().filter(|(t, _)| *t != 3) {
            assert!(
                matches!(returned, Ok(Err(_))),
                "the call of turn {turn} shared the rolled-back group: {returned:?}"
            );
        }
        assert_eq!(
            audited(&commit),
            Vec::<String>::new(),
            "nothing of the group stays"
        );
        assert_eq!(units(&commit), 0);
        assert_eq!(
            record(&commit, "after", 100, false).expect("recorded"),
            RecordOutcome::Recorded
        );
        assert_eq!(audited(&commit), ["after"]);
    }

    #[test]
    fn a_leader_that_panics_rolls_back_its_own_call_and_the_others_record() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let by_turn = one_panicking(&commit, 0);
        assert!(by_turn[0].is_err(), "the leader panicked");
        // It panicked before any call joined: the others form the next group.
        for (turn, returned) in by_turn.iter().enumerate().skip(1) {
            assert!(
                matches!(returned, Ok(Ok(RecordOutcome::Recorded))),
                "the call of turn {turn}: {returned:?}"
            );
        }
        assert_eq!(audited(&commit).len(), 5);
        assert_eq!(units(&commit), 5);
    }

    #[test]
    fn a_call_alone_commits_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let outcome = record(&commit, "alone", 100, false).expect("recorded");
        assert_eq!(outcome, RecordOutcome::Recorded);
        assert_eq!(commit.commits.load(Ordering::SeqCst), 1);
        assert_eq!(audited(&commit), ["alone"]);
    }

    #[test]
    fn a_key_used_twice_in_one_group_is_recorded_once_and_answered_from_the_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let outcomes = together(&commit, 6, |_| record(&commit, "same", 100, false));
        assert_eq!(commit.commits.load(Ordering::SeqCst), 1);
        let recorded = outcomes
            .iter()
            .filter(|o| **o == RecordOutcome::Recorded)
            .count();
        assert_eq!(recorded, 1, "{outcomes:?}");
        for outcome in outcomes {
            if let RecordOutcome::Existing(KeyLookup::Stored(first)) = &outcome {
                assert_eq!(first.response, br#"{"answer for":"same"}"#);
            } else {
                assert_eq!(outcome, RecordOutcome::Recorded);
            }
        }
        assert_eq!(audited(&commit), ["same"]);
        assert_eq!(units(&commit), 1);
    }

    #[test]
    fn the_quota_counts_the_calls_of_the_same_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let outcomes = together(&commit, 6, |i| record(&commit, &format!("q{i}"), 3, false));
        let over = outcomes
            .iter()
            .filter(|o| **o == RecordOutcome::OverQuota)
            .count();
        assert_eq!(over, 3, "{outcomes:?}");
        assert_eq!(audited(&commit).len(), 3);
        assert_eq!(units(&commit), 3);
    }

    #[test]
    fn the_quota_counts_the_calls_another_writer_committed() {
        // Two servers on one store: each counts what the other recorded in the window.
        let dir = tempfile::tempdir().expect("temp dir");
        let (first, second) = (writer(&dir), writer(&dir));
        let calls: [(&GroupCommit, &str, RecordOutcome); 6] = [
            (&first, "a1", RecordOutcome::Recorded),
            (&second, "b1", RecordOutcome::Recorded),
            (&first, "a2", RecordOutcome::Recorded),
            (&second, "b2", RecordOutcome::Recorded),
            (&first, "a3", RecordOutcome::OverQuota),
            (&second, "b3", RecordOutcome::OverQuota),
        ];
        for (writer, key, expected) in calls {
            let outcome = record(writer, key, 4, false).expect("recorded");
            assert_eq!(outcome, expected, "call {key}");
        }
        assert_eq!(units(&first), 4);
        assert_eq!(units(&second), 4);
    }

    /// The quota a server reports in its answers' headers comes from the writer's count while
    /// that count is exact, and from the rows once another writer has committed.
    #[test]
    fn the_units_used_come_from_the_writers_count_only_while_it_is_exact() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (first, second) = (writer(&dir), writer(&dir));
        let used = |commit: &GroupCommit, scope: &str, window_start: i64| {
            commit
                .units_used(scope, window_start)
                .expect("read the count")
        };
        assert_eq!(used(&first, "local", 0), None, "nothing counted yet");
        for key in ["a1", "a2", "a3"] {
            assert_eq!(
                record(&first, key, 100, false).expect("recorded"),
                RecordOutcome::Recorded
            );
        }
        assert_eq!(used(&first, "local", 0), Some(3));
        assert_eq!(used(&first, "local", 60_000), None, "another window");
        assert_eq!(used(&first, "other", 0), None, "another scope");
        assert_eq!(
            record(&second, "b1", 100, false).expect("recorded"),
            RecordOutcome::Recorded
        );
        assert_eq!(used(&first, "local", 0), None, "another writer committed");
        assert_eq!(
            record(&first, "a4", 100, false).expect("recorded"),
            RecordOutcome::Recorded
        );
        assert_eq!(used(&first, "local", 0), Some(5), "recounted from the rows");
        assert_eq!(units(&first), 5);
    }

    #[test]
    fn a_cancelled_call_writes_nothing_and_the_others_of_its_group_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let outcomes = together(&commit, 6, |i| {
            record(&commit, &format!("c{i}"), 100, i % 2 == 1)
        });
        assert_eq!(commit.commits.load(Ordering::SeqCst), 1);
        for (i, outcome) in outcomes.iter().enumerate() {
            let expected = if i % 2 == 1 {
                RecordOutcome::Cancelled
            } else {
                RecordOutcome::Recorded
            };
            assert_eq!(*outcome, expected, "call {i}");
        }
        let mut keys = audited(&commit);
        keys.sort();
        assert_eq!(keys, ["c0", "c2", "c4"]);
        assert_eq!(units(&commit), 3);
    }

    #[test]
    fn a_group_holds_at_most_max_group_calls() {
        let dir = tempfile::tempdir().expect("temp dir");
        let commit = writer(&dir);
        let n = MAX_GROUP + 6;
        let outcomes = together(&commit, n, |i| {
            record(&commit, &format!("m{i}"), 1_000, false)
        });
        assert!(outcomes.iter().all(|o| *o == RecordOutcome::Recorded));
        assert_eq!(commit.commits.load(Ordering::SeqCst), 2);
        assert_eq!(audited(&commit).len(), n);
    }
}
