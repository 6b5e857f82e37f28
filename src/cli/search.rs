//! `groundidx search QUERY`

use clap::builder::TypedValueParser as _;
use groundidx::Result;

use groundidx::ledger::ChunkFilter;
use groundidx::search::{self, SearchRequest, SearchResponse};
use groundidx::store::StoreReader;

use crate::cli::output;
use crate::cli::style::{self, Style};
use crate::cli::{Cli, ExitCode};

/// Search the index (BM25, English stemming, headings and titles boosted).
///
/// The query is free text; quotes make a phrase, and a query never fails for its syntax. Hits
/// never repeat a passage: a passage found in several files is one hit listing every path.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to look for
    #[arg(value_name = "QUERY")]
    pub query: String,

    /// How many hits to return
    #[arg(long, short = 'k', value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=search::MAX_TOP_K as i64).map(|v| v as usize))]
    pub top_k: usize,

    /// Only hits from files whose path (relative to its folder) starts with this
    #[arg(long, value_name = "PREFIX")]
    pub path: Option<String>,

    /// Only hits from documents with this front-matter tag; repeat to require several
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,

    /// Only hits from files whose path (relative to its folder) matches this glob: `*` within
    /// a folder, `**` across folders, `{a,b}`, `[abc]` (e.g. 'guides/**/*.md')
    #[arg(long, value_name = "GLOB", value_parser = parse_glob)]
    pub glob: Option<String>,

    /// Only hits from documents whose front-matter field KEY is VALUE (ignoring case); repeat
    /// to require several
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_field)]
    pub field: Vec<(String, String)>,

    /// Only hits from documents under this ingested folder (one of the store's roots)
    #[arg(long, value_name = "DIR")]
    pub root: Option<std::path::PathBuf>,

    /// How to rank: by words (lexical, BM25), by meaning (semantic, the embedding model), or
    /// both fused (hybrid) [default: hybrid when the store has vectors, else lexical]
    #[arg(long, value_name = "MODE", value_parser = clap::builder::PossibleValuesParser::new(search::Mode::NAMES).map(|m| m.parse::<search::Mode>().expect("a listed mode")))]
    pub mode: Option<search::Mode>,

    /// Drop hits whose similarity to the query (the cosine of their embeddings, -1 to 1) is
    /// below this: "nothing relevant" becomes an empty answer. Needs the store's model; a
    /// document the query names exactly always stays, and so does a passage not embedded yet
    #[arg(long, value_name = "COSINE", allow_negative_numbers = true, value_parser = parse_min_score)]
    pub min_score: Option<f32>,

    #[command(flatten)]
    pub embed: crate::cli::embed_args::EmbedArgs,
}

fn parse_glob(text: &str) -> std::result::Result<String, String> {
    groundidx::ledger::path_glob(text).map(|_| text.to_string())
}

fn parse_field(text: &str) -> std::result::Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!(
            "{text:?} is not KEY=VALUE (a front-matter field and the value it must have, e.g. status=final)"
        )),
    }
}

