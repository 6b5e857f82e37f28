//! The HTTP server's connections: the accept loop, the cap on open connections with its reserve
//! for clients that proved themselves, and the time limits on a connection's request headers,
//! its idle keep-alive and its request bodies (the last enforced by the router, which reads
//! every body; see `http::read_body`).
//!
//! It exists because `axum::serve` has none of these: a client that opens sockets and sends a
//! byte now and then holds each one open forever, and with enough of them the process runs out
//! of file descriptors and nobody else is served. What it does not do: routing, or deciding who
//! is authenticated. The router's guard tells a connection through the request's
//! `ConnectionProof` that the request carried a valid token (or that none is needed), and the
//! connection counts as proved once such a request has been answered.
//!
//! The reserve: at most a quarter of the slots go to connections that have not proved
//! themselves. A new connection past that cap, or past the total cap, closes the oldest
//! unproved one (an idle one first), and with every slot proved it closes the proved
//! connection idle the longest. So sockets that never finish a request can hold only the
//! unproved quarter, each for at most the header timeout, while `/health` (a complete request,
//! answered at once) and authenticated clients still get in.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The time and count limits of `groundidx serve`'s connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// At most this many connections are open at once; a quarter of them at most are
    /// connections that have not yet completed an authenticated request.
    pub max_connections: usize,
    /// A new connection must complete its first request's headers within this; a kept-alive
    /// one, each later request's headers from its first byte.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request in progress is closed after this.
    pub idle_timeout: Duration,
    /// A request's body must arrive in full within this, counted from the end of its headers.
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// `--max-connections`' default: far more than the agents of one deployment open, far fewer
/// than the open files a process may usually have.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The smallest `--max-connections`: one slot for unproved connections and three in reserve.
pub const MIN_MAX_CONNECTIONS: usize = 4;

/// File descriptors kept for everything but client connections: the ledger (SQLite's files,
/// or the PostgreSQL pool), index files, the runtime's own, a re-ingest's reads, and its
/// merges, which hold about seven files open for each segment they read (`index::directory`;
/// a merge that finds no descriptor left maps the files instead).
const FILES_BESIDE_CONNECTIONS: u64 = 128;

impl ConnectionLimits {
    /// How many slots connections that have not proved themselves may hold.
    pub(crate) fn max_unproved(&self) -> usize {
        (self.max_connections / 4).max(1)
    }

    /// These limits with `max_connections` lowered, when needed, so that the connections and
    /// the server's own files fit under the open-file limit: past it `accept` fails and
    /// nobody is served.
    fn fitted_to(self, open_files: Option<u64>) -> ConnectionLimits {
        let Some(open_files) = open_files else {
            return self;
        };
        let room = usize::try_from(open_files.saturating_sub(FILES_BESIDE_CONNECTIONS))
            .unwrap_or(usize::MAX)
            .max(MIN_MAX_CONNECTIONS);
        if self.max_connections <= room {
            return self;
        }
        tracing::warn!(
            max_connections = self.max_connections,
            open_file_limit = open_files,
            "--max-connections lowered to {room} to fit the open-file limit; hint: raise the hard limit (ulimit -Hn, LimitNOFILE=) to serve more"
        );
        ConnectionLimits {
            max_connections: room,
            ..self
        }
    }
}

