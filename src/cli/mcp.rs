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

    #[command(flatten)]
    pub embed: crate::cli::embed_args::EmbedArgs,
}

pub fn run(cli: &Cli, args: &Args) -> Result<ExitCode> {
    let loaded = crate::cli::embed_args::load_query_model(&cli.store_dir(), &args.embed)?;
    crate::cli::embed_args::print_query_model(&loaded);
    let query = server::QueryEmbedding {
        loaded: loaded.model,
        configured: args.embed.model_config()?,
        problem: loaded.problem,
    };
    server::serve_stdio(
        &cli.store_dir(),
        args.agent.config(),
        &args.agent.client_id,
        query,
        cli.shared_ledger(false, 8)?
            .map(|ledger| groundidx::server::SharedServing {
                ledger,
                store: groundidx::store::StoreConfig::default(),
            }),
    )?;
    Ok(ExitCode::Success)
}
