//! Reading `groundidx.toml`: every key known, every value checked, whatever the command.
//!
//! The whole file is read and checked before any command runs, so a bad value stops every
//! command, also one that never uses that key: a file that is wrong somewhere is wrong
//! everywhere, and is found out at the first run, not at the first `serve` weeks later. A
//! message names the file, the line, the key as the file spells it, the value, and what the key
//! takes in words (never a Rust type).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use groundidx::agent::RateLimit;
use groundidx::clock::DURATION_FORMS;
use groundidx::{Error, Result};

use crate::cli::agent_args::parse_ttl;
use crate::cli::index_args::check_chunk_size;

/// Every key the file may hold, in the order `groundidx config` and errors list them. Keys are
/// the long flags' names with `_` for `-`.
pub const KEYS: [&str; 22] = [
    "store",
    "ledger",
    "ledger_schema",
    "ledger_ca",
    "roots",
    "exclude",
    "formats",
    "chunk_size",
    "max_file_size",
    "id_fields",
    "key_ttl",
    "rate_limit",
    "client_id",
    "listen",
    "tokens",
    "embed_model",
    "embed_url",
    "embed_remote_model",
    "embed_query_prefix",
    "embed_passage_prefix",
    "embed_max_tokens",
    "embed_precision",
];

/// The file's values that are valid, already in the types the flags have. Paths are as
/// written; `ConfigFile::resolve` makes them relative to the file's folder.
#[derive(Debug, Default)]
pub struct FileSettings {
    pub store: Option<PathBuf>,
    pub ledger: Option<String>,
    pub ledger_schema: Option<String>,
    pub ledger_ca: Option<PathBuf>,
    pub roots: Option<Vec<PathBuf>>,
    pub exclude: Option<Vec<String>>,
    pub formats: Option<Vec<String>>,
    pub chunk_size: Option<usize>,
    pub max_file_size: Option<u64>,
    pub id_fields: Option<Vec<String>>,
    /// Milliseconds, as `--key-ttl` holds it.
    pub key_ttl: Option<i64>,
    pub rate_limit: Option<RateLimit>,
    pub client_id: Option<String>,
    pub listen: Option<SocketAddr>,
    pub tokens: Option<PathBuf>,
    pub embed_model: Option<PathBuf>,
    pub embed_url: Option<String>,
    pub embed_remote_model: Option<String>,
    pub embed_query_prefix: Option<String>,
    pub embed_passage_prefix: Option<String>,
    pub embed_max_tokens: Option<usize>,
    pub embed_precision: Option<groundidx::embed::Precision>,
}

/// A value the file holds that its key does not take.
#[derive(Debug)]
pub struct BadValue {
    /// The key, one of `KEYS`.
    pub key: &'static str,
    /// The line it is on, from 1.
    pub line: usize,
    /// The value as TOML writes it.
    pub value: String,
    /// What the key takes, in words.
    pub expected: String,
    /// Why a value of the right kind is still refused, when it is.
    pub why: Option<String>,
}

/// A configuration file, read and checked.
#[derive(Debug)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub settings: FileSettings,
    /// Values that were refused, in the file's order. A command fails on the first one it does
    /// not override with a flag or a variable (`apply` decides).
    pub bad: Vec<BadValue>,
}

impl ConfigFile {
    /// Reads and checks the file at `path`: a file that cannot be read, is not TOML or holds a
    /// key that does not exist is an error here; bad values are kept in `bad`.
    pub fn read(path: &Path) -> Result<ConfigFile> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::Usage(format!(
                "cannot read the configuration file {}: {err}\nhint: check --config or GROUNDIDX_CONFIG",
                path.display()
            ))
        })?;
        let table: toml::Table = text.parse().map_err(|err: toml::de::Error| {
            let at = err
                .span()
                .map(|span| {
                    let start = span.start.min(text.len());
                    format!(", line {}", text[..start].matches('\n').count() + 1)
                })
                .unwrap_or_default();
            Error::Usage(format!(
                "{}{at}: not valid TOML: {}\nhint: a setting is one line such as chunk_size = 1000 \
                 or roots = [\"docs\"]; text goes in quotes",
                path.display(),
                err.message()
            ))
        })?;
        let mut settings = FileSettings::default();
        let mut bad = Vec::new();
        // In the file's order, so the first problem reported is the first one in the file.
        let mut entries: Vec<(usize, String, toml::Value)> = table
            .into_iter()
            .map(|(name, value)| (line_of(&text, &name), name, value))
            .collect();
        entries.sort_by_key(|(line, _, _)| *line);
        for (line, name, value) in entries {
            let Some(key) = KEYS.iter().copied().find(|key| *key == name) else {
                return Err(unknown_key(path, line, &name));
            };
            if let Err(refused) = settings.set(key, &value) {
                bad.push(BadValue {
                    key,
                    line,
                    value: value.to_string(),
                    expected: refused.expected,
                    why: refused.why,
                });
            }
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            settings,
            bad,
        })
    }

    /// A path from the file, relative to the file's folder.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match self.path.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// The error for a refused value. `flag` is the flag that would override it, when the
    /// command being run has one.
    pub fn invalid(&self, bad: &BadValue, flag: Option<&str>) -> Error {
        let why = bad
            .why
            .as_deref()
            .map(|why| format!("{why}; "))
            .unwrap_or_default();
        let hint = match flag {
            Some(flag) => format!("fix it in the file, or override it with {flag}"),
            None => "fix it in the file: every command reads the whole file".to_string(),
        };
        Error::Usage(format!(
            "{}, line {}: {} = {}: {why}expected {}\nhint: {hint}",
            self.path.display(),
            bad.line,
            bad.key,
            bad.value,
            bad.expected,
        ))
    }
}

