//! CORS on `groundidx serve`, with real preflights over TCP: a browser app on a loopback origin
//! or one given with `--allow-origin` gets its preflight answered (204, its origin echoed, the
//! methods and headers it may use, a max age, `Vary: Origin`) without a token, and reads the
//! headers of every answer that follows (`Idempotency-Key`, `Idempotent-Replayed`, the quota's
//! `RateLimit` fields, `Retry-After`); an origin not allowed is refused, preflight or not,
//! with nothing that would let a browser read the refusal.

use serde_json::json;

use crate::support::http::{Reply, raw_request, serve, serve_with_env, tokens_file};
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{frozen_clock, sample_store};

const APP: &str = "https://app.example.com";

/// The request headers a browser app on this server may send.
const REQUEST_HEADERS: [&str; 7] = [
    "content-type",
    "authorization",
    "idempotency-key",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "accept",
];

/// The comma-separated values of a header, lowercased.
fn listed(reply: &Reply, name: &str) -> Vec<String> {
    reply
        .header(name)
        .unwrap_or_else(|| panic!("no {name}: {reply}"))
        .split(',')
        .map(|value| value.trim().to_ascii_lowercase())
        .filter(|value| !value.is_empty())
        .collect()
}

/// A browser's preflight for a POST from `origin` that sends these headers.
fn preflight(addr: &str, path: &str, origin: &str, headers: &str) -> Reply {
    raw_request(
        addr,
        "OPTIONS",
        path,
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", headers),
        ],
        "",
    )
}

/// Asserts a preflight answered for `origin`: 204, no body, the origin itself (never `*`), the
/// methods, every request header, a max age and `Vary: Origin`.
fn assert_preflight_allowed(reply: &Reply, origin: &str) {
    assert_eq!(reply.status, 204, "{reply}");
    assert_eq!(reply.body, "", "{reply}");
    assert_eq!(
        reply.header("Access-Control-Allow-Origin"),
        Some(origin),
        "{reply}"
    );
    let methods = listed(reply, "Access-Control-Allow-Methods");
    for method in ["get", "post", "options"] {
        assert!(methods.iter().any(|m| m == method), "{method}: {reply}");
    }
    let headers = listed(reply, "Access-Control-Allow-Headers");
    for header in REQUEST_HEADERS {
        assert!(headers.iter().any(|h| h == header), "{header}: {reply}");
    }
    let max_age: u64 = reply
        .header("Access-Control-Max-Age")
        .and_then(|age| age.parse().ok())
        .unwrap_or_else(|| panic!("no numeric Access-Control-Max-Age: {reply}"));
    assert!(max_age > 0, "{reply}");
    assert!(
        listed(reply, "Vary").iter().any(|v| v == "origin"),
        "{reply}"
    );
}

/// Asserts that the browser may read every one of `names`, which the reply carries.
fn assert_exposed(reply: &Reply, names: &[&str]) {
    let exposed = listed(reply, "Access-Control-Expose-Headers");
    for name in names {
        assert!(
            reply.header(name).is_some(),
            "the reply lacks {name}: {reply}"
        );
        assert!(
            exposed.iter().any(|e| e.eq_ignore_ascii_case(name)),
            "{name} is not exposed: {reply}"
        );
    }
}

