//! `/metrics` stays valid Prometheus text whatever requests come in: tool names from requests
//! are never label values unless they are tools, values are escaped, and MCP and the JSON API
//! count a refusal alike.

use std::collections::BTreeMap;

use serde_json::json;

use crate::support::http::serve;
use crate::support::mcp::{sample_store, signing};

/// One sample line of the text format: metric name, labels, value. Panics, naming the line, on
/// anything the format does not allow (exposition format 0.0.4: `name{k="v",…} value`, label
/// values with only `\\`, `\"` and `\n` escapes).
fn sample(line: &str) -> (String, BTreeMap<String, String>, f64) {
    let bad = |why: &str| -> ! { panic!("not a Prometheus sample line ({why}): {line:?}") };
    let (head, value) = line.rsplit_once(' ').unwrap_or_else(|| bad("no value"));
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        text => text.parse().unwrap_or_else(|_| bad("value")),
    };
    let chars: Vec<char> = head.chars().collect();
    let mut at = 0;
    while at < chars.len() && (chars[at].is_ascii_alphanumeric() || "_:".contains(chars[at])) {
        at += 1;
    }
    let name: String = chars[..at].iter().collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        bad("metric name");
    }
    let mut labels = BTreeMap::new();
    if at < chars.len() {
        if chars[at] != '{' {
            bad("junk after the name");
        }
        at += 1;
        while chars.get(at) != Some(&'}') {
            let key_start = at;
            while chars
                .get(at)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                at += 1;
            }
            let key: String = chars[key_start..at].iter().collect();
            if key.is_empty() || chars.get(at) != Some(&'=') || chars.get(at + 1) != Some(&'"') {
                bad("label");
            }
            at += 2;
            let mut text = String::new();
            loop {
                match chars.get(at) {
                    None => bad("unclosed label value"),
                    Some('"') => break,
                    Some('\\') => {
                        match chars.get(at + 1) {
                            Some('n') => text.push('\n'),
                            Some('\\') => text.push('\\'),
                            Some('"') => text.push('"'),
                            _ => bad("unknown escape"),
                        }
                        at += 1;
                    }
                    Some(c) => text.push(*c),
                }
                at += 1;
            }
            at += 1;
            labels.insert(key, text);
            match chars.get(at) {
                Some(',') => at += 1,
                Some('}') => {}
                _ => bad("labels"),
            }
        }
        if at + 1 != chars.len() {
            bad("junk after the labels");
        }
    }
    (name, labels, value)
}

/// Every sample of a `/metrics` body, each line checked.
fn samples(body: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    body.lines()
        .filter(|line| {
            if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
                return false;
            }
            assert!(!line.starts_with('#'), "a stray comment line: {line:?}");
            true
        })
        .map(sample)
        .collect()
}

#[test]
fn injected_and_random_tool_names_leave_metrics_valid_and_bounded() {
    let env = sample_store();
    let server = serve(&env, &[]);
    // A name with a quote, a brace and a line feed: unescaped, it ends the label set and
    // starts a line of its own.
    let injected = "/v1/tools/x%22%7D%201%0Afake_metric%7Btool%3D%22search_docs%22%7D%201%0A";
    let reply = server.post(injected, &[], &signing().to_string());
    assert_eq!(reply.status, 404, "{reply}");
    for i in 0..40 {
        let reply = server.tool(&format!("random-{i}"), &[], &signing().to_string());
        assert_eq!(reply.status, 404, "{reply}");
    }
    let (reply, message) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "x\"}\nfake_metric 1", "arguments": {"query": "key"}}}),
    );
    assert_eq!(reply.status, 200, "{reply}");
    assert_eq!(message["error"]["code"], -32602, "{message}");
    assert_eq!(server.search(None, &signing().to_string()).status, 200);

    let metrics = server.get("/metrics");
    assert_eq!(metrics.status, 200, "{metrics}");
    let samples = samples(&metrics.body);
    let names: std::collections::BTreeSet<&str> = samples.iter().map(|s| s.0.as_str()).collect();
    assert!(
        names.iter().all(|n| n.starts_with("groundidx_")),
        "a request made a metric of its own: {names:?}\n{}",
        metrics.body
    );
    let mut tools = std::collections::BTreeSet::new();
    let mut calls = BTreeMap::new();
    for (name, labels, value) in &samples {
        if let Some(tool) = labels.get("tool") {
            tools.insert(tool.clone());
        }
        if name == "groundidx_tool_calls_total" {
            calls.insert(
                (
                    labels["tool"].clone(),
                    labels["transport"].clone(),
                    labels["outcome"].clone(),
                ),
                *value,
            );
        }
    }
    assert_eq!(
        tools,
        ["search_docs", "unknown"].map(String::from).into(),
        "only tools and `unknown` are label values:\n{}",
        metrics.body
    );
    let count = |tool: &str, transport: &str, outcome: &str| {
        calls
            .get(&(tool.into(), transport.into(), outcome.into()))
            .copied()
    };
    assert_eq!(count("unknown", "http", "refused_unknown_tool"), Some(41.0));
    assert_eq!(
        count("unknown", "mcp", "refused_unknown_tool"),
        Some(1.0),
        "MCP counts an unknown tool as the JSON API does:\n{}",
        metrics.body
    );
    assert_eq!(count("search_docs", "http", "executed"), Some(1.0));
}
