//! Search: a query in, hits with their sources out, never the same passage twice.
//!
//! The index ranks chunks (BM25, stemmed, headings boosted); the ledger adds where each chunk
//! appears. A chunk is one passage with all its sources, so a passage shared by two documents is
//! one hit listing both paths; and two chunks with the same text under different headings are
//! folded into the better-ranked one, so the answer never repeats a passage.
//!
//! A search runs on one index snapshot from start to end, and its answer names that snapshot's
//! generation; pages of one snapshot (`search_page`) follow each other exactly.
//!
//! Three modes: `lexical` (BM25 over the index), `semantic` (the query's vector against the
//! vector index) and `hybrid` (both legs, fused by a convex combination of their scores, each
//! leg's scaled so that its best candidate scores 1 and its `FUSION_ANCHOR`-th 0, weighted by
//! the query's shape: a name trusts words, a question meaning a little more; see `fuse` and
//! `semantic_weight`). Filters restrict both legs to the same chunk keys. Hybrid is the
//! default when the store has vectors and the model that made them is loaded; every answer says
//! the mode it used, the semantic coverage and, in `semantic`, whether meaning took part and why
//! not fully (`SemanticReason`, a closed set of codes: the store's model missing, changed or
//! unreadable, chunks not embedded yet, …).

use std::collections::HashMap;
use std::str::FromStr;

use serde::Serialize;

use crate::clock;
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::ids::{self, ChunkId};
use crate::index::{self, IndexHit, QueryConfig, Snapshot, query_words};
use crate::ledger::{ChunkFilter, ChunkSource, Ledger, StoredChunk};
use crate::store::StoreReader;
use crate::vectors::VectorSet;

/// The rank in each leg whose score is scaled to 0 by the fusion (the best is scaled to 1).
/// A fixed rank, not the last candidate's, so a hit's fused score does not depend on how many
/// candidates a page asked for. 30 is what a first page of 10 hits asks each leg for.
pub(crate) const FUSION_ANCHOR: usize = 30;
/// The weight of the semantic leg for a query that is a name: at most [`NAME_WORDS`] words that
/// carry meaning (`tar`, `git rebase`, `GET _cluster/allocation/explain`). The lexical leg has
/// 1 − this, so its leader outranks the semantic leader whenever neither leg found the other's:
/// a name typed is a word the page holds, and the label fields find exactly that page, where
/// the embedding of a bare name is a guess. tldr-en identifiers keep MRR@10 1.000
/// (docs/BENCHMARKS.md, "Fusion by query shape").
pub(crate) const SEMANTIC_WEIGHT_NAME: f32 = 0.4;
/// The weight of the semantic leg for a query of [`QUESTION_WORDS`] words that carry meaning or
/// more. Not 0.5: at equal weights each leg's leader scored exactly 0.5 when the other leg
/// missed it, and their order was arbitrary; now the lexical leader comes first, by a margin
/// of 0.04. Below 0.5 because SciFact, whose claims are sentences too, loses from 0.45 on
/// (nDCG@10 0.7449 at 0.45, 0.7419 at 0.48, 0.7382 at 0.5, 0.7293 at 0.55) while our written
/// tldr-en questions gain (MRR@10 0.568, 0.589, 0.606, 0.614) and the tldr example
/// descriptions stay level (0.561, 0.561, 0.559, 0.556): no word count tells the two kinds of
/// sentence apart, so the weight is the highest that keeps SciFact at 0.74
/// (docs/BENCHMARKS.md, "Fusion by query shape").
pub(crate) const SEMANTIC_WEIGHT_QUESTION: f32 = 0.48;
/// A query of at most this many words that carry meaning is a name (see [`query_words`]).
pub(crate) const NAME_WORDS: usize = 2;
/// A query of at least this many words that carry meaning is a question; between the two, the
/// weight moves linearly from [`SEMANTIC_WEIGHT_NAME`] to [`SEMANTIC_WEIGHT_QUESTION`].
pub(crate) const QUESTION_WORDS: usize = 4;

/// The weight of the semantic leg in the hybrid fusion of `query` (the lexical leg has 1 − this):
/// [`SEMANTIC_WEIGHT_NAME`] for a name, [`SEMANTIC_WEIGHT_QUESTION`] for a question, linear in
/// the number of words that carry meaning between them. Never 0.5.
pub(crate) fn semantic_weight(query: &str) -> f32 {
    let words = query_words(query);
    if words <= NAME_WORDS {
        return SEMANTIC_WEIGHT_NAME;
    }
    if words >= QUESTION_WORDS {
        return SEMANTIC_WEIGHT_QUESTION;
    }
    let along = (words - NAME_WORDS) as f32 / (QUESTION_WORDS - NAME_WORDS) as f32;
    SEMANTIC_WEIGHT_NAME + along * (SEMANTIC_WEIGHT_QUESTION - SEMANTIC_WEIGHT_NAME)
}

/// How a search ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Lexical,
    Semantic,
}

impl Mode {
    pub const NAMES: [&'static str; 3] = ["hybrid", "lexical", "semantic"];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Lexical => "lexical",
            Mode::Semantic => "semantic",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Mode, String> {
        match text {
            "hybrid" => Ok(Mode::Hybrid),
            "lexical" => Ok(Mode::Lexical),
            "semantic" => Ok(Mode::Semantic),
            other => Err(format!(
                "unknown mode {other:?}: use hybrid, lexical or semantic"
            )),
        }
    }
}

/// What a search reads: one index snapshot, and the vector index with the model that embeds
/// queries for it, when the store has them.
#[derive(Clone, Copy)]
pub(crate) struct Sources<'a> {
    pub snapshot: &'a Snapshot,
    pub vectors: Option<&'a VectorSet>,
    pub embedder: Option<&'a dyn Embedder>,
    /// Why no model that makes the store's vectors is loaded, when it could not be.
    pub model_problem: Option<&'a ModelProblem>,
}

impl<'a> Sources<'a> {
    /// The vector index and the model, when both are there and belong together.
    fn semantic(&self) -> Option<(&'a VectorSet, &'a dyn Embedder)> {
        match (self.vectors, self.embedder) {
            (Some(vectors), Some(embedder))
                if !vectors.is_empty() && embedder.fingerprint() == vectors.marker.fingerprint =>
            {
                Some((vectors, embedder))
            }
            _ => None,
        }
    }

    /// The mode a request runs in: the one asked for, or hybrid when it can run, else lexical.
    pub fn resolve(&self, asked: Option<Mode>) -> Result<Mode> {
        let semantic = self.semantic().is_some();
        match asked {
            None if semantic => Ok(Mode::Hybrid),
            None | Some(Mode::Lexical) => Ok(Mode::Lexical),
            Some(mode) if semantic => Ok(mode),
            Some(mode) => Err(Error::Usage(format!(
                "{} search needs the store's vectors and the model that made them{}",
                mode.as_str(),
                match (self.vectors, self.embedder) {
                    (None, _) => "; this store has no vectors\nhint: ingest with --embed-model DIR, or search with --mode lexical".to_string(),
                    (Some(v), _) if v.is_empty() => "; none is embedded yet\nhint: run groundidx embed, or search with --mode lexical".to_string(),
                    (Some(_), None) => match self.model_problem {
                        Some(problem) => format!("; {}\nhint: {}", problem.message, problem.hint),
                        None => "; the model is not loaded\nhint: pass --embed-model DIR (the model the store was embedded with)".to_string(),
                    },
                    (Some(v), Some(e)) => format!(
                        "; the store's vectors are from model {}, the loaded model is {}\nhint: pass the store's model with --embed-model, or run groundidx embed with this one",
                        &v.marker.fingerprint.to_hex()[..12],
                        &e.fingerprint().to_hex()[..12]
                    ),
                }
            ))),
        }
    }

