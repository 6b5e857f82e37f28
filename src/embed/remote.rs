//! An OpenAI-compatible embeddings server (`POST /v1/embeddings`: Ollama, llama.cpp server,
//! vLLM, OpenAI) as a model: passages go in batches, vectors come back L2-normalised.
//!
//! Retries are owned here and only here (ureq does not retry): a connection failure, a timeout,
//! 429 and 5xx are tried again up to `ATTEMPTS` times with a growing pause (or the server's
//! `Retry-After`, capped); any other answer fails at once with what the server said.
//!
//! A name says nothing about the weights behind it: a server may update the model it serves
//! under the same name, or serve it in other dimensions. So loading sends one fixed text, the
//! probe, and the fingerprint is made of what came back (its dimensions and its vector, rounded
//! to one decimal) with the name, prefixes and cut: a model that changed behind its name is a new
//! model whose vectors are a new set, and the same model behind another address is the same.
//! The probe is sent once per endpoint and model name per process (again after
//! `PROBE_FRESH_FOR`, for a server that runs for days), not once per batch. A server that
//! cannot be reached fails before any work, with the address in the error.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Embedder, Fingerprint, RemoteConfig};
use crate::error::{Error, Result};
use crate::ids::{self, StreamHash};

/// Tries per request, the first included.
const ATTEMPTS: u32 = 4;
/// The pause before the second try; doubled for each one after.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest vector accepted.
const MAX_DIMS: usize = 65_536;
/// The longest pause a `Retry-After` may ask for.
const MAX_PAUSE: Duration = Duration::from_secs(10);
/// The text whose vector names the model (sent without the prefixes).
const PROBE_TEXT: &str = "dimension probe";
/// How long a probe's answer stands for the model behind an endpoint in this process.
pub const PROBE_FRESH_FOR: Duration = Duration::from_secs(60);
/// The rounding step of the probe's vector in the fingerprint: coarse, so that the last bits
/// of a float (a GPU server may vary there from call to call) do not make a new model, while any
/// real change of the weights moves some of the probe's hundreds of numbers across a step.
const PROBE_STEPS_PER_UNIT: f32 = 10.0;

/// The probe's answers, by endpoint and model name, with when each came.
type Probes = HashMap<(String, String), (Instant, Vec<f32>)>;
static PROBES: LazyLock<Mutex<Probes>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The fingerprint of a remote model: its name, prefixes and cut, and what it answered to the
/// probe (its dimensions and its vector, rounded). Sends the probe unless this process sent it
/// to this endpoint less than `PROBE_FRESH_FOR` ago.
pub fn fingerprint(config: &RemoteConfig) -> Result<Fingerprint> {
    Ok(RemoteModel::new(config)?.fingerprint)
}

fn fingerprint_of(config: &RemoteConfig, probe: &[f32]) -> Fingerprint {
    let mut hash = StreamHash::new(ids::MODEL_VERSION);
    // A tag of its own: a fingerprint made from the settings alone never equals this one.
    hash.part(b"remote-probed")
        .part(config.model.as_bytes())
        .part(
            config
                .query_prefix
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
        )
        .part(
            config
                .passage_prefix
                .as_deref()
                .unwrap_or_default()
                .as_bytes(),
        )
        .part(&(config.max_chars.unwrap_or(0) as u64).to_le_bytes())
        .part(&(probe.len() as u64).to_le_bytes());
    let rounded: Vec<u8> = probe
        .iter()
        .map(|x| (x * PROBE_STEPS_PER_UNIT).round() as i8 as u8)
        .collect();
    hash.part(&rounded);
    Fingerprint(hash.finish())
}

/// A remote model, named by its answer to the probe.
pub struct RemoteModel {
    config: RemoteConfig,
    agent: ureq::Agent,
    fingerprint: Fingerprint,
    dims: usize,
}

#[derive(Deserialize)]
struct EmbeddingsAnswer {
    data: Vec<EmbeddingRow>,
}

#[derive(Deserialize)]
struct EmbeddingRow {
    embedding: Vec<f32>,
    index: Option<usize>,
}

