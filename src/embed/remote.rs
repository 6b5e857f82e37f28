//! An OpenAI-compatible embeddings server (`POST /v1/embeddings`: Ollama, llama.cpp server,
//! vLLM, OpenAI) as a model: passages go in batches, vectors come back L2-normalised.
//!
//! Retries are owned here and only here (ureq does not retry): a connection failure, a timeout,
//! 429 and 5xx are tried again up to `ATTEMPTS` times with a growing pause (or the server's
//! `Retry-After`, capped); any other answer fails at once with what the server said.
//!
//! A name says nothing about the weights behind it: a server may update the model it serves
//! under the same name, or serve it in other dimensions. So loading sends one fixed text, the
//! probe, and the model is named by its name, prefixes, cut and the probe's dimensions (exactly)
//! and by the probe's vector, compared by cosine with the probe each recorded model of the same
//! name, prefixes, cut and dimensions answered (kept in its description): a close enough answer
//! is that model, whatever its last digits (a GPU server in fp16 varies there from call to call);
//! no close answer is a new model, whose vectors are a new set. The same model behind another
//! address is the same.
//! The probe is sent once per endpoint and model name per process (again after
//! `PROBE_FRESH_FOR`, for a server that runs for days), not once per batch. A server that
//! cannot be reached fails before any work, with the address in the error.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Embedder, Fingerprint, RecordedModel, RemoteConfig};
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
pub(crate) const PROBE_FRESH_FOR: Duration = Duration::from_secs(60);
/// The least cosine between the probe's answer now and a recorded model's for the two to be one
/// model. Float noise is far above it: a server in fp16 or bf16, or one that batches requests
/// differently, moves each number of a unit vector by about 1e-3, which in 384 to 4096
/// dimensions is a distance of 0.02 to 0.06 and a cosine of 0.9998 to 0.998 at worst (the
/// distance squared over two: 0.0002 to 0.0018, so 0.999 holds up to about 1e-3 per number in
/// 1000 dimensions and a bit less beyond). Another model is far below it: a retrained or
/// fine-tuned model answers the same text at a cosine well under 0.99, and a model of another
/// size is never compared (its dimensions differ). The same weights served at another precision
/// may stay above it, and are then the same model: their vectors are that close to the old.
pub(crate) const SAME_MODEL_COSINE: f64 = 0.999;
/// The rounding step of the probe's vector in a new model's fingerprint. The fingerprint only
/// needs to be a name nobody else has: whether two answers are one model is the cosine's to
/// say, never the rounding's.
const PROBE_STEPS_PER_UNIT: f32 = 10.0;

/// The probe's answers, by endpoint and model name, with when each came.
type Probes = HashMap<(String, String), (Instant, Vec<f32>)>;
static PROBES: LazyLock<Mutex<Probes>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The fingerprint of a remote model: the recorded model with the same name, prefixes, cut and
/// dimensions whose probe is closest to the one answered now, at a cosine of at least
/// `SAME_MODEL_COSINE`; else a new one. Sends the probe unless this process sent it to this
/// endpoint less than `PROBE_FRESH_FOR` ago.
pub fn fingerprint(config: &RemoteConfig, recorded: &[RecordedModel]) -> Result<Fingerprint> {
    Ok(RemoteModel::new(config, recorded)?.fingerprint)
}

/// Names the model that answered `probe`: a recorded one of the same settings and dimensions
/// whose recorded probe is close enough (the closest, if several are), else a new fingerprint.
fn identify(config: &RemoteConfig, probe: &[f32], recorded: &[RecordedModel]) -> Fingerprint {
    let mut closest: Option<(f64, Fingerprint)> = None;
    let mut taken = Vec::new();
    for model in recorded {
        let Some(recorded_probe) = recorded_probe(config, probe.len(), &model.description) else {
            continue;
        };
        let similarity = cosine(probe, &recorded_probe);
        if similarity >= SAME_MODEL_COSINE {
            if closest.is_none_or(|(best, _)| similarity > best) {
                closest = Some((similarity, model.fingerprint));
            }
        } else {
            taken.push(model.fingerprint);
        }
    }
    if let Some((_, fingerprint)) = closest {
        return fingerprint;
    }
    let new = fingerprint_of(config, probe, Salt::Rounded);
    if taken.contains(&new) {
        // Another model's probe rounds like this one but is not close to it: the exact numbers
        // name this one, so the two are never one set of vectors.
        return fingerprint_of(config, probe, Salt::Exact);
    }
    new
}