    /// Why semantic ranking cannot run though the store has vectors (no model that makes them
    /// is loaded, or the loaded one is another model); `None` when it can, or when there are
    /// no vectors to rank by.
    pub fn semantic_unavailable(&self) -> Option<String> {
        let vectors = self.vectors.filter(|v| !v.is_empty())?;
        let short =
            |fingerprint: &crate::embed::Fingerprint| fingerprint.to_hex()[..12].to_string();
        match self.embedder {
            _ if self.semantic().is_some() => None,
            None => Some(format!(
                "the store's vectors are from model {}, and no model that makes them is loaded",
                short(&vectors.marker.fingerprint)
            )),
            Some(embedder) => Some(format!(
                "the store's vectors are from model {}, and queries would be embedded by model {}: their vectors cannot be compared",
                short(&vectors.marker.fingerprint),
                short(&embedder.fingerprint())
            )),
        }
    }

    /// Whether meaning took part in an answer ranked in `mode` (asked as `asked`), and why not
    /// fully; `query_error` when the model failed to embed the query.
    pub fn semantic_status(
        &self,
        asked: Option<Mode>,
        mode: Mode,
        query_error: Option<&Error>,
    ) -> SemanticStatus {
        let coverage = self.coverage();
        let vectors = self.vectors.filter(|v| !v.is_empty());
        let model = match (self.model_problem, self.embedder) {
            (Some(problem), _) => Some(problem.model.clone()),
            (None, Some(embedder)) => Some(model_place(embedder)),
            (None, None) => {
                vectors.map(|v| format!("model {}", &v.marker.fingerprint.to_hex()[..12]))
            }
        };
        let off = |reason: SemanticReason, message: String, hint: Option<String>| SemanticStatus {
            state: SemanticState::Off,
            reason: Some(reason),
            message: Some(message),
            hint,
            model: model.clone(),
            coverage,
        };
        if mode != Mode::Lexical {
            if coverage.vectors < coverage.chunks {
                return SemanticStatus {
                    state: SemanticState::Partial,
                    reason: Some(SemanticReason::EmbeddingIncomplete),
                    message: Some(format!(
                        "{} chunks have no vector yet and are {}",
                        coverage.chunks - coverage.vectors,
                        if mode == Mode::Semantic {
                            "not found by meaning"
                        } else {
                            "found by words only"
                        }
                    )),
                    hint: Some(
                        "run `groundidx embed` (a plain `groundidx ingest` embeds new chunks too)"
                            .to_string(),
                    ),
                    model,
                    coverage,
                };
            }
            return SemanticStatus {
                state: SemanticState::On,
                reason: None,
                message: None,
                hint: None,
                model,
                coverage,
            };
        }
        if asked == Some(Mode::Lexical) {
            return off(
                SemanticReason::LexicalAsked,
                "lexical search was asked for".to_string(),
                None,
            );
        }
        if let Some(error) = query_error {
            let text = error.to_string();
            let (message, hint) = match text.split_once("\nhint: ") {
                Some((message, hint)) => (message.to_string(), Some(hint.replace('\n', " "))),
                None => (text, None),
            };
            return off(
                SemanticReason::QueryNotEmbedded,
                format!(
                    "the query could not be embedded: {}",
                    message.replace('\n', " ")
                ),
                hint,
            );
        }
        if let Some(problem) = self.model_problem {
            return off(
                problem.reason,
                problem.message.clone(),
                Some(problem.hint.clone()),
            );
        }
        match (self.vectors, self.embedder) {
            (None, _) => off(
                SemanticReason::NoModel,
                "the store has no embedding model".to_string(),
                Some("ingest with --embed-model DIR to search by meaning too".to_string()),
            ),
            (Some(v), _) if v.is_empty() => off(
                SemanticReason::EmbeddingIncomplete,
                "no chunk has a vector yet".to_string(),
                Some("run `groundidx embed`".to_string()),
            ),
            (Some(_), Some(_)) => off(
                SemanticReason::ModelChanged,
                self.semantic_unavailable().unwrap_or_default(),
                Some("search with the model that made the store's vectors".to_string()),
            ),
            (Some(_), None) => off(
                SemanticReason::ModelNotLoaded,
                self.semantic_unavailable().unwrap_or_default(),
                Some("pass --embed-model DIR (the model the store was embedded with)".to_string()),
            ),
        }
    }

    /// How many of the snapshot's chunks the vector index covers.
    pub fn coverage(&self) -> Coverage {
        let chunks = self.snapshot.num_chunks();
        Coverage {
            vectors: self.vectors.map_or(0, |v| (v.len() as u64).min(chunks)),
            chunks,
        }
    }
}

/// The model that embeds queries for a store, and what a person should know about the choice.
pub struct QueryModel {
    pub model: Option<std::sync::Arc<dyn Embedder>>,
    /// Set when search uses another model than the configured one.
    pub notice: Option<String>,
    /// Set when no model that makes the store's vectors can be loaded: semantic search is off.
    pub problem: Option<ModelProblem>,
}

/// Which model would embed queries for a store, before it is loaded: its configuration and
/// fingerprint (`None` when none can), and what a person should know about the choice.
pub(crate) struct QueryModelChoice {
    pub chosen: Option<(crate::embed::ModelConfig, crate::embed::Fingerprint)>,
    pub notice: Option<String>,
    /// Why none can, when the store has vectors.
    pub problem: Option<ModelProblem>,
}

/// Why semantic ranking is off or partial, as a code a program can act on (the closed set
/// `search --json`, `search_docs`, `/health` and `status --json` carry in `semantic.reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SemanticReason {
    /// The store has no vectors: it was never given an embedding model.
    NoModel,
    /// The request asked for lexical search.
    LexicalAsked,
    /// The folder of the store's model is gone.
    ModelMissing,
    /// A model is where the store's was, but its fingerprint differs: another model or settings.
    ModelChanged,
    /// The folder of the store's model is there but cannot be read or loaded.
    ModelUnreadable,
    /// The server of the store's (remote) model cannot be reached or fails.
    ModelUnreachable,
    /// No model that makes the store's vectors was handed to the search (a library caller).
    ModelNotLoaded,
    /// Some chunks have no vector yet: those are found by words only.
    EmbeddingIncomplete,
    /// The model failed to embed this query.
    QueryNotEmbedded,
}

impl SemanticReason {
    /// Every code, for the tool's output schema.
    pub(crate) const ALL: [SemanticReason; 9] = [
        SemanticReason::NoModel,
        SemanticReason::LexicalAsked,
        SemanticReason::ModelMissing,
        SemanticReason::ModelChanged,
        SemanticReason::ModelUnreadable,
        SemanticReason::ModelUnreachable,
        SemanticReason::ModelNotLoaded,
        SemanticReason::EmbeddingIncomplete,
        SemanticReason::QueryNotEmbedded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SemanticReason::NoModel => "no_model",
            SemanticReason::LexicalAsked => "lexical_asked",
            SemanticReason::ModelMissing => "model_missing",
            SemanticReason::ModelChanged => "model_changed",
            SemanticReason::ModelUnreadable => "model_unreadable",
            SemanticReason::ModelUnreachable => "model_unreachable",
            SemanticReason::ModelNotLoaded => "model_not_loaded",
            SemanticReason::EmbeddingIncomplete => "embedding_incomplete",
            SemanticReason::QueryNotEmbedded => "query_not_embedded",
        }
    }
}

impl From<crate::store::ModelAbsence> for SemanticReason {
    fn from(absence: crate::store::ModelAbsence) -> SemanticReason {
        use crate::store::ModelAbsence;
        match absence {
            ModelAbsence::Missing => SemanticReason::ModelMissing,
            ModelAbsence::Changed => SemanticReason::ModelChanged,
            ModelAbsence::Unreadable => SemanticReason::ModelUnreadable,
            ModelAbsence::Unreachable => SemanticReason::ModelUnreachable,
        }
    }
}

/// How much meaning took part in ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SemanticState {
    /// Every chunk has a vector, and the query was embedded by the model that made them.
    On,
    /// Semantic ranking ran, but some chunks have no vector yet.
    Partial,
    /// Ranked by words alone.
    Off,
}

