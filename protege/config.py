"""Configuration: ``protege.toml`` plus the environment, read into one frozen ``Config``."""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import types
import typing
import zoneinfo
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs

from protege.addresses import canonical_address
from protege.authentication.resolver import DnsResolver, pinned_records
from protege.errors import ConfigError, did_you_mean
from protege.frozen import read_only
from protege.limit_settings import LimitSettings, ModelPrice
from protege.mailbox_settings import MailboxSettings, SubmissionSettings, is_mailbox_name
from protege.reprs import fields_repr

if TYPE_CHECKING:
    import cattrs

CONFIG_FILENAME = "protege.toml"
CONFIG_VARIABLE = "PROTEGE_CONFIG"
DATA_DIR_VARIABLE = "PROTEGE_DATA_DIR"
DATABASE_URL_VARIABLE = "PROTEGE_DATABASE_URL"
MODEL_VARIABLE = "PROTEGE_MODEL"
OPENAI_BASE_URL_VARIABLE = "OPENAI_BASE_URL"
MODEL_BASE_URL_VARIABLE = "PROTEGE_MODEL_BASE_URL"
MODEL_API_KEY_ENV_VARIABLE = "PROTEGE_MODEL_API_KEY_ENV"
MAIL_TRANSPORT_VARIABLE = "PROTEGE_MAIL_TRANSPORT"
BLOB_STORE_VARIABLE = "PROTEGE_BLOB_STORE"
DNS_OFFLINE_VARIABLE = "PROTEGE_DNS_OFFLINE"  # "1": sender checks ask no DNS server (tests)
DEFAULT_DATA_DIR = ".protege"
TEXT, IMAGE, PDF = "text", "image", "pdf"
MODEL_INPUTS = (TEXT, IMAGE, PDF)
_Section = TypeVar("_Section", bound=attrs.AttrsInstance)
MIB = 1024 * 1024


@attrs.frozen(kw_only=True, repr=False)
class ModelSettings:
    """``[model]``: the OpenAI-compatible Chat Completions endpoint runs talk to.

    ``base_url`` falls back to ``OPENAI_BASE_URL``, then OpenAI's own. The API key is read
    from the environment variable ``api_key_env`` names. ``max_output_tokens``, when set, is
    sent as ``token_parameter`` (reasoning models take ``max_completion_tokens``; some older
    servers only know ``max_tokens``).

    The environment overrides the file: ``PROTEGE_MODEL`` sets ``model``,
    ``PROTEGE_MODEL_BASE_URL`` sets ``base_url`` and ``PROTEGE_MODEL_API_KEY_ENV`` sets
    ``api_key_env``. ``input`` says what the model reads besides text (``"image"``,
    ``"pdf"``); only those are ever sent to it, so the default, text only, suits any model.
    The test fixtures use them to put their scripted model in place of
    whatever the app's ``protege.toml`` names.
    """

    __repr__ = fields_repr

    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    # Read from the environment (api_key_env) when the configuration is loaded; kept out of
    # repr so that it never reaches a log.
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = 60.0
    # One model call as a whole, retries included: ``timeout`` bounds each read, and an
    # endpoint sending a byte now and then would otherwise hold a run for ever.
    max_call_seconds: float = attrs.field(default=300.0, validator=attrs.validators.gt(0))
    max_retries: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    max_output_tokens: int | None = None
    token_parameter: str = attrs.field(
        default="max_completion_tokens",
        validator=attrs.validators.in_(("max_completion_tokens", "max_tokens")),
    )
    temperature: float | None = None
    input: tuple[str, ...] = attrs.field(
        default=(TEXT,),
        validator=attrs.validators.deep_iterable(attrs.validators.in_(MODEL_INPUTS)),
    )
    # What the model's provider charges per million tokens, for ``protege usage``.
    input_cost_per_million: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    output_cost_per_million: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    # ``[model.prices]``: prices per model name, for whichever model answered.
    prices: Mapping[str, ModelPrice] = attrs.field(factory=dict, hash=False)

    def price_of(self, model: str | None) -> ModelPrice | None:
        """What ``model`` costs: its row of ``prices``, else, for the configured model,
        ``input_cost_per_million`` and ``output_cost_per_million``; None when unknown.

        Names are compared as endpoints spell them differently: in any case, without a
        ``vendor/`` prefix or a ``:tag`` suffix, and a dated name (a row's name, a dash and
        more) has its row's price."""
        if model:
            wanted = _model_key(model)
            rows = {_model_key(name): price for name, price in self.prices.items()}
            if wanted in rows:
                return rows[wanted]
            for name in sorted(rows, key=len, reverse=True):
                if wanted.startswith(name + "-"):
                    return rows[name]
        if self.input_cost_per_million is None or self.output_cost_per_million is None:
            return None
        if model and self.model:
            wanted, configured = _model_key(model), _model_key(self.model)
            if wanted != configured and not wanted.startswith(configured):
                return None
        return ModelPrice(input=self.input_cost_per_million, output=self.output_cost_per_million)

    def highest_price(self) -> ModelPrice | None:
        """The highest input and the highest output price of ``prices`` (or, without a
        table, ``input_cost_per_million`` and ``output_cost_per_million``): what an answer of
        a model without a price is charged while a money limit applies, so that the limit
        still holds. None when no price is known at all."""
        if self.prices:
            return ModelPrice(
                input=max(price.input for price in self.prices.values()),
                output=max(price.output for price in self.prices.values()),
            )
        if self.input_cost_per_million is None or self.output_cost_per_million is None:
            return None
        return ModelPrice(input=self.input_cost_per_million, output=self.output_cost_per_million)

    def accepts(self, kind: str) -> bool:
        """Whether the model may be sent content of ``kind`` (``"image"``, ``"pdf"``)."""
        return kind in self.input