#[test]
fn an_allowed_origins_preflight_is_answered_and_its_post_reads_the_headers() {
    let env = sample_store();
    let server = serve_with_env(
        &env,
        &["--allow-origin", APP, "--rate-limit", "2/60s"],
        &frozen_clock(),
    );
    let body = json!({"query": "rotate the signing key", "top_k": 3}).to_string();

    let answered = preflight(
        &server.addr,
        "/v1/tools/search_docs",
        APP,
        "content-type,idempotency-key",
    );
    assert_preflight_allowed(&answered, APP);
    // The loopback origins are allowed too, on /mcp with MCP's own headers.
    let loopback = "http://localhost:5173";
    let mcp = preflight(
        &server.addr,
        "/mcp",
        loopback,
        "content-type,mcp-protocol-version,accept",
    );
    assert_preflight_allowed(&mcp, loopback);
    // A preflight runs nothing.
    assert_eq!(counts(&env.store), executed(0));

    let post = |key: &str| {
        raw_request(
            &server.addr,
            "POST",
            "/v1/tools/search_docs",
            &[
                ("Origin", APP),
                ("Content-Type", "application/json"),
                ("Idempotency-Key", key),
            ],
            &body,
        )
    };
    let first = post("\"cors-1\"");
    assert_eq!(first.status, 200, "{first}");
    assert_eq!(
        first.header("Access-Control-Allow-Origin"),
        Some(APP),
        "{first}"
    );
    assert!(
        listed(&first, "Vary").iter().any(|v| v == "origin"),
        "{first}"
    );
    assert_exposed(
        &first,
        &["Idempotency-Key", "RateLimit", "RateLimit-Policy"],
    );
    // Not sent by the stateless /mcp, yet readable should a session mode send it.
    assert!(
        listed(&first, "Access-Control-Expose-Headers")
            .iter()
            .any(|e| e.eq_ignore_ascii_case("Mcp-Session-Id")),
        "{first}"
    );
    let replay = post("\"cors-1\"");
    assert_eq!(replay.status, 200, "{replay}");
    assert_eq!(
        replay.header("Idempotent-Replayed"),
        Some("true"),
        "{replay}"
    );
    assert_exposed(&replay, &["Idempotent-Replayed", "Idempotency-Key"]);
    assert_eq!(replay.body, first.body, "{replay}");

    // The quota (2 a window) spent, the refusal still reaches the app, Retry-After readable.
    let second = post("\"cors-2\"");
    assert_eq!(second.status, 200, "{second}");
    let limited = post("\"cors-3\"");
    assert_eq!(limited.status, 429, "{limited}");
    assert_eq!(
        limited.header("Access-Control-Allow-Origin"),
        Some(APP),
        "{limited}"
    );
    assert_exposed(&limited, &["Retry-After", "RateLimit", "RateLimit-Policy"]);
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn an_origin_not_allowed_is_refused_preflight_or_not() {
    let env = sample_store();
    let server = serve(&env, &["--allow-origin", APP]);
    let body = json!({"query": "signing"}).to_string();
    for origin in [
        "https://evil.example",
        "https://app.example.com.evil.example",
        "http://app.example.com",
        "https://app.example.com:8443",
        "null",
    ] {
        for path in ["/v1/tools/search_docs", "/mcp", "/health"] {
            let refused = preflight(&server.addr, path, origin, "content-type");
            let problem = refused.assert_problem(403);
            assert_eq!(problem["code"], "origin_not_allowed", "{origin}: {refused}");
            for header in [
                "Access-Control-Allow-Origin",
                "Access-Control-Allow-Methods",
                "Access-Control-Allow-Headers",
            ] {
                assert_eq!(refused.header(header), None, "{origin} {path}: {refused}");
            }
        }
        let post = raw_request(
            &server.addr,
            "POST",
            "/v1/tools/search_docs",
            &[("Origin", origin), ("Content-Type", "application/json")],
            &body,
        );
        let problem = post.assert_problem(403);
        assert_eq!(problem["code"], "origin_not_allowed", "{post}");
        assert_eq!(post.header("Access-Control-Allow-Origin"), None, "{post}");
    }
    assert_eq!(counts(&env.store), executed(0));
}

#[test]
fn a_preflight_needs_no_token_and_the_token_check_stays_readable() {
    let env = sample_store();
    let tokens = tokens_file(&env, &[("cors-app-token-0123456789", "app")]);
    let server = serve(
        &env,
        &[
            "--allow-origin",
            APP,
            "--tokens",
            tokens.to_str().expect("utf-8"),
        ],
    );
    for path in ["/v1/tools/search_docs", "/mcp", "/metrics"] {
        let answered = preflight(&server.addr, path, APP, "authorization,content-type");
        assert_preflight_allowed(&answered, APP);
    }
    let body = json!({"query": "rotate the signing key"}).to_string();
    let post = |headers: &[(&str, &str)]| {
        let mut all = vec![("Origin", APP), ("Content-Type", "application/json")];
        all.extend_from_slice(headers);
        raw_request(&server.addr, "POST", "/v1/tools/search_docs", &all, &body)
    };
    // Without the token: refused, and the app can read why.
    let refused = post(&[]);
    let problem = refused.assert_problem(401);
    assert_eq!(problem["code"], "unauthorized", "{refused}");
    assert_eq!(
        refused.header("Access-Control-Allow-Origin"),
        Some(APP),
        "{refused}"
    );
    assert_exposed(&refused, &["WWW-Authenticate"]);
    assert_eq!(counts(&env.store), executed(0));
    // With it: served.
    let served = post(&[("Authorization", "Bearer cors-app-token-0123456789")]);
    assert_eq!(served.status, 200, "{served}");
    assert_eq!(
        served.header("Access-Control-Allow-Origin"),
        Some(APP),
        "{served}"
    );
    assert!(served.json()["hits"].is_array(), "{served}");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn an_options_request_that_is_no_preflight_is_a_method_not_allowed() {
    let env = sample_store();
    let server = serve(&env, &["--allow-origin", APP]);
    // No Access-Control-Request-Method: no preflight, so the routes answer it, with a 405 and
    // the methods they do serve, with an Origin or without.
    let plain = raw_request(&server.addr, "OPTIONS", "/v1/tools/search_docs", &[], "");
    let problem = plain.assert_problem(405);
    assert_eq!(problem["code"], "method_not_allowed", "{plain}");
    assert_eq!(plain.header("Allow"), Some("POST"), "{plain}");
    assert_eq!(plain.header("Access-Control-Allow-Origin"), None, "{plain}");
    let from_app = raw_request(&server.addr, "OPTIONS", "/mcp", &[("Origin", APP)], "");
    let problem = from_app.assert_problem(405);
    assert_eq!(problem["code"], "method_not_allowed", "{from_app}");
    assert_eq!(from_app.header("Allow"), Some("POST"), "{from_app}");
}
