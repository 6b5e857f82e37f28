//! `groundidx.toml`: where it is found, what it may hold, how it layers under flags and the
//! environment, and `groundidx config`, which shows the result.
//!
//! Precedence is flags > environment > file > defaults. Clap already resolves flags, the
//! environment and defaults; `apply` puts the file's value in wherever clap fell back to a
//! default, and records where every setting came from.

use std::path::{Path, PathBuf};

use clap::ArgMatches;
use clap::parser::ValueSource;
use serde::{Deserialize, Serialize};

use groundidx::keys::RateLimit;
use groundidx::{Error, Result};

use crate::cli::agent_args::{AgentArgs, parse_ttl};
use crate::cli::embed_args::EmbedArgs;
use crate::cli::index_args::{IdFieldArgs, IndexArgs, check_chunk_size};
use crate::cli::serve::HttpArgs;
use crate::cli::{Cli, Command, ExitCode, output, style};

/// The file looked for in the current folder when neither `--config` nor `GROUNDIDX_CONFIG`
/// names one.
pub const FILE_NAME: &str = "groundidx.toml";

/// What `groundidx.toml` may hold. Keys are the long flags' names with `_` for `-`; relative
/// paths are relative to the file's folder. Any other key is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    store: Option<PathBuf>,
    ledger: Option<String>,
    ledger_schema: Option<String>,
    ledger_ca: Option<PathBuf>,
    roots: Option<Vec<PathBuf>>,
    exclude: Option<Vec<String>>,
    formats: Option<Vec<String>>,
    chunk_size: Option<usize>,
    max_file_size: Option<u64>,
    id_fields: Option<Vec<String>>,
    key_ttl: Option<String>,
    rate_limit: Option<String>,
    client_id: Option<String>,
    listen: Option<String>,
    tokens: Option<PathBuf>,
    embed_model: Option<PathBuf>,
    embed_url: Option<String>,
    embed_remote_model: Option<String>,
    embed_query_prefix: Option<String>,
    embed_passage_prefix: Option<String>,
    embed_max_tokens: Option<usize>,
}

/// A configuration file, read and checked.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    settings: FileSettings,
}

/// Where one setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "source", content = "from")]
pub enum Source {
    Flag(String),
    Env(String),
    File(PathBuf),
    Default,
}

/// One effective setting, as `groundidx config` shows it.
#[derive(Clone, Debug)]
pub struct Setting {
    pub key: &'static str,
    pub value: serde_json::Value,
    pub source: Source,
}

/// `groundidx config`: the effective settings and where each came from.
///
/// Shows what a command run here, with the same environment and these flags, would use.
/// The file is `--config FILE`, else `GROUNDIDX_CONFIG`, else `groundidx.toml` in the current
/// folder when there is one.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folders `ingest` would index
    #[arg(value_name = "DIR")]
    pub roots: Vec<PathBuf>,

    #[command(flatten)]
    pub index: IndexArgs,

    #[command(flatten)]
    pub agent: AgentArgs,

    #[command(flatten)]
    pub http: HttpArgs,

    #[command(flatten)]
    pub embed: EmbedArgs,
}

/// Finds and reads the configuration file, if any.
pub fn find(explicit: Option<&Path>) -> Result<Option<ConfigFile>> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let here = PathBuf::from(FILE_NAME);
            if !here.is_file() {
                return Ok(None);
            }
            here
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|err| {
        Error::Usage(format!(
            "cannot read the configuration file {}: {err}\nhint: check --config or GROUNDIDX_CONFIG",
            path.display()
        ))
    })?;
    let settings: FileSettings = toml::from_str(&text).map_err(|err| {
        let at = err
            .span()
            .map(|span| {
                let start = span.start.min(text.len());
                let number = text[..start].matches('\n').count() + 1;
                let line = text[..start]
                    .rfind('\n')
                    .map_or(&text[..], |at| &text[at + 1..]);
                let line = line.lines().next().unwrap_or_default().trim();
                format!(", line {number} ({line})")
            })
            .unwrap_or_default();
        Error::Usage(format!(
            "{}{at}: {}",
            path.display(),
            err.message().replace("field", "key")
        ))
    })?;
    Ok(Some(ConfigFile { path, settings }))
}

impl ConfigFile {
    /// A path from the file, relative to the file's folder.
    fn resolve(&self, path: &Path) -> PathBuf {
        match self.path.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    fn invalid(&self, key: &str, message: impl std::fmt::Display) -> Error {
        Error::Usage(format!(
            "{}: {key}: {message}\nhint: fix the value in the file, or override it with --{}",
            self.path.display(),
            key.replace('_', "-")
        ))
    }
}

/// Layers one subcommand's settings: flag or environment, else file, else default.
struct Layers<'a> {
    matches: &'a ArgMatches,
    file: Option<&'a ConfigFile>,
    shown: Vec<Setting>,
}

