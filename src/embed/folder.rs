//! Reading a sentence-transformers folder: which files it has and what they say, resolved
//! with the user's `LocalConfig` into the settings a model runs with.
//!
//! It reads only the small JSON files (never the weights), so `fingerprint` and `stat_key` can
//! use it without loading anything. Precedence for each setting: `LocalConfig`, then the folder
//! (`sentence_bert_config.json`, `1_Pooling/config.json`, `2_Normalize/`,
//! `config_sentence_transformers.json`'s `prompts`), then the model family's default (known by
//! the folder's name: bge and e5 models publish their prefixes in their model cards, not in
//! their folders).

use std::path::{Path, PathBuf};

use candle_transformers::models::bert;
use serde_json::Value;

use super::LocalConfig;
use crate::error::{Error, Result};

pub(crate) const CONFIG: &str = "config.json";
pub(crate) const WEIGHTS: &str = "model.safetensors";
pub(crate) const TOKENIZER: &str = "tokenizer.json";
pub(crate) const POOLING: &str = "1_Pooling/config.json";
pub(crate) const NORMALIZE: &str = "2_Normalize";
pub(crate) const SENTENCE_BERT: &str = "sentence_bert_config.json";
pub(crate) const SENTENCE_TRANSFORMERS: &str = "config_sentence_transformers.json";

/// The largest settings file read (`config.json` and the sentence-transformers JSON files): a
/// real one is a few hundred bytes, a classifier's `config.json` with its labels some hundred
/// KiB. A larger file is refused before it is read, so a hostile folder costs no more.
pub(crate) const MAX_SETTINGS_BYTES: u64 = 1 << 20;
/// The largest `tokenizer.json` read: a BERT tokenizer's is under 1 MiB, a multilingual
/// vocabulary's some 10 MiB.
pub(crate) const MAX_TOKENIZER_BYTES: u64 = 32 << 20;
/// The longest query or passage prefix, in bytes. Published prompts are a sentence at most;
/// every text is embedded with its prefix, so a long one costs its tokenization on every
/// passage (a 4 MB prompt took 16 s and 1.5 GB), and one longer than the model's maximum
/// length would leave no room for the text at all.
pub(crate) const MAX_PREFIX_BYTES: usize = 4096;

/// The largest `model.safetensors` read, whatever `config.json` says: BERT-large in f32 is
/// 1.3 GB. Below it the bound is `ModelFolder::max_weights_bytes`.
pub(crate) const MAX_WEIGHTS_BYTES: u64 = 4 << 30;

/// Every path the settings or the vectors depend on, in a fixed order (for `stat_key`).
pub(crate) const FILES: [&str; 7] = [
    CONFIG,
    WEIGHTS,
    TOKENIZER,
    POOLING,
    NORMALIZE,
    SENTENCE_BERT,
    SENTENCE_TRANSFORMERS,
];

/// How token vectors become one vector per text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of the vectors of real (unpadded) tokens.
    Mean,
    /// The vector of the first token (`[CLS]`).
    Cls,
    /// The element-wise maximum over real tokens.
    Max,
}

impl Pooling {
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
        }
    }
}

/// What a model runs with, resolved from the config, the folder and the family defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub pooling: Pooling,
    /// Whether the folder asks for normalisation (`2_Normalize/`). Vectors are L2-normalised
    /// either way (cosine similarity is then a dot product, and a direction is all a cosine
    /// sees); the flag is reported and fingerprinted as the folder states it.
    pub normalize: bool,
    pub query_prefix: String,
    pub passage_prefix: String,
    /// Tokens per text, `[CLS]` and `[SEP]` included; longer texts are truncated.
    pub max_tokens: usize,
}

/// A sentence-transformers folder, read and checked (weights excepted).
#[derive(Debug)]
pub struct ModelFolder {
    pub dir: PathBuf,
    /// The raw bytes of `config.json` (fingerprinted as they are).
    pub config_bytes: Vec<u8>,
    pub bert: bert::Config,
    pub settings: Settings,
}

