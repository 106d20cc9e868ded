"""A stdio MCP server whose tool list changes at run time, on the official Python SDK (PyPI
`mcp`): its tool `grow` adds a tool and sends `notifications/tools/list_changed`, which is how
tests/it/mcp/mod.rs checks that hermes-agent follows a server's changing tools. Run with the venv of
scripts/ci/mcp-deps.sh.
"""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("changing")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called NAME and tell the client that the tool list changed."""

    def added() -> str:
        return f"I am {name}, added at run time"

    server.add_tool(added, name=name, description=f"A tool added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
