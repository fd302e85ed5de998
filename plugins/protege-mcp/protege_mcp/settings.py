"""``[plugins.protege-mcp]`` in ``protege.toml``: the MCP servers whose tools protege offers,
as frozen attrs classes protege checks the table against (an unknown key, a value of the
wrong TOML type, or one a check refuses is named, and the plugin registers nothing).

    [plugins.protege-mcp]
    list_timeout_seconds = 30        # sync's listing of one server, start-up included

    [plugins.protege-mcp.servers.files]      # a stdio server: command, args, cwd, env
    command = "python3"
    args = ["-m", "files_server"]
    cwd = "/srv/files"
    env = ["FILES_ROOT", "PATH"]             # passed by name; the server gets nothing else
    tools = ["read_file", "list_dir"]        # allow-list of the server's tool names
    prefix = "files_"
    timeout_seconds = 30                     # one call
    max_result_chars = 20000                 # text handed to the model
    max_result_bytes = 2097152               # all one call may bring back, on the wire

    [plugins.protege-mcp.servers.crm]        # a streamable HTTP server: url, header_env, ca_file
    url = "https://crm.example.com/mcp"
    header_env = { Authorization = "CRM_MCP_AUTHORIZATION" }
    ca_file = "/etc/ssl/private-ca.pem"

No secret is ever written here: a stdio server's variables and an HTTP server's header
values are read from the environment, by the names given, when the server is connected.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

DISTRIBUTION = "protege-mcp"
MIB = 1024 * 1024

SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
PREFIX = re.compile(r"^([a-z][a-z0-9_]{0,31})?$")
# Headers the transport itself sets; a configured value would break the protocol.
RESERVED_HEADERS = frozenset(
    {
        "accept",
        "connection",
        "content-length",
        "content-type",
        "host",
        "last-event-id",
        "mcp-protocol-version",
        "mcp-session-id",
        "transfer-encoding",
    }
)
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
MAX_TIMEOUT_SECONDS = 600.0


def _table(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of a table (no tool's run can change what another run reads)."""
    return MappingProxyType(dict(value))