/// Why the model that makes a store's vectors cannot embed queries here: found when the model
/// is chosen and loaded, carried to every answer until another choice is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelProblem {
    pub reason: SemanticReason,
    /// The model's folder or server, as the store records it.
    pub model: String,
    /// What is wrong, one line.
    pub message: String,
    /// What to do.
    pub hint: String,
}

impl ModelProblem {
    /// The problem with `model` (`whose`: "the store's model", "the configured model"),
    /// `detail` being what failed, from an error's text (its `hint:` lines dropped).
    pub fn new(reason: SemanticReason, whose: &str, model: &str, detail: &str) -> ModelProblem {
        let detail = detail
            .lines()
            .filter(|line| !line.starts_with("hint: "))
            .collect::<Vec<_>>()
            .join(" ");
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({detail})")
        };
        let (what, hint) = match reason {
            SemanticReason::ModelMissing => (
                "is missing".to_string(),
                "put the model folder back, or pass where it is now with --embed-model DIR; `groundidx embed --embed-model DIR` embeds the store with another model".to_string(),
            ),
            SemanticReason::ModelChanged => (
                format!("holds another model now{detail}"),
                format!("put the store's model back there, or run `groundidx embed --embed-model {model}` to embed the store with the model it holds now"),
            ),
            SemanticReason::ModelUnreachable => (
                format!("cannot be reached{detail}"),
                "start that server, or pass one that serves the same model with --embed-url URL --embed-remote-model NAME".to_string(),
            ),
            _ => (
                format!("cannot be loaded{detail}"),
                "check the folder's files and permissions, or download the model again".to_string(),
            ),
        };
        ModelProblem {
            reason,
            model: model.to_string(),
            message: format!("{whose} {model} {what}"),
            hint,
        }
    }

    /// The problem an `Error::Model` describes (another error's text stands as the detail).
    pub fn from_error(reason: SemanticReason, whose: &str, error: &Error) -> ModelProblem {
        match error {
            Error::Model { model, message } => ModelProblem::new(reason, whose, model, message),
            other => ModelProblem::new(reason, whose, "", &other.to_string()),
        }
    }
}

/// Whether meaning took part in ranking an answer and, when not fully, why: the `semantic` field
/// of every answer, of `/health` and of `status --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SemanticStatus {
    pub state: SemanticState,
    /// `null` when `state` is `on`.
    pub reason: Option<SemanticReason>,
    /// What `reason` means here, one line (`null` when `on`).
    pub message: Option<String>,
    /// What to do about it, when something can be done.
    pub hint: Option<String>,
    /// The store's model (its folder, or name and server), `null` when the store has none.
    pub model: Option<String>,
    /// Chunks with a vector of the store's model, of all chunks.
    pub coverage: Coverage,
}

impl SemanticStatus {
    /// Whether a person should be told: semantic ranking is off or partial though the store has
    /// a model, and nobody asked for words alone.
    pub fn degraded(&self) -> bool {
        self.state != SemanticState::On
            && !matches!(
                self.reason,
                Some(SemanticReason::NoModel | SemanticReason::LexicalAsked)
            )
    }

    /// One line for a person: the mode, why, the coverage, and what to do.
    pub fn warning(&self, mode: Mode) -> String {
        let doing = match (self.state, mode) {
            (SemanticState::Off, _) | (_, Mode::Lexical) => "searching by words only".to_string(),
            (_, mode) => format!("{} search over part of the store", mode.as_str()),
        };
        let mut line = format!(
            "{doing}: {} ({} of {} chunks embedded)",
            self.message.as_deref().unwrap_or("semantic ranking is off"),
            self.coverage.vectors,
            self.coverage.chunks
        );
        if let Some(hint) = self.hint.as_deref().filter(|h| !h.is_empty()) {
            line.push_str("; hint: ");
            line.push_str(hint);
        }
        line
    }
}

/// Loads the model that embeds queries for the store whose ledger this is: the configured one
/// when the store's vectors are its own (or the store has none yet), else the model the store's
/// vectors came from, found again through the ledger's record of it. Loads nothing when the
/// store has no vectors and no model is configured.
pub fn query_model(
    ledger: &Ledger,
    configured: Option<&crate::embed::ModelConfig>,
) -> Result<QueryModel> {
    let choice = choose_query_model(ledger, configured)?;
    let Some((config, _)) = &choice.chosen else {
        return Ok(QueryModel {
            model: None,
            notice: choice.notice,
            problem: choice.problem,
        });
    };
    // A model that fingerprints but cannot be loaded costs semantic search only.
    match crate::embed::load(config, &crate::store::recorded_models(ledger)?) {
        Ok(model) => Ok(QueryModel {
            model: Some(model),
            notice: choice.notice,
            problem: None,
        }),
        Err(error @ Error::Model { .. }) => Ok(QueryModel {
            model: None,
            notice: choice.notice,
            problem: Some(ModelProblem::from_error(
                load_failure(config),
                "the store's model",
                &error,
            )),
        }),
        Err(error) => Err(error),
    }
}

/// Why a chosen model failed to load: its server, or its folder (gone or unreadable).
pub fn load_failure(config: &crate::embed::ModelConfig) -> SemanticReason {
    match config {
        crate::embed::ModelConfig::Local(local) => {
            crate::store::ModelAbsence::of_local_failure(&local.dir).into()
        }
        crate::embed::ModelConfig::Remote(_) => SemanticReason::ModelUnreachable,
    }
}

/// The choice `query_model` makes, without loading the model: a server compares the chosen
/// fingerprint with the model it holds, and loads only a model that changed.
pub(crate) fn choose_query_model(
    ledger: &Ledger,
    configured: Option<&crate::embed::ModelConfig>,
) -> Result<QueryModelChoice> {
    let active = ledger.active_model()?;
    let configured_fingerprint = match configured {
        Some(config) => match crate::store::model_fingerprint(ledger, config) {
            Ok(fingerprint) => Some(fingerprint),
            // The configured model cannot be read: semantic search is off, and says why.
            Err(error @ Error::Model { .. }) => {
                return Ok(QueryModelChoice {
                    chosen: None,
                    notice: None,
                    problem: Some(ModelProblem::from_error(
                        load_failure(config),
                        "the configured model",
                        &error,
                    )),
                });
            }
            Err(error) => return Err(error),
        },
        None => None,
    };
    if let (Some(config), Some(fingerprint)) = (configured, configured_fingerprint)
        && active.as_ref().is_none_or(|a| a.fingerprint == fingerprint)
    {
        return Ok(QueryModelChoice {
            chosen: Some((config.clone(), fingerprint)),
            notice: None,
            problem: None,
        });
    }
    let Some(active) = active else {
        return Ok(QueryModelChoice {
            chosen: None,
            notice: None,
            problem: None,
        });
    };
    let short = &active.fingerprint.to_hex()[..12];
    match crate::store::find_recorded_model(ledger)? {
        crate::store::RecordedModelLookup::Found {
            config,
            fingerprint,
        } => Ok(QueryModelChoice {
            chosen: Some((config, fingerprint)),
            notice: configured.map(|_| format!(
                "the store's vectors are from another model ({short}); search uses that one until the configured model's vectors cover every chunk"
            )),
            problem: None,
        }),
        crate::store::RecordedModelLookup::NoVectors => Ok(QueryModelChoice {
            chosen: None,
            notice: None,
            problem: None,
        }),
        // A recorded model gone, moved or changed costs semantic search only: words still
        // answer, and every answer says which model, why and what to do.
        crate::store::RecordedModelLookup::Unusable {
            absence,
            model,
            detail,
            ..
        } => Ok(QueryModelChoice {
            chosen: None,
            notice: None,
            problem: Some(ModelProblem::new(
                absence.into(),
                "the store's model",
                &model,
                &detail,
            )),
        }),
    }
}

