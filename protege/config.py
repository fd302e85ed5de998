"""Configuration: ``protege.toml`` plus the environment, read into one frozen ``Config``."""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs

from protege.addresses import canonical_address
from protege.errors import ConfigError

CONFIG_FILENAME = "protege.toml"
CONFIG_VARIABLE = "PROTEGE_CONFIG"
DATA_DIR_VARIABLE = "PROTEGE_DATA_DIR"
DATABASE_URL_VARIABLE = "PROTEGE_DATABASE_URL"
MODEL_VARIABLE = "PROTEGE_MODEL"
OPENAI_BASE_URL_VARIABLE = "OPENAI_BASE_URL"
MODEL_BASE_URL_VARIABLE = "PROTEGE_MODEL_BASE_URL"
MODEL_API_KEY_ENV_VARIABLE = "PROTEGE_MODEL_API_KEY_ENV"
MAIL_TRANSPORT_VARIABLE = "PROTEGE_MAIL_TRANSPORT"
DEFAULT_DATA_DIR = ".protege"
TEXT, IMAGE, PDF = "text", "image", "pdf"
MODEL_INPUTS = (TEXT, IMAGE, PDF)
_Section = TypeVar("_Section", bound=attrs.AttrsInstance)


@attrs.frozen(kw_only=True)
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

    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    # Read from the environment (api_key_env) when the configuration is loaded; kept out of
    # repr so that it never reaches a log.
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = 60.0
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

    def accepts(self, kind: str) -> bool:
        """Whether the model may be sent content of ``kind`` (``"image"``, ``"pdf"``)."""
        return kind in self.input


@attrs.frozen(kw_only=True)
class RunSettings:
    """``[runs]``: the budgets and limits of one agent run.

    ``max_tool_calls_per_turn`` caps the calls run from one model answer; the calls past it
    are answered with a failure saying so, and the model may ask again in its next turn.
    """

    max_model_turns: int = attrs.field(default=20, validator=attrs.validators.ge(1))
    max_tool_failures: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    max_tool_calls_per_turn: int = attrs.field(default=16, validator=attrs.validators.ge(1))
    max_result_bytes: int = attrs.field(default=64 * 1024, validator=attrs.validators.ge(1024))


MIB = 1024 * 1024


@attrs.frozen(kw_only=True)
class MailSettings:
    """``[mail]``: the SMTP gateway, outbound transport, and limits on what mail may carry.

    ``transport = "outbox"`` (the default) writes outgoing mail as ``.eml`` files in the
    data directory's ``outbox``; ``"smtp"`` hands it to ``smtp_host``. Inbound mail whose
    header block is over ``max_header_bytes`` (Postfix's default) or names more than
    ``max_header_addresses`` addresses is refused before it is parsed.
    data directory's ``outbox``; ``"smtp"`` hands it to ``smtp_host``, verifying its
    certificate against the system's authorities or ``smtp_ca_file`` (relative to the
    project root); temporary failures are retried ``smtp_retries`` times, waiting
    ``smtp_backoff_seconds``, then twice as long each time. One mail goes to at most
    ``max_recipients`` people (To, Cc and Bcc together).
    """

    listen_host: str = "127.0.0.1"
    listen_port: int = 2525
    workers: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    transport: str = attrs.field(
        default="outbox", validator=attrs.validators.in_(("outbox", "smtp"))
    )
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 587
    smtp_starttls: bool = True
    smtp_username: str | None = None
    smtp_password_env: str = "PROTEGE_SMTP_PASSWORD"
    # Read from the environment (smtp_password_env) when the configuration is loaded.
    smtp_password: str | None = attrs.field(default=None, repr=False)
    smtp_timeout: float = 30.0
    smtp_retries: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    max_message_bytes: int = 25 * MIB
    max_attachments: int = 10
    max_attachment_bytes: int = 10 * MIB
    loop_limit: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    max_header_bytes: int = attrs.field(default=100 * 1024, validator=attrs.validators.ge(1024))
    max_header_addresses: int = attrs.field(default=1000, validator=attrs.validators.ge(1))
    max_recipients: int = attrs.field(default=50, validator=attrs.validators.ge(1))
    smtp_ca_file: str | None = None
    smtp_backoff_seconds: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))