/// The probe a recorded model answered, when that model has the same name, prefixes, cut and
/// `dims` as `config`'s; `None` for any other model (a local one, another name, another size,
/// or one recorded before probes were kept).
fn recorded_probe(
    config: &RemoteConfig,
    dims: usize,
    description: &serde_json::Value,
) -> Option<Vec<f32>> {
    let text = |key: &str| description.get(key).and_then(|v| v.as_str());
    let same = text("kind") == Some("remote")
        && text("name") == Some(config.model.as_str())
        && text("query_prefix") == config.query_prefix.as_deref()
        && text("passage_prefix") == config.passage_prefix.as_deref()
        && description
            .get("max_chars")
            .and_then(serde_json::Value::as_u64)
            == config.max_chars.map(|n| n as u64)
        && description.get("dims").and_then(serde_json::Value::as_u64) == Some(dims as u64);
    if !same {
        return None;
    }
    let numbers = description.get("probe")?.as_array()?;
    let probe: Vec<f32> = numbers
        .iter()
        .map(|x| x.as_f64().map(|x| x as f32))
        .collect::<Option<_>>()?;
    (probe.len() == dims).then_some(probe)
}

/// The cosine of two vectors of one length, summed in f64; 0 when either is zero.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    let norms = (dot(a, a) * dot(b, b)).sqrt();
    if norms > 0.0 { dot(a, b) / norms } else { 0.0 }
}

/// What makes a new model's fingerprint unique beside its settings.
#[derive(Clone, Copy)]
enum Salt {
    /// The probe rounded to `PROBE_STEPS_PER_UNIT`: the same as before probes were recorded, so
    /// a store's earlier remote models keep their names when their server has not changed.
    Rounded,
    /// The probe's exact numbers, when the rounded one is another model's.
    Exact,
}

fn fingerprint_of(config: &RemoteConfig, probe: &[f32], salt: Salt) -> Fingerprint {
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
    if let Salt::Exact = salt {
        let exact: Vec<u8> = probe.iter().flat_map(|x| x.to_le_bytes()).collect();
        hash.part(b"exact").part(&exact);
    }
    Fingerprint(hash.finish())
}