impl Layers<'_> {
    /// Where clap found `id`: the command line, the environment, or neither.
    fn given(&self, id: &str, flag: &str, env: Option<&str>) -> Option<Source> {
        if !self.matches.ids().any(|known| known.as_str() == id) {
            return None;
        }
        match self.matches.value_source(id)? {
            ValueSource::CommandLine => Some(Source::Flag(flag.to_string())),
            ValueSource::EnvVariable => Some(Source::Env(env.unwrap_or_default().to_string())),
            _ => None,
        }
    }

    /// Settles one setting: keeps a flag's or the environment's value, else takes the file's
    /// (checked by `parse`), else keeps the default; then records it for `groundidx config`.
    fn layer<T, F>(
        &mut self,
        key: &'static str,
        flag: &str,
        env: Option<&str>,
        target: &mut T,
        from_file: Option<F>,
        parse: impl FnOnce(&ConfigFile, F) -> Result<T>,
    ) -> Result<()>
    where
        T: Serialize,
    {
        let source = match (self.given(key, flag, env), from_file, self.file) {
            (Some(source), _, _) => source,
            (None, Some(value), Some(file)) => {
                *target = parse(file, value)?;
                Source::File(file.path.clone())
            }
            _ => Source::Default,
        };
        self.shown.push(Setting {
            key,
            value: serde_json::to_value(&*target).unwrap_or_default(),
            source,
        });
        Ok(())
    }

    fn index(&mut self, args: &mut IndexArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "exclude",
            "--exclude",
            None,
            &mut args.exclude,
            file.and_then(|f| f.exclude.clone()),
            |_, v| Ok(v),
        )?;
        self.layer(
            "formats",
            "--formats",
            Some("GROUNDIDX_FORMATS"),
            &mut args.formats,
            file.and_then(|f| f.formats.clone()),
            |file, v| {
                groundidx::extract::FormatSet::parse(&v)
                    .map(|_| v)
                    .map_err(|m| file.invalid("formats", m))
            },
        )?;
        self.layer(
            "chunk_size",
            "--chunk-size",
            Some("GROUNDIDX_CHUNK_SIZE"),
            &mut args.chunk_size,
            file.and_then(|f| f.chunk_size),
            |file, v| check_chunk_size(v).map_err(|m| file.invalid("chunk_size", m)),
        )?;
        self.layer(
            "max_file_size",
            "--max-file-size",
            Some("GROUNDIDX_MAX_FILE_SIZE"),
            &mut args.max_file_size,
            file.and_then(|f| f.max_file_size),
            |_, v| Ok(v),
        )?;
        self.id_fields(&mut args.id_fields)
    }

    fn id_fields(&mut self, args: &mut IdFieldArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "id_fields",
            "--id-fields",
            Some("GROUNDIDX_ID_FIELDS"),
            &mut args.id_fields,
            file.and_then(|f| f.id_fields.clone()),
            |_, v| Ok(v),
        )
    }

    fn agent(&mut self, args: &mut AgentArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "client_id",
            "--client-id",
            Some("GROUNDIDX_CLIENT_ID"),
            &mut args.client_id,
            file.and_then(|f| f.client_id.clone()),
            |_, v| Ok(v),
        )?;
        let mut ttl = DurationText(args.key_ttl);
        self.layer(
            "key_ttl",
            "--key-ttl",
            Some("GROUNDIDX_KEY_TTL"),
            &mut ttl,
            file.and_then(|f| f.key_ttl.clone()),
            |file, v| {
                parse_ttl(&v)
                    .map(DurationText)
                    .map_err(|m| file.invalid("key_ttl", m))
            },
        )?;
        args.key_ttl = ttl.0;
        let mut rate = RateText(args.rate_limit);
        self.layer(
            "rate_limit",
            "--rate-limit",
            Some("GROUNDIDX_RATE_LIMIT"),
            &mut rate,
            file.and_then(|f| f.rate_limit.clone()),
            |file, v| {
                v.parse::<RateLimit>()
                    .map(RateText)
                    .map_err(|m| file.invalid("rate_limit", m))
            },
        )?;
        args.rate_limit = rate.0;
        Ok(())
    }

    fn http(&mut self, args: &mut HttpArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "listen",
            "--listen",
            Some("GROUNDIDX_LISTEN"),
            &mut args.listen,
            file.and_then(|f| f.listen.clone()),
            |file, v| {
                v.parse()
                    .map_err(|err| file.invalid("listen", format!("{v:?}: {err}")))
            },
        )?;
        self.layer(
            "tokens",
            "--tokens",
            Some("GROUNDIDX_TOKENS"),
            &mut args.tokens,
            file.and_then(|f| f.tokens.clone()),
            |file, v| Ok(Some(file.resolve(&v))),
        )
    }

    fn embed(&mut self, args: &mut EmbedArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "embed_model",
            "--embed-model",
            Some("GROUNDIDX_EMBED_MODEL"),
            &mut args.embed_model,
            file.and_then(|f| f.embed_model.clone()),
            |file, v| Ok(Some(file.resolve(&v))),
        )?;
        self.layer(
            "embed_url",
            "--embed-url",
            Some("GROUNDIDX_EMBED_URL"),
            &mut args.embed_url,
            file.and_then(|f| f.embed_url.clone()),
            |_, v| Ok(Some(v)),
        )?;
        self.layer(
            "embed_remote_model",
            "--embed-remote-model",
            Some("GROUNDIDX_EMBED_REMOTE_MODEL"),
            &mut args.embed_remote_model,
            file.and_then(|f| f.embed_remote_model.clone()),
            |_, v| Ok(Some(v)),
        )?;
        self.layer(
            "embed_query_prefix",
            "--embed-query-prefix",
            Some("GROUNDIDX_EMBED_QUERY_PREFIX"),
            &mut args.embed_query_prefix,
            file.and_then(|f| f.embed_query_prefix.clone()),
            |_, v| Ok(Some(v)),
        )?;
        self.layer(
            "embed_passage_prefix",
            "--embed-passage-prefix",
            Some("GROUNDIDX_EMBED_PASSAGE_PREFIX"),
            &mut args.embed_passage_prefix,
            file.and_then(|f| f.embed_passage_prefix.clone()),
            |_, v| Ok(Some(v)),
        )?;
        self.layer(
            "embed_max_tokens",
            "--embed-max-tokens",
            Some("GROUNDIDX_EMBED_MAX_TOKENS"),
            &mut args.embed_max_tokens,
            file.and_then(|f| f.embed_max_tokens),
            |_, v| Ok(Some(v)),
        )?;
        if args.embed_model.is_some() && args.embed_url.is_some() {
            return Err(Error::Usage(
                "both a local embedding model (embed_model) and a remote one (embed_url) are set\nhint: keep one".into(),
            ));
        }
        Ok(())
    }

    fn roots(&mut self, dirs: &mut Vec<PathBuf>) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "roots",
            "DIR arguments",
            None,
            dirs,
            file.and_then(|f| f.roots.clone()),
            |file, v| Ok(v.iter().map(|p| file.resolve(p)).collect()),
        )
    }
}

