//! A small real HTTP server speaking the OpenAI embeddings protocol (`POST /v1/embeddings`),
//! started by a test on a loopback port: it counts every passage it is given, so a test counts
//! exactly what the model embedded, and it serves vectors either from the local model
//! (`../shared/models/all-MiniLM-L6-v2`, through the library) or from a deterministic hash of
//! the words (for the tests of what is embedded when, where the vectors' meaning is beside the
//! point). A test can switch the model it serves while it runs (`switch`), as a server-side
//! model update under the same name does.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use groundidx::embed::{self, Embedder, LocalConfig, ModelConfig};

/// How the server makes a vector.
#[derive(Clone)]
pub enum Vectors {
    /// 64 dimensions, one per hash bucket of the lower-cased words.
    Words,
    /// Another model under the same name: 64 dimensions hashed with another seed.
    WordsUpdated,
    /// The word vectors cut to their first 48 dimensions (a model of another size).
    Shorter,
    /// The word vectors with float noise, as a GPU server in fp16 answers: every number sits
    /// on the edge of a one-decimal rounding and moves by 1e-3 either way, anew each request.
    Noisy,
    /// The local model.
    Model(Arc<dyn Embedder>),
    /// Word vectors for a first request (the probe), then a broken answer of this kind:
    /// `fewer` (one vector short), `ragged` (vectors of two lengths), `garbage` (not JSON),
    /// `longer-later` (65 dimensions); or `longer`: 65 dimensions from the probe on.
    Broken(&'static str),
}

/// A running server; it stops when dropped.
pub struct EmbedServer {
    pub port: u16,
    /// Passages embedded so far (the probe a client sends on loading included).
    inputs: Arc<AtomicU64>,
    /// Every input text, in arrival order.
    pub texts: Arc<Mutex<Vec<String>>>,
    /// While set, every request is answered 503.
    pub failing: Arc<AtomicBool>,
    /// How vectors are made now.
    vectors: Arc<Mutex<Vectors>>,
    stop: Arc<AtomicBool>,
}

/// The local model folder, if it is there (else `prerequisite_missing`, a failure under CI).
pub fn model_dir() -> Option<PathBuf> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/models/all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        crate::support::prerequisite_missing(&format!(
            "the embedding model {} is missing",
            dir.display()
        ));
        None
    }
}

/// The local model, loaded through the library.
pub fn local_model() -> Option<Arc<dyn Embedder>> {
    let dir = model_dir()?;
    Some(
        embed::load(
            &ModelConfig::Local(LocalConfig {
                dir,
                ..LocalConfig::default()
            }),
            &[],
        )
        .expect("load the local model"),
    )
}

fn word_vector(text: &str) -> Vec<f32> {
    seeded_word_vector(text, 0xcbf2_9ce4_8422_2325)
}

fn seeded_word_vector(text: &str, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; 64];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let bucket = word.to_lowercase().bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        v[(bucket % 64) as usize] += 1.0;
    }
    if v.iter().all(|x| *x == 0.0) {
        v[0] = 1.0;
    }
    v
}

/// A unit word vector whose empty buckets hold 0.05 each (the words share the rest), with
/// 1e-3 added to or taken from every number by signs drawn from `seed`.
fn noisy_word_vector(text: &str, seed: u64) -> Vec<f32> {
    let words = word_vector(text);
    let norm = words.iter().map(|x| x * x).sum::<f32>().sqrt();
    let empty = words.iter().filter(|x| **x == 0.0).count() as f32;
    let left = (1.0 - empty * 0.05 * 0.05).sqrt();
    words
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let base = if *x == 0.0 { 0.05 } else { x / norm * left };
            let sign = ((i as u64) ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63;
            base + if sign == 1 { 1e-3 } else { -1e-3 }
        })
        .collect()
}

/// A word vector with one more dimension.
fn longer_vector(text: &str) -> Vec<f32> {
    let mut v = word_vector(text);
    v.push(1.0);
    v
}

