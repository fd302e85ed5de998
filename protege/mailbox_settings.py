"""``[mail.imap.NAME]`` and ``[mail.submission]``: an existing mailbox as the agent's
address, read over IMAP, and the provider's submission server for what the agent sends;
read into frozen attrs classes by ``protege.config``.

Secrets are never written in ``protege.toml``: a password is read from the environment
variable ``password_env`` names, once, when the configuration is loaded; an OAuth2 access
token (XOAUTH2) is printed by ``oauth2_command`` when a login needs one.
"""

from __future__ import annotations

import re
import shlex

import attrs

from protege.addresses import canonical_address
from protege.reprs import fields_repr

TLS, STARTTLS = "tls", "starttls"
SECURITIES = (TLS, STARTTLS)
# What becomes of a mail once it is stored: \Seen set, moved to ``move_to``, or left as it was.
SEEN, MOVE, KEEP = "seen", "move", "keep"
DONE_ACTIONS = (SEEN, MOVE, KEEP)
MAX_BATCH = 1000

_MAILBOX_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_BACKFILL = re.compile(r"none|all|[1-9][0-9]{0,4}d")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def is_mailbox_name(text: str) -> bool:
    """Whether ``text`` may name a mailbox (``[mail.imap.NAME]``): a lower-case letter, then
    lower-case letters, digits, ``-`` and ``_``."""
    return isinstance(text, str) and _MAILBOX_NAME.fullmatch(text) is not None


