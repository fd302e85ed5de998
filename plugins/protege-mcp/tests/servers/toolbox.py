"""An MCP server of the official SDK with well-behaved and hostile tools, for the tests.

Run over stdio: ``python toolbox.py``. Over streamable HTTP on a listening socket the test
made and handed down: ``python toolbox.py --http-fd N [--tls CERT KEY]``.
"""

import argparse
import base64
import os
import socket
import sys
import time

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

# A valid 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)

server = MCPServer("toolbox")
# The wire to the client: the SDK points fd 1 at stderr while it serves, so hostile tools
# write to a copy of the real one, taken before.
WIRE = os.dup(sys.stdout.fileno())


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def environ() -> dict[str, str]:
    """The server's whole environment."""
    return dict(os.environ)


@server.tool()
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def image() -> list[types.ContentBlock]:
    """A caption and a picture."""
    return [
        types.TextContent(text="a red dot"),
        types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png"),
    ]


@server.tool()
def fail(message: str) -> str:
    """Fail, saying why."""
    raise ToolError(message)


@server.tool()
async def hang() -> str:
    """Never answer (the server stays responsive otherwise)."""
    await anyio.sleep_forever()
    return "never"


@server.tool()
async def freeze() -> str:
    """Block the whole server: it answers nothing more."""
    time.sleep(3600)
    return "never"


@server.tool()
def crash() -> str:
    """Exit at once, mid-call."""
    os._exit(3)


@server.tool()
def big(size: int) -> str:
    """A result of ``size`` characters."""
    return "x" * size


@server.tool()
async def flood(size: int) -> str:
    """Write one enormous line to stdout, outside the protocol, then never answer."""
    os.write(WIRE, b"x" * size)
    await anyio.sleep_forever()
    return "never"


@server.tool()
async def malformed() -> str:
    """Write a line that is not JSON-RPC, then never answer."""
    os.write(WIRE, b"this is not json-rpc\n")
    await anyio.sleep_forever()
    return "never"


@server.tool()
def shout(lines: int, width: int) -> str:
    """Write ``lines`` lines of ``width`` characters to stderr."""
    for number in range(lines):
        sys.stderr.write(f"{number:05d}" + "e" * max(0, width - 5) + "\n")
    sys.stderr.flush()
    return "shouted"


@server.tool()
def spawn() -> int:
    """Start a long-lived child process (in the server's process group); its pid."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    return child.pid


@server.tool()
def headers(ctx: Context) -> dict[str, str]:
    """The HTTP headers of this request (over HTTP only)."""
    return {name.lower(): value for name, value in (ctx.headers or {}).items()}


def serve_http(fd: int, tls: list[str] | None) -> None:
    import uvicorn

    app = server.streamable_http_app()
    app = _malformed_answers(app)
    listening = socket.socket(fileno=fd)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    if tls:
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", ssl_certfile=tls[0], ssl_keyfile=tls[1]
        )
    uvicorn.Server(config).run(sockets=[listening])


def _malformed_answers(app):
    """Answer a call of the tool ``garbled`` with a body that is not JSON-RPC."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if b'"garbled"' in body:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"jsonrpc": "2.0", "id": {'})
            return None
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return wrapped


@server.tool()
def garbled() -> str:
    """Over HTTP, answered with a body that is not JSON-RPC."""
    return "not this"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-fd", type=int)
    parser.add_argument("--tls", nargs=2)
    options = parser.parse_args()
    if options.http_fd is None:
        server.run()
    else:
        serve_http(options.http_fd, options.tls)
