"""``[plugins.protege-web]`` in ``protege.toml``: the limits of ``web_fetch`` and
``web_search``, declared through the ``plugin_settings`` hook so that protege checks the
table as it checks its own (an unknown key, a value of the wrong TOML type, or one a limit
refuses is named, and the web tools are not registered).

    [plugins.protege-web]
    timeout_seconds = 15.0          # one fetch (redirects included) or one search, in all
    max_bytes = 2097152             # of a body, after decompression
    max_chars = 20000               # of the text handed to the model
    max_redirects = 5
    allow_networks = []             # private ranges web_fetch may reach (CIDR)
    search_url = "https://html.duckduckgo.com/html/"
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from protege import RunContext

DISTRIBUTION = "protege-web"
DEFAULT_SEARCH_URL = "https://html.duckduckgo.com/html/"
MIB = 1024 * 1024


def _check_networks(instance: object, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    for item in value:
        try:
            ipaddress.ip_network(item, strict=True)
        except ValueError:
            raise ValueError(
                f"allow_networks: {item!r} is not a network in CIDR form (such as 10.1.0.0/16)"
            ) from None


def _check_http_url(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{attribute.name} must be an http or https URL, not {value!r}")


@attrs.frozen(kw_only=True)
class WebSettings:
    """The limits of the ``web_fetch`` and ``web_search`` tools.

    One fetch (every redirect included) or one search has ``timeout_seconds`` in all; a body
    is read up to ``max_bytes`` (after decompression) and the text handed to the model up to
    ``max_chars``. ``allow_networks`` lists address ranges (CIDR) the SSRF guard lets
    ``web_fetch`` reach although they are private or reserved: the operator's exception, for
    an intranet (and for tests on loopback). ``search_url`` is DuckDuckGo's HTML endpoint.
    """

    timeout_seconds: float = attrs.field(
        default=15.0, validator=[attrs.validators.gt(0), attrs.validators.le(120)]
    )
    max_bytes: int = attrs.field(default=2 * MIB, validator=attrs.validators.ge(1024))
    max_chars: int = attrs.field(default=20_000, validator=attrs.validators.ge(100))
    max_redirects: int = attrs.field(
        default=5, validator=[attrs.validators.ge(0), attrs.validators.le(20)]
    )
    allow_networks: tuple[str, ...] = attrs.field(default=(), validator=_check_networks)
    search_url: str = attrs.field(default=DEFAULT_SEARCH_URL, validator=_check_http_url)


def settings_of(context: RunContext) -> WebSettings:
    """The web settings of the run's installation, as protege checked them: the defaults
    when ``protege.toml`` has no ``[plugins.protege-web]`` (or the configuration was never
    checked against the declaration, as in a context made by hand)."""
    found = context.config.plugin_settings(DISTRIBUTION)
    return found if isinstance(found, WebSettings) else WebSettings()