/// What `status` says of semantic search from here, without loading a model: the store's
/// recorded model, whether it is found where the store recorded it (by its fingerprint), and
/// how many chunks have its vector. The mode is the one a search that names none would run in.
pub(crate) fn store_semantic_status(ledger: &Ledger) -> Result<(Mode, SemanticStatus)> {
    let chunks = ledger.counts()?.chunks;
    let Some(active) = ledger.active_model()? else {
        return Ok((
            Mode::Lexical,
            SemanticStatus {
                state: SemanticState::Off,
                reason: Some(SemanticReason::NoModel),
                message: Some("the store has no embedding model".to_string()),
                hint: Some("ingest with --embed-model DIR to search by meaning too".to_string()),
                model: None,
                coverage: Coverage { vectors: 0, chunks },
            },
        ));
    };
    let covered = ledger.vector_coverage(&active.fingerprint)?;
    // A remote model is known only by what its server answers: `status` asks no server (it
    // must answer at once for monitoring, whatever the network), so it says what the store
    // records and the coverage; a search or the server's `/health` says whether it answers.
    let coverage = Coverage {
        vectors: covered.vectors.min(covered.chunks),
        chunks: covered.chunks,
    };
    if active.description["kind"] == "remote" {
        let model = format!(
            "{} at {}",
            active.description["name"].as_str().unwrap_or("?"),
            active.description["url"].as_str().unwrap_or("?")
        );
        return Ok(coverage_status(coverage, Some(model)));
    }
    let status = |state, reason, message, hint, model| SemanticStatus {
        state,
        reason,
        message,
        hint,
        model,
        coverage,
    };
    Ok(match crate::store::find_recorded_model(ledger)? {
        crate::store::RecordedModelLookup::NoVectors => (
            Mode::Lexical,
            status(
                SemanticState::Off,
                Some(SemanticReason::NoModel),
                None,
                None,
                None,
            ),
        ),
        crate::store::RecordedModelLookup::Unusable {
            absence,
            model,
            detail,
            ..
        } => {
            let problem = ModelProblem::new(absence.into(), "the store's model", &model, &detail);
            (
                Mode::Lexical,
                status(
                    SemanticState::Off,
                    Some(problem.reason),
                    Some(problem.message),
                    Some(problem.hint),
                    Some(model),
                ),
            )
        }
        crate::store::RecordedModelLookup::Found { config, .. } => {
            let model = Some(match &config {
                crate::embed::ModelConfig::Local(local) => local.dir.display().to_string(),
                crate::embed::ModelConfig::Remote(remote) => {
                    format!("{} at {}", remote.model, remote.url)
                }
            });
            coverage_status(coverage, model)
        }
    })
}

/// The mode and semantic status of a store whose model is found, by its coverage alone.
fn coverage_status(coverage: Coverage, model: Option<String>) -> (Mode, SemanticStatus) {
    let status = |state, reason, message, hint, model| SemanticStatus {
        state,
        reason,
        message,
        hint,
        model,
        coverage,
    };
    if coverage.vectors == 0 {
        (
            Mode::Lexical,
            status(
                SemanticState::Off,
                Some(SemanticReason::EmbeddingIncomplete),
                Some("no chunk has a vector yet".to_string()),
                Some("run `groundidx embed`".to_string()),
                model,
            ),
        )
    } else if coverage.vectors < coverage.chunks {
        (
            Mode::Hybrid,
            status(
                SemanticState::Partial,
                Some(SemanticReason::EmbeddingIncomplete),
                Some(format!(
                    "{} chunks have no vector yet and are found by words only",
                    coverage.chunks - coverage.vectors
                )),
                Some(
                    "run `groundidx embed` (a plain `groundidx ingest` embeds new chunks too)"
                        .to_string(),
                ),
                model,
            ),
        )
    } else {
        (
            Mode::Hybrid,
            status(SemanticState::On, None, None, None, model),
        )
    }
}

/// Where a loaded model is: its folder, or its name and server.
fn model_place(embedder: &dyn Embedder) -> String {
    let described = embedder.describe();
    match (
        described["path"].as_str().or(described["dir"].as_str()),
        described["url"].as_str(),
    ) {
        (Some(path), _) => path.to_string(),
        (None, Some(url)) => match described["name"].as_str() {
            Some(name) => format!("{name} at {url}"),
            None => url.to_string(),
        },
        (None, None) => format!("model {}", &embedder.fingerprint().to_hex()[..12]),
    }
}

/// Chunks with a vector under the model search uses, of all chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub vectors: u64,
    pub chunks: u64,
}

/// The most hits one search returns, from the CLI (`search -k`) and the agent tool alike.
pub const MAX_TOP_K: usize = 100;

/// How deep the pages of one search (`cursor`, `next_cursor`) may reach, in hits.
pub(crate) const MAX_PAGED_HITS: usize = 1_000;

/// A search as the CLI and the agent tool ask for it.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchRequest {
    pub query: String,
    pub top_k: usize,
    pub filter: ChunkFilter,
    /// `None`: hybrid when the store has vectors and the model is loaded, else lexical.
    pub mode: Option<Mode>,
    /// The relevance floor: hits whose `similarity` to the query is below it are dropped
    /// (`MIN_SCORE_RANGE`), except the documents the query names exactly.
    pub min_score: Option<f32>,
}

/// The values `min_score` may take: a cosine.
pub const MIN_SCORE_RANGE: std::ops::RangeInclusive<f32> = -1.0..=1.0;

/// Where a passage appears: a path under one of the store's roots, and its lines there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HitSource {
    /// The folder the document was ingested from (its canonical path).
    pub root: String,
    /// The document's path relative to `root`.
    pub path: String,
    /// First and last line of the passage in that document; for a document with pages (PDF),
    /// lines of the text of its first and last page.
    pub lines: [u32; 2],
    /// First and last page of the passage, for a document with pages (PDF).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<[u32; 2]>,
}

/// Where a passage is, as a person reads it after its path: `:12-30` (lines), or for a document
/// with pages `, p. 3:5-20` (page 3, lines 5 to 20 of its text) and `, p. 3:40 to p. 4:5`.
pub fn location_label(lines: [u32; 2], pages: Option<[u32; 2]>) -> String {
    match pages {
        None => format!(":{}-{}", lines[0], lines[1]),
        Some([first, last]) if first == last => format!(", p. {first}:{}-{}", lines[0], lines[1]),
        Some([first, last]) => format!(", p. {first}:{} to p. {last}:{}", lines[0], lines[1]),
    }
}

/// One hit: the `search --json` contract.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    pub chunk_id: String,
    pub score: f32,
    /// Every path of the chunk relative to the folder it was ingested from, each once; the same
    /// relative path under two roots is one entry here and two in `sources`.
    pub paths: Vec<String>,
    /// Every source of the chunk with its root: what tells two roots' `a.md` apart.
    pub sources: Vec<HitSource>,
    pub heading: String,
    /// First and last line of the passage in the first path (lines of its pages' text, for a
    /// document with pages).
    pub lines: [u32; 2],
    /// First and last page of the passage in the first path, for a document with pages (PDF).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<[u32; 2]>,
    pub snippet: String,
    pub text: String,
    /// The cosine of the query's and the passage's embeddings (−1 to 1; the same scale in
    /// every mode and for every query, unlike `score`): present when the query was embedded
    /// and the passage has a vector. What `min_score` is compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// The query names this passage's document exactly (its file name, title or an
    /// identifier field): such hits come first in every mode, whatever their score.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact_match: bool,
}

