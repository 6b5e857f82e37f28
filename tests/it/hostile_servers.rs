//! Hostile embeddings servers: answers that are not numbers, indexes that are not `0..n`, a
//! probe of too many dimensions, vectors that change length after the probe, a body that is not
//! UTF-8, a redirect loop, a server that dies after the probe, and HTTP 429 with `Retry-After`.
//! Each fails the embedding with an error naming the address and stores no vector (or, for
//! 429, waits and embeds each passage once), and lexical search keeps working.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::support::Env;
use crate::support::embed_server::{listen, read_request};

/// What the server does with request number `n` (0 is the probe) of `inputs` texts: the whole
/// HTTP response, or `None` to close the connection without answering.
type Respond = fn(n: usize, inputs: usize) -> Option<Vec<u8>>;

struct Hostile {
    port: u16,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    fn start(respond: Respond) -> Hostile {
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let counter = Arc::clone(&requests);
        let port = listen(&stop, move |stream| {
            let _ = serve(stream, respond, &counter);
        });
        Hostile {
            port,
            requests,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/embeddings", self.port)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, respond: Respond, counter: &AtomicUsize) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    // The port the client connected to: this server's own.
    let port = stream.local_addr()?.port();
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(body) = read_request(&mut reader)? else {
            return Ok(());
        };
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let inputs = request["input"].as_array().map_or(0, Vec::len);
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let Some(answer) = respond(n, inputs) else {
            return Ok(());
        };
        // A redirect names this server's own address.
        let bytes = match String::from_utf8(answer) {
            Ok(text) => text.replace("{port}", &port.to_string()).into_bytes(),
            Err(err) => err.into_bytes(),
        };
        writer.write_all(&bytes)?;
        writer.flush()?;
    }
}

/// An HTTP response with `status`, extra header lines and `body`.
fn http(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A well-formed answer of `inputs` vectors of `dims` dimensions.
fn vectors(inputs: usize, dims: usize) -> Vec<u8> {
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let mut v = vec![0.0f32; dims];
            v[i % dims] = 1.0;
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    http(
        "200 OK",
        "",
        json!({"object": "list", "data": data})
            .to_string()
            .as_bytes(),
    )
}

/// The probe answered well, the rest by `body` (a JSON text with `{n}` for the input count).
fn after_probe(n: usize, inputs: usize, body: &str) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(vectors(inputs, 8));
    }
    Some(http(
        "200 OK",
        "",
        body.replace("{n}", &inputs.to_string()).as_bytes(),
    ))
}

fn run_with(env: &Env, server: &Hostile) -> std::process::Output {
    let docs = env.docs.to_str().expect("utf-8").to_string();
    env.run(&[
        "ingest",
        &docs,
        "--embed-url",
        &server.url(),
        "--embed-remote-model",
        "hostile",
    ])
}

/// The run failed naming the address and `expected`, no vector is stored, and the store is
/// whole and searchable by words.
fn assert_refused_cleanly(what: &str, env: &Env, server: &Hostile, expected: &str) {
    let output = run_with(env, server);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert!(
        stderr.contains(&server.url()),
        "{what}: the address in {stderr}"
    );
    assert!(
        stderr.contains(expected),
        "{what}: {expected:?} in {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    let status = env.json(&["status", "--json"]);
    for model in status["models"].as_array().expect("models") {
        assert_eq!(model["vectors"], 0, "{what}: {status}");
    }
    let hits = env.search("rotate keys", 3);
    assert!(
        !hits["hits"].as_array().expect("hits").is_empty(),
        "{what}: {hits}"
    );
    env.assert_verified();
}

#[test]
fn broken_answers_after_the_probe_store_nothing_and_name_the_address() {
    let cases: [(&str, Respond, &str); 5] = [
        (
            "NaN",
            |n, i| after_probe(n, i, r#"{"data":[{"index":0,"embedding":[NaN,1]}]}"#),
            "not an embeddings list",
        ),
        (
            "infinity",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                // Too large for an f32: it reads as infinity.
                let rows: Vec<String> = (0..i)
                    .map(|k| format!(r#"{{"index":{k},"embedding":[1e39,1,1,1,1,1,1,1]}}"#))
                    .collect();
                Some(http(
                    "200 OK",
                    "",
                    format!(r#"{{"data":[{}]}}"#, rows.join(",")).as_bytes(),
                ))
            },
            "finite",
        ),
        (
            "index out of range",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                let data: Vec<Value> = (0..i)
                    .map(|k| json!({"index": k + 7, "embedding": [1.0, 0, 0, 0, 0, 0, 0, 0]}))
                    .collect();
                Some(http(
                    "200 OK",
                    "",
                    json!({"data": data}).to_string().as_bytes(),
                ))
            },
            "indexes are not 0..n",
        ),
        (
            "duplicate indexes",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                let data: Vec<Value> = (0..i)
                    .map(|_| json!({"index": 0, "embedding": [1.0, 0, 0, 0, 0, 0, 0, 0]}))
                    .collect();
                Some(http(
                    "200 OK",
                    "",
                    json!({"data": data}).to_string().as_bytes(),
                ))
            },
            "indexes are not 0..n",
        ),
        (
            "longer after the probe",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                Some(vectors(i, 9))
            },
            "another length than its first",
        ),
    ];
    for (what, respond, expected) in cases {
        let env = Env::sample();
        let server = Hostile::start(respond);
        assert_refused_cleanly(what, &env, &server, expected);
    }
}

#[test]
fn a_probe_of_too_many_dimensions_is_refused() {
    let env = Env::sample();
    let server = Hostile::start(|_, i| Some(vectors(i, 70_000)));
    assert_refused_cleanly("huge", &env, &server, "dimensions (1 to 65536");
}

#[test]
fn a_body_that_is_not_utf8_a_redirect_loop_and_a_server_that_dies_after_the_probe_fail_cleanly() {
    let cases: [(&str, Respond, &str); 3] = [
        (
            "not UTF-8",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                Some(http("200 OK", "", b"{\"data\": [\xff\xfe]}"))
            },
            "after 4 tries",
        ),
        (
            "redirect",
            |n, i| {
                if n == 0 {
                    return Some(vectors(i, 8));
                }
                Some(http(
                    "307 Temporary Redirect",
                    "Location: http://127.0.0.1:{port}/v1/embeddings\r\n",
                    b"",
                ))
            },
            "it redirects the request",
        ),
        (
            "dies after the probe",
            |n, i| (n == 0).then(|| vectors(i, 8)),
            "after 4 tries",
        ),
    ];
    for (what, respond, expected) in cases {
        let env = Env::sample();
        let server = Hostile::start(respond);
        assert_refused_cleanly(what, &env, &server, expected);
    }
}

#[test]
fn http_429_with_retry_after_is_waited_for_and_each_passage_embedded_once() {
    let env = Env::sample();
    let server = Hostile::start(|n, i| {
        if n == 1 {
            return Some(http(
                "429 Too Many Requests",
                "Retry-After: 1\r\n",
                br#"{"error":"slow down"}"#,
            ));
        }
        Some(vectors(i, 8))
    });
    let output = run_with(&env, &server);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report = env.json(&["verify", "--json"]);
    assert_eq!(report["vectors"]["identical"], true, "{report}");
    assert_eq!(
        report["vectors"]["ledger_vectors"], report["ledger_chunks"],
        "every chunk has one vector: {report}"
    );
    assert!(server.requests.load(Ordering::SeqCst) >= 3);
}
