"""``[plugins.dashboard]`` in ``protege.toml``: where the dashboard listens, and the secrets
of its mail ingresses (each named by the environment variable that holds it).

    [plugins.dashboard]
    host = "127.0.0.1"          # the default: only this machine
    port = 8025
    secure_cookies = false      # true behind HTTPS: cookies are then sent over HTTPS only
    allowed_hosts = ["dash.example.com"]   # Host names answered; default below
    relay_password_env = "PROTEGE_RELAY_PASSWORD"       # POST /ingress/relay
    postmark_password_env = "PROTEGE_POSTMARK_PASSWORD" # POST /ingress/postmark
    sendgrid_password_env = "PROTEGE_SENDGRID_PASSWORD" # POST /ingress/sendgrid
    mailgun_signing_key_env = "MAILGUN_SIGNING_KEY"     # POST /ingress/mailgun

An ingress whose secret is not set in the environment is closed (it answers 404). Without
``allowed_hosts``, a dashboard on a loopback address answers only requests for 127.0.0.1,
localhost and ::1 (so a web page cannot reach it through DNS rebinding), and one on any
other address answers any Host.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

import attrs
import cattrs

from protege import ProtegeError

PLUGIN_NAME = "dashboard"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


@attrs.frozen(kw_only=True)
class DashboardSettings:
    """The dashboard's settings, with the ingress secrets read from the environment."""

    host: str = "127.0.0.1"
    port: int = 8025
    secure_cookies: bool = False
    allowed_hosts: tuple[str, ...] | None = None
    session_hours: float = attrs.field(default=12.0, validator=attrs.validators.gt(0))
    login_attempts: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    login_window_seconds: float = attrs.field(default=900.0, validator=attrs.validators.gt(0))
    mailgun_max_age_seconds: float = attrs.field(default=300.0, validator=attrs.validators.gt(0))
    relay_password_env: str = "PROTEGE_RELAY_PASSWORD"
    postmark_password_env: str = "PROTEGE_POSTMARK_PASSWORD"
    sendgrid_password_env: str = "PROTEGE_SENDGRID_PASSWORD"
    mailgun_signing_key_env: str = "MAILGUN_SIGNING_KEY"
    # Read from the environment variables above when the settings are read; kept out of repr.
    secrets: dict[str, str] = attrs.field(factory=dict, repr=False, hash=False)

    def hosts(self) -> list[str]:
        """The Host names the dashboard answers."""
        if self.allowed_hosts is not None:
            return list(self.allowed_hosts)
        try:
            loopback = ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        return list(LOOPBACK_NAMES) if loopback else ["*"]

    def secret(self, ingress: str) -> str | None:
        """The password (or Mailgun signing key) of ``ingress``; None when it is closed."""
        return self.secrets.get(ingress) or None


_converter = cattrs.Converter(forbid_extra_keys=True)


def read_settings(
    table: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> DashboardSettings:
    """The settings in ``table`` (the ``[plugins.dashboard]`` table), secrets from
    ``environ``; a clear ``ProtegeError`` for keys or values the dashboard cannot use."""
    environ = os.environ if environ is None else environ
    if "secrets" in table:
        raise ProtegeError("[plugins.dashboard]: secrets are read from the environment")
    try:
        settings = _converter.structure(dict(table), DashboardSettings)
    except cattrs.BaseValidationError as error:
        problems = "; ".join(cattrs.transform_error(error, path="[plugins.dashboard]"))
        raise ProtegeError(
            f"protege.toml has settings the dashboard cannot use: {problems}"
        ) from None
    names = {
        "relay": settings.relay_password_env,
        "postmark": settings.postmark_password_env,
        "sendgrid": settings.sendgrid_password_env,
        "mailgun": settings.mailgun_signing_key_env,
    }
    secrets = {ingress: environ[name] for ingress, name in names.items() if environ.get(name)}
    return attrs.evolve(settings, secrets=secrets)