/// A search answer, with how fresh the index is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResponse {
    /// The generation of the index commit the hits come from.
    pub generation: u64,
    pub last_ingest: Option<String>,
    /// The mode the hits were ranked in.
    pub mode: Mode,
    /// Chunks with a vector, of all chunks: how much of the store semantic search sees.
    pub semantic_coverage: Coverage,
    /// Why the hits were ranked by words alone though the store has vectors: the model that
    /// made them is not the one that would embed the query, or the query could not be embedded.
    /// `semantic.message` says the same; this stays for older clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_unavailable: Option<String>,
    /// Why a `min_score` asked for was not applied (the query could not be embedded, so no
    /// hit has a `similarity`): the hits are not filtered, which the caller must know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_score_unapplied: Option<String>,
    /// Whether meaning took part in the ranking and, when not fully, why (`semantic.reason`,
    /// a closed set of codes).
    pub semantic: SemanticStatus,
    pub hits: Vec<Hit>,
}

/// One page of a search: the hits after the first `offset`, and whether more follow.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchPage {
    pub response: SearchResponse,
    /// There are hits after this page (and the page does not end at `MAX_PAGED_HITS`).
    pub more: bool,
    /// The query was embedded and compared with the vector index (a semantic leg, or the
    /// relevance floor in any mode): the next page must use the same vectors.
    pub used_vectors: bool,
}

/// Runs a search against the reader's current snapshot of the index.
pub fn search(reader: &StoreReader, request: &SearchRequest) -> Result<SearchResponse> {
    let snapshot = reader.index().snapshot();
    let vectors = reader.vectors();
    let embedder = reader.embedder();
    let ledger = reader.ledger()?;
    let model_problem = reader.model_problem();
    let sources = Sources {
        snapshot: &snapshot,
        vectors: vectors.as_deref(),
        embedder: embedder.as_deref(),
        model_problem: model_problem.as_ref(),
    };
    Ok(search_page(sources, &ledger, request, 0)?.response)
}

/// Runs a search against one snapshot and returns the `request.top_k` hits after the first
/// `offset`. The same snapshot gives the same ranking, so the pages of one snapshot follow each
/// other without a gap or a repeat. A page ends at `MAX_PAGED_HITS` at the latest.
pub(crate) fn search_page(
    sources_in: Sources<'_>,
    ledger: &Ledger,
    request: &SearchRequest,
    offset: usize,
) -> Result<SearchPage> {
    // One read transaction for every ledger read of the search: one snapshot of the ledger,
    // and one lock taken instead of one per statement.
    ledger.read_snapshot(|ledger| search_page_in(sources_in, ledger, request, offset))
}

fn search_page_in(
    sources_in: Sources<'_>,
    ledger: &Ledger,
    request: &SearchRequest,
    offset: usize,
) -> Result<SearchPage> {
    let snapshot = sources_in.snapshot;
    let mode = sources_in.resolve(request.mode)?;
    check_request(request, offset)?;
    // The last page stops at `MAX_PAGED_HITS`, whatever `top_k` the pages before it used.
    let end = offset.saturating_add(request.top_k).min(MAX_PAGED_HITS);
    let allowed = if request.filter.is_empty() {
        None
    } else {
        // Shared, not copied, with every pass of the query below.
        Some(std::sync::Arc::new(
            ledger.chunks_matching(&request.filter)?,
        ))
    };
    let config = QueryConfig::default();
    let (query_vector, mode, query_error) = embed_query(sources_in, request, mode)?;
    // The documents the query names exactly come first: the same on every page of a snapshot.
    let named = named_passages(snapshot, ledger, &request.query, allowed.as_ref(), &config)?;
    let folded = ranked_hits(
        sources_in,
        ledger,
        request,
        mode,
        query_vector.as_deref(),
        allowed.as_ref(),
        &named,
        end,
        &config,
    )?;
    let more = folded.more && end < MAX_PAGED_HITS;
    let mut page: Vec<Hit> = folded.hits.into_iter().skip(offset).collect();
    add_snippets(&mut page, snapshot, mode, &request.query, &config)?;
    let semantic = sources_in.semantic_status(request.mode, mode, query_error.as_ref());
    let semantic_unavailable = match (&semantic.state, semantic.reason) {
        (
            SemanticState::Off,
            Some(SemanticReason::NoModel | SemanticReason::LexicalAsked) | None,
        ) => None,
        (SemanticState::Off, Some(_)) => semantic.message.clone(),
        _ => None,
    };
    Ok(SearchPage {
        response: SearchResponse {
            generation: snapshot.generation().0,
            last_ingest: ledger.last_ingest_ms()?.map(clock::rfc3339),
            mode,
            semantic_coverage: sources_in.coverage(),
            semantic_unavailable,
            min_score_unapplied: match (request.min_score, &query_vector) {
                (Some(_), None) => Some(
                    "the query was not embedded (the store has no vectors, or no model that made them is loaded, or it failed): no hit has a similarity, so none was dropped".to_string(),
                ),
                _ => None,
            },
            semantic,
            hits: page,
        },
        more,
        used_vectors: query_vector.is_some(),
    })
}

/// Refuses a request out of range: `top_k`, `min_score`, or a page past the last one.
fn check_request(request: &SearchRequest, offset: usize) -> Result<()> {
    if request.top_k == 0 || request.top_k > MAX_TOP_K {
        return Err(Error::Usage(format!(
            "top_k must be between 1 and {MAX_TOP_K}, not {}",
            request.top_k
        )));
    }
    if let Some(floor) = request.min_score
        && !MIN_SCORE_RANGE.contains(&floor)
    {
        return Err(Error::Usage(format!(
            "min_score must be between {} and {} (a cosine similarity), not {floor}",
            MIN_SCORE_RANGE.start(),
            MIN_SCORE_RANGE.end()
        )));
    }
    if offset >= MAX_PAGED_HITS {
        return Err(Error::Usage(format!(
            "the pages of a search reach at most {MAX_PAGED_HITS} hits; this page would start at hit {}",
            offset + 1
        )));
    }
    Ok(())
}

/// The query's embedding, when a semantic leg or the relevance floor needs one, and the mode
/// the search then runs in: a default hybrid search whose query cannot be embedded answers by
/// words alone, with the error that says why.
fn embed_query(
    sources_in: Sources<'_>,
    request: &SearchRequest,
    mut mode: Mode,
) -> Result<(Option<Vec<f32>>, Mode, Option<Error>)> {
    let mut query_error: Option<Error> = None;
    // The query is embedded for a semantic leg, and for the relevance floor in any mode.
    let query_vector = match sources_in.semantic() {
        Some((set, embedder)) if mode != Mode::Lexical || request.min_score.is_some() => {
            let embedded = embedder.embed_query(&request.query).and_then(|vector| {
                if vector.len() == set.dims {
                    return Ok(vector);
                }
                let described = embedder.describe();
                Err(Error::Model {
                    model: described["url"]
                        .as_str()
                        .or(described["path"].as_str())
                        .or(described["dir"].as_str())
                        .map_or_else(|| embedder.fingerprint().to_hex(), str::to_string),
                    message: format!(
                        "it embedded the query in {} dimensions, the store's vectors have {}\nhint: embed the store with this model (`groundidx embed`), or search with the one that made its vectors",
                        vector.len(),
                        set.dims
                    ),
                })
            });
            match embedded {
                Ok(vector) => Some(vector),
                // Only the floor needed it: the hits are not filtered, and the answer says so.
                Err(err) if mode == Mode::Lexical => {
                    tracing::warn!(error = %err, "the query could not be embedded; min_score is not applied");
                    None
                }
                // Hybrid only because it was the default: words alone still answer, and the
                // answer's mode says so.
                Err(err) if request.mode.is_none() => {
                    tracing::warn!(error = %err, "the query could not be embedded; searching by words alone");
                    mode = Mode::Lexical;
                    query_error = Some(err);
                    None
                }
                Err(err) => return Err(err),
            }
        }
        _ => None,
    };
    Ok((query_vector, mode, query_error))
}

