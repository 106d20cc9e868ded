"""Drive `hermes-agent mcp` with the official Python MCP client (PyPI `mcp`), as a desktop
assistant or an editor would: start it over stdio, list its tools, remember then recall a fact,
run a task, and make one bad call. Prints one JSON object with what it saw; the Rust test
(tests/it/mcp/mod.rs) checks it. Run with the venv of scripts/ci/mcp-deps.sh.

Usage: client.py BINARY CONFIG DATA_DIR XDG_CONFIG_HOME
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def structured(result):
    """The structured content of a successful call; fails loudly on an error result."""
    if result.is_error:
        raise SystemExit(f"unexpected error result: {result.content}")
    return result.structured_content


async def main(binary, config, data_dir, xdg):
    params = StdioServerParameters(
        command=binary,
        args=["--config", config, "--data-dir", data_dir, "mcp"],
        env={"RUST_LOG": "warn", "XDG_CONFIG_HOME": xdg},
    )
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            listed = await session.list_tools()
            seen["tools"] = [t.name for t in listed.tools]
            seen["schemas"] = {t.name: t.input_schema for t in listed.tools}

            made = structured(await session.call_tool(
                "remember", {"text": "The cat is called Miso", "tags": ["pets"]}))
            seen["remembered"] = made
            found = structured(await session.call_tool("recall", {"query": "cat Miso"}))
            seen["recalled"] = [f["text"] for f in found["facts"]]

            ran = structured(await session.call_tool("run_task", {"task": "say hello over MCP"}))
            seen["run"] = ran
            task = structured(await session.call_tool("get_task", {"id": ran["task_id"]}))
            seen["task_origin"] = task["task"]["origin"]

            bad = await session.call_tool("recall", {"query": 7, "extra": True})
            seen["bad"] = {
                "is_error": bad.is_error,
                "text": " ".join(c.text for c in bad.content if c.type == "text"),
            }
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