/// A key TTL in milliseconds, shown as text a person reads.
struct DurationText(i64);

impl Serialize for DurationText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let secs = self.0 / 1000;
        let text = match secs {
            s if s % 86_400 == 0 => format!("{}d", s / 86_400),
            s if s % 3_600 == 0 => format!("{}h", s / 3_600),
            s if s % 60 == 0 => format!("{}m", s / 60),
            s => format!("{s}s"),
        };
        s.serialize_str(&text)
    }
}

/// A rate limit, shown as `UNITS/WINDOWs`.
struct RateText(RateLimit);

impl Serialize for RateText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}/{}s", self.0.units, self.0.window_secs))
    }
}

/// Reads the configuration file and puts its values into `cli` wherever no flag or
/// environment variable gave one; returns every setting the command uses, with its source.
pub fn apply(cli: &mut Cli, matches: &ArgMatches) -> Result<Vec<Setting>> {
    let file = find(cli.config.as_deref())?;
    let mut layers = Layers {
        matches,
        file: file.as_ref(),
        shown: Vec::new(),
    };
    let store_source = layers.given("store", "--store", Some("GROUNDIDX_STORE"));
    if let (None, Some(file)) = (&store_source, &file)
        && let Some(path) = &file.settings.store
    {
        cli.store = Some(file.resolve(path));
    }
    layers.shown.push(Setting {
        key: "store",
        value: serde_json::to_value(cli.store_dir()).unwrap_or_default(),
        source: store_source.unwrap_or_else(|| match &file {
            Some(f) if f.settings.store.is_some() => Source::File(f.path.clone()),
            _ => Source::Default,
        }),
    });

    let ledger_source = layers.given("ledger", "--ledger", Some("GROUNDIDX_LEDGER"));
    if let (None, Some(file)) = (&ledger_source, &file)
        && let Some(url) = &file.settings.ledger
    {
        cli.ledger = Some(url.clone());
    }
    layers.shown.push(Setting {
        key: "ledger",
        value: serde_json::to_value(
            cli.ledger
                .as_deref()
                .map(groundidx::ledger::postgres::redact),
        )
        .unwrap_or_default(),
        source: ledger_source.unwrap_or_else(|| match &file {
            Some(f) if f.settings.ledger.is_some() => Source::File(f.path.clone()),
            _ => Source::Default,
        }),
    });
    let from_file = file.as_ref().and_then(|f| f.settings.ledger_schema.clone());
    let mut schema = cli.ledger_schema.clone();
    layers.layer(
        "ledger_schema",
        "--ledger-schema",
        Some("GROUNDIDX_LEDGER_SCHEMA"),
        &mut schema,
        from_file,
        |_, v| Ok(v),
    )?;
    cli.ledger_schema = schema;
    let ca_source = layers.given("ledger_ca", "--ledger-ca", Some("GROUNDIDX_LEDGER_CA"));
    if let (None, Some(file)) = (&ca_source, &file)
        && let Some(path) = &file.settings.ledger_ca
    {
        cli.ledger_ca = Some(file.resolve(path));
    }
    layers.shown.push(Setting {
        key: "ledger_ca",
        value: serde_json::to_value(&cli.ledger_ca).unwrap_or_default(),
        source: ca_source.unwrap_or_else(|| match &file {
            Some(f) if f.settings.ledger_ca.is_some() => Source::File(f.path.clone()),
            _ => Source::Default,
        }),
    });

    let Some((_, sub)) = matches.subcommand() else {
        return Ok(layers.shown);
    };
    layers.matches = sub;
    match &mut cli.command {
        Command::Ingest(args) => {
            layers.roots(&mut args.roots)?;
            layers.index(&mut args.index)?;
            layers.embed(&mut args.embed)?;
        }
        Command::Serve(args) => {
            layers.http(&mut args.http)?;
            layers.agent(&mut args.agent)?;
            layers.index(&mut args.index)?;
            layers.embed(&mut args.embed)?;
        }
        Command::Mcp(args) => {
            layers.agent(&mut args.agent)?;
            layers.embed(&mut args.embed)?;
        }
        Command::Search(args) => layers.embed(&mut args.embed)?,
        Command::Embed(args) => layers.embed(&mut args.embed)?,
        Command::Rebuild(args) => layers.id_fields(&mut args.id_fields)?,
        Command::Config(args) => {
            layers.roots(&mut args.roots)?;
            layers.index(&mut args.index)?;
            layers.agent(&mut args.agent)?;
            layers.http(&mut args.http)?;
            layers.embed(&mut args.embed)?;
        }
        _ => {}
    }
    Ok(layers.shown)
}

