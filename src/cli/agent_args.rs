//! Arguments shared by `mcp` and `serve`: the client identity, key TTL and rate limit.

use groundidx::keys::{AgentConfig, RateLimit, parse_duration};

/// How keyed calls behave.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// How long a key's first answer is kept for replays (at least 24h)
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_ttl)]
    pub key_ttl: i64,

    /// Calls allowed per client and window, e.g. 600/60s; replays are free
    #[arg(long, value_name = "UNITS/WINDOW", default_value = "600/60s")]
    pub rate_limit: RateLimit,
}

fn parse_ttl(text: &str) -> Result<i64, String> {
    let ttl = parse_duration(text)?;
    i64::try_from(ttl.as_millis()).map_err(|_| format!("{text:?} is too long"))
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
