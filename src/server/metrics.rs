//! Counters and latencies of the tool calls a server answered, in Prometheus text format
//! (`GET /metrics` on `groundidx serve`).
//!
//! Kept in memory, per process: they describe this server since it started. The index
//! generation and the age of the last ingest are read from the store at scrape time.
//!
//! A label value never comes from a request as such: a tool name that is not one of the tools
//! counts as `unknown` (a random name per request would add a series per request, forever), and
//! every value is escaped as the text format requires, so no value can end a line.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::agent::tools::TOOL_NAMES;
use crate::agent::{CallError, CallResponse, Replayed};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// How a call ended, for the `outcome` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Outcome {
    Executed,
    Replayed,
    Refused(&'static str),
}

impl Outcome {
    /// The outcome of a finished call.
    pub fn of(result: &Result<CallResponse, CallError>) -> Outcome {
        match result {
            Ok(response) if response.replayed == Replayed::No => Outcome::Executed,
            Ok(_) => Outcome::Replayed,
            Err(error) => Outcome::Refused(error.code()),
        }
    }
}

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct State {
    calls: BTreeMap<(&'static str, &'static str, String), u64>,
    latency: BTreeMap<&'static str, Histogram>,
}

/// The `tool` label of a call to `tool`: the tool's name when it is one, else `unknown`.
pub(crate) fn tool_label(tool: &str) -> &'static str {
    TOOL_NAMES
        .iter()
        .find(|name| **name == tool)
        .copied()
        .unwrap_or("unknown")
}

/// A label value as the Prometheus text format writes it: backslash, double quote and line
/// feed escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The server's metrics.
#[derive(Default)]
pub(crate) struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    /// Records one call of `tool` (any name a request gave) over `transport` (`mcp` or `http`).
    pub fn record(&self, tool: &str, transport: &'static str, outcome: Outcome, took: Duration) {
        let tool = tool_label(tool);
        let outcome = match outcome {
            Outcome::Executed => "executed".to_string(),
            Outcome::Replayed => "replayed".to_string(),
            Outcome::Refused(code) => format!("refused_{code}"),
        };
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *state.calls.entry((tool, transport, outcome)).or_default() += 1;
        let histogram = state.latency.entry(tool).or_default();
        let seconds = took.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(histogram.counts.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// The Prometheus text exposition, with the store's gauges.
    pub fn render(&self, generation: Option<u64>, seconds_since_ingest: Option<f64>) -> String {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP groundidx_tool_calls_total Tool calls answered, by tool, transport and outcome."
        );
        let _ = writeln!(out, "# TYPE groundidx_tool_calls_total counter");
        for ((tool, transport, outcome), n) in &state.calls {
            let (tool, transport, outcome) = (escape(tool), escape(transport), escape(outcome));
            let _ = writeln!(
                out,
                "groundidx_tool_calls_total{{tool=\"{tool}\",transport=\"{transport}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP groundidx_tool_call_duration_seconds Time to answer a tool call."
        );
        let _ = writeln!(out, "# TYPE groundidx_tool_call_duration_seconds histogram");
        for (tool, histogram) in &state.latency {
            let tool = escape(tool);
            for (bound, count) in BUCKETS.iter().zip(histogram.counts.iter()) {
                let _ = writeln!(
                    out,
                    "groundidx_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "groundidx_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}",
                histogram.count
            );
            let _ = writeln!(
                out,
                "groundidx_tool_call_duration_seconds_sum{{tool=\"{tool}\"}} {}",
                histogram.sum
            );
            let _ = writeln!(
                out,
                "groundidx_tool_call_duration_seconds_count{{tool=\"{tool}\"}} {}",
                histogram.count
            );
        }
        if let Some(generation) = generation {
            let _ = writeln!(
                out,
                "# HELP groundidx_index_generation The index generation searches see."
            );
            let _ = writeln!(out, "# TYPE groundidx_index_generation gauge");
            let _ = writeln!(out, "groundidx_index_generation {generation}");
        }
        if let Some(seconds) = seconds_since_ingest {
            let _ = writeln!(
                out,
                "# HELP groundidx_seconds_since_last_ingest Seconds since the last finished ingest."
            );
            let _ = writeln!(out, "# TYPE groundidx_seconds_since_last_ingest gauge");
            let _ = writeln!(out, "groundidx_seconds_since_last_ingest {seconds:.3}");
        }
        out
    }
}

/// The gauges of a server on a shared ledger: whether it reaches it, and how many calls it
/// answered without it that wait in its spool.
pub(crate) fn render_shared(reachable: bool, spooled: Option<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP groundidx_ledger_reachable 1 while the shared ledger answers, 0 while this server is read-only."
    );
    let _ = writeln!(out, "# TYPE groundidx_ledger_reachable gauge");
    let _ = writeln!(out, "groundidx_ledger_reachable {}", u8::from(reachable));
    if let Some(spooled) = spooled {
        let _ = writeln!(
            out,
            "# HELP groundidx_spooled_calls Calls answered while the shared ledger was away, not yet forwarded to it."
        );
        let _ = writeln!(out, "# TYPE groundidx_spooled_calls gauge");
        let _ = writeln!(out, "groundidx_spooled_calls {spooled}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{escape, tool_label};

    #[test]
    fn label_values_are_escaped_and_tools_are_known() {
        assert_eq!(escape("plain"), "plain");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(tool_label("search_docs"), "search_docs");
        assert_eq!(tool_label("get_chunk"), "get_chunk");
        assert_eq!(tool_label("x\"} 1\nfake 1"), "unknown");
    }
}