fn parse_min_score(text: &str) -> std::result::Result<f32, String> {
    text.parse::<f32>()
        .ok()
        .filter(|x| search::MIN_SCORE_RANGE.contains(x))
        .ok_or_else(|| format!("{text:?} is not a number between -1 and 1"))
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let reader = StoreReader::open(&cli.store_dir())?;
    // A lexical search loads the model only to judge hits against `--min-score`.
    if args.mode != Some(search::Mode::Lexical) || args.min_score.is_some() {
        let loaded = crate::cli::embed_args::load_query_model_for(&reader, &args.embed)?;
        // Said at -v only: search runs hybrid with the store's own model, nothing is lost.
        if let Some(notice) = &loaded.notice {
            tracing::info!("{notice}");
        }
        reader.set_embedder(loaded.model);
        reader.set_model_problem(loaded.problem);
    }
    let root = match &args.root {
        Some(dir) => Some(known_root(&reader, dir)?),
        None => None,
    };
    let request = SearchRequest {
        query: args.query.clone(),
        top_k: args.top_k,
        filter: ChunkFilter {
            path_prefix: args.path.as_deref().and_then(ChunkFilter::normalise_path),
            path_glob: args.glob.clone(),
            tags: args.tag.clone(),
            root,
            fields: args.field.clone(),
        },
        mode: args.mode,
        min_score: args.min_score,
    };
    let response = search::search(&reader, &request)?;
    // One line when meaning took less part than the store's model allows, with or without
    // --json: the mode, why, the coverage and what to do.
    if response.semantic.degraded() {
        tracing::warn!("{}", response.semantic.warning(response.mode));
    }
    // A reader never replays the log (a writer does, and none can run on a read-only mount):
    // chunks committed after the index's generation are not found yet, which must be said.
    let ledger_generation = reader.ledger()?.generation()?.0;
    if response.generation < ledger_generation {
        output::notice(&format!(
            "the index is at generation {}, behind the ledger's {ledger_generation}: what was committed since is not searched until the next ingest (or `groundidx rebuild`) brings the index up to date",
            response.generation
        ));
    }
    if cli.json {
        output::json(&response)?;
    } else {
        print_hits(&response)?;
    }
    Ok(ExitCode::Success)
}

/// The canonical path of `dir`, which must be one of the store's roots.
fn known_root(reader: &StoreReader, dir: &std::path::Path) -> Result<String> {
    let roots = reader.ledger()?.roots()?;
    let canonical = dir.canonicalize().ok();
    canonical
        .as_ref()
        .and_then(|c| c.to_str())
        .filter(|c| roots.iter().any(|r| r == c))
        .map(str::to_string)
        .ok_or_else(|| {
            groundidx::Error::Usage(format!(
                "{} is not a folder this store has ingested\nhint: the roots are: {}",
                dir.display(),
                if roots.is_empty() {
                    "(none yet)".to_string()
                } else {
                    roots.join(", ")
                }
            ))
        })
}

fn print_hits(response: &SearchResponse) -> Result<()> {
    if let Some(why) = &response.min_score_unapplied {
        output::notice(&format!("--min-score not applied: {why}"));
    }
    if response.hits.is_empty() {
        return output::line("no hits");
    }
    for (rank, hit) in response.hits.iter().enumerate() {
        // The first file with its root (a relative path alone can be under several roots),
        // escaped: paths come from the documents, so no control sequence reaches the terminal.
        let first = hit.sources.first().map_or(String::new(), |source| {
            style::visible(
                &std::path::Path::new(&source.root)
                    .join(&source.path)
                    .display()
                    .to_string(),
            )
            .into_owned()
        });
        let more = match hit.sources.len() {
            0 | 1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        output::line(format!(
            "{:>2}. {}{}{more}  {}",
            rank + 1,
            style::out(Style::Path, &first),
            style::out(
                Style::Dim,
                &groundidx::search::location_label(hit.lines, hit.pages)
            ),
            style::out(Style::Dim, &format!("{:.2}", hit.score)),
        ))?;
        if !hit.heading.is_empty() {
            output::line(format!(
                "    {}",
                style::out(Style::Heading, &style::visible(&hit.heading))
            ))?;
        }
        output::line(format!("    {}", highlight(&style::visible(&hit.snippet))))?;
    }
    Ok(())
}

/// The snippet with its `**matches**` in colour on a coloured terminal; as marked otherwise.
fn highlight(snippet: &str) -> String {
    if style::out(Style::Match, "x") == "x" {
        return snippet.to_string();
    }
    let mut out = String::with_capacity(snippet.len() + 32);
    for (i, part) in snippet.split("**").enumerate() {
        if i % 2 == 1 {
            out.push_str(&style::out(Style::Match, part));
        } else {
            out.push_str(part);
        }
    }
    out
}
