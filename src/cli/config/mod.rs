//! `groundidx.toml`: where it is found, what it may hold, how it layers under flags and the
//! environment, and `groundidx config`, which shows the result.
//!
//! Precedence is flags > environment > file > defaults. Clap already resolves flags, the
//! environment and defaults, and tells for each argument which of them gave its value; `apply`
//! puts the file's value in wherever clap fell back to a default, and records where every
//! setting came from. A layering crate (figment) would read the environment a second time,
//! beside clap, and could not tell a flag from a default without clap's answer anyway; the file
//! is the one layer clap lacks, and `file` reads and checks it.

use std::path::{Path, PathBuf};

use clap::ArgMatches;
use clap::parser::ValueSource;
use serde::Serialize;

use groundidx::agent::RateLimit;
use groundidx::{Error, Result};

use crate::cli::agent_args::AgentArgs;
use crate::cli::embed_args::EmbedArgs;
use crate::cli::index_args::{INDEX_HEADING, IdFieldArgs, IndexArgs};
use crate::cli::serve::HttpArgs;
use crate::cli::{Cli, Command, ExitCode, output, style};

mod file;

pub use file::ConfigFile;

/// The file looked for in the current folder when neither `--config` nor `GROUNDIDX_CONFIG`
/// names one.
pub const FILE_NAME: &str = "groundidx.toml";

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

    #[command(flatten, next_help_heading = INDEX_HEADING)]
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
    ConfigFile::read(&path).map(Some)
}

/// Layers one subcommand's settings: flag or environment, else file, else default.
struct Layers<'a> {
    matches: &'a ArgMatches,
    file: Option<&'a ConfigFile>,
    shown: Vec<Setting>,
    /// Keys a flag or a variable set for this command: the file's value for them is not used,
    /// so a bad one there does not stop the command.
    overridden: Vec<&'static str>,
}