/// Raises this process's soft open-file limit to its hard limit, as servers do (a soft limit of
/// 1,024 is a default for interactive shells, not a choice); returns the limit now in force,
/// `None` when there is none.
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // macOS refuses an unlimited soft limit; a million is more than any deployment needs.
    let wanted = limit.maximum.unwrap_or(1 << 20);
    if limit.current.is_some_and(|current| current < wanted) {
        let raised = Rlimit {
            current: Some(wanted),
            maximum: limit.maximum,
        };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %err, "could not raise the open-file limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// Set on a request by the router's guard when it carried a valid bearer token, or when the
/// server needs none: an answer to such a request proves its connection.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnectionProof(Arc<AtomicBool>);

impl ConnectionProof {
    pub fn authenticated(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_authenticated(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Raises the open-file limit (`raise_open_file_limit`) and fits `limits` to it. Called
/// before the server listens, so that its first client already finds the raised limit.
pub(crate) fn fitted_to_open_files(limits: ConnectionLimits) -> ConnectionLimits {
    limits.fitted_to(raise_open_file_limit())
}

/// Accepts connections on `listener` and serves `router` on each, within `limits` (already
/// `fitted_to_open_files`), until `shutdown` is cancelled; then waits for the requests in
/// progress to be answered.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let open = Arc::new(OpenConnections::new(limits));
    'accepting: loop {
        // With every slot proved and busy, wait for one to close or go idle: new connections
        // wait in the kernel's backlog meanwhile, instead of costing a file each.
        loop {
            let changed = open.changed.notified();
            if open.can_admit() {
                break;
            }
            tokio::select! {
                _ = changed => {}
                _ = shutdown.cancelled() => break 'accepting,
            }
        }
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    if !is_connection_error(&err) {
                        // Out of files or memory: wait a moment instead of spinning on a
                        // backlog that cannot be accepted.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let Some(connection) = open.admit() else {
            // Every slot became busy since `can_admit`: this one is refused (closed).
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            router.clone(),
            connection,
            open.clone(),
            shutdown.clone(),
        ));
    }
    drop(listener);
    loop {
        let changed = open.changed.notified();
        if open.is_empty() {
            break;
        }
        changed.await;
    }
}

fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One admitted connection: its number (accept order), what it does, and how to close it.
struct Admitted {
    id: u64,
    activity: Arc<Activity>,
    evicted: CancellationToken,
}

/// Serves one connection until it ends, is evicted, overstays a timeout, or the server shuts
/// down while it has no request in progress.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    connection: Admitted,
    open: Arc<OpenConnections>,
    shutdown: CancellationToken,
) {
    let Admitted {
        id,
        activity,
        evicted,
    } = connection;
    let io = TokioIo::new(WatchedStream {
        stream,
        activity: activity.clone(),
    });
    let service = {
        let (activity, open) = (activity.clone(), open.clone());
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (router, activity, open) = (router.clone(), activity.clone(), open.clone());
            async move {
                activity.request_started();
                let proof = ConnectionProof::default();
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(proof.clone());
                let response = router
                    .oneshot(request)
                    .await
                    .unwrap_or_else(|never| match never {});
                if proof.is_authenticated() {
                    open.prove(id);
                }
                activity.request_finished();
                open.changed.notify_one();
                Ok::<_, Infallible>(response)
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    let limits = open.limits;
    let mut shutting_down = false;
    loop {
        let deadline = activity.deadline(&limits);
        let changed = activity.changed.notified();
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(error = %err, "connection ended");
                }
                break;
            }
            _ = evicted.cancelled() => {
                tracing::debug!("closed a connection to make room for a new one");
                break;
            }
            _ = sleep_until(deadline) => {
                if activity.deadline(&limits).is_some_and(|at| at <= Instant::now()) {
                    tracing::debug!("closed a connection that overstayed its header or idle timeout");
                    break;
                }
            }
            _ = changed => {}
            _ = shutdown.cancelled(), if !shutting_down => {
                shutting_down = true;
                if activity.is_idle() {
                    break;
                }
                // The request in progress is answered; then the connection closes.
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    open.release(id);
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The connections open now, in accept order, and which of them proved themselves.
struct OpenConnections {
    limits: ConnectionLimits,
    state: Mutex<OpenState>,
    /// Told when a connection closes or goes idle: the accept loop may then admit.
    changed: Notify,
}

#[derive(Default)]
struct OpenState {
    next_id: u64,
    connections: BTreeMap<u64, OpenEntry>,
    n_proved: usize,
}

struct OpenEntry {
    proved: bool,
    activity: Arc<Activity>,
    evict: CancellationToken,
}

impl OpenConnections {
    fn new(limits: ConnectionLimits) -> Self {
        OpenConnections {
            limits,
            state: Mutex::new(OpenState::default()),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OpenState> {
        // The state is a few counters and a map, each update one step: a panic cannot leave
        // it half-changed, so a poisoned lock is still sound.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_empty(&self) -> bool {
        self.lock().connections.is_empty()
    }

    /// Whether a new connection can be admitted now, evicting one if need be.
    fn can_admit(&self) -> bool {
        let state = self.lock();
        state.connections.len() < self.limits.max_connections
            || state.n_proved < state.connections.len()
            || state
                .connections
                .values()
                .any(|entry| entry.activity.is_idle())
    }

    /// Registers a new connection as unproved, first closing the one it displaces when the
    /// unproved share or the whole is full; `None` when every slot is proved and busy.
    fn admit(&self) -> Option<Admitted> {
        let mut state = self.lock();
        let n_unproved = state.connections.len() - state.n_proved;
        let full = state.connections.len() >= self.limits.max_connections;
        if n_unproved >= self.limits.max_unproved() || full {
            let victim = state
                .oldest(|entry| !entry.proved && entry.activity.is_idle())
                .or_else(|| state.oldest(|entry| !entry.proved))
                .or_else(|| {
                    full.then(|| state.oldest(|entry| entry.activity.is_idle()))
                        .flatten()
                });
            match victim {
                Some(victim) => {
                    let entry = state.connections.remove(&victim)?;
                    state.n_proved -= usize::from(entry.proved);
                    entry.evict.cancel();
                }
                None => return None,
            }
        }
        let id = state.next_id;
        state.next_id += 1;
        let activity = Arc::new(Activity::new());
        let evict = CancellationToken::new();
        state.connections.insert(
            id,
            OpenEntry {
                proved: false,
                activity: activity.clone(),
                evict: evict.clone(),
            },
        );
        Some(Admitted {
            id,
            activity,
            evicted: evict,
        })
    }

    fn prove(&self, id: u64) {
        let mut state = self.lock();
        if let Some(entry) = state.connections.get_mut(&id)
            && !entry.proved
        {
            entry.proved = true;
            state.n_proved += 1;
        }
    }

    fn release(&self, id: u64) {
        {
            let mut state = self.lock();
            if let Some(entry) = state.connections.remove(&id) {
                state.n_proved -= usize::from(entry.proved);
            }
        }
        self.changed.notify_one();
    }
}

impl OpenState {
    /// The first-accepted connection that `which` picks.
    fn oldest(&self, which: impl Fn(&OpenEntry) -> bool) -> Option<u64> {
        self.connections
            .iter()
            .find(|(_, entry)| which(entry))
            .map(|(id, _)| *id)
    }
}

/// What one connection is doing, for its timeouts.
struct Activity {
    state: Mutex<ActivityState>,
    /// Told when the deadline may have moved earlier (a new request's first byte).
    changed: Notify,
}

struct ActivityState {
    /// Requests whose headers are in and whose response is not yet made.
    in_flight: usize,
    /// Since when no request has been in progress (the accept, or the last response).
    waiting_since: Instant,
    /// When the first byte came in after `waiting_since`.
    first_byte: Option<Instant>,
    /// Whether a request has been answered on this connection (it is kept alive).
    answered_one: bool,
}

impl Activity {
    fn new() -> Self {
        Activity {
            state: Mutex::new(ActivityState {
                in_flight: 0,
                waiting_since: Instant::now(),
                first_byte: None,
                answered_one: false,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        // As for `OpenConnections::lock`: each update is one step.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_idle(&self) -> bool {
        self.lock().in_flight == 0
    }

    /// When the connection is to be closed unless a request comes in; none while one is in
    /// progress (its body has its own timeout, and the answer takes what it takes).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let state = self.lock();
        if state.in_flight > 0 {
            return None;
        }
        Some(match (state.answered_one, state.first_byte) {
            (false, _) => state.waiting_since + limits.header_timeout,
            (true, None) => state.waiting_since + limits.idle_timeout,
            (true, Some(first_byte)) => first_byte + limits.header_timeout,
        })
    }

    fn bytes_read(&self) {
        let mut state = self.lock();
        if state.in_flight == 0 && state.first_byte.is_none() {
            state.first_byte = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    fn request_started(&self) {
        self.lock().in_flight += 1;
        self.changed.notify_one();
    }

    fn request_finished(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.waiting_since = Instant::now();
            state.first_byte = None;
            state.answered_one = true;
        }
        drop(state);
        self.changed.notify_one();
    }
}

/// A client's socket that tells its connection's `Activity` when bytes come in.
struct WatchedStream {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectionLimits, OpenConnections};

    fn limits(max_connections: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections,
            ..ConnectionLimits::default()
        }
    }

    #[test]
    fn unproved_connections_hold_at_most_a_quarter_and_the_oldest_goes_first() {
        let open = OpenConnections::new(limits(8));
        let first = open.admit().expect("room");
        let second = open.admit().expect("room");
        // A third unproved connection displaces the oldest one.
        let third = open.admit().expect("room");
        assert!(first.evicted.is_cancelled());
        assert!(!second.evicted.is_cancelled() && !third.evicted.is_cancelled());
        // A proved connection no longer counts against the unproved share.
        open.prove(second.id);
        let fourth = open.admit().expect("room");
        assert!(!third.evicted.is_cancelled() && !fourth.evicted.is_cancelled());
    }

    #[test]
    fn a_full_server_closes_the_longest_idle_proved_connection_and_never_a_busy_one() {
        let open = OpenConnections::new(limits(4));
        let admitted: Vec<_> = (0..4)
            .map(|_| {
                let connection = open.admit().expect("room");
                open.prove(connection.id);
                connection.activity.request_started();
                connection
            })
            .collect();
        assert!(!open.can_admit(), "every slot is proved and busy");
        assert!(open.admit().is_none());
        admitted[2].activity.request_finished();
        assert!(open.can_admit());
        let fifth = open.admit().expect("the idle one makes room");
        assert!(admitted[2].evicted.is_cancelled());
        assert!(!admitted[0].evicted.is_cancelled() && !fifth.evicted.is_cancelled());
    }

    #[test]
    fn the_limit_fits_the_open_file_limit() {
        assert_eq!(limits(512).fitted_to(None).max_connections, 512);
        assert_eq!(limits(512).fitted_to(Some(4096)).max_connections, 512);
        assert_eq!(limits(512).fitted_to(Some(256)).max_connections, 128);
        assert_eq!(limits(512).fitted_to(Some(10)).max_connections, 4);
    }
}