/// Why one try failed, and whether another may succeed.
enum Failure {
    Retry(String, Option<Duration>),
    Fatal(String),
}

impl RemoteModel {
    pub fn new(config: &RemoteConfig) -> Result<RemoteModel> {
        if !(config.url.starts_with("http://") || config.url.starts_with("https://")) {
            return Err(Error::Model {
                model: config.url.clone(),
                message: "the address must start with http:// or https://\nhint: pass the full endpoint, e.g. http://127.0.0.1:11434/v1/embeddings".into(),
            });
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let mut model = RemoteModel {
            config: config.clone(),
            agent,
            fingerprint: Fingerprint([0; 32]),
            dims: 0,
        };
        let probe = model.probe()?;
        model.dims = probe.len();
        if model.dims == 0 || model.dims > MAX_DIMS {
            return Err(model.error(format!(
                "it answered a vector of {} dimensions (1 to {MAX_DIMS} are accepted)",
                model.dims
            )));
        }
        model.fingerprint = fingerprint_of(config, &probe);
        Ok(model)
    }

    /// The probe's vector: this process's last answer from this endpoint, while fresh, else a
    /// new request.
    fn probe(&self) -> Result<Vec<f32>> {
        let key = (self.config.url.clone(), self.config.model.clone());
        let fresh = PROBES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .filter(|(when, _)| when.elapsed() < PROBE_FRESH_FOR)
            .map(|(_, vector)| vector.clone());
        if let Some(vector) = fresh {
            return Ok(vector);
        }
        // Not held across the request: another thread may probe at the same time, and both
        // answers name the same model.
        let vector = self.request(&[PROBE_TEXT.to_string()])?.remove(0);
        PROBES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (Instant::now(), vector.clone()));
        Ok(vector)
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::Model {
            model: format!("{} at {}", self.config.model, self.config.url),
            message: message.into(),
        }
    }

    fn prepare(&self, prefix: Option<&str>, text: &str) -> String {
        let mut text = format!("{}{text}", prefix.unwrap_or_default());
        if let Some(max) = self.config.max_chars
            && let Some((cut, _)) = text.char_indices().nth(max)
        {
            text.truncate(cut);
        }
        text
    }

    /// One batch, with the retries; vectors in input order, normalised.
    fn request(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut pause = FIRST_PAUSE;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            match self.try_once(inputs) {
                Ok(vectors) => return Ok(vectors),
                Err(Failure::Fatal(message)) => return Err(self.error(message)),
                Err(Failure::Retry(message, asked)) => {
                    tracing::warn!(attempt, error = %message, "embedding request failed; retrying");
                    last = message;
                    if attempt < ATTEMPTS {
                        std::thread::sleep(asked.map_or(pause, |a| a.min(MAX_PAUSE)));
                        pause *= 2;
                    }
                }
            }
        }
        Err(self.error(format!(
            "{last} (after {ATTEMPTS} tries)\nhint: check that the server is running and serves this model; lexical search works without it"
        )))
    }

    fn try_once(&self, inputs: &[String]) -> std::result::Result<Vec<Vec<f32>>, Failure> {
        let body = serde_json::json!({ "model": self.config.model, "input": inputs });
        let mut request = self
            .agent
            .post(&self.config.url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = request
            .send(body.to_string().as_bytes())
            .map_err(|err| match err {
                // A redirect of the request is refused or loops: trying again changes nothing.
                ureq::Error::RedirectFailed | ureq::Error::TooManyRedirects => Failure::Fatal(format!(
                    "it redirects the request ({err})\nhint: pass the address it redirects to as --embed-url"
                )),
                err => Failure::Retry(format!("cannot reach it: {err}"), None),
            })?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|err| Failure::Retry(format!("reading its answer failed: {err}"), None))?;
        if status == 429 || status >= 500 {
            return Err(Failure::Retry(
                format!("it answered HTTP {status}: {}", excerpt(&text)),
                retry_after,
            ));
        }
        if status != 200 {
            return Err(Failure::Fatal(format!(
                "it answered HTTP {status}: {}",
                excerpt(&text)
            )));
        }
        let answer: EmbeddingsAnswer = serde_json::from_str(&text).map_err(|err| {
            Failure::Fatal(format!(
                "its answer is not an embeddings list ({err}): {}",
                excerpt(&text)
            ))
        })?;
        if answer.data.len() != inputs.len() {
            return Err(Failure::Fatal(format!(
                "it answered {} vectors for {} inputs",
                answer.data.len(),
                inputs.len()
            )));
        }
        let mut rows: Vec<(usize, Vec<f32>)> = answer
            .data
            .into_iter()
            .enumerate()
            .map(|(i, row)| (row.index.unwrap_or(i), row.embedding))
            .collect();
        rows.sort_by_key(|(i, _)| *i);
        if rows.iter().enumerate().any(|(i, (at, _))| i != *at) {
            return Err(Failure::Fatal(
                "its answer's indexes are not 0..n, each once".into(),
            ));
        }
        let dims = rows[0].1.len();
        if rows.iter().any(|(_, v)| v.iter().any(|x| !x.is_finite())) {
            return Err(Failure::Fatal(
                "it answered a vector with a value that is not a finite number".into(),
            ));
        }
        if rows.iter().any(|(_, v)| v.len() != dims) {
            return Err(Failure::Fatal(
                "it answered vectors of different lengths".into(),
            ));
        }
        Ok(rows
            .into_iter()
            .map(|(_, mut v)| {
                normalise(&mut v);
                v
            })
            .collect())
    }
}

fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

/// Scales `vector` to length 1; the length is summed in f64, so large or tiny (finite) values
/// neither overflow to a zero vector nor vanish.
fn normalise(vector: &mut [f32]) {
    let norm = vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        vector
            .iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}

impl Embedder for RemoteModel {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "remote",
            "url": self.config.url,
            "name": self.config.model,
            "dims": self.dims,
            "query_prefix": self.config.query_prefix,
            "passage_prefix": self.config.passage_prefix,
            "max_chars": self.config.max_chars,
        })
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.batch_size.max(1)) {
            let inputs: Vec<String> = batch
                .iter()
                .map(|t| self.prepare(self.config.passage_prefix.as_deref(), t))
                .collect();
            let vectors = self.request(&inputs)?;
            if vectors.iter().any(|v| v.len() != self.dims) {
                return Err(self.error(format!(
                    "it answered vectors of another length than its first ({})",
                    self.dims
                )));
            }
            out.extend(vectors);
        }
        Ok(out)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let input = self.prepare(self.config.query_prefix.as_deref(), text);
        let vector = self.request(&[input])?.remove(0);
        if vector.len() != self.dims {
            return Err(self.error(format!(
                "it embedded the query in {} dimensions, its first answer had {}",
                vector.len(),
                self.dims
            )));
        }
        Ok(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::{fingerprint_of, normalise};
    use crate::embed::RemoteConfig;

    #[test]
    fn the_fingerprint_follows_the_probes_answer_but_not_its_last_bits() {
        let config = RemoteConfig {
            model: "words".into(),
            ..RemoteConfig::default()
        };
        let probe = [0.62f32, -0.31, 0.12, 0.71];
        let noisy: Vec<f32> = probe.iter().map(|x| x + 1e-6).collect();
        let updated = [0.58f32, -0.36, 0.12, 0.71];
        let of = |vector: &[f32]| fingerprint_of(&config, vector);
        assert_eq!(of(&probe), of(&noisy), "float noise is not a new model");
        assert_ne!(of(&probe), of(&updated), "other weights are");
        assert_ne!(of(&probe), of(&probe[..3]), "and so are other dimensions");
        let renamed = RemoteConfig {
            model: "words-v2".into(),
            ..config.clone()
        };
        assert_ne!(of(&probe), fingerprint_of(&renamed, &probe));
    }

    #[test]
    fn large_and_tiny_finite_values_normalise_to_length_one() {
        for value in [1e30f32, 1e-30, f32::MAX, f32::MIN_POSITIVE] {
            let mut vector = vec![value, value, 0.0, -value];
            normalise(&mut vector);
            let length: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((length - 1.0).abs() < 1e-5, "{value}: {vector:?}");
        }
    }
}
