"""The official MCP Python SDK client in one protocol mode, driven by tests/it/clients.rs.

Usage: python client.py PLAN.json
PLAN: {"mode": "legacy" | "2026-07-28", "stdio": {"command", "args", "env"}} or {"mode", "http": URL},
      plus "calls": [{"name", "arguments", "_meta"}].
Prints one JSON object: {"mode", "results": [the CallToolResult of each call, as JSON]}.
"""

import asyncio
import json
import os
import sys

from mcp import StdioServerParameters
from mcp.client.client import Client


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
    async with Client(server, mode=plan["mode"]) as client:
        for call in plan["calls"]:
            result = await client.call_tool(call["name"], call["arguments"], meta=call.get("_meta"))
            results.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    print(json.dumps({"mode": plan["mode"], "results": results}))


asyncio.run(main())
