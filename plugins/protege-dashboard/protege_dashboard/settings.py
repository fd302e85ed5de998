"""``[plugins.protege-dashboard]`` in ``protege.toml``: where the dashboard listens, and the
environment variables holding the secrets of its mail ingresses.

    [plugins.protege-dashboard]
    host = "127.0.0.1"          # the default: only this machine
    port = 8025
    secure_cookies = false      # true behind HTTPS: cookies are then sent over HTTPS only
    allowed_hosts = ["dash.example.com"]   # Host names answered; default below
    relay_password_env = "PROTEGE_RELAY_PASSWORD"       # POST /ingress/relay
    postmark_password_env = "PROTEGE_POSTMARK_PASSWORD" # POST /ingress/postmark
    sendgrid_password_env = "PROTEGE_SENDGRID_PASSWORD" # POST /ingress/sendgrid
    mailgun_signing_key_env = "MAILGUN_SIGNING_KEY"     # POST /ingress/mailgun
    mailgun_max_age_seconds = 300.0   # a signed timestamp further from now is refused
    trust_provider_verdicts = ["mailgun"]   # whose own SPF/DKIM results count; none by default

The plugin declares ``DashboardSettings`` through the ``plugin_settings`` hook, so protege
checks the table when it builds the manifest, as it checks its own: an unknown key, a wrong
type or a secret written in the file is refused, and the dashboard will not start.

``trust_provider_verdicts`` names the provider ingresses (postmark, sendgrid, mailgun) whose
own SPF and DKIM results may prove a sender, read from a request whose password or signature
was checked. Without it only protege's own DKIM check of the raw message counts, and a
message rebuilt from a provider's parsed fields proves nothing.

An ingress whose secret is not set in the environment is closed (it answers 404). Without
``allowed_hosts``, a dashboard on a loopback address answers only requests for 127.0.0.1,
localhost and ::1 (so a web page cannot reach it through DNS rebinding), and one on any
other address answers any Host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from protege import ProtegeError

if TYPE_CHECKING:
    from protege import admin

DISTRIBUTION = "protege-dashboard"
OLD_TABLE = "dashboard"  # the table's name before plugins declared their settings
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
INGRESSES = ("relay", "postmark", "sendgrid", "mailgun")
PROVIDERS = ("postmark", "sendgrid", "mailgun")  # the ingresses that report their own checks


@attrs.frozen(kw_only=True)
class DashboardSettings:
    """The dashboard's settings, as ``[plugins.protege-dashboard]`` holds them: secrets are
    never here, only the names of the environment variables that hold them."""

    host: str = "127.0.0.1"
    port: int = attrs.field(
        default=8025, validator=[attrs.validators.ge(0), attrs.validators.le(65535)]
    )
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
    trust_provider_verdicts: tuple[str, ...] = attrs.field(
        default=(),
        validator=attrs.validators.deep_iterable(attrs.validators.in_(PROVIDERS)),
    )

    def hosts(self) -> list[str]:
        """The Host names the dashboard answers."""
        if self.allowed_hosts is not None:
            return list(self.allowed_hosts)
        try:
            import ipaddress  # only when the dashboard starts, not for every manifest

            loopback = ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        return list(LOOPBACK_NAMES) if loopback else ["*"]

    def secrets(self, environ: Mapping[str, str] | None = None) -> IngressSecrets:
        """The ingresses' secrets, read from the variables named here in ``environ`` (the
        process's environment by default)."""
        environ = os.environ if environ is None else environ
        names = {
            "relay": self.relay_password_env,
            "postmark": self.postmark_password_env,
            "sendgrid": self.sendgrid_password_env,
            "mailgun": self.mailgun_signing_key_env,
        }
        return IngressSecrets(
            {ingress: environ[n] for ingress, n in names.items() if environ.get(n)}
        )


@attrs.frozen(repr=False)
class IngressSecrets:
    """The password (or Mailgun signing key) of each ingress that has one; never shown."""

    values: Mapping[str, str]

    def get(self, ingress: str) -> str | None:
        """The secret of ``ingress``; None when it is closed."""
        return self.values.get(ingress) or None

    def __repr__(self) -> str:
        return f"IngressSecrets(set for: {', '.join(sorted(self.values)) or 'none'})"


def read_settings(installation: admin.Installation) -> DashboardSettings:
    """The dashboard's settings in ``installation``, as protege checked them (the defaults
    when ``protege.toml`` has no table); ``ProtegeError`` with protege's reason when it
    refused the table."""
    report = next(
        (
            report
            for report in installation.manifest.plugins
            if _normalized(report.plugin.source.distribution) == DISTRIBUTION
        ),
        None,
    )
    if report is not None and report.error is not None:
        raise ProtegeError(report.error)
    settings = installation.config.plugin_settings(DISTRIBUTION)
    return settings if isinstance(settings, DashboardSettings) else DashboardSettings()


def refuse_old_table(tables: Mapping[str, object]) -> None:
    """``ProtegeError`` when ``protege.toml`` still has ``[plugins.dashboard]``: protege
    drops a table no plugin declares, and a dashboard started without it would quietly lose
    its ``allowed_hosts`` and ``secure_cookies``."""
    if OLD_TABLE in tables:
        raise ProtegeError(
            f"protege.toml has [plugins.{OLD_TABLE}]: the dashboard's settings are now "
            f"[plugins.{DISTRIBUTION}]; rename the table"
        )


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()
