//! Logs on stderr through `tracing`: `error:`/`warning:` lines for people, or one JSON object
//! per line (`--log-format json`) for log shippers. `-v` adds what each run does (info), `-vv`
//! and `-vvv` debugging detail. Notices (the address `serve` listens on) always show. Text lines
//! show control characters in paths and messages as escapes (`style::visible`).

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::cli::style::{self, Style};

/// The target of events shown at every verbosity.
pub const NOTICE: &str = "groundidx::notice";

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `warning: PATH: what happened`, for people
    Text,
    /// One JSON object per line: timestamp, level, message and fields
    Json,
}

/// Installs the global subscriber; call once, before anything logs.
pub fn init(verbose: u8, format: LogFormat) {
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    // Dependencies speak only from -vv on; groundidx's own events follow the level.
    let mut filter = Targets::new()
        .with_default(if verbose >= 2 {
            level
        } else {
            LevelFilter::WARN
        })
        .with_target("groundidx", level)
        .with_target(NOTICE, level.max(LevelFilter::INFO));
    if verbose < 2 {
        // rmcp warns of every error answer it sends with a `Debug` dump of it, a client's
        // mistake (an unknown tool or method) included; `server` logs those itself, readably
        // and at INFO. rmcp's own failures are errors and still show.
        filter = filter.with_target("rmcp::service", LevelFilter::ERROR);
    }
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(layer.event_format(Plain).with_filter(filter))
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                layer
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_filter(filter),
            )
            .try_init(),
    };
    // Only a second init fails, and then the first one stands.
    let _ = result;
}

use tracing_subscriber::Layer as _;

/// The text format: `level: [path: ]message [key=value…]`.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        if metadata.target() != NOTICE {
            let (label, style) = match *metadata.level() {
                Level::ERROR => ("error:", Some(Style::Error)),
                Level::WARN => ("warning:", Some(Style::Warning)),
                Level::INFO => ("info:", None),
                Level::DEBUG => ("debug:", None),
                Level::TRACE => ("trace:", None),
            };
            let label = match style {
                Some(style) => style::err(style, label),
                None => style::err(Style::Dim, label),
            };
            write!(writer, "{label} ")?;
        }
        // Paths and messages carry file names, which are untrusted: escaped, they cannot forge
        // a line or reach the terminal as control sequences.
        if let Some(path) = &fields.path {
            write!(writer, "{}: ", style::visible(path))?;
        }
        write!(writer, "{}", style::visible_message(&fields.message))?;
        if !fields.rest.is_empty() {
            write!(
                writer,
                "{}",
                style::err(Style::Dim, &style::visible(&fields.rest))
            )?;
        }
        writeln!(writer)
    }
}

/// An event's fields: the message, the path it is about, and the rest as ` key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    path: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "path" => self.path = Some(value.to_string()),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "path" => self.path = Some(format!("{value:?}")),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}