/// Prints the effective settings: `key = value  (source)`, or JSON.
pub fn run(cli: &Cli, settings: &[Setting]) -> Result<ExitCode> {
    let file = find(cli.config.as_deref())?.map(|f| f.path);
    if cli.json {
        let settings: serde_json::Map<String, serde_json::Value> = settings
            .iter()
            .map(|s| {
                let mut entry = serde_json::to_value(&s.source).unwrap_or_default();
                entry["value"] = s.value.clone();
                (s.key.to_string(), entry)
            })
            .collect();
        output::json(&serde_json::json!({ "file": file, "settings": settings }))?;
        return Ok(ExitCode::Success);
    }
    match &file {
        Some(path) => output::line(format!(
            "# configuration file: {}",
            style::visible(&path.display().to_string())
        ))?,
        None => output::line(format!(
            "# no configuration file ({FILE_NAME} here, --config or GROUNDIDX_CONFIG)"
        ))?,
    }
    for setting in settings {
        let from = match &setting.source {
            Source::Flag(flag) => format!("flag {flag}"),
            Source::Env(var) => format!("env {var}"),
            Source::File(path) => format!("file {}", style::visible(&path.display().to_string())),
            Source::Default => "default".to_string(),
        };
        let value = toml_value(&setting.value);
        output::line(format!(
            "{:<28} # {from}",
            format!("{} = {value}", setting.key)
        ))?;
    }
    Ok(ExitCode::Success)
}

/// A JSON value written the way it would appear in `groundidx.toml`.
fn toml_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "(none)".to_string(),
        other => other.to_string(),
    }
}
