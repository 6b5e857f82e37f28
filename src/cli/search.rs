//! `groundidx search QUERY`

use clap::builder::TypedValueParser as _;
use groundidx::Result;
use groundidx::ledger::ChunkFilter;
use groundidx::search::{self, SearchRequest, SearchResponse};
use groundidx::store::StoreReader;

use crate::cli::output;
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
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let reader = StoreReader::open(&cli.store_dir())?;
    let request = SearchRequest {
        query: args.query.clone(),
        top_k: args.top_k,
        filter: ChunkFilter {
            path_prefix: args
                .path
                .as_ref()
                .map(|p| p.trim_start_matches("./").to_string()),
            tags: args.tag.clone(),
        },
    };
    let response = search::search(&reader, &request)?;
    if cli.json {
        output::json(&response)?;
    } else {
        print_hits(&response)?;
    }
    Ok(ExitCode::Success)
}

fn print_hits(response: &SearchResponse) -> Result<()> {
    if response.hits.is_empty() {
        return output::line("no hits");
    }
    for (rank, hit) in response.hits.iter().enumerate() {
        let first = hit.paths.first().map_or("", String::as_str);
        let more = match hit.paths.len() {
            0 | 1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        output::line(format!(
            "{:>2}. {first}:{}-{}{more}  {:.2}",
            rank + 1,
            hit.lines[0],
            hit.lines[1],
            hit.score
        ))?;
        if !hit.heading.is_empty() {
            output::line(format!("    {}", hit.heading))?;
        }
        output::line(format!("    {}", hit.snippet))?;
    }
    Ok(())
}