DEFAULT_SEARCH_URL = "https://html.duckduckgo.com/html/"


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
    """``[web]``: the limits of the ``web_fetch`` and ``web_search`` tools.

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


def _notify_address(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and canonical_address(value) is None:
        raise ValueError(f"notify: {value!r} is not an email address")


@attrs.frozen(kw_only=True)
class ResponsibilitySettings:
    """``[responsibilities]``: the scheduler, and what happens when a scheduled run fails.

    The scheduler looks for due responsibilities every ``poll_seconds``. A scheduled run that
    fails is queued again up to ``retries`` times (none by default), ``retry_delay_seconds``
    after it failed; it resumes from its own trail. When it has failed for good, the failure
    stays recorded on the run and, if ``notify`` names an address, is mailed there once, as
    the run's agent.
    """

    poll_seconds: float = attrs.field(default=15.0, validator=attrs.validators.gt(0))
    retries: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    retry_delay_seconds: float = attrs.field(default=300.0, validator=attrs.validators.ge(0))
    notify: str | None = attrs.field(default=None, validator=_notify_address)


@attrs.frozen(kw_only=True)
class FilesSettings:
    """``[files]``: limits on the files agents read and write.

    ``read_attachment`` reads files of at most ``max_read_bytes`` and gives back at most
    ``max_text_chars`` characters of text (``max_pdf_pages`` pages of a PDF whose text is
    extracted, in a process of its own given ``max_pdf_seconds`` of CPU). A run shows the
    model at most ``max_parts_per_run`` files as themselves (images, PDFs), of
    ``max_part_bytes_per_run`` bytes together. ``create_file`` writes at most
    ``max_created_bytes`` and names files in at most ``max_filename_chars`` characters.
    """

    max_read_bytes: int = attrs.field(default=10 * MIB, validator=attrs.validators.ge(1))
    max_text_chars: int = attrs.field(default=20_000, validator=attrs.validators.ge(100))
    max_pdf_pages: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    max_pdf_seconds: float = attrs.field(
        default=10.0, validator=[attrs.validators.gt(0), attrs.validators.le(120)]
    )
    max_parts_per_run: int = attrs.field(default=8, validator=attrs.validators.ge(0))
    max_part_bytes_per_run: int = attrs.field(default=20 * MIB, validator=attrs.validators.ge(0))
    max_created_bytes: int = attrs.field(default=MIB, validator=attrs.validators.ge(1))
    max_filename_chars: int = attrs.field(
        default=100, validator=[attrs.validators.ge(8), attrs.validators.le(200)]
    )


@attrs.frozen(kw_only=True)
class FileSettings:
    """The keys ``protege.toml`` may hold; any other key is an error, not a silent no-op."""

    tool_modules: tuple[str, ...] = ()
    data_dir: str = DEFAULT_DATA_DIR
    database_url: str | None = None
    model: ModelSettings = ModelSettings()
    runs: RunSettings = RunSettings()
    mail: MailSettings = MailSettings()
    web: WebSettings = WebSettings()
    responsibilities: ResponsibilitySettings = ResponsibilitySettings()
    files: FilesSettings = FilesSettings()


@attrs.frozen(kw_only=True)
class Config:
    """The settings of one protege installation, frozen once read.

    ``root`` is the folder holding ``protege.toml`` (or the working directory when there is
    none); relative paths in the file, and host tool modules, are found from there.

    These environment variables override the file: ``PROTEGE_DATABASE_URL``,
    ``PROTEGE_DATA_DIR``, ``PROTEGE_MAIL_TRANSPORT`` (``outbox`` or ``smtp``), and the model
    variables ``ModelSettings`` lists. ``protege.testing``'s fixtures set them, so that a
    test of a host app uses its own database, data directory, outbox and scripted model
    whatever the app's ``protege.toml`` says.
    """

    root: Path
    path: Path | None = None
    tool_modules: tuple[str, ...] = ()
    data_dir: Path
    database_url: str
    model: ModelSettings = ModelSettings()
    runs: RunSettings = RunSettings()
    mail: MailSettings = MailSettings()
    web: WebSettings = WebSettings()
    responsibilities: ResponsibilitySettings = ResponsibilitySettings()
    files: FilesSettings = FilesSettings()

    @classmethod
    def defaults(cls, root: Path) -> Config:
        """The embedded defaults for a project at ``root``: local files and SQLite."""
        return _build(root, None, FileSettings(), {})


_converter = cattrs.Converter(forbid_extra_keys=True)


def _structure_names(value: object, _type: object) -> tuple[str, ...]:
    # cattrs would happily split a lone string into characters.
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("must be a list of strings")
    return tuple(value)


def _describe(error: BaseException, type_: Any) -> str:
    if type(error) is ValueError and str(error):
        return str(error)
    return cattrs.v.format_exception(error, type_)


_converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_names)


def load_config(start: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the configuration: ``$PROTEGE_CONFIG``, else the nearest ``protege.toml`` upward
    from ``start`` (the working directory), else the embedded defaults."""
    environ = os.environ if environ is None else environ
    start = Path.cwd() if start is None else Path(start)
    path = _find_config_file(start, environ)
    if path is None:
        return _build(start.resolve(), None, FileSettings(), environ)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    try:
        settings = _converter.structure(raw, FileSettings)
    except cattrs.BaseValidationError as error:
        problems = "; ".join(
            cattrs.transform_error(error, path=path.name, format_exception=_describe)
        )
        raise ConfigError(f"{path} has settings protege cannot use: {problems}") from None
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
        mail=_with_mail_secrets(
            _overridden(settings.mail, environ, transport=MAIL_TRANSPORT_VARIABLE), environ
        ),
        web=settings.web,
        responsibilities=settings.responsibilities,
        files=settings.files,
    )


def _with_model_secrets(model: ModelSettings, environ: Mapping[str, str]) -> ModelSettings:
    # The environment is read here, once, so that nothing below configuration reads it.
    return attrs.evolve(
        model,
        base_url=model.base_url or environ.get(OPENAI_BASE_URL_VARIABLE) or None,
        api_key=model.api_key or environ.get(model.api_key_env) or None,
    )


def _with_mail_secrets(mail: MailSettings, environ: Mapping[str, str]) -> MailSettings:
    return attrs.evolve(
        mail, smtp_password=mail.smtp_password or environ.get(mail.smtp_password_env) or None
    )


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