/// The hits up to `end`, ranked (the named documents first), folded and floored, and whether
/// another follows: a pass that finds too few asks its legs for four times as many candidates,
/// until they run out.
#[allow(
    clippy::too_many_arguments,
    reason = "the parts of one search, each as the caller holds it"
)]
fn ranked_hits(
    sources_in: Sources<'_>,
    ledger: &Ledger,
    request: &SearchRequest,
    mode: Mode,
    query_vector: Option<&[f32]>,
    allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
    named: &[IndexHit],
    end: usize,
    config: &QueryConfig,
) -> Result<Folded> {
    // Room for the page, one passage past it and repeats. A hybrid leg never has fewer than
    // the fusion's anchor, so a hit scores the same on every page.
    let mut limit = (end + 1) * 2 + 8;
    if mode == Mode::Hybrid {
        limit = limit.max(FUSION_ANCHOR);
    }
    let folded = loop {
        let (raw, exhausted) = candidates(
            sources_in,
            mode,
            request,
            query_vector,
            limit,
            allowed,
            config,
        )?;
        let ranked = named_first(named, raw, mode);
        let ranked = with_similarity(ranked, sources_in.vectors, query_vector, request.min_score);
        let folded = fold(ledger, ranked, end)?;
        if folded.more || exhausted || limit >= 16 * MAX_PAGED_HITS {
            break folded;
        }
        limit *= 4;
    };
    Ok(folded)
}

/// Gives each hit of the page its snippet: the query's words marked, or the passage's opening
/// for a search by meaning alone. Only the hits returned: marking a passage reads all of it.
fn add_snippets(
    page: &mut [Hit],
    snapshot: &Snapshot,
    mode: Mode,
    query: &str,
    config: &QueryConfig,
) -> Result<()> {
    let mut highlighter = match mode {
        Mode::Semantic => None,
        _ => Some(snapshot.highlighter(query, config)?),
    };
    for hit in page {
        hit.snippet = match &mut highlighter {
            Some(highlighter) => highlighter.snippet(&hit.text),
            None => index::opening(&hit.text, 240),
        };
    }
    Ok(())
}

/// A ranked candidate: a chunk, its score, the key of its text when the index gave it, and
/// whether the query names its document exactly.
struct Candidate {
    id: ChunkId,
    score: f32,
    text_key: Option<u64>,
    exact_match: bool,
    similarity: Option<f32>,
}

/// The candidates with their `similarity` to the query (when it was embedded and the chunk has
/// a vector), less those below `min_score`: a chunk without a vector, which cannot be judged,
/// and a document the query names exactly stay.
fn with_similarity(
    ranked: Vec<Candidate>,
    vectors: Option<&VectorSet>,
    query_vector: Option<&[f32]>,
    min_score: Option<f32>,
) -> Vec<Candidate> {
    let (Some(vectors), Some(query_vector)) = (vectors, query_vector) else {
        return ranked;
    };
    ranked
        .into_iter()
        .map(|mut candidate| {
            candidate.similarity = vectors.similarity(&candidate.id, query_vector);
            candidate
        })
        .filter(|candidate| {
            candidate.exact_match
                || match (min_score, candidate.similarity) {
                    (Some(floor), Some(similarity)) => similarity >= floor,
                    _ => true,
                }
        })
        .collect()
}

/// The most documents one query names exactly (`named_passages`) and that are put first.
pub(crate) const MAX_NAMED_DOCUMENTS: usize = 10;

/// How many chunks of the documents a query names are looked at to find each one's best
/// passage.
const NAMED_CHUNKS_READ: usize = 500;

/// The best passage (by the query's words) of each document the query names exactly by its
/// file name stem, title or an identifier field (`Snapshot::named`), best first, one per
/// document, at most [`MAX_NAMED_DOCUMENTS`]. A query of a name (`tar`, `EIP-1559`,
/// `Cluster health`) or that cites an identifier (`what does EIP-7702 change`) finds that
/// document first in every mode: equal scores of the two legs of a fusion, or a passage that
/// explains a concept better than its own page, must not push it down.
fn named_passages(
    snapshot: &Snapshot,
    ledger: &Ledger,
    query: &str,
    allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
    config: &QueryConfig,
) -> Result<Vec<IndexHit>> {
    let mut kept: Vec<IndexHit> = Vec::new();
    let mut documents: std::collections::HashSet<(String, String)> = Default::default();
    for hit in snapshot.named(query, NAMED_CHUNKS_READ, allowed, config)? {
        if kept.len() == MAX_NAMED_DOCUMENTS {
            break;
        }
        let sources = ledger.sources_of_chunk(&hit.id)?;
        if sources.is_empty()
            || sources
                .iter()
                .any(|s| documents.contains(&(s.root.clone(), s.path.clone())))
        {
            continue;
        }
        documents.extend(sources.into_iter().map(|s| (s.root, s.path)));
        kept.push(hit);
    }
    Ok(kept)
}

/// The candidates with the named passages first (`named_passages`), each keeping the score
/// the mode gave it (a named passage the mode did not rank scores its words' BM25 in lexical
/// mode, else 0), and the rest in their order.
fn named_first(named: &[IndexHit], ranked: Vec<Candidate>, mode: Mode) -> Vec<Candidate> {
    if named.is_empty() {
        return ranked;
    }
    let mut rest: Vec<Candidate> = Vec::with_capacity(ranked.len());
    let mut scores: HashMap<ChunkId, (f32, Option<u64>)> = HashMap::new();
    for candidate in ranked {
        if named.iter().any(|hit| hit.id == candidate.id) {
            scores.insert(candidate.id, (candidate.score, candidate.text_key));
        } else {
            rest.push(candidate);
        }
    }
    let mut first: Vec<Candidate> = named
        .iter()
        .map(|hit| {
            let (score, text_key) = scores.get(&hit.id).copied().unwrap_or((
                if mode == Mode::Lexical {
                    hit.score
                } else {
                    0.0
                },
                Some(hit.text_key),
            ));
            Candidate {
                id: hit.id,
                score,
                text_key: text_key.or(Some(hit.text_key)),
                exact_match: true,
                similarity: None,
            }
        })
        .collect();
    first.append(&mut rest);
    first
}

/// The first `end` distinct passages among the candidates, best first, each with the sources of
/// every candidate that repeats its text (the same passage under another heading), and whether
/// another distinct passage follows them (`more`: another page). Text and sources are read
/// from the ledger only for the candidates kept or folded in; past the last kept passage, a
/// candidate whose text key the index gave is only looked up. A candidate the ledger no longer
/// holds was removed after the commit the snapshot holds, and is dropped. Snippets are left
/// empty.
fn fold(ledger: &Ledger, raw: Vec<Candidate>, end: usize) -> Result<Folded> {
    let mut hits: Vec<Hit> = Vec::with_capacity(end);
    let mut by_text: HashMap<u64, usize> = HashMap::new();
    let mut more = false;
    for candidate in raw {
        // A candidate that repeats a kept passage adds its sources to it: its text is known.
        if let Some(&kept) = candidate.text_key.and_then(|key| by_text.get(&key)) {
            let sources = ledger.sources_of_chunk(&candidate.id)?;
            add_sources(
                &mut hits[kept],
                sources.into_iter().map(HitSource::from).collect(),
            );
            continue;
        }
        if hits.len() == end && candidate.text_key.is_some() {
            // Another passage, which only tells that a page follows: whether the ledger holds
            // it is one look-up, not a read of its text and sources.
            more = more || ledger.holds_chunk_with_source(&candidate.id)?;
            continue;
        }
        // A new passage, or one found by meaning alone, which comes without its text's key:
        // its text and sources in one read.
        let Some((chunk, sources)) = ledger.chunk_with_sources(&candidate.id)? else {
            continue;
        };
        let key = candidate
            .text_key
            .unwrap_or_else(|| ids::text_key(&chunk.text));
        let first = &sources[0];
        let lines = [first.lines.0, first.lines.1];
        let pages = first.pages.map(|(a, b)| [a, b]);
        let sources: Vec<HitSource> = sources.into_iter().map(HitSource::from).collect();
        if let Some(&kept) = by_text.get(&key) {
            add_sources(&mut hits[kept], sources);
            continue;
        }
        if hits.len() == end {
            more = true;
            continue;
        }
        by_text.insert(key, hits.len());
        let mut hit = Hit {
            chunk_id: candidate.id.to_hex(),
            score: candidate.score,
            paths: Vec::new(),
            sources: Vec::new(),
            heading: chunk.heading_path.join(" > "),
            lines,
            pages,
            snippet: String::new(),
            text: chunk.text,
            similarity: candidate.similarity,
            exact_match: candidate.exact_match,
        };
        add_sources(&mut hit, sources);
        hits.push(hit);
    }
    Ok(Folded { hits, more })
}