/// Why a value was refused: what the key takes, and what was wrong beyond its kind.
struct Refused {
    expected: String,
    why: Option<String>,
}

impl Refused {
    fn kind(expected: &str) -> Refused {
        Refused {
            expected: expected.to_string(),
            why: None,
        }
    }

    fn because(expected: &str, why: String) -> Refused {
        Refused {
            expected: expected.to_string(),
            why: Some(why),
        }
    }
}

const A_PATH: &str = "a path in quotes, such as \"/var/lib/groundidx\"";
const A_TEXT: &str = "text in quotes";
const A_URL: &str = "a URL in quotes, such as \"postgres://user@host/db\"";
const FOLDERS: &str = "a list of folders, such as [\"docs\", \"handbook\"]";
const GLOBS: &str = "a list of globs, such as [\"drafts\", \"*.tmp.md\"]";
const FORMATS: &str = "a list of formats, such as [\"md\", \"pdf\"] or [\"all\"]";
const FIELDS: &str = "a list of front-matter keys, such as [\"id\", \"slug\"]";
const CHUNK_SIZE: &str = "a whole number of characters from 50 to 100000";
const BYTES: &str = "a whole number of bytes";
const TOKENS: &str = "a whole number of tokens";
const RATE: &str = "calls per window in quotes, such as \"600/60s\" or \"100/1h30m\"";
const ADDRESS: &str = "an address and port in quotes, such as \"127.0.0.1:7878\"";

impl FileSettings {
    /// Checks `value` for `key` and keeps it.
    fn set(&mut self, key: &'static str, value: &toml::Value) -> std::result::Result<(), Refused> {
        match key {
            "store" => self.store = Some(path(value, A_PATH)?),
            "ledger" => self.ledger = Some(text(value, A_URL)?),
            "ledger_schema" => self.ledger_schema = Some(text(value, A_TEXT)?),
            "ledger_ca" => self.ledger_ca = Some(path(value, A_PATH)?),
            "roots" => {
                let roots = texts(value, FOLDERS)?;
                self.roots = Some(roots.into_iter().map(PathBuf::from).collect());
            }
            "exclude" => self.exclude = Some(texts(value, GLOBS)?),
            "formats" => {
                let names = texts(value, FORMATS)?;
                groundidx::format::FormatSet::parse(&names)
                    .map_err(|why| Refused::because(FORMATS, why))?;
                self.formats = Some(names);
            }
            "chunk_size" => {
                let size = whole(value, CHUNK_SIZE)?;
                let size = usize::try_from(size)
                    .map_err(|_| Refused::kind(CHUNK_SIZE))
                    .and_then(|size| {
                        check_chunk_size(size).map_err(|why| Refused::because(CHUNK_SIZE, why))
                    })?;
                self.chunk_size = Some(size);
            }
            "max_file_size" => self.max_file_size = Some(whole(value, BYTES)?),
            "id_fields" => self.id_fields = Some(texts(value, FIELDS)?),
            "key_ttl" => {
                let expected = format!("{DURATION_FORMS}, at least 24h");
                let written = text(value, &expected)?;
                let ms = parse_ttl(&written).map_err(|why| Refused::because(&expected, why))?;
                self.key_ttl = Some(ms);
            }
            "rate_limit" => {
                let written = text(value, RATE)?;
                let rate = written
                    .parse::<RateLimit>()
                    .map_err(|why| Refused::because(RATE, why))?;
                self.rate_limit = Some(rate);
            }
            "client_id" => self.client_id = Some(text(value, A_TEXT)?),
            "listen" => {
                let written = text(value, ADDRESS)?;
                let address = written
                    .trim()
                    .parse()
                    .map_err(|err| Refused::because(ADDRESS, format!("{written:?}: {err}")))?;
                self.listen = Some(address);
            }
            "tokens" => self.tokens = Some(path(value, A_PATH)?),
            "embed_model" => self.embed_model = Some(path(value, A_PATH)?),
            "embed_url" => {
                self.embed_url = Some(text(
                    value,
                    "a URL in quotes, such as \"http://localhost:11434/v1/embeddings\"",
                )?);
            }
            "embed_remote_model" => self.embed_remote_model = Some(text(value, A_TEXT)?),
            "embed_query_prefix" => self.embed_query_prefix = Some(text(value, A_TEXT)?),
            "embed_passage_prefix" => self.embed_passage_prefix = Some(text(value, A_TEXT)?),
            "embed_max_tokens" => {
                let n = whole(value, TOKENS)?;
                self.embed_max_tokens =
                    Some(usize::try_from(n).map_err(|_| Refused::kind(TOKENS))?);
            }
            "embed_precision" => {
                const PRECISION: &str = "\"auto\" or \"float32\"";
                self.embed_precision = Some(
                    text(value, PRECISION)?
                        .parse()
                        .map_err(|_| Refused::kind(PRECISION))?,
                );
            }
            other => unreachable!("{other} is in KEYS but has no check"),
        }
        Ok(())
    }
}

