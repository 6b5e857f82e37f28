"""The official MCP Python SDK client in one protocol mode, driven by tests/it/clients.rs.

Usage: python client.py PLAN.json
PLAN: {"mode": "legacy" | "2026-07-28", "stdio": {"command", "args", "env"}} or {"mode", "http": URL},
      plus "calls": [{"name", "arguments", "_meta"}], and optionally "resources": {"read": [uri]}.
An argument "$first_hit" stands for the chunk_id of the first hit of the latest search.
Prints one JSON object: {"mode", "results": [the CallToolResult of each call, as JSON],
"resources": {"list", "templates", "reads": [{"contents"} or {"error": {"code", "message"}}]} or null}.
"""

import asyncio
import json
import os
import sys

from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError


def dump(model) -> dict:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        plan = json.load(file)
    if "stdio" in plan:
        server = StdioServerParameters(
            command=plan["stdio"]["command"],
            args=plan["stdio"]["args"],
            env={**os.environ, **plan["stdio"].get("env", {})},
        )
    else:
        server = plan["http"]
    results = []
    resources = None
    first_hit = None
    async with Client(server, mode=plan["mode"]) as client:
        for call in plan["calls"]:
            arguments = {k: first_hit if v == "$first_hit" else v for k, v in call["arguments"].items()}
            result = dump(await client.call_tool(call["name"], arguments, meta=call.get("_meta")))
            hits = (result.get("structuredContent") or {}).get("hits") or []
            first_hit = hits[0]["chunk_id"] if hits else first_hit
            results.append(result)
        if "resources" in plan:
            listed = dump(await client.list_resources())
            templates = dump(await client.list_resource_templates())
            reads = []
            for uri in plan["resources"]["read"]:
                try:
                    reads.append(dump(await client.read_resource(uri)))
                except MCPError as error:
                    reads.append({"error": {"code": error.error.code, "message": error.error.message}})
            resources = {"list": listed, "templates": templates, "reads": reads}
    print(json.dumps({"mode": plan["mode"], "results": results, "resources": resources}))


asyncio.run(main())