/// A remote model, named by its answer to the probe.
pub(crate) struct RemoteModel {
    config: RemoteConfig,
    agent: ureq::Agent,
    fingerprint: Fingerprint,
    dims: usize,
    /// The probe's answer this model was named by, recorded with the model by `describe`.
    probe: Vec<f32>,
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
    pub fn new(config: &RemoteConfig, recorded: &[RecordedModel]) -> Result<RemoteModel> {
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
            probe: Vec::new(),
        };
        let probe = model.probe()?;
        model.dims = probe.len();
        if model.dims == 0 || model.dims > MAX_DIMS {
            return Err(model.error(format!(
                "it answered a vector of {} dimensions (1 to {MAX_DIMS} are accepted)",
                model.dims
            )));
        }
        model.fingerprint = identify(config, &probe, recorded);
        model.probe = probe;
        Ok(model)
    }

    /// The probe's vector: this process's last answer from this endpoint, while fresh, else a
    /// new request.
    fn probe(&self) -> Result<Vec<f32>> {
        let key = (self.config.url.clone(), self.config.model.clone());
        let fresh = PROBES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            "probe": self.probe,
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
    use super::{SAME_MODEL_COSINE, cosine, identify, normalise};
    use crate::embed::{Fingerprint, RecordedModel, RemoteConfig};

    fn words() -> RemoteConfig {
        RemoteConfig {
            model: "words".into(),
            ..RemoteConfig::default()
        }
    }

    /// What `describe` records of a model named `fingerprint` that answered `probe`.
    fn recorded(config: &RemoteConfig, fingerprint: Fingerprint, probe: &[f32]) -> RecordedModel {
        RecordedModel {
            fingerprint,
            description: serde_json::json!({
                "kind": "remote",
                "url": "http://127.0.0.1:1/v1/embeddings",
                "name": config.model,
                "dims": probe.len(),
                "query_prefix": config.query_prefix,
                "passage_prefix": config.passage_prefix,
                "max_chars": config.max_chars,
                "probe": probe,
            }),
        }
    }

    /// A probe of 384 numbers, about unit length like a real one, each half a rounding step
    /// (0.05 at one decimal) from a whole step, where the least noise rounds either way.
    fn probe_on_the_rounding_edges() -> Vec<f32> {
        (0..384)
            .map(|i| {
                let sign = if i % 3 == 0 { -1.0 } else { 1.0 };
                let steps = if i % 16 == 0 { 1.0 } else { 0.0 };
                sign * (steps + 0.5) / 10.0
            })
            .collect()
    }

    /// The probe with `size` added to or taken from each number, by a fixed pseudo-random sign.
    fn with_noise(probe: &[f32], size: f32, seed: u64) -> Vec<f32> {
        probe
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let bits = (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63;
                x + if bits == 1 { size } else { -size }
            })
            .collect()
    }

    #[test]
    fn float_noise_on_the_probe_keeps_the_recorded_model() {
        let config = words();
        let probe = probe_on_the_rounding_edges();
        let first = identify(&config, &probe, &[]);
        let store = [recorded(&config, first, &probe)];
        for (size, seed) in [(1e-6, 1), (1e-6, 2), (1e-3, 3), (1e-3, 4), (1e-3, 5)] {
            let noisy = with_noise(&probe, size, seed);
            assert_eq!(
                identify(&config, &noisy, &store),
                first,
                "noise of {size} made a new model"
            );
        }
    }

    #[test]
    fn another_answer_other_dimensions_or_another_name_is_a_new_model() {
        let config = words();
        let probe = probe_on_the_rounding_edges();
        let first = identify(&config, &probe, &[]);
        let store = [recorded(&config, first, &probe)];
        // Other weights: a quarter of the numbers change sign.
        let updated: Vec<f32> = probe
            .iter()
            .enumerate()
            .map(|(i, x)| if i % 4 == 0 { -x } else { *x })
            .collect();
        let new = identify(&config, &updated, &store);
        assert_ne!(new, first, "other weights are another model");
        assert_ne!(
            identify(&config, &probe[..383], &store),
            first,
            "so is another size"
        );
        let renamed = RemoteConfig {
            model: "words-v2".into(),
            ..config.clone()
        };
        assert_ne!(
            identify(&renamed, &probe, &store),
            first,
            "and another name"
        );
        // Both recorded: each answer names its own.
        let both = [store[0].clone(), recorded(&config, new, &updated)];
        assert_eq!(
            identify(&config, &with_noise(&probe, 1e-3, 9), &both),
            first
        );
        assert_eq!(
            identify(&config, &with_noise(&updated, 1e-3, 9), &both),
            new
        );
    }

    #[test]
    fn a_new_answer_that_rounds_like_a_recorded_one_is_still_a_new_model() {
        let config = words();
        // Far from the rounding edges, so that a change the cosine sees does not show there.
        let probe: Vec<f32> = (0..384)
            .map(|i| if i % 2 == 0 { 0.02 } else { -0.03 })
            .collect();
        let first = identify(&config, &probe, &[]);
        let store = [recorded(&config, first, &probe)];
        // Moved across the probe (a cosine of about 0.988), every number still rounding to 0.
        let moved: Vec<f32> = probe
            .iter()
            .enumerate()
            .map(|(i, x)| if i % 4 < 2 { x + 0.004 } else { x - 0.004 })
            .collect();
        assert!(cosine(&probe, &moved) < SAME_MODEL_COSINE);
        assert_ne!(identify(&config, &moved, &store), first);
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
