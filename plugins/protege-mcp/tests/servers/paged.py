"""An MCP server (the SDK's low-level ``Server``) that lists ``COUNT`` tools, ``PAGE`` a
page; with ``--loop``, its cursor comes back to the first page for ever.

    python paged.py COUNT PAGE [--loop]
"""

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

COUNT, PAGE = int(sys.argv[1]), int(sys.argv[2])
LOOP = "--loop" in sys.argv
TOOLS = [
    types.Tool(
        name=f"tool_{number}",
        description=f"Tool number {number}.",
        input_schema={"type": "object", "properties": {}},
    )
    for number in range(COUNT)
]


async def list_tools(ctx, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + PAGE
    following = str(end) if end < COUNT else ("0" if LOOP else None)
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=following)


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
