//! Arguments shared by `mcp` and `serve`: the client identity, key TTL and rate limit.

use groundidx::agent::{AgentConfig, MIN_TTL_MS, RateLimit};
use groundidx::clock::parse_duration;

/// How keyed calls behave.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Keys and quotas")]
pub struct AgentArgs {
    /// The client identity that keys and quotas belong to (over HTTP with --tokens, each
    /// token's client instead)
    #[arg(
        long,
        value_name = "ID",
        env = "GROUNDIDX_CLIENT_ID",
        default_value = "local"
    )]
    pub client_id: String,

    /// How long a key's first answer is kept for replays (at least 24h)
    #[arg(long, value_name = "DURATION", env = "GROUNDIDX_KEY_TTL", default_value = "7d", value_parser = parse_ttl)]
    pub key_ttl: i64,

    /// Calls allowed per client and window, e.g. 600/60s; replays are free
    #[arg(
        long,
        value_name = "UNITS/WINDOW",
        env = "GROUNDIDX_RATE_LIMIT",
        default_value = "600/60s"
    )]
    pub rate_limit: RateLimit,
}

pub fn parse_ttl(text: &str) -> Result<i64, String> {
    let ttl = parse_duration(text)?;
    let ms = i64::try_from(ttl.as_millis()).map_err(|_| format!("{text:?} is too long"))?;
    if ms < MIN_TTL_MS {
        return Err(format!(
            "{text:?} is below the 24h floor: a retry a day later must still be recognised"
        ));
    }
    Ok(ms)
}

impl AgentArgs {
    pub fn config(&self) -> AgentConfig {
        AgentConfig {
            ttl_ms: self.key_ttl,
            rate_limit: self.rate_limit,
            ..AgentConfig::default()
        }
    }
}
