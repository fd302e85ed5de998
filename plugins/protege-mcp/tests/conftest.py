"""Real MCP servers written with the official SDK (``servers/``), run as child processes over
stdio and over streamable HTTP on loopback, and the ``Connections`` that reach them; every
fixture ends what it started, and each test checks it left no process of its own running."""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from protege_mcp.connections import Connections
from protege_mcp.settings import ServerSettings

SERVERS = Path(__file__).parent / "servers"
TOOLBOX = str(SERVERS / "toolbox.py")
PAGED = str(SERVERS / "paged.py")
# The variables a Python server needs to start the same everywhere (no locale coercion).
BASE_ENVIRON = {"LC_ALL": "C.UTF-8"}
# Long enough for a server's start-up on a loaded machine; hang cases use short timeouts.
START_SECONDS = 30.0
DEADLINE_SECONDS = 30.0


def stdio(*args: str, script: str = TOOLBOX, **settings: object) -> ServerSettings:
    """Settings of a stdio server: a script of ``servers/`` run by this interpreter."""
    options: dict[str, object] = {"env": ["LC_ALL"], "timeout_seconds": START_SECONDS}
    options.update(settings)
    return ServerSettings(command=sys.executable, args=[script, *args], **options)  # type: ignore[arg-type]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail the test, saying ``what``, after a deadline."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children() -> list[int]:
    """The live child processes of this test process."""
    found = []
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Each test ends with no child process of its own left (any left are killed, and the
    test fails)."""
    before = set(children())
    yield
    deadline = time.monotonic() + DEADLINE_SECONDS
    while (left := set(children()) - before) and time.monotonic() < deadline:
        time.sleep(0.01)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {sorted(left)}"


@pytest.fixture
def connect() -> Iterator[Callable[..., Connections]]:
    """``connect(servers, environ=...)``: a ``Connections``, closed after the test."""
    made: list[Connections] = []

    def make(servers: dict[str, ServerSettings], **options: object) -> Connections:
        options.setdefault("environ", dict(BASE_ENVIRON))
        connections = Connections(servers, **options)  # type: ignore[arg-type]
        made.append(connections)
        return connections

    yield make
    for connections in made:
        connections.close()


class HttpServer:
    """The toolbox served over streamable HTTP from a child process, on a listening socket
    this process keeps: a restarted server answers at the same address."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.listening = socket.socket()
        self.listening.bind(("127.0.0.1", 0))
        self.listening.listen(64)
        self.tls = tls
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.listening.getsockname()[1]}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        fd = self.listening.fileno()
        command = [sys.executable, TOOLBOX, "--http-fd", str(fd)]
        if self.tls:
            command += ["--tls", str(self.tls[0]), str(self.tls[1])]
        self.process = subprocess.Popen(command, pass_fds=[fd], env={**os.environ, **BASE_ENVIRON})
        wait_until(self.ready, "the HTTP server answering")

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"the HTTP server exited with status {self.process.returncode}")
        try:
            httpx.get(self.url, verify=False, timeout=1.0)
        except httpx.HTTPError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()

    def close(self) -> None:
        self.stop()
        self.listening.close()


@pytest.fixture
def http_server() -> Iterator[Callable[..., HttpServer]]:
    """``http_server(tls=None)``: the toolbox over streamable HTTP, started; stopped after."""
    made: list[HttpServer] = []

    def start(tls: tuple[Path, Path] | None = None) -> HttpServer:
        server = HttpServer(tls)
        made.append(server)
        server.start()
        return server

    yield start
    for server in made:
        server.close()


class Authority:
    """A certificate authority made for one test, and a certificate it signed for
    127.0.0.1 (``cert``, ``key``); ``ca`` is its own certificate."""

    def __init__(self, directory: Path) -> None:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "protege test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca = directory / "ca.pem"
        self.cert = directory / "server.pem"
        self.key = directory / "server.key"
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    """A certificate authority of this test's own, and a server certificate it signed."""
    return Authority(tmp_path)