/// What `fold` keeps: the page's passages up to its end, and whether another follows.
struct Folded {
    hits: Vec<Hit>,
    more: bool,
}

/// The ranked candidates of one pass, best first, and whether every leg returned fewer than
/// `limit` (so a larger limit would find nothing more).
fn candidates(
    sources: Sources<'_>,
    mode: Mode,
    request: &SearchRequest,
    query_vector: Option<&[f32]>,
    limit: usize,
    allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
    config: &QueryConfig,
) -> Result<(Vec<Candidate>, bool)> {
    let (query, min_score) = (request.query.as_str(), request.min_score);
    let lexical_leg = || match mode {
        Mode::Semantic => Ok(Vec::new()),
        _ => sources.snapshot.search(query, limit, allowed, config),
    };
    let semantic_leg = || match (mode, sources.vectors, query_vector) {
        (Mode::Lexical, _, _) | (_, None, _) | (_, _, None) => Ok(Vec::new()),
        (_, Some(vectors), Some(vector)) => {
            vectors.search(vector, limit, allowed.map(std::convert::AsRef::as_ref))
        }
    };
    // The two legs of a hybrid search share nothing, so they run at once.
    let (lexical, semantic) = if mode == Mode::Hybrid {
        rayon::join(lexical_leg, semantic_leg)
    } else {
        (lexical_leg(), semantic_leg())
    };
    let (lexical, semantic): (Vec<IndexHit>, Vec<(ChunkId, f32)>) = (lexical?, semantic?);
    // With a floor and every chunk embedded, a semantic leg whose last candidate is below the
    // floor holds every chunk at or above it (it is ranked by that very cosine): a deeper pass
    // would add only chunks the floor drops, so "nothing relevant" costs one pass, not six.
    let every_chunk_embedded = {
        let coverage = sources.coverage();
        coverage.vectors >= coverage.chunks
    };
    let below_floor = every_chunk_embedded
        && min_score
            .is_some_and(|floor| semantic.last().is_some_and(|(_, cosine)| *cosine < floor));
    let exhausted = (lexical.len() < limit && semantic.len() < limit) || below_floor;
    if mode == Mode::Lexical {
        let ranked = lexical
            .into_iter()
            .map(|hit| Candidate {
                id: hit.id,
                score: hit.score,
                text_key: Some(hit.text_key),
                exact_match: false,
                similarity: None,
            })
            .collect();
        return Ok((ranked, exhausted));
    }
    // In semantic mode, the one leg's own order and cosine scores.
    let mut fused = if mode == Mode::Semantic {
        semantic
            .iter()
            .enumerate()
            .map(|(rank, (id, cosine))| (*cosine, rank, *id))
            .collect()
    } else {
        let lexical_scores: Vec<(ChunkId, f32)> =
            lexical.iter().map(|hit| (hit.id, hit.score)).collect();
        fuse(&lexical_scores, &semantic, semantic_weight(query))
    };
    fused.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let text_keys: HashMap<ChunkId, u64> = lexical.iter().map(|h| (h.id, h.text_key)).collect();
    let ranked = fused
        .into_iter()
        .map(|(score, _, id)| Candidate {
            id,
            score,
            text_key: text_keys.get(&id).copied(),
            exact_match: false,
            similarity: None,
        })
        .collect();
    Ok((ranked, exhausted))
}

/// The hybrid fusion of two ranked legs of (chunk, score), best first: a convex combination of
/// their scores (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval",
/// ACM TOIS 2023, found it better than reciprocal rank fusion, and on SciFact and the
/// documentation questions here it is; docs/BENCHMARKS.md, "Fusion").
///
/// Each leg's scores are scaled linearly so that its first candidate scores 1 and its
/// [`FUSION_ANCHOR`]-th (its last, when it has fewer) 0; candidates past the anchor count 0, as
/// does a leg that did not find a chunk, so a chunk's score depends only on each leg's first
/// [`FUSION_ANCHOR`] candidates, however many more a page asked for. A chunk's score is
/// `(1 − w) · lexical + w · semantic` with `w` = `semantic_weight` (the query's, from
/// [`semantic_weight`]; never 0.5 there, so the leaders of the two legs do not tie). Returned as
/// (score, best rank in either leg, chunk), unsorted.
fn fuse(
    lexical: &[(ChunkId, f32)],
    semantic: &[(ChunkId, f32)],
    semantic_weight: f32,
) -> Vec<(f32, usize, ChunkId)> {
    let mut fused: Vec<(f32, usize, ChunkId)> = Vec::with_capacity(lexical.len() + semantic.len());
    let mut at: HashMap<ChunkId, usize> = HashMap::new();
    for (leg, weight) in [
        (lexical, 1.0 - semantic_weight),
        (semantic, semantic_weight),
    ] {
        let (Some(first), Some(anchor)) = (leg.first(), leg[..leg.len().min(FUSION_ANCHOR)].last())
        else {
            continue;
        };
        let (high, low) = (first.1, anchor.1);
        let scaled = |score: f32| {
            if high > low {
                ((score - low) / (high - low)).max(0.0)
            } else {
                1.0
            }
        };
        for (rank, (id, score)) in leg.iter().enumerate() {
            let score = weight * scaled(*score);
            match at.get(id) {
                Some(&i) => {
                    fused[i].0 += score;
                    fused[i].1 = fused[i].1.min(rank);
                }
                None => {
                    at.insert(*id, fused.len());
                    fused.push((score, rank, *id));
                }
            }
        }
    }
    fused
}

/// Adds the sources a hit does not list yet, and their paths to `paths` once each.
fn add_sources(hit: &mut Hit, sources: Vec<HitSource>) {
    for source in sources {
        if hit
            .sources
            .iter()
            .any(|s| s.root == source.root && s.path == source.path)
        {
            continue;
        }
        if !hit.paths.contains(&source.path) {
            hit.paths.push(source.path.clone());
        }
        hit.sources.push(source);
    }
}

/// One chunk with its sources: what `get_chunk` answers and `export` prints per line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChunkRecord {
    pub chunk_id: String,
    /// Every path relative to its root, each once.
    pub paths: Vec<String>,
    /// Every source with its root and lines.
    pub sources: Vec<HitSource>,
    pub heading: String,
    pub lines: [u32; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<[u32; 2]>,
    pub text: String,
}

impl From<ChunkSource> for HitSource {
    fn from(source: ChunkSource) -> HitSource {
        HitSource {
            root: source.root,
            path: source.path,
            lines: [source.lines.0, source.lines.1],
            pages: source.pages.map(|(first, last)| [first, last]),
        }
    }
}

/// Looks up one chunk; `Ok(None)` when the store does not hold it.
pub fn get_chunk(reader: &StoreReader, id: &ChunkId) -> Result<Option<ChunkRecord>> {
    let ledger = reader.ledger()?;
    match ledger.chunks(std::slice::from_ref(id))?.into_iter().next() {
        Some(chunk) => chunk_record(&ledger, chunk).map(Some),
        None => Ok(None),
    }
}

