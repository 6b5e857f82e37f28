//! Embedding models: passages and queries to vectors, and the fingerprint that names a model.
//!
//! A model is either a local sentence-transformers folder run in process on the CPU
//! (`local`, candle + tokenizers) or an OpenAI-compatible `POST /v1/embeddings` server
//! (`remote`). Both give L2-normalised vectors, so cosine similarity is a dot product.
//!
//! The fingerprint is what vectors are keyed by in the ledger: for a local model, a hash of its
//! weights, tokenizer, pooling, normalisation, prefixes and maximum length; for a remote one, of
//! the model name, prefixes and maximum length and of what the server answers to a fixed probe
//! text, since a name alone does not say which weights answer (not the address: the same model
//! behind another server gives the same vectors). The probe's vector is compared by cosine with
//! the probes of the models a store recorded (`RecordedModel`, handed in by the caller), never
//! hashed as it is: a float that differs in its last digits from call to call must not make a
//! new model.
//! `stat_key` is a cheap summary of what a local fingerprint was computed from (file sizes and
//! times, settings), so a caller can cache the fingerprint and a no-op run never reads the
//! weights; a remote model has none, its fingerprint is the probe's answer. Hashing is done by
//! `ids::StreamHash` (the only blake3 user).
//!
//! Nothing here reads the ledger or the index; `store` and `ingest` decide what to embed.

pub mod bert;
pub mod folder;
mod kernels;
pub mod local;
pub mod remote;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Result;

/// What a user configured as the embedding model.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    Local(LocalConfig),
    Remote(RemoteConfig),
}

/// A sentence-transformers folder. Every `Option` left `None` is read from the folder
/// (`sentence_bert_config.json`, `1_Pooling/config.json`, `2_Normalize/`,
/// `config_sentence_transformers.json`'s prompts), or takes the model family's default.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct LocalConfig {
    pub dir: PathBuf,
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    pub max_tokens: Option<usize>,
    /// The number of threads the forward pass uses; `None` for every core.
    pub threads: Option<usize>,
    pub precision: Precision,
}

/// How a local model multiplies its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// bfloat16 on AMX tiles where the CPU has them (vectors within a cosine of 0.999 of
    /// float32's), else float32.
    #[default]
    Auto,
    /// float32 everywhere.
    Float32,
}

impl Precision {
    /// The name a flag and the configuration file take.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Float32 => "float32",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Precision, String> {
        match text {
            "auto" => Ok(Precision::Auto),
            "float32" | "f32" => Ok(Precision::Float32),
            other => Err(format!(
                "`{other}` is not a precision: `auto` (bfloat16 on AMX where the CPU has it) or `float32`"
            )),
        }
    }
}

/// An OpenAI-compatible embeddings endpoint.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RemoteConfig {
    /// The endpoint, e.g. `http://127.0.0.1:11434/v1/embeddings`.
    pub url: String,
    /// The `model` sent with every request.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    /// Characters a passage is cut to before it is sent, when set.
    pub max_chars: Option<usize>,
    /// Passages per request.
    pub batch_size: usize,
    /// How long one request may take.
    pub timeout: std::time::Duration,
}

/// The name of one model's vectors: 32 bytes, printed as hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..12])
    }
}

/// A model a store recorded: its fingerprint and what `Embedder::describe` said of it then (for
/// a remote model, its answer to the probe). A remote model's fingerprint is chosen among these.
#[derive(Clone, Debug)]
pub struct RecordedModel {
    pub fingerprint: Fingerprint,
    pub description: serde_json::Value,
}

/// A loaded model.
pub trait Embedder: Send + Sync {
    fn fingerprint(&self) -> Fingerprint;
    /// The length of every vector it returns.
    fn dims(&self) -> usize;
    /// What the model is, for `status` and the ledger: kind, path or address, name, dims,
    /// pooling, prefixes, maximum length.
    fn describe(&self) -> serde_json::Value;
    /// One L2-normalised vector per passage, in order (the passage prefix added).
    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
    /// The L2-normalised vector of a query (the query prefix added).
    fn embed_query(&self, text: &str) -> Result<Vec<f32>>;
}

/// The configuration that loads a model again from what `Embedder::describe` said of it
/// (`kind` `local` with `path`, or `remote` with `url` and `name`; prefixes and maximum length
/// when set), for a reader that must embed queries with the model a store's vectors came from.
/// The caller checks the fingerprint: the folder may have changed since.
pub(crate) fn config_from_description(description: &serde_json::Value) -> Option<ModelConfig> {
    let text = |key: &str| {
        description
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    match description.get("kind")?.as_str()? {
        "local" => Some(ModelConfig::Local(LocalConfig {
            dir: PathBuf::from(text("path").or_else(|| text("dir"))?),
            query_prefix: text("query_prefix"),
            passage_prefix: text("passage_prefix"),
            max_tokens: description
                .get("max_tokens")
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize),
            threads: None,
            precision: Precision::Auto,
        })),
        "remote" => Some(ModelConfig::Remote(RemoteConfig {
            url: text("url")?,
            model: text("name")?,
            api_key: None,
            query_prefix: text("query_prefix"),
            passage_prefix: text("passage_prefix"),
            max_chars: description
                .get("max_chars")
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize),
            batch_size: 64,
            timeout: std::time::Duration::from_secs(60),
        })),
        _ => None,
    }
}

/// A cheap summary of everything the fingerprint depends on (no file contents read), under
/// which a caller may cache the fingerprint; `None` for a remote model, whose fingerprint only
/// its server's answer to the probe can tell (nothing local changes when the server's model
/// does).
pub fn stat_key(config: &ModelConfig) -> Result<Option<String>> {
    match config {
        ModelConfig::Local(local) => local::stat_key(local).map(Some),
        ModelConfig::Remote(_) => Ok(None),
    }
}

/// The fingerprint, computed from the files (local; loads nothing) or from the server's answer
/// to the probe (remote; one request per process and endpoint, see `remote::PROBE_FRESH_FOR`),
/// which names the recorded model that answered the same probe, if one did (see
/// `remote::SAME_MODEL_COSINE`). A local model ignores `recorded`.
pub fn fingerprint(config: &ModelConfig, recorded: &[RecordedModel]) -> Result<Fingerprint> {
    match config {
        ModelConfig::Local(local) => local::fingerprint(local),
        ModelConfig::Remote(remote) => remote::fingerprint(remote, recorded),
    }
}

/// Loads the model (a local one into memory; a remote one is probed, see `fingerprint`).
pub fn load(config: &ModelConfig, recorded: &[RecordedModel]) -> Result<Arc<dyn Embedder>> {
    match config {
        ModelConfig::Local(local) => Ok(Arc::new(local::LocalModel::load(local)?)),
        ModelConfig::Remote(remote) => Ok(Arc::new(remote::RemoteModel::new(remote, recorded)?)),
    }
}