impl Layers<'_> {
    /// The settings every command takes: the store, and the shared ledger with its schema and
    /// CA file.
    fn globals(&mut self, cli: &mut Cli) {
        let store = self.file_path(|f| f.store.as_ref()).map(Some);
        self.layer(
            "store",
            "--store",
            Some("GROUNDIDX_STORE"),
            &mut cli.store,
            store,
        );
        // Shown as the folder used, the default one included.
        if let Some(shown) = self.shown.last_mut() {
            shown.value = serde_json::to_value(cli.store_dir()).unwrap_or_default();
        }
        let ledger = self.file.and_then(|f| f.settings.ledger.clone()).map(Some);
        self.layer(
            "ledger",
            "--ledger",
            Some("GROUNDIDX_LEDGER"),
            &mut cli.ledger,
            ledger,
        );
        // Shown without its password.
        if let Some(shown) = self.shown.last_mut() {
            shown.value = serde_json::to_value(
                cli.ledger
                    .as_deref()
                    .map(groundidx::ledger::postgres::redact),
            )
            .unwrap_or_default();
        }
        let schema = self.file.and_then(|f| f.settings.ledger_schema.clone());
        self.layer(
            "ledger_schema",
            "--ledger-schema",
            Some("GROUNDIDX_LEDGER_SCHEMA"),
            &mut cli.ledger_schema,
            schema,
        );
        let ca = self.file_path(|f| f.ledger_ca.as_ref()).map(Some);
        self.layer(
            "ledger_ca",
            "--ledger-ca",
            Some("GROUNDIDX_LEDGER_CA"),
            &mut cli.ledger_ca,
            ca,
        );
    }

    /// The settings of the command being run.
    fn subcommand(&mut self, command: &mut Command) -> Result<()> {
        match command {
            Command::Ingest(args) => {
                self.roots(&mut args.roots);
                self.index(&mut args.index);
                self.embed(&mut args.embed)?;
            }
            Command::Serve(args) => {
                self.http(&mut args.http);
                self.agent(&mut args.agent);
                self.index(&mut args.index);
                self.embed(&mut args.embed)?;
            }
            Command::Mcp(args) => {
                self.agent(&mut args.agent);
                self.embed(&mut args.embed)?;
            }
            Command::Search(args) => self.embed(&mut args.embed)?,
            Command::Embed(args) => self.embed(&mut args.embed)?,
            Command::Rebuild(args) => self.id_fields(&mut args.id_fields),
            Command::Config(args) => {
                self.roots(&mut args.roots);
                self.index(&mut args.index);
                self.agent(&mut args.agent);
                self.http(&mut args.http);
                self.embed(&mut args.embed)?;
            }
            _ => {}
        }
        Ok(())
    }

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
    /// (already checked when the file was read), else keeps the default; then records it for
    /// `groundidx config`.
    fn layer<T: Serialize>(
        &mut self,
        key: &'static str,
        flag: &str,
        env: Option<&str>,
        target: &mut T,
        from_file: Option<T>,
    ) {
        let source = match (self.given(key, flag, env), from_file, self.file) {
            (Some(source), _, _) => {
                self.overridden.push(key);
                source
            }
            (None, Some(value), Some(file)) => {
                *target = value;
                Source::File(file.path.clone())
            }
            _ => Source::Default,
        };
        self.shown.push(Setting {
            key,
            value: serde_json::to_value(&*target).unwrap_or_default(),
            source,
        });
    }

    /// A path setting from the file, relative to the file's folder.
    fn file_path(&self, pick: impl Fn(&file::FileSettings) -> Option<&PathBuf>) -> Option<PathBuf> {
        let file = self.file?;
        pick(&file.settings).map(|path| file.resolve(path))
    }

    fn index(&mut self, args: &mut IndexArgs) {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "exclude",
            "--exclude",
            None,
            &mut args.exclude,
            file.and_then(|f| f.exclude.clone()),
        );
        self.layer(
            "formats",
            "--formats",
            Some("GROUNDIDX_FORMATS"),
            &mut args.formats,
            file.and_then(|f| f.formats.clone()),
        );
        self.layer(
            "chunk_size",
            "--chunk-size",
            Some("GROUNDIDX_CHUNK_SIZE"),
            &mut args.chunk_size,
            file.and_then(|f| f.chunk_size),
        );
        self.layer(
            "max_file_size",
            "--max-file-size",
            Some("GROUNDIDX_MAX_FILE_SIZE"),
            &mut args.max_file_size,
            file.and_then(|f| f.max_file_size),
        );
        self.id_fields(&mut args.id_fields);
    }

    fn id_fields(&mut self, args: &mut IdFieldArgs) {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "id_fields",
            "--id-fields",
            Some("GROUNDIDX_ID_FIELDS"),
            &mut args.id_fields,
            file.and_then(|f| f.id_fields.clone()),
        );
    }

    fn agent(&mut self, args: &mut AgentArgs) {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "client_id",
            "--client-id",
            Some("GROUNDIDX_CLIENT_ID"),
            &mut args.client_id,
            file.and_then(|f| f.client_id.clone()),
        );
        let mut ttl = DurationText(args.key_ttl);
        self.layer(
            "key_ttl",
            "--key-ttl",
            Some("GROUNDIDX_KEY_TTL"),
            &mut ttl,
            file.and_then(|f| f.key_ttl).map(DurationText),
        );
        args.key_ttl = ttl.0;
        let mut rate = RateText(args.rate_limit);
        self.layer(
            "rate_limit",
            "--rate-limit",
            Some("GROUNDIDX_RATE_LIMIT"),
            &mut rate,
            file.and_then(|f| f.rate_limit).map(RateText),
        );
        args.rate_limit = rate.0;
    }

    fn http(&mut self, args: &mut HttpArgs) {
        let file = self.file.map(|f| &f.settings);
        self.layer(
            "listen",
            "--listen",
            Some("GROUNDIDX_LISTEN"),
            &mut args.listen,
            file.and_then(|f| f.listen),
        );
        let tokens = self.file_path(|f| f.tokens.as_ref()).map(Some);
        self.layer(
            "tokens",
            "--tokens",
            Some("GROUNDIDX_TOKENS"),
            &mut args.tokens,
            tokens,
        );
    }

    fn embed(&mut self, args: &mut EmbedArgs) -> Result<()> {
        let file = self.file.map(|f| &f.settings);
        let model = self.file_path(|f| f.embed_model.as_ref()).map(Some);
        self.layer(
            "embed_model",
            "--embed-model",
            Some("GROUNDIDX_EMBED_MODEL"),
            &mut args.embed_model,
            model,
        );
        self.layer(
            "embed_url",
            "--embed-url",
            Some("GROUNDIDX_EMBED_URL"),
            &mut args.embed_url,
            file.and_then(|f| f.embed_url.clone()).map(Some),
        );
        self.layer(
            "embed_remote_model",
            "--embed-remote-model",
            Some("GROUNDIDX_EMBED_REMOTE_MODEL"),
            &mut args.embed_remote_model,
            file.and_then(|f| f.embed_remote_model.clone()).map(Some),
        );
        self.layer(
            "embed_query_prefix",
            "--embed-query-prefix",
            Some("GROUNDIDX_EMBED_QUERY_PREFIX"),
            &mut args.embed_query_prefix,
            file.and_then(|f| f.embed_query_prefix.clone()).map(Some),
        );
        self.layer(
            "embed_passage_prefix",
            "--embed-passage-prefix",
            Some("GROUNDIDX_EMBED_PASSAGE_PREFIX"),
            &mut args.embed_passage_prefix,
            file.and_then(|f| f.embed_passage_prefix.clone()).map(Some),
        );
        self.layer(
            "embed_max_tokens",
            "--embed-max-tokens",
            Some("GROUNDIDX_EMBED_MAX_TOKENS"),
            &mut args.embed_max_tokens,
            file.and_then(|f| f.embed_max_tokens).map(Some),
        );
        self.layer(
            "embed_precision",
            "--embed-precision",
            Some("GROUNDIDX_EMBED_PRECISION"),
            &mut args.embed_precision,
            file.and_then(|f| f.embed_precision).map(Some),
        );
        if args.embed_model.is_some() && args.embed_url.is_some() {
            return Err(Error::Usage(
                "both a local embedding model (embed_model) and a remote one (embed_url) are set\nhint: keep one".into(),
            ));
        }
        Ok(())
    }

    fn roots(&mut self, dirs: &mut Vec<PathBuf>) {
        let roots = self.file.and_then(|file| {
            file.settings
                .roots
                .as_ref()
                .map(|roots| roots.iter().map(|p| file.resolve(p)).collect())
        });
        self.layer("roots", "DIR arguments", None, dirs, roots);
    }

    /// Fails on the file's first bad value that no flag or variable replaced for this command.
    fn check_bad_values(&self, top: &ArgMatches) -> Result<()> {
        let Some(file) = self.file else {
            return Ok(());
        };
        let Some(bad) = file
            .bad
            .iter()
            .find(|bad| !self.overridden.contains(&bad.key))
        else {
            return Ok(());
        };
        let takes = |matches: &ArgMatches| matches.ids().any(|id| id.as_str() == bad.key);
        let flag = if bad.key == "roots" {
            "folders on the command line".to_string()
        } else {
            format!("--{}", bad.key.replace('_', "-"))
        };
        let flag = (takes(self.matches) || takes(top)).then_some(flag.as_str());
        Err(file.invalid(bad, flag))
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
/// A bad value in the file is an error here, before the command runs, unless a flag or a
/// variable replaced it for this command.
pub fn apply(cli: &mut Cli, matches: &ArgMatches) -> Result<Vec<Setting>> {
    // The extraction worker uses no setting, and runs in the folder and environment of the
    // ingest that started it, which read the file with its own flags: a value that ingest's
    // flag replaced must not stop the worker.
    if matches!(cli.command, Command::ExtractWorker(_)) {
        return Ok(Vec::new());
    }
    let file = find(cli.config.as_deref())?;
    let mut layers = Layers {
        matches,
        file: file.as_ref(),
        shown: Vec::new(),
        overridden: Vec::new(),
    };
    layers.globals(cli);
    if let Some((_, sub)) = matches.subcommand() {
        layers.matches = sub;
        layers.subcommand(&mut cli.command)?;
    }
    layers.check_bad_values(matches)?;
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