/// A stored chunk with its sources (the first source's lines), as `get_chunk` and `export`
/// give it.
pub(crate) fn chunk_record(ledger: &Ledger, chunk: StoredChunk) -> Result<ChunkRecord> {
    let sources = ledger.sources_of_chunk(&chunk.id)?;
    let lines = sources.first().map_or([0, 0], |s| [s.lines.0, s.lines.1]);
    let pages = sources.first().and_then(|s| s.pages.map(|(a, b)| [a, b]));
    let mut paths: Vec<String> = Vec::with_capacity(sources.len());
    for source in &sources {
        if !paths.contains(&source.path) {
            paths.push(source.path.clone());
        }
    }
    Ok(ChunkRecord {
        chunk_id: chunk.id.to_hex(),
        paths,
        sources: sources.into_iter().map(HitSource::from).collect(),
        heading: chunk.heading_path.join(" > "),
        lines,
        pages,
        text: chunk.text,
    })
}

#[cfg(test)]
mod tests {
    use super::{
        Coverage, FUSION_ANCHOR, Mode, ModelProblem, SEMANTIC_WEIGHT_NAME,
        SEMANTIC_WEIGHT_QUESTION, SemanticReason, SemanticState, SemanticStatus, fuse,
        semantic_weight,
    };
    use crate::ids::{self, ChunkId};

    fn status(state: SemanticState, reason: Option<SemanticReason>) -> SemanticStatus {
        let problem = ModelProblem::new(
            SemanticReason::ModelMissing,
            "the store's model",
            "/x/all-MiniLM-L6-v2",
            "embedding model /x: gone\nhint: never shown twice",
        );
        SemanticStatus {
            state,
            reason,
            message: Some(problem.message),
            hint: Some(problem.hint),
            model: Some(problem.model),
            coverage: Coverage {
                vectors: 15,
                chunks: 15,
            },
        }
    }

    #[test]
    fn the_warning_is_one_line_with_the_mode_the_reason_the_coverage_and_a_hint() {
        let missing = status(SemanticState::Off, Some(SemanticReason::ModelMissing));
        assert!(missing.degraded());
        assert_eq!(
            missing.warning(Mode::Lexical),
            "searching by words only: the store's model /x/all-MiniLM-L6-v2 is missing \
             (15 of 15 chunks embedded); hint: put the model folder back, or pass where it is \
             now with --embed-model DIR; `groundidx embed --embed-model DIR` embeds the store \
             with another model"
        );
        assert!(!missing.warning(Mode::Lexical).contains('\n'));
        let partial = status(
            SemanticState::Partial,
            Some(SemanticReason::EmbeddingIncomplete),
        );
        assert!(
            partial
                .warning(Mode::Hybrid)
                .starts_with("hybrid search over part of the store: ")
        );
        // Words alone asked for, or no model to search by: nothing to warn about.
        for quiet in [SemanticReason::LexicalAsked, SemanticReason::NoModel] {
            assert!(!status(SemanticState::Off, Some(quiet)).degraded());
        }
        assert!(!status(SemanticState::On, None).degraded());
    }

    fn id(n: usize) -> ChunkId {
        ids::chunk_id(&[], &format!("chunk {n}"))
    }

    /// A leg of `n` chunks numbered from `first`, scores falling from `top` by `step`.
    fn leg(first: usize, n: usize, top: f32, step: f32) -> Vec<(ChunkId, f32)> {
        (0..n)
            .map(|i| (id(first + i), top - step * i as f32))
            .collect()
    }

    fn ranked(lexical: &[(ChunkId, f32)], semantic: &[(ChunkId, f32)]) -> Vec<ChunkId> {
        ranked_for(lexical, semantic, SEMANTIC_WEIGHT_QUESTION)
    }

    fn ranked_for(
        lexical: &[(ChunkId, f32)],
        semantic: &[(ChunkId, f32)],
        semantic_weight: f32,
    ) -> Vec<ChunkId> {
        let mut fused = fuse(lexical, semantic, semantic_weight);
        fused.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        fused.into_iter().map(|(_, _, id)| id).collect()
    }

    #[test]
    fn a_chunk_both_legs_rank_high_comes_first_and_each_comes_once() {
        // Chunk 5 is third by words and second by meaning; each leg's first is the other's miss.
        let mut lexical = leg(100, 40, 20.0, 0.4);
        lexical[2].0 = id(5);
        let mut semantic = leg(200, 40, 0.9, 0.01);
        semantic[1].0 = id(5);
        let order = ranked(&lexical, &semantic);
        assert_eq!(order[0], id(5));
        let distinct: std::collections::HashSet<_> = order.iter().collect();
        assert_eq!(distinct.len(), order.len(), "a chunk twice");
        assert_eq!(order.len(), 79);
    }

    #[test]
    fn scores_do_not_depend_on_how_many_candidates_past_the_anchor_a_leg_returned() {
        let lexical = leg(0, 200, 30.0, 0.1);
        let semantic = leg(50, 200, 0.8, 0.002);
        let short = ranked(
            &lexical[..FUSION_ANCHOR + 5],
            &semantic[..FUSION_ANCHOR + 5],
        );
        let long = ranked(&lexical, &semantic);
        assert_eq!(short[..20], long[..20]);
    }

    #[test]
    fn one_leg_alone_keeps_its_order_and_a_flat_leg_counts_as_best() {
        let lexical = leg(0, 10, 5.0, 0.5);
        assert_eq!(
            ranked(&lexical, &[]),
            lexical.iter().map(|(id, _)| *id).collect::<Vec<_>>()
        );
        let flat = vec![(id(1), 0.5), (id(2), 0.5)];
        let fused = fuse(&[], &flat, 0.3);
        assert!(
            fused
                .iter()
                .all(|(score, _, _)| (*score - 0.3).abs() < 1e-6)
        );
    }

    /// Queries of every length from one word to twenty, as words that carry meaning.
    fn queries_of_every_length() -> Vec<String> {
        (1..=20)
            .map(|n| {
                (0..n)
                    .map(|i| format!("word{}", (b'a' + i as u8) as char))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn the_leaders_of_the_two_legs_never_tie() {
        // Each leg's leader is missing from the other leg: at equal weights both scored 0.5.
        let lexical = leg(0, 40, 20.0, 0.4);
        let semantic = leg(100, 40, 0.9, 0.01);
        for query in queries_of_every_length() {
            let fused = fuse(&lexical, &semantic, semantic_weight(&query));
            let score_of = |wanted: super::ChunkId| {
                fused
                    .iter()
                    .find(|(_, _, id)| *id == wanted)
                    .map(|(score, _, _)| *score)
                    .expect("every candidate is fused")
            };
            let (lexical_leader, semantic_leader) = (score_of(id(0)), score_of(id(100)));
            assert!(
                (lexical_leader - semantic_leader).abs() > 0.01,
                "{query:?}: lexical leader {lexical_leader}, semantic leader {semantic_leader}"
            );
        }
    }

    #[test]
    fn a_name_keeps_the_lexical_leader_first() {
        let lexical = leg(0, 40, 20.0, 0.4);
        let semantic = leg(100, 40, 0.9, 0.01);
        for name in [
            "tar",
            "Get-ChildItem",
            "git rebase",
            "GET _cluster/allocation/explain",
        ] {
            assert!(semantic_weight(name) < 0.5, "{name}");
            assert_eq!(
                ranked_for(&lexical, &semantic, semantic_weight(name))[0],
                id(0),
                "{name}"
            );
        }
        // A question weighs meaning more than a name does.
        let question = "why does my cluster turn yellow after adding a node";
        assert!(semantic_weight(question) > semantic_weight("cluster"));
    }

    #[test]
    fn the_semantic_weight_rises_with_the_words_that_carry_meaning() {
        let weights: Vec<f32> = queries_of_every_length()
            .iter()
            .map(|query| semantic_weight(query))
            .collect();
        assert_eq!(weights[0], SEMANTIC_WEIGHT_NAME);
        assert_eq!(weights[19], SEMANTIC_WEIGHT_QUESTION);
        assert!(
            weights.windows(2).all(|pair| pair[0] <= pair[1]),
            "{weights:?}"
        );
        // Stop words do not make a name a question.
        assert_eq!(
            semantic_weight("the tar of the archive"),
            semantic_weight("tar archive")
        );
    }
}