def _seconds(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not (0 < value <= MAX_TIMEOUT_SECONDS):  # also NaN and infinity
        raise ValueError(
            f"{attribute.name}: must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} "
            f"seconds, not {value!r}"
        )


def _optional_text(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and (not value or "\0" in value):
        raise ValueError(f"{attribute.name}: must be a non-empty string without NUL")


def _arguments(instance: object, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    if any("\0" in item for item in value):
        raise ValueError(f"{attribute.name}: an argument may not hold a NUL character")


def _variables(instance: object, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    for name in value:
        if VARIABLE_NAME.match(name):
            continue
        if "=" in name:  # NAME=value: the value may be a secret, and is never echoed
            named = name.split("=", 1)[0]
            raise ValueError(
                f"{attribute.name}: an entry is a variable's name, not NAME=value (the entry "
                f"for {named[:64]!r}); set the variable in protege's environment"
            )
        raise ValueError(f"{attribute.name}: {name[:64]!r} is not the name of a variable")


def _tool_names(
    instance: object, attribute: attrs.Attribute, value: tuple[str, ...] | None
) -> None:
    if value is not None and any(not name or len(name) > 128 for name in value):
        raise ValueError(f"{attribute.name}: a tool name is 1 to 128 characters")


def _prefix(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not PREFIX.match(value):
        raise ValueError(
            f"{attribute.name}: {value!r} must be empty or start with a lowercase letter "
            "followed by lowercase letters, digits and underscores (at most 32)"
        )


def _headers(instance: object, attribute: attrs.Attribute, value: Mapping[str, str]) -> None:
    for header, variable in value.items():
        if not HEADER_NAME.match(header):
            raise ValueError(f"{attribute.name}: {header!r} is not a header name")
        if header.lower() in RESERVED_HEADERS:
            raise ValueError(f"{attribute.name}: {header} is set by the transport itself")
        if not isinstance(variable, str) or not VARIABLE_NAME.match(variable):
            raise ValueError(
                f"{attribute.name}.{header}: must name the environment variable holding the "
                "header's value (the value itself is never written in protege.toml)"
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a URL's host) names this machine: localhost, 127.0.0.0/8 or ::1."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def shown_url(url: str) -> str:
    """``url`` as errors and logs may show it: scheme, host, port and path, never a user,
    password, query or fragment (any of which may carry a secret)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(an unreadable URL)"
    if ":" in host:
        host = f"[{host}]"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def _url(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is None:
        return
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise ValueError(f"{attribute.name}: {shown_url(value)!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(
            f"{attribute.name}: must be an http or https URL with a host, not {shown_url(value)!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{attribute.name}: a URL may not carry a user or password (a secret is never "
            "written in protege.toml); send credentials in a header named in header_env"
        )
    if parts.scheme == "http" and not is_loopback(host):
        raise ValueError(
            f"{attribute.name}: plain http is allowed only to this machine (localhost, "
            f"127.0.0.1, ::1), since header values would cross the network unencrypted; "
            f"use https for {shown_url(value)!r}"
        )


@attrs.frozen(kw_only=True)
class ServerSettings:
    """``[plugins.protege-mcp.servers.NAME]``: one MCP server and the limits of its calls.

    A stdio server is a ``command`` (looked up on the host's ``PATH`` when it has no
    slash) with ``args``, run in ``cwd``, given exactly the environment variables ``env``
    names (with the host's values) and nothing else. A streamable HTTP server is a
    ``url`` (https, or http to this machine only), sent the headers ``header_env`` maps
    to the variables holding their values, its TLS certificate verified against the
    system's authorities or, when given, ``ca_file`` alone. Exactly one of ``command``
    and ``url`` is given.

    ``tools`` (when given) lists the server's tool names protege offers, all others left
    out; ``prefix`` starts the id of each. One call has ``timeout_seconds``; its text
    handed to the model is cut at ``max_result_chars``, and everything it brings back,
    as the server sends it, may not pass ``max_result_bytes``.
    """

    command: str | None = attrs.field(default=None, validator=_optional_text)
    args: tuple[str, ...] = attrs.field(default=(), validator=_arguments)
    cwd: str | None = attrs.field(default=None, validator=_optional_text)
    env: tuple[str, ...] = attrs.field(default=(), validator=_variables)
    url: str | None = attrs.field(default=None, validator=_url)
    header_env: Mapping[str, str] = attrs.field(
        factory=dict, converter=_table, validator=_headers, hash=False
    )
    ca_file: str | None = attrs.field(default=None, validator=_optional_text)
    tools: tuple[str, ...] | None = attrs.field(default=None, validator=_tool_names)
    prefix: str = attrs.field(default="", validator=_prefix)
    timeout_seconds: float = attrs.field(default=30.0, validator=_seconds)
    max_result_chars: int = attrs.field(
        default=20_000, validator=[attrs.validators.ge(100), attrs.validators.le(10_000_000)]
    )
    max_result_bytes: int = attrs.field(
        default=2 * MIB, validator=[attrs.validators.ge(1024), attrs.validators.le(256 * MIB)]
    )

    def __attrs_post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What makes this server's settings unusable together, or None."""
        if (self.command is None) == (self.url is None):
            return "give either command (a stdio server) or url (a streamable HTTP server), " + (
                "not both" if self.command is not None else "neither was given"
            )
        if self.command is not None:
            stray = [
                name
                for name, given in (("header_env", self.header_env), ("ca_file", self.ca_file))
                if given
            ]
            if stray:
                return f"{', '.join(stray)}: only for a server reached by url, not a command"
        else:
            stray = [
                name
                for name, given in (("args", self.args), ("cwd", self.cwd), ("env", self.env))
                if given
            ]
            if stray:
                return f"{', '.join(stray)}: only for a server run by command, not a url"
            if self.ca_file is not None and not str(self.url).startswith("https://"):
                return "ca_file: only for an https url"
        return None

    @property
    def kind(self) -> Literal["stdio", "http"]:
        """How protege reaches the server: ``"stdio"`` (a command) or ``"http"`` (a url)."""
        return "stdio" if self.command is not None else "http"

    def allows(self, tool: str) -> bool:
        """Whether the allow-list (``tools``) lets protege offer the server's tool ``tool``."""
        return self.tools is None or tool in self.tools


def _servers(instance: object, attribute: attrs.Attribute, value: Mapping[str, Any]) -> None:
    for name, server in value.items():
        if not SERVER_NAME.match(name):
            raise ValueError(
                f"servers.{name}: a server's name is a lowercase letter followed by up to 31 "
                "lowercase letters, digits, '-' and '_'"
            )
        if not isinstance(server, ServerSettings):
            raise ValueError(f"servers.{name}: must be a table of settings")


@attrs.frozen(kw_only=True)
class McpSettings:
    """``[plugins.protege-mcp]``: the configured MCP servers by name
    (``[plugins.protege-mcp.servers.NAME]``) and how long ``protege sync`` waits for the
    listing of one server's tools, its start-up included."""

    list_timeout_seconds: float = attrs.field(default=30.0, validator=_seconds)
    servers: Mapping[str, ServerSettings] = attrs.field(
        factory=dict, converter=_table, validator=_servers, hash=False
    )