impl ModelFolder {
    /// Reads and checks every small file of the folder and resolves the settings.
    pub fn read(config: &LocalConfig) -> Result<ModelFolder> {
        // The folder by its canonical path: the ledger records it (`Embedder::describe`), and a
        // path as given (`./all-MiniLM-L6-v2`) would name nothing from another current folder.
        let dir = std::fs::canonicalize(&config.dir).unwrap_or_else(|_| config.dir.clone());
        if !dir.is_dir() {
            return Err(model_error(
                &dir,
                format!("{} is not a folder", dir.display()),
                "pass the folder of a sentence-transformers model (the one holding config.json and model.safetensors)",
            ));
        }
        for required in [WEIGHTS, TOKENIZER] {
            if !dir.join(required).is_file() {
                return Err(model_error(
                    &dir,
                    format!("{required} is missing"),
                    "download the whole model folder again (sentence-transformers layout)",
                ));
            }
        }
        let config_bytes = read_file(&dir, CONFIG)?.ok_or_else(|| {
            model_error(
                &dir,
                format!("{CONFIG} is missing"),
                "download the whole model folder again (sentence-transformers layout)",
            )
        })?;
        let bert = parse_bert_config(&dir, &config_bytes)?;

        let pooling = match read_json(&dir, POOLING)? {
            Some(pooling) => parse_pooling(&dir, &pooling)?,
            None => Pooling::Mean,
        };
        let normalize = dir.join(NORMALIZE).is_dir();
        let folder_max = match read_json(&dir, SENTENCE_BERT)? {
            Some(sentence_bert) => match sentence_bert.get("max_seq_length") {
                Some(Value::Number(number)) => Some(number.as_u64().ok_or_else(|| {
                    model_error(
                        &dir,
                        format!("{SENTENCE_BERT}: max_seq_length {number} is not a whole number"),
                        "fix the file, or set the maximum length in the configuration",
                    )
                })? as usize),
                Some(Value::Null) | None => None,
                Some(other) => {
                    return Err(model_error(
                        &dir,
                        format!("{SENTENCE_BERT}: max_seq_length {other} is not a number"),
                        "fix the file, or set the maximum length in the configuration",
                    ));
                }
            },
            None => None,
        };
        let (folder_query, folder_passage) = match read_json(&dir, SENTENCE_TRANSFORMERS)? {
            Some(sentence_transformers) => parse_prompts(&dir, &sentence_transformers)?,
            None => (None, None),
        };
        let family = Family::of(&dir);

        let max_tokens = config
            .max_tokens
            .or(folder_max)
            .unwrap_or(bert.max_position_embeddings);
        if max_tokens < 2 || max_tokens > bert.max_position_embeddings {
            return Err(model_error(
                &dir,
                format!(
                    "a maximum length of {max_tokens} tokens is out of range: the model has {} positions",
                    bert.max_position_embeddings
                ),
                format!(
                    "set the maximum length between 2 and {}",
                    bert.max_position_embeddings
                ),
            ));
        }
        for (prefix, what) in [
            (&config.query_prefix, "the configured query prefix"),
            (&config.passage_prefix, "the configured passage prefix"),
        ] {
            if let Some(prefix) = prefix {
                check_prefix(&dir, prefix, what)?;
            }
        }
        let settings = Settings {
            pooling,
            normalize,
            query_prefix: config
                .query_prefix
                .clone()
                .or(folder_query)
                .unwrap_or_else(|| family.query_prefix().to_owned()),
            passage_prefix: config
                .passage_prefix
                .clone()
                .or(folder_passage)
                .unwrap_or_else(|| family.passage_prefix().to_owned()),
            max_tokens,
        };
        Ok(ModelFolder {
            dir,
            config_bytes,
            bert,
            settings,
        })
    }

    /// The most bytes `model.safetensors` may hold for the BERT `config.json` describes: its
    /// parameters (embeddings, layers, pooler) at 8 bytes each (f64, the widest type), twice
    /// over for the heads a checkpoint may carry beside them, and 64 MiB for the header; at most
    /// `MAX_WEIGHTS_BYTES`. The weights are read whole into memory (and hashed whole), so a
    /// larger file, or a sparse one of any size, is refused before it is read.
    pub(crate) fn max_weights_bytes(&self) -> u64 {
        let config = &self.bert;
        let [hidden, inner, layers, vocab, positions, types] = [
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            config.vocab_size,
            config.max_position_embeddings,
            config.type_vocab_size,
        ]
        .map(|value| value as u64);
        let embeddings = vocab
            .saturating_add(positions)
            .saturating_add(types)
            .saturating_add(2)
            .saturating_mul(hidden);
        let layer = hidden
            .saturating_mul(hidden)
            .saturating_add(hidden)
            .saturating_mul(4)
            .saturating_add(hidden.saturating_mul(inner).saturating_mul(2))
            .saturating_add(inner)
            .saturating_add(hidden.saturating_mul(5));
        let pooler = hidden.saturating_mul(hidden).saturating_add(hidden);
        let parameters = embeddings
            .saturating_add(layer.saturating_mul(layers))
            .saturating_add(pooler);
        parameters
            .saturating_mul(16)
            .saturating_add(64 << 20)
            .min(MAX_WEIGHTS_BYTES)
    }

