//! Arguments shared by everything that ingests (`ingest`, `serve --reindex`): what to leave
//! out and how to chunk; and by every writer (those and `rebuild`): which front-matter fields
//! are identifiers. Two writers of one store must agree on these, or each run would replace
//! the other's chunks; `groundidx.toml` is the place to set them once.

use groundidx::chunk::{ChunkConfig, DEFAULT_CHUNK_SIZE};
use groundidx::error::{Error, Result};
use groundidx::extract::{self, Isolation};
use groundidx::format::FormatSet;
use groundidx::index::{DEFAULT_ID_FIELDS, IdFields};
use groundidx::ingest::{DEFAULT_BATCH_FILES, DEFAULT_MAX_FILE_SIZE, IngestConfig};
use groundidx::store::StoreConfig;

/// The smallest and largest `--chunk-size`.
pub const CHUNK_SIZE_RANGE: std::ops::RangeInclusive<usize> = 50..=100_000;

/// The help heading of `IndexArgs` and `IdFieldArgs`, where a command has no better one.
pub const INDEX_HEADING: &str = "Indexing";

/// What a run indexes and how it cuts documents into chunks. Each command that flattens it
/// names its heading (`serve`'s says the flags are for --reindex).
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// Leave out files and folders matching this glob (a name, or a path with '/'); repeatable
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Target chunk size in characters
    #[arg(long, value_name = "CHARS", env = "GROUNDIDX_CHUNK_SIZE", default_value_t = DEFAULT_CHUNK_SIZE, value_parser = parse_chunk_size)]
    pub chunk_size: usize,

    /// The formats to read, comma-separated: md, txt, mdx, rst, adoc, html, pdf, ipynb, or all;
    /// files of other formats are counted by extension in the report
    #[arg(long, value_name = "FORMATS", env = "GROUNDIDX_FORMATS", value_delimiter = ',', default_value = "all", value_parser = parse_format_name)]
    pub formats: Vec<String>,

    /// Skip files larger than this many bytes, with a warning
    #[arg(long, value_name = "BYTES", env = "GROUNDIDX_MAX_FILE_SIZE", default_value_t = DEFAULT_MAX_FILE_SIZE)]
    pub max_file_size: u64,

    #[command(flatten)]
    pub id_fields: IdFieldArgs,
}

/// Which front-matter fields are searched as identifiers.
#[derive(Debug, clap::Args)]
pub struct IdFieldArgs {
    /// Front-matter keys whose values are searched as identifiers, comma-separated ('' for
    /// none); a change reaches the whole index at `groundidx rebuild`
    #[arg(long, value_name = "KEYS", env = "GROUNDIDX_ID_FIELDS", value_delimiter = ',', default_values_t = default_id_fields())]
    pub id_fields: Vec<String>,
}

fn default_id_fields() -> Vec<String> {
    DEFAULT_ID_FIELDS
        .iter()
        .map(std::string::ToString::to_string)
        .collect()
}

impl IdFieldArgs {
    /// The store configuration these arguments describe.
    pub fn store_config(&self) -> StoreConfig {
        let keys: Vec<String> = self
            .id_fields
            .iter()
            .map(|key| key.trim().to_string())
            .filter(|key| !key.is_empty())
            .collect();
        StoreConfig {
            id_fields: IdFields::new(&keys),
        }
    }
}

/// Parses and range-checks a chunk size, for the flag and the configuration file alike.
pub fn parse_chunk_size(text: &str) -> Result<usize, String> {
    let size: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    check_chunk_size(size)
}

pub fn check_chunk_size(size: usize) -> Result<usize, String> {
    if CHUNK_SIZE_RANGE.contains(&size) {
        Ok(size)
    } else {
        Err(format!(
            "{size} is not in {}..={}",
            CHUNK_SIZE_RANGE.start(),
            CHUNK_SIZE_RANGE.end()
        ))
    }
}

/// Checks one name of `--formats` (a format's name or extension, or `all`).
pub fn parse_format_name(text: &str) -> Result<String, String> {
    FormatSet::parse(&[text]).map(|_| text.trim().to_ascii_lowercase())
}

impl IndexArgs {
    /// The ingest configuration these arguments describe. A third-party parser (PDF) runs in a
    /// child process of this executable (`extract-worker`), so a hostile file cannot take the
    /// run down.
    pub fn ingest_config(&self) -> Result<IngestConfig> {
        let formats = FormatSet::parse(&self.formats)
            .map_err(|why| Error::Usage(format!("bad --formats: {why}")))?;
        let isolation = match std::env::current_exe() {
            Ok(exe) => Isolation::Child(exe),
            Err(err) => {
                tracing::warn!(error = %err, "cannot find this executable; PDF files are read in this process");
                Isolation::InProcess
            }
        };
        Ok(IngestConfig {
            formats,
            extraction: extract::Options {
                isolation,
                ..extract::Options::default()
            },
            chunk: ChunkConfig {
                target_size: self.chunk_size,
            },
            excludes: self.exclude.clone(),
            max_file_size: self.max_file_size,
            batch_files: DEFAULT_BATCH_FILES,
            store: self.id_fields.store_config(),
            ..IngestConfig::default()
        })
    }
}