def _model_key(name: str) -> str:
    """``name`` as model names are compared: lower case, without a ``vendor/`` prefix or a
    ``:tag`` suffix (``openai/GPT-4o:latest`` is ``gpt-4o``)."""
    return name.strip().lower().rsplit("/", 1)[-1].split(":", 1)[0]


def _check_zone(instance: object, attribute: attrs.Attribute, value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"timezone: unknown time zone {value!r}: use an IANA name such as Europe/Berlin or UTC"
        ) from None


@attrs.frozen(kw_only=True, repr=False)
class RunSettings:
    """``[runs]``: the budgets and limits of one agent run.

    ``max_tool_calls_per_turn`` caps the calls run from one model answer; the calls past it
    are answered with a failure saying so, and the model may ask again in its next turn.

    A run shows the model at most ``max_parts_per_run`` files as themselves (images, PDFs,
    from attachments or tool results), of ``max_part_bytes_per_run`` bytes together; an
    attachment over ``max_shown_attachment_bytes`` is only listed, never read to be shown.

    ``timezone`` is the IANA zone agents tell the time in (the current date and time in
    their prompt; a scheduled run uses its responsibility's zone). Each prompt section is
    cut to ``max_prompt_section_chars`` characters, and all of a run's sections together to
    ``max_prompt_sections_chars``.
    """

    __repr__ = fields_repr

    max_model_turns: int = attrs.field(default=20, validator=attrs.validators.ge(1))
    max_tool_failures: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    max_tool_calls_per_turn: int = attrs.field(default=16, validator=attrs.validators.ge(1))
    max_result_bytes: int = attrs.field(default=64 * 1024, validator=attrs.validators.ge(1024))
    # A worker renews its hold on a running run every third of this; a run whose worker
    # stopped renewing is taken over once it runs out, at most ``max_attempts`` times in all.
    lease_seconds: float = attrs.field(default=60.0, validator=attrs.validators.ge(1))
    max_attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    # Threads tools may hold at once (a sync tool past its timeout holds one until it ends).
    tool_threads: int = attrs.field(default=64, validator=attrs.validators.ge(1))
    # One attempt at a run, from its claim to its end (waiting for an approval ends an
    # attempt): past this, the run fails with a budget_exhausted event.
    max_run_seconds: int = attrs.field(default=1800, validator=attrs.validators.ge(1))
    # How often a worker looks for its runs' cancels (one query for all its runs).
    cancel_check_seconds: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))
    max_parts_per_run: int = attrs.field(default=8, validator=attrs.validators.ge(0))
    max_part_bytes_per_run: int = attrs.field(default=20 * MIB, validator=attrs.validators.ge(0))
    max_shown_attachment_bytes: int = attrs.field(
        default=10 * MIB, validator=attrs.validators.ge(1)
    )
    timezone: str = attrs.field(default="UTC", validator=_check_zone)
    max_prompt_section_chars: int = attrs.field(default=4000, validator=attrs.validators.ge(100))
    max_prompt_sections_chars: int = attrs.field(default=16000, validator=attrs.validators.ge(100))


@attrs.frozen(kw_only=True, repr=False)
class ServeSettings:
    """``[serve]``: how ``protege serve`` carries runs out.

    One process carries up to ``max_concurrent_runs`` runs at once on one event loop; with
    ``processes`` above one, that many worker processes carry runs and the first only takes
    mail and queues duties. Each looks for queued runs every
    ``poll_interval`` seconds (at once when its own gateway queues one). On SIGTERM it stops
    taking mail and runs, gives the runs in flight ``shutdown_seconds`` to end, and hands
    back to the queue those that did not. ``db_threads`` bounds the database connections a
    process uses for its runs. The worker processes run ``worker_niceness`` steps below the
    mail process's CPU priority (POSIX ``nice``; 0 for the same), so that taking mail keeps
    its pace while runs use the rest of the machine.
    """

    __repr__ = fields_repr

    max_concurrent_runs: int = attrs.field(default=64, validator=attrs.validators.ge(1))
    processes: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    poll_interval: float = attrs.field(default=0.5, validator=attrs.validators.gt(0))
    shutdown_seconds: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    db_threads: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    max_concurrent_deliveries: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    worker_niceness: int = attrs.field(
        default=10, validator=[attrs.validators.ge(0), attrs.validators.le(19)]
    )