fn text(value: &toml::Value, expected: &str) -> std::result::Result<String, Refused> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| Refused::kind(expected))
}

fn path(value: &toml::Value, expected: &str) -> std::result::Result<PathBuf, Refused> {
    text(value, expected).map(PathBuf::from)
}

fn texts(value: &toml::Value, expected: &str) -> std::result::Result<Vec<String>, Refused> {
    value
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .ok_or_else(|| Refused::kind(expected))
}

fn whole(value: &toml::Value, expected: &str) -> std::result::Result<u64, Refused> {
    value
        .as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Refused::kind(expected))
}

/// The error for a key the file may not hold, with the nearest real key when one is close.
fn unknown_key(path: &Path, line: usize, name: &str) -> Error {
    let guess = nearest_key(name)
        .map(|key| format!("; did you mean {key}?"))
        .unwrap_or_default();
    Error::Usage(format!(
        "{}, line {line}: unknown key {name}{guess}\nhint: the keys are {}",
        path.display(),
        KEYS.join(", ")
    ))
}

/// The real key `name` was most likely meant to be: the one fewest edits away, if it is a
/// near miss (a slip of a letter or two) or shares a word with `name` (`id_keys`, `id_fields`).
fn nearest_key(name: &str) -> Option<&'static str> {
    let words: Vec<&str> = name.split(['_', '-']).filter(|w| !w.is_empty()).collect();
    KEYS.iter()
        .copied()
        .map(|key| (edits(name, key), key))
        .filter(|(distance, key)| {
            *distance <= 2 || key.split('_').any(|word| words.contains(&word))
        })
        .min()
        .map(|(_, key)| key)
}

/// The Levenshtein distance between two short strings.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The line (from 1) where the top-level key `name` is set: `name = …`, `"name" = …`,
/// `name.x = …` or a `[name]` table; 1 when it cannot be found.
fn line_of(text: &str, name: &str) -> usize {
    let quoted = format!("\"{name}\"");
    let single = format!("'{name}'");
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            let line = line.strip_prefix('[').unwrap_or(line).trim_start();
            [name, quoted.as_str(), single.as_str()]
                .iter()
                .any(|spelling| {
                    line.strip_prefix(spelling).is_some_and(|rest| {
                        let rest = rest.trim_start();
                        rest.starts_with('=') || rest.starts_with('.') || rest.starts_with(']')
                    })
                })
        })
        .map_or(1, |at| at + 1)
}

#[cfg(test)]
mod tests {
    use super::{line_of, nearest_key};

    #[test]
    fn a_near_miss_suggests_the_real_key() {
        assert_eq!(nearest_key("id_keys"), Some("id_fields"));
        assert_eq!(nearest_key("chunk_sise"), Some("chunk_size"));
        assert_eq!(nearest_key("ratelimit"), Some("rate_limit"));
        assert_eq!(nearest_key("colour"), None);
    }

    #[test]
    fn keys_are_found_on_their_line() {
        let text = "# settings\nroots = [\"docs\"]\n\n  chunk_size=10\n[embed]\nmodel = 1\n";
        assert_eq!(line_of(text, "roots"), 2);
        assert_eq!(line_of(text, "chunk_size"), 4);
        assert_eq!(line_of(text, "embed"), 5);
        assert_eq!(line_of("\"listen\" = 1\n", "listen"), 1);
    }
}
