//! The embedding model settings every command that embeds passages or queries shares
//! (`ingest`, `embed`, `search`, `mcp`, `serve`): a local sentence-transformers folder, or an
//! OpenAI-compatible server.

use std::path::PathBuf;
use std::time::Duration;

use groundidx::embed::{LocalConfig, ModelConfig, Precision, RemoteConfig};
use groundidx::search::{ModelProblem, QueryModel};
use groundidx::{Error, Result};

use crate::cli::output;

/// Passages per request to a remote model when not set.
pub const DEFAULT_REMOTE_BATCH: usize = 64;

/// Which model embeds, and how.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Embedding")]
pub struct EmbedArgs {
    /// A sentence-transformers model folder (config.json, model.safetensors, tokenizer.json),
    /// run in process on the CPU [default: the model the store's vectors came from; none: lexical
    /// search only]
    #[arg(
        long,
        value_name = "DIR",
        env = "GROUNDIDX_EMBED_MODEL",
        conflicts_with = "embed_url"
    )]
    pub embed_model: Option<PathBuf>,

    /// An OpenAI-compatible embeddings endpoint instead of a local folder
    /// (http://host:port/v1/embeddings: Ollama, llama.cpp, vLLM, OpenAI); the API key, if any,
    /// is read from GROUNDIDX_EMBED_API_KEY
    #[arg(
        long,
        value_name = "URL",
        env = "GROUNDIDX_EMBED_URL",
        requires = "embed_remote_model"
    )]
    pub embed_url: Option<String>,

    /// The model name sent to --embed-url
    #[arg(long, value_name = "NAME", env = "GROUNDIDX_EMBED_REMOTE_MODEL")]
    pub embed_remote_model: Option<String>,

    /// Text put before every query [default: read from the model folder]
    #[arg(long, value_name = "TEXT", env = "GROUNDIDX_EMBED_QUERY_PREFIX")]
    pub embed_query_prefix: Option<String>,

    /// Text put before every passage [default: read from the model folder]
    #[arg(long, value_name = "TEXT", env = "GROUNDIDX_EMBED_PASSAGE_PREFIX")]
    pub embed_passage_prefix: Option<String>,

    /// Tokens a passage is cut to [default: the model's maximum]
    #[arg(long, value_name = "N", env = "GROUNDIDX_EMBED_MAX_TOKENS")]
    pub embed_max_tokens: Option<usize>,

    /// How a local model multiplies its weights: `auto` in bfloat16 on AMX tiles where the CPU
    /// has them (vectors within a cosine of 0.999 of float32's, about 1.7× as fast), else in
    /// float32; `float32` always in float32
    #[arg(long, value_name = "PRECISION", env = "GROUNDIDX_EMBED_PRECISION", value_parser = parse_precision)]
    pub embed_precision: Option<Precision>,
}

fn parse_precision(text: &str) -> std::result::Result<Precision, String> {
    text.parse()
}

impl EmbedArgs {
    /// The configured model, if any.
    pub fn model_config(&self) -> Result<Option<ModelConfig>> {
        if let Some(dir) = &self.embed_model {
            return Ok(Some(ModelConfig::Local(LocalConfig {
                dir: dir.clone(),
                query_prefix: self.embed_query_prefix.clone(),
                passage_prefix: self.embed_passage_prefix.clone(),
                max_tokens: self.embed_max_tokens,
                threads: None,
                precision: self.embed_precision.unwrap_or_default(),
            })));
        }
        let Some(url) = &self.embed_url else {
            return Ok(None);
        };
        let Some(model) = &self.embed_remote_model else {
            return Err(Error::Usage(
                "--embed-url needs --embed-remote-model, the model name the server knows".into(),
            ));
        };
        Ok(Some(ModelConfig::Remote(RemoteConfig {
            url: url.clone(),
            model: model.clone(),
            api_key: std::env::var("GROUNDIDX_EMBED_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            query_prefix: self.embed_query_prefix.clone(),
            passage_prefix: self.embed_passage_prefix.clone(),
            max_chars: self.embed_max_tokens.map(|tokens| tokens * 4),
            batch_size: DEFAULT_REMOTE_BATCH,
            timeout: Duration::from_secs(60),
        })))
    }
}

/// Loads the model that embeds queries for the store in `dir` (the configured one, or the one
/// the store's vectors came from), once, for `search`, `mcp` and `serve`. Prints nothing: the
/// caller says why semantic search is off (`problem`) or uses another model (`notice`), each
/// in its own way. A store that does not exist yet gets the configured model (a
/// `serve --reindex` makes the store).
pub fn load_query_model(dir: &std::path::Path, args: &EmbedArgs) -> Result<QueryModel> {
    let configured = args.model_config()?;
    let ledger = match groundidx::store::open_ledger(dir) {
        Ok(ledger) => ledger,
        Err(Error::NoStore { .. }) => {
            // No store, no recorded model: a remote model gets a new fingerprint.
            let Some(config) = configured.as_ref() else {
                return Ok(QueryModel {
                    model: None,
                    notice: None,
                    problem: None,
                });
            };
            return match groundidx::embed::load(config, &[]) {
                Ok(model) => Ok(QueryModel {
                    model: Some(model),
                    notice: None,
                    problem: None,
                }),
                Err(error @ Error::Model { .. }) => Ok(QueryModel {
                    model: None,
                    notice: None,
                    problem: Some(ModelProblem::from_error(
                        groundidx::search::load_failure(config),
                        "the configured model",
                        &error,
                    )),
                }),
                Err(error) => Err(error),
            };
        }
        Err(err) => return Err(err),
    };
    groundidx::search::query_model(&ledger, configured.as_ref())
}

/// `load_query_model` for a store already open for reading: its ledger is not opened again.
pub fn load_query_model_for(
    reader: &groundidx::store::StoreReader,
    args: &EmbedArgs,
) -> Result<QueryModel> {
    let configured = args.model_config()?;
    let ledger = reader.ledger()?;
    groundidx::search::query_model(&ledger, configured.as_ref())
}

/// Prints what a server should know about its query model at start: the model it uses
/// instead of the configured one, or why semantic search is off.
pub fn print_query_model(query: &QueryModel) {
    if let Some(notice) = &query.notice {
        output::notice(notice);
    }
    if let Some(problem) = &query.problem {
        output::notice(&format!(
            "searching by words only: {}\nhint: {}",
            problem.message, problem.hint
        ));
    }
}