    /// Refuses a `model.safetensors` of `size` bytes over `max_weights_bytes`.
    pub(crate) fn check_weights_size(&self, size: u64) -> Result<()> {
        let limit = self.max_weights_bytes();
        if size > limit {
            return Err(model_error(
                &self.dir,
                format!(
                    "{WEIGHTS} is {size} bytes, over the limit of {limit} bytes for the model {CONFIG} describes"
                ),
                "download the model folder again; this is not the file the model publishes",
            ));
        }
        Ok(())
    }
}

/// An `Error::Model` for the folder: what is wrong, then what to do.
pub fn model_error(
    dir: &Path,
    message: impl std::fmt::Display,
    hint: impl std::fmt::Display,
) -> Error {
    Error::Model {
        model: dir.display().to_string(),
        message: format!("{message}\nhint: {hint}"),
    }
}

/// Model families whose prefixes are conventions of the model card rather than folder files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    BgeEnglish,
    E5,
    Other,
}

impl Family {
    fn of(dir: &Path) -> Family {
        let name = dir
            .file_name()
            .map(|name| name.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if name.contains("bge-") && name.contains("-en") {
            Family::BgeEnglish
        } else if name.starts_with("e5-") || name.contains("-e5-") || name.contains("_e5-") {
            Family::E5
        } else {
            Family::Other
        }
    }

    fn query_prefix(self) -> &'static str {
        match self {
            Family::BgeEnglish => "Represent this sentence for searching relevant passages: ",
            Family::E5 => "query: ",
            Family::Other => "",
        }
    }

    fn passage_prefix(self) -> &'static str {
        match self {
            Family::E5 => "passage: ",
            Family::BgeEnglish | Family::Other => "",
        }
    }
}

/// Refuses a prefix longer than `MAX_PREFIX_BYTES`; `what` names where it came from.
fn check_prefix(dir: &Path, prefix: &str, what: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_BYTES {
        return Err(model_error(
            dir,
            format!(
                "{what} is {} bytes long, over the limit of {MAX_PREFIX_BYTES} bytes",
                prefix.len()
            ),
            "a prefix is a short instruction such as \"query: \"; fix it, or set both prefixes in the configuration",
        ));
    }
    Ok(())
}

fn read_file(dir: &Path, name: &str) -> Result<Option<Vec<u8>>> {
    read_bounded(dir, name, MAX_SETTINGS_BYTES)
}

/// The bytes of `dir/name`, or `None` when it does not exist; refused when it holds more than
/// `limit` bytes, without reading more than that (a file that grows meanwhile included).
pub(crate) fn read_bounded(dir: &Path, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |error: std::io::Error| {
        model_error(
            dir,
            format!("{name} cannot be read: {error}"),
            "check the file's permissions",
        )
    };
    // Opened without blocking, so that a FIFO named like a model file cannot hang the open,
    // and refused unless it is a regular file (a link to a device has no size to bound).
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(dir.join(name))
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(cannot(error)),
    };
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(model_error(
            dir,
            format!("{name} is not a regular file"),
            "put the model's own files in the folder (a copy, or a link to a regular file)",
        ));
    }
    let too_large = |size: u64| {
        model_error(
            dir,
            format!("{name} is {size} bytes, over the limit of {limit} bytes for this file"),
            "download the model folder again; this is not the file the model publishes",
        )
    };
    let size = file.metadata().map_err(cannot)?.len();
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

fn read_json(dir: &Path, name: &str) -> Result<Option<Value>> {
    let Some(bytes) = read_file(dir, name)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|error| {
        model_error(
            dir,
            format!("{name} is not valid JSON: {error}"),
            "download the model folder again",
        )
    })
}

