// The official MCP TypeScript SDK client, as the MCP Inspector uses it: connect, list the tools
// (which arms the SDK's output-schema validation), then make each call of a plan and print what
// the client saw.
//
// Usage: node client.mjs PLAN.json
// PLAN: {"stdio": {"command", "args", "env"}} or {"http": "http://127.0.0.1:PORT/mcp"},
//       plus "calls": [{"name", "arguments", "_meta"}], and optionally "resources": {"read": [uri]}.
// An argument "$first_hit" stands for the chunk_id of the first hit of the latest search.
// Prints one JSON object on stdout: {"protocolVersion", "tools": [names],
//   "results": [{"isError", "text", "structuredContent", "thrown"}], "resources": {"list",
//   "templates", "reads": [{"contents", "thrown", "code"}]} or null}; "thrown" is the message
// of an exception the SDK raised instead of returning the result (such as a failed output-schema
// check), which is what a user of the client would see.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const transport = plan.stdio
  ? new StdioClientTransport({
      command: plan.stdio.command,
      args: plan.stdio.args,
      env: { ...process.env, ...(plan.stdio.env ?? {}) },
      stderr: "inherit",
    })
  : new StreamableHTTPClientTransport(new URL(plan.http));
const client = new Client({ name: "groundidx-ts-test", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const results = [];
let firstHit = null;
const substitute = (args) =>
  Object.fromEntries(Object.entries(args).map(([k, v]) => [k, v === "$first_hit" ? firstHit : v]));
for (const call of plan.calls) {
  try {
    const result = await client.callTool({
      name: call.name,
      arguments: substitute(call.arguments),
      _meta: call._meta,
    });
    firstHit = result.structuredContent?.hits?.[0]?.chunk_id ?? firstHit;
    results.push({
      isError: result.isError === true,
      text: result.content?.[0]?.text ?? null,
      structuredContent: result.structuredContent ?? null,
      thrown: null,
    });
  } catch (error) {
    results.push({ isError: null, text: null, structuredContent: null, thrown: String(error?.message ?? error) });
  }
}

let resources = null;
if (plan.resources) {
  const list = (await client.listResources()).resources;
  const templates = (await client.listResourceTemplates()).resourceTemplates;
  const reads = [];
  for (const uri of plan.resources.read) {
    try {
      reads.push({ contents: (await client.readResource({ uri })).contents, thrown: null, code: null });
    } catch (error) {
      reads.push({ contents: null, thrown: String(error?.message ?? error), code: error?.code ?? null });
    }
  }
  resources = { list, templates, reads };
}

console.log(JSON.stringify({ tools: tools.map((t) => t.name), results, resources }));
await client.close();
