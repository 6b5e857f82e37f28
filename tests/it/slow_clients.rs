//! `serve` cannot be starved by slow clients: a request's headers, an idle kept-alive
//! connection and a request's body each have a timeout, after which the server closes the
//! socket; the open connections are capped, and sockets that never complete an authenticated
//! request hold at most a quarter of the slots, so `/health` and a client with a token are
//! answered at once during a flood of them. The server raises its soft open-file limit to the
//! hard one at start.
//!
//! Every socket goes to loopback; the server runs with small limits (16 connections, 2 s
//! timeouts) under a low open-file limit, and each test ends within seconds.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::http::{Server, launch_command, tokens_file};
use crate::support::mcp::{sample_store, signing};
use crate::support::{BIN, Env, isolate};

const TOKEN: &str = "token-slow-0123456789";

/// Each timeout of the server under test.
const TIMEOUT: Duration = Duration::from_secs(2);

/// How much later than its timeout a socket may be closed: generous, so a loaded machine
/// passes, and far below the forever a server without the timeout takes.
const SLACK: Duration = Duration::from_secs(3);

/// The open-file limits the server starts with: a soft limit too low for the flood below
/// (the server must raise it) and a hard limit it can raise it to.
const SOFT_FILES: u32 = 64;
const HARD_FILES: u32 = 160;

/// `serve --tokens …` with 16 connections at most and 2 s timeouts, started under `ulimit`.
fn limited_server(env: &Env) -> Server {
    let tokens = tokens_file(env, &[(TOKEN, "client-slow")]);
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit -S -n {SOFT_FILES} && ulimit -H -n {HARD_FILES} && exec \"$0\" \"$@\""
        ))
        .arg(BIN)
        .arg("--store")
        .arg(&env.store)
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(tokens)
        .args(["--max-connections", "16"])
        .args(["--header-timeout", "2s", "--idle-timeout", "2s"])
        .args(["--body-timeout", "2s"]);
    isolate(&mut command);
    launch_command(command, &["serve", "--max-connections", "16"]).server()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A request line and one header, then a header line every 300 ms, never the end.
    TrickledHeaders,
    /// Connected, and not a byte sent.
    Silent,
    /// Complete headers announcing a 1,000-byte body that never comes.
    BodyNeverSent,
    /// One complete request answered, then nothing on the kept-alive connection.
    IdleAfterOne,
}

/// One slow socket, non-blocking, and what became of it.
struct Slow {
    kind: Kind,
    stream: TcpStream,
    /// When the timeout that should close it started.
    since: Instant,
    last_trickle: Instant,
    /// What the server sent.
    got: Vec<u8>,
    closed: Option<Instant>,
}

impl Slow {
    fn open(addr: &str, kind: Kind, token: Option<&str>) -> Slow {
        let mut stream = TcpStream::connect(addr).expect("connect to the server");
        let host = format!("Host: {addr}\r\n");
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let body = signing().to_string();
        let request = match kind {
            Kind::TrickledHeaders => format!("POST /v1/tools/search_docs HTTP/1.1\r\n{host}"),
            Kind::Silent => String::new(),
            Kind::BodyNeverSent => format!(
                "POST /v1/tools/search_docs HTTP/1.1\r\n{host}{auth}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            ),
            Kind::IdleAfterOne => format!(
                "POST /v1/tools/search_docs HTTP/1.1\r\n{host}{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        };
        stream.write_all(request.as_bytes()).expect("send");
        let mut slow = Slow {
            kind,
            stream,
            since: Instant::now(),
            last_trickle: Instant::now(),
            got: Vec::new(),
            closed: None,
        };
        if kind == Kind::IdleAfterOne {
            slow.read_one_response();
        }
        slow.stream
            .set_nonblocking(true)
            .expect("a non-blocking socket");
        slow
    }

    /// Reads the answer to the complete request; the idle timeout starts after it.
    fn read_one_response(&mut self) {
        self.stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut buffer = [0; 65536];
        loop {
            let n = self.stream.read(&mut buffer).expect("read the answer");
            assert!(n > 0, "the server closed before answering");
            self.got.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&self.got);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .expect("a Content-Length");
                if body.len() >= length {
                    break;
                }
            }
        }
        assert!(
            self.got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&self.got)
        );
        self.got.clear();
        self.since = Instant::now();
    }

