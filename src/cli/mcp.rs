//! `groundidx mcp`

use groundidx::Result;
use groundidx::server;

use crate::cli::agent_args::AgentArgs;
use crate::cli::{Cli, ExitCode};

/// Serve the search tools to an agent over MCP on stdin/stdout.
///
/// For Claude Desktop, Cursor or any MCP client that starts a command. Tools: search_docs and
/// get_chunk, both read-only. Only JSON-RPC goes to stdout; logs go to stderr.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    server::serve_stdio(&cli.store_dir(), args.agent.config(), &args.agent.client_id)?;
    Ok(ExitCode::Success)
}
