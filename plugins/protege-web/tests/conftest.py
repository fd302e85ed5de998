"""The internet, faked at the protocol boundary: real HTTP servers on loopback addresses."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

Respond = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    """Hands each GET to the server's ``respond`` function, after recording it."""

    server: LoopbackServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.requests.append({"path": self.path, "host": self.headers.get("Host")})
        # The client may stop reading, as it should at its cap.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.server.respond(self)

    def send(self, chunk: bytes) -> None:
        """Write part of a body, counting what the client accepted."""
        self.wfile.write(chunk)
        self.server.sent += len(chunk)

    def answer(
        self, body: bytes, content_type: str = "text/html; charset=utf-8", **headers: str
    ) -> None:
        """A complete 200 answer (``content_encoding="gzip"`` adds a Content-Encoding)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.send(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class LoopbackServer(ThreadingHTTPServer):
    """One test's web server; ``stop`` ends any answer still trickling out."""

    daemon_threads = True

    def __init__(self, host: str, port: int, respond: Respond) -> None:
        super().__init__((host, port), Handler)
        self.respond = respond
        self.requests: list[dict[str, str | None]] = []
        self.sent = 0
        self.stop = threading.Event()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}"


@pytest.fixture
def serve():
    """Start a server: ``serve(respond, host="127.0.0.1", port=0)``; all stop after the test."""
    servers: list[LoopbackServer] = []

    def start(respond: Respond, host: str = "127.0.0.1", port: int = 0) -> LoopbackServer:
        server = LoopbackServer(host, port, respond)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop.set()
        server.shutdown()
        server.server_close()