def _check_port(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if not 1 <= value <= 65535:
        raise ValueError(f"{attribute.name}: {value} is not a TCP port (1 to 65535)")


# A transport's or blob store's name, as plugins register it and protege.toml chooses it;
# whether something has that name is known only once the plugins are loaded.
_IMPLEMENTATION_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def _check_implementation_name(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not _IMPLEMENTATION_NAME.fullmatch(value):
        raise ValueError(
            f"{attribute.name}: {value!r} is not a name (a lower-case letter, then lower-case "
            "letters, digits, - and _)"
        )


AUTHENTICATION_MODES = ("enforce", "report", "off")

_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def is_host_name(text: str) -> bool:
    """Whether ``text`` is a fully qualified host name an SMTP server takes in EHLO: ASCII
    letters, digits and hyphens, in two labels or more, 253 characters at most."""
    labels = text.split(".")
    return len(text) <= 253 and len(labels) >= 2 and all(_HOST_LABEL.match(x) for x in labels)


def is_address_literal(text: str) -> bool:
    """Whether ``text`` is an SMTP address literal: ``[192.0.2.7]`` or ``[IPv6:2001:db8::7]``."""
    if not (text.startswith("[") and text.endswith("]")):
        return False
    inside = text[1:-1]
    try:
        if inside[:5].lower() == "ipv6:":
            ipaddress.IPv6Address(inside[5:])
        else:
            ipaddress.IPv4Address(inside)
    except ValueError:
        return False
    return True


def _check_ehlo_name(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and not (is_host_name(value) or is_address_literal(value)):
        raise ValueError(
            f"ehlo_name: {value!r} is neither a host name (such as mail.example.com) nor an "
            "address literal (such as [192.0.2.7])"
        )


def _check_relays(instance: object, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    for item in value:
        try:
            ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise ValueError(
                f"trusted_relays: {item!r} is not an address or a network (such as 192.0.2.7 "
                "or 198.51.100.16/28)"
            ) from None


def _pinned(value: Mapping[str, Any]) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ValueError("dns: must be a table of DNS names and their TXT records")
    return read_only(pinned_records(value))


@attrs.frozen(kw_only=True, repr=False)
class AuthenticationSettings:
    """``[mail.authentication]``: how protege decides whether mail proves its sender.

    ``mode = "enforce"`` (the default) lets allow rules, approvers and approval answers
    admit only an authenticated sender, and starts no run for mail failing DMARC at a
    domain whose policy is quarantine or reject; ``"report"`` computes and shows the
    verdict without using it (a first rollout); ``"off"`` computes nothing.

    Mail arriving from an address in ``trusted_relays`` (networks or single addresses) has
    its topmost ``Authentication-Results`` carrying one of ``trusted_authserv_ids`` read; an
    ARC chain sealed by one of ``trusted_arc_sealers`` carries its recorded DMARC pass.
    ``[mail.authentication.dns]`` pins TXT records (DKIM keys, SPF, DMARC) by name; with
    ``offline = true`` nothing else is looked up (closed setups, tests, the demo). A lookup
    waits ``dns_timeout`` seconds at most.
    """

    __repr__ = fields_repr

    mode: str = attrs.field(default="enforce", validator=attrs.validators.in_(AUTHENTICATION_MODES))
    trusted_relays: tuple[str, ...] = attrs.field(default=(), validator=_check_relays)
    trusted_authserv_ids: tuple[str, ...] = ()
    trusted_arc_sealers: tuple[str, ...] = ()
    dns: Mapping[str, Any] = attrs.field(factory=dict, converter=_pinned, hash=False)
    offline: bool = False
    dns_timeout: float = attrs.field(
        default=5.0, validator=[attrs.validators.gt(0), attrs.validators.le(60)]
    )

    @property
    def enforced(self) -> bool:
        """Whether the verdict decides (else every sender is taken as written)."""
        return self.mode == "enforce"

    def resolver(self) -> DnsResolver:
        """A resolver for these settings: the pinned records, then DNS unless offline.
        Build one per serving object and keep it: its cache lives as long as it does."""
        return DnsResolver(self.dns, offline=self.offline, timeout=self.dns_timeout)


def _check_mailboxes(
    instance: object, attribute: attrs.Attribute, value: Mapping[str, MailboxSettings]
) -> None:
    read: dict[tuple[str, int, str, str], str] = {}
    for name, box in value.items():
        if not is_mailbox_name(name):
            raise ValueError(
                f"imap: {name!r} is not a mailbox name (a lower-case letter, then lower-case "
                "letters, digits, - and _)"
            )
        host, port = box.address
        where = (host.lower(), port, box.username.lower(), box.folder)
        if where in read:
            raise ValueError(
                f"imap: {read[where]} and {name} read the same folder of the same account; "
                "two readers would take each other's mail"
            )
        read[where] = name


@attrs.frozen(kw_only=True, repr=False)
class MailSettings:
    """``[mail]``: the SMTP gateway, outbound transport, and limits on what mail may carry.

    ``transport`` names the transport outgoing mail goes through: ``"outbox"`` (the
    default) writes it as ``.eml`` files in the data directory's ``outbox``; ``"smtp"``
    hands it to ``smtp_host``, verifying its certificate against the system's authorities or
    ``smtp_ca_file`` (relative to the project root); a plugin may register others
    (``register_transports``), and a name nothing registers stops the installation from
    opening. Mail is sent by the delivery loop, apart from the run that queued it;
    temporary failures are retried ``smtp_retries`` times, waiting ``smtp_backoff_seconds``,
    then twice as long each time. Inbound mail whose header block is over
    ``max_header_bytes`` (Postfix's default) or names more than ``max_header_addresses``
    addresses is refused before it is parsed. One mail goes to at most
    ``max_recipients`` people (To, Cc and Bcc together).

    ``smtp_timeout`` is how many seconds the relay may take to answer one step (connecting,
    each command, sending the data); ``smtp_data_timeout`` how long it may take to answer
    the mail itself; ``max_handoff_seconds`` how long any transport may hold one mail before
    its claim is let go and the mail tried again. ``ehlo_name`` is the name protege greets
    the relay with; by
    default this machine's fully qualified name when it has one, else the address literal
    of the connection (``[192.0.2.7]``).
    """

    __repr__ = fields_repr

    listen_host: str = "127.0.0.1"
    listen_port: int = attrs.field(default=2525, validator=_check_port)
    transport: str = attrs.field(default="outbox", validator=_check_implementation_name)
    smtp_host: str = "127.0.0.1"
    smtp_port: int = attrs.field(default=587, validator=_check_port)
    smtp_starttls: bool = True
    smtp_username: str | None = None
    smtp_password_env: str = "PROTEGE_SMTP_PASSWORD"
    # Read from the environment (smtp_password_env) when the configuration is loaded.
    smtp_password: str | None = attrs.field(default=None, repr=False)
    smtp_timeout: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    ehlo_name: str | None = attrs.field(default=None, validator=_check_ehlo_name)
    # How long the relay may take to answer the mail itself (after its last byte), as RFC
    # 5321 asks of senders (10 minutes): timing out there would send it again.
    smtp_data_timeout: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    smtp_retries: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    # One hand-off to the transport, whichever it is: past this its claim on the mail is
    # no longer renewed, so a transport that hangs holds the mail for this long, not for
    # ever (it is tried again once the claim runs out).
    max_handoff_seconds: float = attrs.field(default=1800.0, validator=attrs.validators.gt(0))
    max_message_bytes: int = 25 * MIB
    max_attachments: int = 10
    max_attachment_bytes: int = 10 * MIB
    loop_limit: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    max_header_bytes: int = attrs.field(default=100 * 1024, validator=attrs.validators.ge(1024))
    max_header_addresses: int = attrs.field(default=1000, validator=attrs.validators.ge(1))
    max_recipients: int = attrs.field(default=50, validator=attrs.validators.ge(1))
    smtp_ca_file: str | None = None
    smtp_backoff_seconds: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    authentication: AuthenticationSettings = AuthenticationSettings()
    # [mail.imap.NAME]: existing mailboxes read over IMAP (protege.mailboxes).
    imap: Mapping[str, MailboxSettings] = attrs.field(
        factory=dict, converter=read_only, validator=_check_mailboxes, hash=False
    )
    submission: SubmissionSettings = SubmissionSettings()


def _check_http_url(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{attribute.name} must be an http or https URL, not {value!r}")


def _notify_address(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and canonical_address(value) is None:
        raise ValueError(f"notify: {value!r} is not an email address")


@attrs.frozen(kw_only=True, repr=False)
class ResponsibilitySettings:
    """``[responsibilities]``: the scheduler, and what happens when a scheduled run fails.

    The scheduler looks for due responsibilities every ``poll_seconds``. A scheduled run that
    fails is queued again up to ``retries`` times (none by default), ``retry_delay_seconds``
    after it failed; it resumes from its own trail. When it has failed for good, the failure
    stays recorded on the run and, if ``notify`` names an address, is mailed there once, as
    the run's agent.
    """

    __repr__ = fields_repr

    poll_seconds: float = attrs.field(default=15.0, validator=attrs.validators.gt(0))
    retries: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    retry_delay_seconds: float = attrs.field(default=300.0, validator=attrs.validators.ge(0))
    notify: str | None = attrs.field(default=None, validator=_notify_address)


LOCAL, S3 = "local", "s3"
# S3's own rules for a bucket name: 3 to 63 lower-case letters, digits, dots and hyphens.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
# The keys that hold secrets: read from the variables their ``_env`` keys name, never written.
BLOB_SECRETS = ("access_key_id", "secret_access_key", "session_token")


def _check_bucket(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and not _BUCKET_NAME.fullmatch(value):
        raise ValueError(
            f"bucket: {value!r} is not an S3 bucket name (3 to 63 lower-case letters, digits, "
            "dots and hyphens)"
        )


def _check_prefix(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value.startswith("/") or ".." in value.split("/") or any(ord(c) < 32 for c in value):
        raise ValueError(
            f"prefix: {value!r} must not start with / or hold .. or control characters"
        )


def _check_optional_http_url(
    instance: object, attribute: attrs.Attribute, value: str | None
) -> None:
    if value is not None:
        _check_http_url(instance, attribute, value)


@attrs.frozen(kw_only=True, repr=False)
class BlobSettings:
    """``[blobs]``: where stored files (attachments, created files) keep their bytes.

    ``store = "local"`` (the default) keeps them under the data directory's ``blobs``
    folder; ``"s3"`` in the S3 bucket ``bucket`` (any S3-compatible service, at
    ``endpoint_url`` when it is not AWS), under the key prefix ``prefix``, so that several
    machines share them; a plugin may register other stores (``register_blob_stores``),
    which read their own ``[plugins.NAME]`` settings, and a name nothing registers stops the
    installation from opening. ``PROTEGE_BLOB_STORE`` overrides ``store``. The credentials are read
    from the environment variables ``access_key_id_env``, ``secret_access_key_env`` and
    ``session_token_env`` name; when the first two are unset, boto3 finds its own (an
    instance role, ``~/.aws``). They are never written in ``protege.toml``.
    """

    __repr__ = fields_repr

    store: str = attrs.field(default=LOCAL, validator=_check_implementation_name)
    bucket: str | None = attrs.field(default=None, validator=_check_bucket)
    prefix: str = attrs.field(default="", validator=_check_prefix)
    endpoint_url: str | None = attrs.field(default=None, validator=_check_optional_http_url)
    region: str | None = None
    addressing_style: str = attrs.field(
        default="auto", validator=attrs.validators.in_(("auto", "path", "virtual"))
    )
    timeout_seconds: float = attrs.field(
        default=30.0, validator=[attrs.validators.gt(0), attrs.validators.le(300)]
    )
    access_key_id_env: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_env: str = "AWS_SECRET_ACCESS_KEY"
    session_token_env: str = "AWS_SESSION_TOKEN"
    # Read from the environment when the configuration is loaded; kept out of repr.
    access_key_id: str | None = attrs.field(default=None, repr=False)
    secret_access_key: str | None = attrs.field(default=None, repr=False)
    session_token: str | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.store == S3 and self.bucket is None:
            raise ValueError('bucket: required when store = "s3"')


@attrs.frozen(kw_only=True, repr=False)
class FileSettings:
    """The keys ``protege.toml`` may hold; any other key is an error, not a silent no-op."""

    __repr__ = fields_repr

    tool_modules: tuple[str, ...] = ()
    data_dir: str = DEFAULT_DATA_DIR
    database_url: str | None = None
    model: ModelSettings = ModelSettings()
    runs: RunSettings = RunSettings()
    serve: ServeSettings = ServeSettings()
    mail: MailSettings = MailSettings()
    responsibilities: ResponsibilitySettings = ResponsibilitySettings()
    blobs: BlobSettings = BlobSettings()
    limits: LimitSettings = LimitSettings()
    overrides: tuple[str, ...] = ()
    plugins: dict[str, dict[str, Any]] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True, repr=False)
class Config:
    """The settings of one protege installation, frozen once read.

    ``root`` is the folder holding ``protege.toml`` (or the working directory when there is
    none); relative paths in the file, and host tool modules, are found from there.

    These environment variables override the file: ``PROTEGE_DATABASE_URL``,
    ``PROTEGE_DATA_DIR``, ``PROTEGE_MAIL_TRANSPORT`` (``outbox``, ``smtp`` or a plugin's),
    ``PROTEGE_BLOB_STORE`` (``local``, ``s3`` or a plugin's), and the model
    variables ``ModelSettings`` lists. ``protege.testing``'s fixtures set them, so that a
    test of a host app uses its own database, data directory, local blobs, outbox and
    scripted model whatever the app's ``protege.toml`` says.
    """

    __repr__ = fields_repr

    root: Path
    path: Path | None = None
    tool_modules: tuple[str, ...] = ()
    data_dir: Path
    database_url: str
    model: ModelSettings = ModelSettings()
    runs: RunSettings = RunSettings()
    serve: ServeSettings = ServeSettings()
    mail: MailSettings = MailSettings()
    responsibilities: ResponsibilitySettings = ResponsibilitySettings()
    blobs: BlobSettings = BlobSettings()
    limits: LimitSettings = LimitSettings()
    # Tool ids the host's own tools take from a plugin on purpose: ``doctor`` stays green.
    overrides: tuple[str, ...] = ()
    # ``[plugins.NAME]`` tables by normalized distribution name: as the file has them when
    # loaded; in an installation, each plugin's settings as its declaration made them.
    # Read-only all the way down: a tool's run cannot change what another run reads.
    plugins: Mapping[str, Any] = attrs.field(factory=dict, hash=False, converter=read_only)
    # The blob store the installation resolved from ``[blobs] store`` when it opened (see
    # ``protege.blobs.with_blob_store``); None in a configuration read from the file alone.
    blob_store: Any = attrs.field(default=None, eq=False, hash=False, repr=False)

    def plugin_settings(self, distribution: str) -> Any:
        """The settings of the plugin ``distribution`` (``[plugins.NAME]`` in
        ``protege.toml``), validated against what the plugin declared; None when it
        declares none and the file has none."""
        return self.plugins.get(_normalized(distribution))

    @classmethod
    def defaults(cls, root: Path) -> Config:
        """The embedded defaults for a project at ``root``: local files and SQLite."""
        return _build(root, None, FileSettings(), {})


# Settings are read into their attrs classes in two ways. A table that already has the
# exact shape of its class (the usual case: every key known, every value of its declared
# type) is read directly, which costs next to nothing. Anything else (a value to convert,
# an unknown key, a type beyond the plain ones, a value a validator refuses) goes to
# cattrs, loaded only then (importing it costs more than the rest of reading the
# configuration), so that what it accepts and how it words each problem are unchanged.
# bench/config.py measures what the direct reading saves a command (cattrs' import and
# converter); tests/test_config_plain_tables.py holds it to cattrs' answer on a generated
# corpus of tables.
_UNSURE: Any = object()  # "not plainly of this shape": let cattrs decide
_NONE_TYPE = type(None)
# Fields of a class a table must not set, though the class has them: secrets, read from the
# environment variable their ``_env`` key names.
_REFUSED_KEYS: dict[type, tuple[str, ...]] = {
    BlobSettings: BLOB_SECRETS,
    ModelSettings: ("api_key",),
    # Before MailSettings: its structuring is built with theirs, as registered by then.
    MailboxSettings: ("password",),
    SubmissionSettings: ("password",),
    MailSettings: ("smtp_password",),
}


_LARGEST_EXACT = 2**53  # every int up to it is a float as it is


def _plainly_structured(value: Any, type_: Any) -> Any:
    """``value`` as ``type_`` when it has exactly that shape already, else ``_UNSURE``."""
    if type_ is Any:
        return value
    if type_ is str or type_ is bool or type_ is int:
        return value if type(value) is type_ else _UNSURE
    if type_ is float:
        if type(value) is float or (type(value) is int and abs(value) <= _LARGEST_EXACT):
            return float(value)
        return _UNSURE  # cattrs decides, and words its error (a 400-digit int overflows)
    if isinstance(type_, type) and attrs.has(type_):
        return _plain_instance(value, type_)
    origin, arguments = typing.get_origin(type_), typing.get_args(type_)
    if origin is types.UnionType or origin is typing.Union:
        others = [argument for argument in arguments if argument is not _NONE_TYPE]
        if value is None and len(others) < len(arguments):
            return None
        return _plainly_structured(value, others[0]) if len(others) == 1 else _UNSURE
    if type_ == tuple[str, ...]:
        plain = type(value) is list and all(type(item) is str for item in value)
        return tuple(value) if plain else _UNSURE
    if origin in (dict, Mapping) and arguments and arguments[0] is str:
        if type(value) is not dict or not all(type(key) is str for key in value):
            return _UNSURE
        items = {key: _plainly_structured(item, arguments[1]) for key, item in value.items()}
        return _UNSURE if _UNSURE in items.values() else items
    return _UNSURE


def _plain_instance(value: Any, cls: type) -> Any:
    if type(value) is not dict:
        return _UNSURE
    fields = [field for field in attrs.fields(cls) if field.init]
    names = {field.name for field in fields}
    if not names.issuperset(value) or any(key in value for key in _REFUSED_KEYS.get(cls, ())):
        return _UNSURE
    types_ = _field_types(cls)
    if types_ is None:
        return _UNSURE
    arguments = {}
    for field in fields:
        if field.name in value:
            item = _plainly_structured(value[field.name], types_[field.name])
            if item is _UNSURE:
                return _UNSURE
            arguments[field.alias] = item
    try:
        return cls(**arguments)
    except Exception:  # a required key missing, a validator refusing: cattrs says which
        return _UNSURE


_resolving: set[type] = set()


@functools.cache
def _field_types(cls: type) -> dict[str, Any] | None:
    """The declared type of each of ``cls``'s fields, when every one of them is a type the
    direct reading knows; else None, and cattrs reads the class's tables. cattrs builds its
    structuring of a class from all its fields, so a class with one type it cannot
    structure is refused whichever keys a table holds (tests/test_config_plain_tables.py)."""
    if cls in _resolving:  # a class holding itself: left to cattrs
        return None
    _resolving.add(cls)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve here: cattrs will say so
        return None
    else:
        # A field declared without an annotation (attr.ib(type=...), or none at all)
        # is not in the hints; cattrs takes its type from the field, or none.
        types_ = {
            field.name: Any if declared is None else declared
            for field in attrs.fields(cls)
            if field.init
            for declared in [hints.get(field.name, field.type)]
        }
        return types_ if all(map(_known, types_.values())) else None
    finally:
        _resolving.discard(cls)


def _known(type_: Any) -> bool:
    """Whether ``_plainly_structured`` reads values of ``type_`` as cattrs does."""
    if type_ in (Any, str, bool, int, float) or type_ == tuple[str, ...]:
        return True
    if isinstance(type_, type) and attrs.has(type_):
        return _field_types(type_) is not None
    origin, arguments = typing.get_origin(type_), typing.get_args(type_)
    if origin is types.UnionType or origin is typing.Union:
        others = [argument for argument in arguments if argument is not _NONE_TYPE]
        return len(others) == 1 and _known(others[0])
    if origin in (dict, Mapping) and len(arguments) == 2 and arguments[0] is str:
        return _known(arguments[1])
    return False


@functools.cache
def _converter() -> cattrs.Converter:
    import cattrs
    import cattrs.gen

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_names)
    # TOML has its own types: a value of another one is a mistake to name, never to convert
    # ("false" is not false, 2.7 is not 2).
    converter.register_structure_hook(bool, _exactly(bool))
    converter.register_structure_hook(int, _exactly(int))
    converter.register_structure_hook(float, _exactly(float))
    converter.register_structure_hook(str, _exactly(str))
    for cls, secrets in _REFUSED_KEYS.items():
        converter.register_structure_hook(cls, _refusing(converter, cls, secrets))
    return converter


_TOML_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _toml_shown(value: object) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    return f"a {type(value).__name__}"


def _exactly(kind: type) -> Any:
    def structure(value: object, _type: object) -> Any:
        # bool is an int to Python, not to TOML; an int is a fine float.
        fits = type(value) is kind or (kind is float and type(value) is int)
        if not fits:
            raise ValueError(f"expected {_TOML_NAMES[kind]}, not {_toml_shown(value)}")
        return float(value) if kind is float else value  # type: ignore[arg-type]

    return structure


def _refusing(converter: cattrs.Converter, cls: type, secrets: tuple[str, ...]) -> Any:
    import cattrs.gen

    structure: Any = cattrs.gen.make_dict_structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=True
    )

    def refuse_secrets(value: object, _type: object) -> Any:
        if isinstance(value, Mapping):
            for key in secrets:
                if key in value:
                    raise ValueError(
                        f"{key} may not be written in protege.toml: name the environment "
                        f"variable that holds it in {key}_env"
                    )
        return structure(value, cls)

    return refuse_secrets


def _structure_names(value: object, _type: object) -> tuple[str, ...]:
    # cattrs would happily split a lone string into characters.
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("must be a list of strings")
    return tuple(value)


def _describe(error: BaseException, type_: Any) -> str:
    # attrs' validators raise ValueError(message, attribute, ...): the message alone is for people.
    if type(error) is ValueError and error.args and str(error.args[0]):
        return str(error.args[0])
    import cattrs.errors
    import cattrs.v

    if isinstance(error, cattrs.errors.ForbiddenExtraKeysError) and attrs.has(error.cl):
        known = [field.name for field in attrs.fields(error.cl) if field.init]
        return "; ".join(
            f"unknown key {key}{did_you_mean(key, known)}" for key in sorted(error.extra_fields)
        )
    return cattrs.v.format_exception(error, type_)


def _structured(raw: Mapping[str, Any], section: type[_Section], where: str) -> _Section:
    """``raw`` as ``section``, or ``ConfigError`` naming each problem (``where`` is the path
    of the table, the start of each problem's path)."""
    value = _plainly_structured(raw, section)
    if value is not _UNSURE:
        return cast(_Section, value)
    import cattrs

    try:
        return _converter().structure(raw, section)
    except cattrs.BaseValidationError as error:
        problems = "; ".join(cattrs.transform_error(error, path=where, format_exception=_describe))
        raise ConfigError(problems) from None
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{where}: {_describe(error, section)}") from None


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


# Keys that would hold a secret itself; protege.toml names the variable holding it instead.
_SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|secret|token|api_key|apikey|private_key|access_key)$"
)


def secret_keys(table: Mapping[str, Any]) -> list[str]:
    """The keys of a settings table that look like secrets written in the file."""
    return sorted(k for k in table if isinstance(k, str) and _SECRET_KEY.search(k.lower()))


def structure_settings(raw: Mapping[str, Any], section: type[_Section], where: str) -> _Section:
    """``raw`` (a table of ``protege.toml``) as the attrs class ``section``, or ``ConfigError``
    naming each key that is wrong as protege names its own (``where`` is the table's path,
    such as ``protege.toml.plugins.protege-weather``)."""
    return _structured(dict(raw), section, where)


# Tables protege once read itself: each plugin now declares its own ``[plugins.NAME]``
# table. Reading an old table under both names would make two places deciding one setting
# (for ``allow_networks``, one could quietly widen what the SSRF guard lets through), so a
# file still holding one is refused with the exact rename to make. The only place core knows
# these names; it goes once no supported release writes them. Old table -> its new table:
_MOVED = {"web": "plugins.protege-web", "files": "plugins.protege-files"}
# Keys of an old table that went to one of protege's own tables instead (the run's budget
# of files shown to the model is the harness's, whichever tool gave the files back).
_MOVED_KEYS = {"files": {"max_parts_per_run": "runs", "max_part_bytes_per_run": "runs"}}
# Keys whose old meaning was split: the other half now has a key of its own.
_SPLIT_KEYS = {
    ("files", "max_read_bytes"): (
        "max_read_bytes now bounds only read_attachment; the attachments shown to the model "
        "are bounded by max_shown_attachment_bytes under [runs]"
    )
}


def _moved_table_problems(raw: Mapping[str, Any]) -> list[str]:
    """What to rename in ``raw`` (a whole ``protege.toml``) so that no setting is written
    under a table protege no longer reads; empty when there is nothing to rename."""
    problems = []
    for old, new in _MOVED.items():
        table = raw.get(old)
        if table is None:
            continue
        elsewhere = _MOVED_KEYS.get(old, {})
        moves = [f"[{old}] is now [{new}]: rename the table"]
        moves += [
            f"move {key} to [{elsewhere[key]}]"
            for key in (table if isinstance(table, Mapping) else ())
            if key in elsewhere
        ]
        moves += [
            note
            for key in (table if isinstance(table, Mapping) else ())
            if (note := _SPLIT_KEYS.get((old, key)))
        ]
        problems.append("; ".join(moves))
    return problems


def load_config(start: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the configuration: ``$PROTEGE_CONFIG``, else the nearest ``protege.toml`` upward
    from ``start`` (the working directory), else the embedded defaults."""
    environ = os.environ if environ is None else environ
    start = Path.cwd() if start is None else Path(start)
    path = _find_config_file(start, environ)
    if path is None:
        return _build(start.resolve(), None, FileSettings(), environ)
    import tomllib  # only needed when there is a file to read

    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    moved = _moved_table_problems(raw)
    if moved:
        raise ConfigError(f"{path} has settings protege no longer reads there: {'; '.join(moved)}")
    try:
        settings = _structured(raw, FileSettings, path.name)
    except ConfigError as error:
        raise ConfigError(f"{path} has settings protege cannot use: {error}") from None
    return _build(path.parent.resolve(), path.resolve(), settings, environ)


def _find_config_file(start: Path, environ: Mapping[str, str]) -> Path | None:
    explicit = environ.get(CONFIG_VARIABLE)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{CONFIG_VARIABLE} names {explicit}, which is not a file")
        return path
    for folder in (start.resolve(), *start.resolve().parents):
        candidate = folder / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    return None


def _build(
    root: Path, path: Path | None, settings: FileSettings, environ: Mapping[str, str]
) -> Config:
    data_dir = root / environ.get(DATA_DIR_VARIABLE, settings.data_dir)
    database_url = environ.get(DATABASE_URL_VARIABLE) or settings.database_url
    return Config(
        root=root,
        path=path,
        tool_modules=settings.tool_modules,
        data_dir=data_dir,
        database_url=database_url or f"sqlite:///{data_dir / 'protege.db'}",
        model=_with_model_secrets(
            _overridden(
                settings.model,
                environ,
                model=MODEL_VARIABLE,
                base_url=MODEL_BASE_URL_VARIABLE,
                api_key_env=MODEL_API_KEY_ENV_VARIABLE,
            ),
            environ,
        ),
        runs=settings.runs,
        serve=settings.serve,
        mail=_with_offline_dns(
            _with_mail_secrets(
                _overridden(settings.mail, environ, transport=MAIL_TRANSPORT_VARIABLE), environ
            ),
            environ,
        ),
        responsibilities=settings.responsibilities,
        blobs=_with_blob_secrets(
            _overridden(settings.blobs, environ, store=BLOB_STORE_VARIABLE), environ
        ),
        limits=settings.limits,
        overrides=settings.overrides,
        plugins={_normalized(name): table for name, table in settings.plugins.items()},
    )


def _with_model_secrets(model: ModelSettings, environ: Mapping[str, str]) -> ModelSettings:
    # The environment is read here, once, so that nothing below configuration reads it.
    return attrs.evolve(
        model,
        base_url=model.base_url or environ.get(OPENAI_BASE_URL_VARIABLE) or None,
        api_key=model.api_key or environ.get(model.api_key_env) or None,
    )


def _with_mail_secrets(mail: MailSettings, environ: Mapping[str, str]) -> MailSettings:
    mailboxes = {
        name: attrs.evolve(box, password=environ.get(box.password_env) or None)
        if box.password_env is not None
        else box
        for name, box in mail.imap.items()
    }
    submission = mail.submission
    return attrs.evolve(
        mail,
        smtp_password=mail.smtp_password or environ.get(mail.smtp_password_env) or None,
        imap=mailboxes,
        submission=attrs.evolve(submission, password=environ.get(submission.password_env) or None),
    )


def _with_offline_dns(mail: MailSettings, environ: Mapping[str, str]) -> MailSettings:
    if environ.get(DNS_OFFLINE_VARIABLE) != "1":
        return mail
    return attrs.evolve(mail, authentication=attrs.evolve(mail.authentication, offline=True))


def _with_blob_secrets(blobs: BlobSettings, environ: Mapping[str, str]) -> BlobSettings:
    if blobs.store != S3:
        return blobs
    defaults = BlobSettings()
    found: dict[str, Any] = {}
    for key in BLOB_SECRETS:
        name = getattr(blobs, f"{key}_env")
        found[key] = environ.get(name) or None
        if found[key] is None and name != getattr(defaults, f"{key}_env"):
            raise ConfigError(f"[blobs] {key}_env names {name}, which is not set")
    if (found["access_key_id"] is None) != (found["secret_access_key"] is None):
        raise ConfigError(
            f"[blobs] needs both {blobs.access_key_id_env} and {blobs.secret_access_key_env} "
            "set, or neither (to let boto3 find its own credentials)"
        )
    return attrs.evolve(blobs, **found)


def _overridden(section: _Section, environ: Mapping[str, str], **variables: str) -> _Section:
    """``section`` with each field named in ``variables`` set from that environment variable,
    when the variable is set and not empty."""
    changes = {field: environ[name] for field, name in variables.items() if environ.get(name)}
    try:
        return attrs.evolve(section, **changes)  # type: ignore[misc]  # bound to attrs classes
    except ValueError as error:  # a validator refused a value; its first argument says why
        names = ", ".join(variables[field] for field in changes)
        reason = error.args[0] if error.args else error
        raise ConfigError(f"{names}: {reason}") from None