fn parse_bert_config(dir: &Path, bytes: &[u8]) -> Result<bert::Config> {
    let json: Value = serde_json::from_slice(bytes).map_err(|error| {
        model_error(
            dir,
            format!("{CONFIG} is not valid JSON: {error}"),
            "download the model folder again",
        )
    })?;
    let model_type = json.get("model_type").and_then(Value::as_str);
    if model_type != Some("bert") {
        return Err(model_error(
            dir,
            format!(
                "{CONFIG} describes a {} model, not a BERT one",
                model_type.map_or_else(|| "model_type-less".to_owned(), |name| format!("{name:?}"))
            ),
            "use a BERT-family sentence-transformers model (model_type \"bert\": all-MiniLM-L6-v2, bge-small-en-v1.5, e5-small-v2, …)",
        ));
    }
    serde_json::from_value(json).map_err(|error| {
        model_error(
            dir,
            format!("{CONFIG} is not a BERT configuration this build can run: {error}"),
            "download the model folder again",
        )
    })
}

fn parse_pooling(dir: &Path, pooling: &Value) -> Result<Pooling> {
    let flag = |key: &str| pooling.get(key).and_then(Value::as_bool).unwrap_or(false);
    let unsupported = [
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ]
    .into_iter()
    .filter(|key| flag(key))
    .collect::<Vec<_>>();
    let chosen = [
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_max_tokens", Pooling::Max),
    ]
    .into_iter()
    .filter(|(key, _)| flag(key))
    .map(|(_, mode)| mode)
    .collect::<Vec<_>>();
    match (chosen.as_slice(), unsupported.as_slice()) {
        ([mode], []) => Ok(*mode),
        ([], []) => Err(model_error(
            dir,
            format!("{POOLING} names no pooling mode"),
            "set one of pooling_mode_mean_tokens, pooling_mode_cls_token or pooling_mode_max_tokens to true",
        )),
        _ => Err(model_error(
            dir,
            format!(
                "{POOLING} asks for pooling this build does not do ({})",
                chosen
                    .iter()
                    .map(|mode| mode.name())
                    .chain(unsupported.iter().copied())
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            "use a model with exactly one of mean, CLS or max pooling",
        )),
    }
}

/// The query and passage prompts of `config_sentence_transformers.json`, when it has them.
fn parse_prompts(
    dir: &Path,
    sentence_transformers: &Value,
) -> Result<(Option<String>, Option<String>)> {
    let Some(prompts) = sentence_transformers.get("prompts") else {
        return Ok((None, None));
    };
    let Some(prompts) = prompts.as_object() else {
        return Err(model_error(
            dir,
            format!("{SENTENCE_TRANSFORMERS}: prompts is not an object"),
            "fix the file, or set both prefixes in the configuration",
        ));
    };
    let prompt = |keys: &[&str]| -> Result<Option<String>> {
        for key in keys {
            match prompts.get(*key) {
                Some(Value::String(text)) => {
                    check_prefix(
                        dir,
                        text,
                        &format!("{SENTENCE_TRANSFORMERS}: prompt {key:?}"),
                    )?;
                    return Ok(Some(text.clone()));
                }
                Some(other) => {
                    return Err(model_error(
                        dir,
                        format!("{SENTENCE_TRANSFORMERS}: prompt {key:?} is {other}, not a string"),
                        "fix the file, or set both prefixes in the configuration",
                    ));
                }
                None => {}
            }
        }
        Ok(None)
    };
    Ok((
        prompt(&["query"])?,
        prompt(&["passage", "document", "corpus"])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::read_bounded;

    #[test]
    fn a_fifo_or_a_device_named_like_a_model_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("config.json"))
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo failed");
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("tokenizer.json"))
            .expect("link to /dev/zero");
        for name in ["config.json", "tokenizer.json"] {
            let error = read_bounded(dir.path(), name, 1 << 20)
                .expect_err("a FIFO or a device is no model file")
                .to_string();
            assert!(error.contains("not a regular file"), "{name}: {error}");
        }
        std::fs::write(dir.path().join("modules.json"), b"[]").expect("write");
        assert_eq!(
            read_bounded(dir.path(), "modules.json", 16).expect("read"),
            Some(b"[]".to_vec())
        );
        assert_eq!(
            read_bounded(dir.path(), "absent.json", 16).expect("read"),
            None
        );
    }
}