impl EmbedServer {
    pub fn start(vectors: Vectors) -> EmbedServer {
        let inputs = Arc::new(AtomicU64::new(0));
        let texts = Arc::new(Mutex::new(Vec::new()));
        let failing = Arc::new(AtomicBool::new(false));
        let vectors = Arc::new(Mutex::new(vectors));
        let stop = Arc::new(AtomicBool::new(false));
        let port = {
            let (vectors, inputs, texts, failing) = (
                Arc::clone(&vectors),
                Arc::clone(&inputs),
                Arc::clone(&texts),
                Arc::clone(&failing),
            );
            listen(&stop, move |stream| {
                let _ = serve(stream, &vectors, &inputs, &texts, &failing);
            })
        };
        EmbedServer {
            port,
            inputs,
            texts,
            failing,
            vectors,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/embeddings", self.port)
    }

    /// Serves `vectors` from the next request on, under the same model name.
    pub fn switch(&self, vectors: Vectors) {
        *self
            .vectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = vectors;
    }

    /// Passages given to the model so far.
    pub fn inputs(&self) -> u64 {
        self.inputs.load(Ordering::SeqCst)
    }

    /// The flags that make a command use this server under the model name `name`.
    pub fn flags(&self, name: &str) -> Vec<String> {
        vec![
            "--embed-url".into(),
            self.url(),
            "--embed-remote-model".into(),
            name.into(),
        ]
    }
}

impl Drop for EmbedServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Listens on a free loopback port until `stop` is set, and hands each connection to `handle`
/// on a thread of its own; returns the port. The fake servers of `hostile_servers` listen so
/// too.
pub fn listen(stop: &Arc<AtomicBool>, handle: impl Fn(TcpStream) + Clone + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let stop = Arc::clone(stop);
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let handle = handle.clone();
                    std::thread::spawn(move || handle(stream));
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(_) => break,
            }
        }
    });
    port
}

/// Answers the requests of one connection (the client may keep it alive).
fn serve(
    stream: TcpStream,
    vectors: &Mutex<Vectors>,
    inputs: &AtomicU64,
    texts: &Mutex<Vec<String>>,
    failing: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(body) = read_request(&mut reader)? else {
            return Ok(());
        };
        let (status, answer) = if failing.load(Ordering::SeqCst) {
            (
                "503 Service Unavailable",
                r#"{"error":"warming up"}"#.to_string(),
            )
        } else {
            let request: serde_json::Value =
                serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            let batch: Vec<String> = request["input"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| t.as_str().unwrap_or_default().to_string())
                        .collect()
                })
                .unwrap_or_default();
            inputs.fetch_add(batch.len() as u64, Ordering::SeqCst);
            texts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(batch.iter().cloned());
            let first = inputs.load(Ordering::SeqCst) == batch.len() as u64;
            let vectors = vectors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let made: Vec<Vec<f32>> = match &vectors {
                Vectors::Words => batch.iter().map(|t| word_vector(t)).collect(),
                Vectors::WordsUpdated => batch
                    .iter()
                    .map(|t| seeded_word_vector(t, 0x9e37_79b9_7f4a_7c15))
                    .collect(),
                Vectors::Noisy => {
                    // The passages counted so far differ from request to request.
                    let seed = inputs.load(Ordering::SeqCst);
                    batch.iter().map(|t| noisy_word_vector(t, seed)).collect()
                }
                Vectors::Shorter => batch
                    .iter()
                    .map(|t| {
                        let mut v = word_vector(t);
                        v.truncate(48);
                        if v.iter().all(|x| *x == 0.0) {
                            v[0] = 1.0;
                        }
                        v
                    })
                    .collect(),
                Vectors::Broken("longer") => batch.iter().map(|t| longer_vector(t)).collect(),
                Vectors::Broken(_) if first => batch.iter().map(|t| word_vector(t)).collect(),
                Vectors::Broken("fewer") => batch.iter().skip(1).map(|t| word_vector(t)).collect(),
                Vectors::Broken("longer-later") => batch.iter().map(|t| longer_vector(t)).collect(),
                Vectors::Broken("ragged") => batch
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let mut v = word_vector(t);
                        if i % 2 == 1 {
                            v.push(1.0);
                        }
                        v
                    })
                    .collect(),
                Vectors::Broken(_) => {
                    let garbage = "<html>502 Bad Gateway</html>";
                    write!(
                        writer,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{garbage}",
                        garbage.len()
                    )?;
                    writer.flush()?;
                    continue;
                }
                Vectors::Model(model) => {
                    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                    // The client adds the prefixes; the model here adds none of its own.
                    model.embed_passages(&refs).expect("the local model embeds")
                }
            };
            let data: Vec<serde_json::Value> = made
                .into_iter()
                .enumerate()
                .map(
                    |(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}),
                )
                .collect();
            (
                "200 OK",
                serde_json::json!({"object": "list", "data": data, "model": request["model"]})
                    .to_string(),
            )
        };
        write!(
            writer,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        )?;
        writer.flush()?;
    }
}

/// Reads one HTTP/1.1 request from a connection and returns its body; `None` when the client
/// closed it. Shared with the hostile servers of `hostile_servers`.
pub fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        return Ok(None);
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(Some(body))
}