    /// Sends the next header line when one is due, and notes whether the server closed.
    fn poll(&mut self) {
        if self.closed.is_some() {
            return;
        }
        if self.kind == Kind::TrickledHeaders
            && self.last_trickle.elapsed() >= Duration::from_millis(300)
        {
            self.last_trickle = Instant::now();
            if self.stream.write_all(b"X-Slow: 1\r\n").is_err() {
                self.closed = Some(Instant::now());
                return;
            }
        }
        let mut buffer = [0; 4096];
        match self.stream.read(&mut buffer) {
            Ok(0) => self.closed = Some(Instant::now()),
            Ok(n) => self.got.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(_) => self.closed = Some(Instant::now()),
        }
    }

    fn got(&self) -> String {
        String::from_utf8_lossy(&self.got).into_owned()
    }
}

/// Polls every socket until all are closed or `within` has passed.
fn poll_until_closed(sockets: &mut [Slow], within: Duration) {
    let started = Instant::now();
    while started.elapsed() < within && sockets.iter().any(|s| s.closed.is_none()) {
        for socket in sockets.iter_mut() {
            socket.poll();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that every socket was closed by the server within its timeout (and the slack).
fn assert_all_closed_in_time(sockets: &[Slow]) {
    for socket in sockets {
        let closed = socket.closed.unwrap_or_else(|| {
            panic!(
                "a {:?} socket is still open {:?} after its timeout started (got {:?})",
                socket.kind,
                socket.since.elapsed(),
                socket.got()
            )
        });
        let took = closed - socket.since;
        assert!(
            took <= TIMEOUT + SLACK,
            "a {:?} socket was closed only after {took:?}",
            socket.kind
        );
    }
}

#[test]
fn each_kind_of_slow_socket_is_closed_within_its_timeout() {
    let env = sample_store();
    let server = limited_server(&env);
    let mut sockets = vec![
        Slow::open(&server.addr, Kind::TrickledHeaders, None),
        Slow::open(&server.addr, Kind::Silent, None),
        Slow::open(&server.addr, Kind::BodyNeverSent, Some(TOKEN)),
        Slow::open(&server.addr, Kind::IdleAfterOne, Some(TOKEN)),
    ];
    poll_until_closed(&mut sockets, TIMEOUT + SLACK + Duration::from_secs(1));
    assert_all_closed_in_time(&sockets);
    for socket in &sockets {
        match socket.kind {
            // A body that never came is answered (408) before the connection is closed.
            Kind::BodyNeverSent => assert!(
                socket.got.starts_with(b"HTTP/1.1 408"),
                "{:?}: {}",
                socket.kind,
                socket.got()
            ),
            // The others are closed without a word: no request was made, or it was answered.
            _ => assert!(socket.got.is_empty(), "{:?}: {}", socket.kind, socket.got()),
        }
    }
}

#[test]
fn a_flood_of_slow_sockets_leaves_health_and_authenticated_clients_served() {
    let env = sample_store();
    let server = limited_server(&env);
    #[cfg(target_os = "linux")]
    {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid()))
            .expect("read /proc/PID/limits");
        let files = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .expect("a Max open files line");
        let numbers: Vec<&str> = files.split_whitespace().skip(3).take(2).collect();
        assert_eq!(
            numbers,
            [HARD_FILES.to_string(), HARD_FILES.to_string()],
            "the soft open-file limit is raised to the hard one: {files}"
        );
    }
    // Far more sockets than the server's 16 slots, and more than its soft open-file limit
    // of 64 would have allowed: without the cap, `accept` fails and nobody is served.
    let mut sockets = Vec::new();
    for n in 0..150 {
        let kind = match n % 5 {
            0 => Kind::Silent,
            1 => Kind::BodyNeverSent,
            _ => Kind::TrickledHeaders,
        };
        sockets.push(Slow::open(&server.addr, kind, None));
    }
    for socket in &mut sockets {
        socket.poll();
    }
    let started = Instant::now();
    let health = server.get("/health");
    assert_eq!(health.status, 200, "{health}");
    let search = server.tool(
        "search_docs",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        &json!({"query": "rotate the signing key"}).to_string(),
    );
    assert_eq!(search.status, 200, "{search}");
    assert!(
        started.elapsed() < SLACK,
        "/health and an authenticated search took {:?} during the flood",
        started.elapsed()
    );
    poll_until_closed(&mut sockets, TIMEOUT + SLACK + Duration::from_secs(1));
    assert_all_closed_in_time(&sockets);
    for socket in &sockets {
        if socket.kind == Kind::BodyNeverSent && !socket.got.is_empty() {
            // Without a token the body is never waited for: 401 at once.
            assert!(socket.got.starts_with(b"HTTP/1.1 401"), "{}", socket.got());
        }
    }
    // The server is still serving after the flood.
    assert_eq!(server.get("/health").status, 200);
}