def _check_port(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and not 1 <= value <= 65535:
        raise ValueError(f"{attribute.name}: {value} is not a TCP port (1 to 65535)")


def _check_address(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if canonical_address(value) is None:
        raise ValueError(f"{attribute.name}: {value!r} is not an email address")


def _check_host(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is None:
        return
    if not value or len(value) > 253 or any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError(f"{attribute.name}: {value!r} is not a host name or address")


def _check_env_name(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(f"{attribute.name}: {value!r} is not an environment variable's name")


def _check_command(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is None:
        return
    try:
        words = shlex.split(value)
    except ValueError as error:
        raise ValueError(
            f"{attribute.name}: {value!r} cannot be read as a command: {error}"
        ) from None
    if not words:
        raise ValueError(f"{attribute.name}: empty; leave it out to log in with a password")


def _check_folder(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is None:
        return
    if not value or len(value) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{attribute.name}: {value!r} is not a folder name")


def _same_folder(one: str, other: str) -> bool:
    """Whether two folder names name one folder (INBOX is INBOX in any case, RFC 3501)."""
    return one == other or (one.upper() == "INBOX" and other.upper() == "INBOX")


_AUTHSERV_ID = re.compile(r"[^\s;()\\\"]{1,255}")


def _check_ids(instance: object, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    for item in value:
        if not _AUTHSERV_ID.fullmatch(item):
            raise ValueError(
                f"trusted_authserv_ids: {item!r} is not an authserv-id (the first word of an "
                "Authentication-Results header, such as mx.google.com)"
            )


@attrs.frozen(kw_only=True, repr=False)
class MailboxSettings:
    """One ``[mail.imap.NAME]`` table: a mailbox whose mail is for the agent ``agent``.

    protege logs in to ``host`` (``port``: 993 with ``security = "tls"``, the default; 143
    with ``"starttls"``, which is then required), verifying the certificate against the
    system's authorities or ``ca_file`` (relative to the project root), as ``username``
    with the password in the environment variable ``password_env``, or with an OAuth2 access
    token (XOAUTH2) printed by ``oauth2_command`` (run without a shell; Gmail and Microsoft
    365 without app passwords). It watches ``folder`` with IDLE where the server offers it
    (and ``idle`` is true), else looks every ``poll_seconds``; new mail is fetched
    ``batch`` at a time and, once stored, is marked ``\\Seen`` (``done = "seen"``), moved to
    ``move_to`` (``"move"``) or left as it was (``"keep"``).

    On the first connection only mail arriving from then on is taken, unless ``backfill``
    says how far back to begin (``"7d"``, ``"all"``). The provider's
    ``Authentication-Results`` are trusted for mail read here when the topmost one carries
    one of ``trusted_authserv_ids`` (none below it ever counts). ``sent_folder``, when set, gets
    a copy of each mail the agent sends through ``[mail] transport = "submission"``.
    """

    __repr__ = fields_repr

    agent: str = attrs.field(validator=_check_address)
    host: str = attrs.field(validator=_check_host)
    port: int | None = attrs.field(default=None, validator=_check_port)
    security: str = attrs.field(default=TLS, validator=attrs.validators.in_(SECURITIES))
    ca_file: str | None = None
    username: str = attrs.field(validator=attrs.validators.min_len(1))
    password_env: str | None = attrs.field(default=None, validator=_check_env_name)
    # Read from the environment (password_env) when the configuration is loaded.
    password: str | None = attrs.field(default=None, repr=False)
    oauth2_command: str | None = attrs.field(default=None, validator=_check_command)
    folder: str = attrs.field(default="INBOX", validator=_check_folder)
    done: str = attrs.field(default=SEEN, validator=attrs.validators.in_(DONE_ACTIONS))
    move_to: str | None = attrs.field(default=None, validator=_check_folder)
    idle: bool = True
    poll_seconds: float = attrs.field(
        default=60.0, validator=[attrs.validators.gt(0), attrs.validators.le(3600)]
    )
    backfill: str = "none"
    batch: int = attrs.field(
        default=100, validator=[attrs.validators.ge(1), attrs.validators.le(MAX_BATCH)]
    )
    timeout: float = attrs.field(
        default=30.0, validator=[attrs.validators.gt(0), attrs.validators.le(600)]
    )
    trusted_authserv_ids: tuple[str, ...] = attrs.field(default=(), validator=_check_ids)
    sent_folder: str | None = attrs.field(default=None, validator=_check_folder)

    def __attrs_post_init__(self) -> None:
        if not _BACKFILL.fullmatch(self.backfill):
            raise ValueError(
                f'backfill: {self.backfill!r} is not "none", "all" or a number of days ("7d")'
            )
        if self.done == MOVE and not self.move_to:
            raise ValueError('move_to: required when done = "move" (the folder to move mail to)')
        if self.done == MOVE and self.move_to and _same_folder(self.move_to, self.folder):
            raise ValueError("move_to: must be another folder than the one read")
        if self.sent_folder is not None and _same_folder(self.sent_folder, self.folder):
            raise ValueError(
                "sent_folder: must be another folder than the one read (the agent would read "
                "its own mail back in)"
            )
        if self.password_env is None and self.oauth2_command is None:
            raise ValueError(
                "password_env or oauth2_command: one is required (how protege logs in)"
            )
        if self.password_env is not None and self.oauth2_command is not None:
            raise ValueError("password_env and oauth2_command: set one, not both")

    @property
    def address(self) -> tuple[str, int]:
        """Where the server listens: ``(host, port)``, the port by ``security`` when unset."""
        return self.host, self.port or (993 if self.security == TLS else 143)

    @property
    def backfill_days(self) -> int | None:
        """How many days back the first connection begins: None for ``"none"``, 0 for all."""
        if self.backfill == "none":
            return None
        return 0 if self.backfill == "all" else int(self.backfill[:-1])


@attrs.frozen(kw_only=True, repr=False)
class SubmissionSettings:
    """``[mail.submission]``: the provider's submission server, for ``[mail] transport =
    "submission"``.

    protege connects to ``host`` on ``port`` (587, with STARTTLS required, by default;
    ``security = "tls"`` for implicit TLS, as on 465), verifying the certificate against
    the system's authorities or ``ca_file``, and logs in (AUTH is required) as ``username``
    with the password in ``password_env`` or an OAuth2 token printed by ``oauth2_command``.
    Each step may take ``timeout`` seconds, the answer to the mail itself
    ``data_timeout``. The account must be allowed to send as every agent's address.
    """

    __repr__ = fields_repr

    host: str | None = attrs.field(default=None, validator=_check_host)
    port: int | None = attrs.field(default=None, validator=_check_port)
    security: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(SECURITIES))
    )
    ca_file: str | None = None
    username: str | None = None
    password_env: str = attrs.field(
        default="PROTEGE_SUBMISSION_PASSWORD", validator=_check_env_name
    )
    # Read from the environment (password_env) when the configuration is loaded.
    password: str | None = attrs.field(default=None, repr=False)
    oauth2_command: str | None = attrs.field(default=None, validator=_check_command)
    timeout: float = attrs.field(
        default=30.0, validator=[attrs.validators.gt(0), attrs.validators.le(600)]
    )
    data_timeout: float = attrs.field(
        default=600.0, validator=[attrs.validators.gt(0), attrs.validators.le(3600)]
    )

    @property
    def tls(self) -> str:
        """``"tls"`` or ``"starttls"``: as set, else implicit TLS on port 465 only."""
        if self.security is not None:
            return self.security
        return TLS if self.port == 465 else STARTTLS

    @property
    def address(self) -> tuple[str, int]:
        """Where the server listens: ``(host, port)``; the port by ``tls`` when unset."""
        return self.host or "", self.port or (465 if self.tls == TLS else 587)
