"""Reading one email from outside into what protege keeps, whatever shape it arrives in.

Nothing here raises for bad mail: problems become flags on the stored message. Only the
sender is strict: a From header that does not name exactly one mailbox unambiguously gives
no sender at all, so no rule and no gate ever sees a guess.
"""

from __future__ import annotations

import collections
import email.utils
import re
import threading
from email import policy
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage, MIMEPart
from email.parser import BytesParser
from html.parser import HTMLParser

import attrs

from protege.addresses import (
    CONTROL_CHARACTERS,
    InvalidAddress,
    has_control_characters,
    parse_mailbox,
)
from protege.blobs import sanitize_filename
from protege.config import MailSettings
from protege.errors import ProtegeError

LOOP_HEADER = "X-Protege-Loop"
BULK_PRECEDENCE = {"bulk", "junk", "list"}
AMBIGUOUS_SENDER = "ambiguous sender"
MAX_ID_LENGTH = 998
MAX_REFERENCES = 100
MAX_SUBJECT = 2000
MAX_DISPLAY_NAME = 200
MAX_CONTENT_TYPE = 127
MAX_NESTING = 5
MAX_LOOP_DIGITS = 6
_MESSAGE_ID = re.compile(rb"<[!-;=?-~]{1,%d}>" % (MAX_ID_LENGTH - 2))
_UNFOLD = re.compile(r"\r\n|\r|\n")
_HEADER_END = re.compile(rb"\r?\n\r?\n")
MAX_MIME_PARTS = 1000
# The standard library's structured header parser takes time quadratic in some shapes
# (thousands of comments, quotes or commas); a header past these is not handed to it.
MAX_STRUCTURED_HEADER = 4096
MAX_STRUCTURED_SPECIALS = 100
MAX_LINES = 1_000_000  # a 25 MiB mail of 76-character lines has about 330,000
MAX_HTML_CHARACTERS = 250_000  # read for text; the rest stays in the raw source
MAX_MULTIPARTS = 100  # Postfix's mime_nesting_limit
_BOUNDARY = re.compile(rb'boundary\s*=\s*(?:"([^"\r\n]{1,200})"|([^\s;"]{1,200}))', re.I)
_MULTIPART = re.compile(rb"^content-type:\s*multipart/", re.MULTILINE | re.IGNORECASE)
_ADDRESS_HEADERS = re.compile(
    rb"^(?:from|sender|reply-to|to|cc|bcc|resent-[a-z]+|delivered-to):", re.IGNORECASE
)


class MailRejected(ProtegeError):
    """Mail turned away before anything was stored; ``code`` is the SMTP reply code."""

    def __init__(self, reason: str, code: int = 550) -> None:
        super().__init__(reason)
        self.code = code


@attrs.frozen
class Attachment:
    """A file that came with the mail, before it is stored."""

    filename: str | None
    content_type: str
    data: bytes


@attrs.frozen
class ParsedMail:
    """An inbound email as protege stores it.

    ``sender`` is the one mailbox of the From header (display name decoded), or empty when
    there is no unambiguous one; then ``ignore_reason`` says why no run may start.
    """

    sender: str
    to: list[str]
    cc: list[str]
    reply_to: list[str]
    subject: str
    body: str
    message_id: str | None
    in_reply_to: str | None
    references: list[str]
    attachments: list[Attachment]
    flags: list[str]
    ignore_reason: str | None

    @classmethod
    def unread(cls, flags: list[str], ignore_reason: str, body: str = "") -> ParsedMail:
        """A mail nothing could be read from (no sender, no recipients): stored and flagged
        with ``flags``, and answered by nobody, for ``ignore_reason``."""
        return cls(
            sender="",
            to=[],
            cc=[],
            reply_to=[],
            subject="",
            body=body,
            message_id=None,
            in_reply_to=None,
            references=[],
            attachments=[],
            flags=flags,
            ignore_reason=ignore_reason,
        )


def check_header_block(raw: bytes, limits: MailSettings) -> None:
    """Refuse (552) mail whose header block is over the limits, before any parsing.

    The standard library's header parser is slow on some shapes of long headers, so what
    it is given is bounded first: the size of the header block, and the number of
    addresses its address headers could hold.
    """
    end = _HEADER_END.search(raw)
    block = raw[: end.start()] if end else raw
    if len(block) > limits.max_header_bytes:
        raise MailRejected(
            f"the header block is {len(block)} bytes; the limit is {limits.max_header_bytes}",
            552,
        )
    addresses = 0
    in_address_header = False
    for line in block.splitlines():
        if line[:1] not in (b" ", b"\t"):
            in_address_header = _ADDRESS_HEADERS.match(line) is not None
        if in_address_header:
            addresses += line.count(b"@")
    if addresses > limits.max_header_addresses:
        raise MailRejected(
            f"the headers name {addresses} addresses; the limit is {limits.max_header_addresses}",
            552,
        )
    lines = max(raw.count(b"\n"), raw.count(b"\r"))
    if lines > MAX_LINES:
        raise MailRejected(f"the message has {lines} lines; the limit is {MAX_LINES}", 552)
    parts = _mime_parts(raw)
    if parts > MAX_MIME_PARTS:
        raise MailRejected(
            f"the message has {parts} MIME parts; the limit is {MAX_MIME_PARTS}", 552
        )
    multiparts = len(_MULTIPART.findall(raw))
    if multiparts > MAX_MULTIPARTS:
        raise MailRejected(
            f"the message has {multiparts} multipart sections; the limit is {MAX_MULTIPARTS}",
            552,
        )


def _mime_parts(raw: bytes) -> int:
    """How many lines open a part under a boundary the mail declares (an upper bound on
    its MIME parts: the parser spends time on each)."""
    boundaries = {m.group(1) or m.group(2) for m in _BOUNDARY.finditer(raw, 0, len(raw))}
    if not boundaries:
        return 0
    if len(boundaries) > MAX_MIME_PARTS:
        return len(boundaries)
    opening = re.compile(
        rb"^--(?:" + b"|".join(re.escape(b) for b in boundaries) + rb")", re.MULTILINE
    )
    return len(opening.findall(raw))


class HeadersOnce(HeaderRegistry):
    """The standard header registry for one message, reading each header once: the email
    package parses a header again each time it is asked for (a part's Content-Type many
    times over), and a parsed header never changes."""

    def __init__(self) -> None:
        super().__init__()
        self._read: dict[tuple[str, str], BaseHeader] = {}

    def __call__(self, name: str, value: str) -> BaseHeader:
        if not isinstance(value, str):  # set from objects (addresses) when writing mail
            return self.make(name, value)
        found = self._read.get((name, value))
        if found is None:
            found = self._read[(name, value)] = self.make(name, value)
        return found

    def make(self, name: str, value: str) -> BaseHeader:
        """The header ``name`` with ``value``, parsed."""
        return super().__call__(name, value)


SHARED_HEADERS = 1024  # parsed headers kept for all the mail a process writes
SHARED_VALUE_LIMIT = 200  # a longer value is parsed, not kept (a parse tree is ~500 B a char)
# Headers that come back mail after mail; Subject, Date, Message-ID, In-Reply-To and
# References are new on every mail and would only push these out.
SHARED_NAMES = frozenset(
    {"from", "to", "cc", "reply-to", "content-type", "content-transfer-encoding", "mime-version"}
)


class SharedHeaders(HeadersOnce):
    """``HeadersOnce`` for the mail protege writes and checks, sharing what it parsed with
    every such message of this process: the same From, To and MIME headers come back on
    mail after mail, and parsing them is most of the cost of checking one. The most
    recently used ``SHARED_HEADERS`` are kept; a parsed header never changes."""

    _shared: collections.OrderedDict[tuple[str, str], BaseHeader] = collections.OrderedDict()
    _lock = threading.Lock()

    def __call__(self, name: str, value: str) -> BaseHeader:
        if (
            not isinstance(value, str)
            or len(value) > SHARED_VALUE_LIMIT
            or name.lower() not in SHARED_NAMES
        ):
            return super().__call__(name, value)
        key = (name, value)
        shared = self._shared
        with self._lock:
            found = shared.get(key)
            if found is not None:
                shared.move_to_end(key)
                return found
        found = self.make(name, value)
        with self._lock:
            shared[key] = found
            if len(shared) > SHARED_HEADERS:
                shared.popitem(last=False)
        return found


class _BoundedHeaders(HeadersOnce):
    """The standard header registry, except that a structured header too long or too
    intricate to parse quickly is read as a safe stand-in, and noted."""

    STAND_INS = {"content-type": "application/octet-stream", "content-disposition": "attachment"}

    def __init__(self) -> None:
        super().__init__()
        self.replaced: list[str] = []

    def make(self, name: str, value: str) -> BaseHeader:
        """The header ``name`` with ``value``, parsed unless it is too intricate."""
        kind = self[name]
        if not issubclass(kind, self.default_class) and _intricate(value):
            self.replaced.append(name)
            return kind(name, self.STAND_INS.get(name.lower(), ""))
        return kind(name, value)


def _intricate(value: str) -> bool:
    if len(value) > MAX_STRUCTURED_HEADER:
        return True
    return sum(value.count(c) for c in '(",;=') > MAX_STRUCTURED_SPECIALS


def parse(raw: bytes, limits: MailSettings, envelope_sender: str | None = None) -> ParsedMail:
    """Read ``raw`` into a ``ParsedMail``; problems become flags, not errors.

    ``envelope_sender`` is the SMTP ``MAIL FROM`` (``""`` for a null return path, None when
    unknown). Raises ``MailRejected`` only for attachments over the limits.
    """
    registry = _BoundedHeaders()
    try:
        bounded = policy.default.clone(header_factory=registry)
        message = BytesParser(policy=bounded).parsebytes(raw)
        parsed = _read(message, limits, envelope_sender)
    except MailRejected:
        raise
    except Exception as error:  # the parser is lenient; this is a last resort
        return _unparsed(raw, f"malformed: cannot parse ({type(error).__name__})")
    if registry.replaced:
        names = ", ".join(sorted({name.lower() for name in registry.replaced}))
        parsed.flags.append(f"malformed: headers too intricate to read ({names})")
    return parsed


def _read(message: EmailMessage, limits: MailSettings, envelope_sender: str | None) -> ParsedMail:
    flags: list[str] = []
    headers = _Headers(message, flags)
    defects = _defects(message)
    if defects:
        flags.append("malformed: " + ", ".join(sorted(defects)))
    sender, ambiguity = _sender(headers, envelope_sender)
    body = _body(message, flags)
    references = headers.ids("References")
    if len(references) > MAX_REFERENCES:  # the root names the thread; the rest is history
        references = [references[0], *references[-(MAX_REFERENCES - 1) :]]
        flags.append(f"references cut to {MAX_REFERENCES}")
    message_id = next(iter(headers.ids("Message-ID")), None)
    replied_to = headers.ids("In-Reply-To")  # RFC 5322 uses it only when it names one
    in_reply_to = replied_to[0] if len(replied_to) == 1 else None
    ignore = _ignore_reason(message, headers, limits, envelope_sender, flags)
    if ambiguity is not None:
        flags.append(f"{AMBIGUOUS_SENDER}: {ambiguity}")
        ignore = f"{AMBIGUOUS_SENDER} ({ambiguity}): there is nobody safe to answer"
    to, cc, reply_to = (headers.addresses(name) for name in ("To", "Cc", "Reply-To"))
    subject = headers.text("Subject", MAX_SUBJECT)
    attachments = _attachments(message, limits, flags)
    return ParsedMail(
        sender=sender,
        to=to,
        cc=cc,
        reply_to=reply_to,
        subject=subject,
        body=storable(body, flags),
        message_id=message_id,
        in_reply_to=in_reply_to,
        references=references,
        attachments=attachments,
        flags=list(dict.fromkeys(flags)),  # each problem once
        ignore_reason=ignore,
    )


def storable(text: str, flags: list[str]) -> str:
    """``text`` as a database column can hold it (no NUL, no lone surrogates)."""
    if "\x00" in text:
        flags.append("malformed: NUL characters replaced")
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        flags.append("malformed: undecodable bytes replaced")
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


class _Headers:
    """The headers of one message, each read once, decoded, and made safe to keep."""

    def __init__(self, message: EmailMessage, flags: list[str]) -> None:
        self.flags = flags
        self.raw: dict[str, list[str]] = {}
        for name, value in message.raw_items():
            text = _utf8(_UNFOLD.sub("", value))
            if text is None:
                flags.append(f"malformed: header {name} has bytes that are not UTF-8")
                text = _UNFOLD.sub("", value)
            self.raw.setdefault(name.lower(), []).append(text)

    def values(self, name: str) -> list[str]:
        return self.raw.get(name.lower(), [])

    def text(self, name: str, limit: int) -> str:
        """An unstructured header decoded, controls made spaces, cut to ``limit``."""
        value = (self.values(name) or [""])[0]
        if len(value) > 4 * limit:  # decoding costs more than the text is worth
            self.flags.append(f"{name} cut to {limit} characters")
            value = value[: 4 * limit]
        try:
            decoded = str(policy.default.header_factory("subject", value))
        except Exception:  # a decoder crash on hostile encoded-words: keep the raw text
            self.flags.append(f"malformed: header {name}")
            decoded = value
        if has_control_characters(decoded):
            self.flags.append(f"control characters removed from {name}")
        text = " ".join(CONTROL_CHARACTERS.sub(" ", decoded).split())
        if len(text) > limit:
            self.flags.append(f"{name} cut to {limit} characters")
            text = text[:limit]
        return storable(text, self.flags)

    def addresses(self, name: str) -> list[str]:
        """The bare addresses of an address-list header; what does not parse is left out.

        ``getaddresses`` takes linear time on any shape; each address it finds is then
        checked on its own.
        """
        found: list[str] = []
        left_out = False
        try:
            pairs = email.utils.getaddresses(self.values(name))
        except Exception:  # RecursionError on thousands of nested comments
            pairs, left_out = [], True
        for _, address in pairs:
            try:
                if "@" not in address:
                    raise InvalidAddress("no domain")
                found.append(parse_mailbox(address).address)
            except InvalidAddress:
                left_out = True
        if left_out:
            self.flags.append(f"malformed: addresses in {name} left out")
        return found

    def ids(self, name: str) -> list[str]:
        """The Message-IDs a header holds; ids that are not plain ASCII or too long, dropped."""
        values = self.values(name)
        return [
            found.decode("ascii")
            for value in values[:1]
            for found in _MESSAGE_ID.findall(value.encode("utf-8", "surrogateescape"))
        ]


def _utf8(value: str) -> str | None:
    # The parser keeps raw 8-bit bytes as surrogates; SMTPUTF8 mail (RFC 6532) is UTF-8.
    try:
        return value.encode("ascii", "surrogateescape").decode("utf-8")
    except UnicodeError:
        return None


def _sender(headers: _Headers, envelope_sender: str | None) -> tuple[str, str | None]:
    values = headers.values("From")
    if not values:
        seen = f" (envelope sender {envelope_sender!r})" if envelope_sender else ""
        return "", f"no From header{seen}"
    if len(values) > 1:
        return "", f"{len(values)} From headers"
    try:
        mailbox = parse_mailbox(values[0])
    except InvalidAddress as error:
        return "", f"{error}: {_excerpt(values[0])}"
    if "=?" in mailbox.name:  # decoded once already: stored so it cannot decode again
        mailbox = attrs.evolve(mailbox, name=mailbox.name.replace("=?", "= ?"))
    if len(mailbox.name) > MAX_DISPLAY_NAME:
        headers.flags.append(f"sender's display name cut to {MAX_DISPLAY_NAME} characters")
        mailbox = attrs.evolve(mailbox, name=mailbox.name[:MAX_DISPLAY_NAME])
    return str(mailbox), None


def _excerpt(value: str, limit: int = 120) -> str:
    text = repr(" ".join(value.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ignore_reason(
    message: EmailMessage,
    headers: _Headers,
    limits: MailSettings,
    envelope_sender: str | None,
    flags: list[str],
) -> str | None:
    # RFC 3834: no automatic answer to bounces, reports, auto-replies or bulk mail.
    return_paths = headers.values("Return-Path")
    if envelope_sender in ("", "<>") or (return_paths and return_paths[0].strip() == "<>"):
        flags.append("null return path")
        return "mail with a null return path (a bounce or report) starts no run"
    if message.get_content_type() in ("multipart/report", "message/delivery-status"):
        flags.append(f"report: {message.get_content_type()}")
        return "a delivery or read report starts no run"
    auto = headers.text("Auto-Submitted", 200).lower()
    if auto and auto.split(";")[0].strip() != "no":
        flags.append(f"auto-submitted: {auto}")
        return f"auto-submitted mail ({auto}) starts no run"
    precedence = headers.text("Precedence", 200).lower()
    if precedence in BULK_PRECEDENCE:
        flags.append(f"precedence: {precedence}")
        return f"{precedence} mail starts no run"
    loop = headers.text(LOOP_HEADER, 200)
    if loop:
        # ASCII digits only: "²" is a digit to str.isdigit, not to int().
        valid = loop.isascii() and loop.isdigit() and len(loop) <= MAX_LOOP_DIGITS
        count = int(loop) if valid else limits.loop_limit
        flags.append(f"loop: {count}" if valid else "loop: invalid count, taken as the limit")
        if count >= limits.loop_limit:
            return f"mail that went round {count} times between agents starts no run"
    return None


def _unparsed(raw: bytes, flag: str) -> ParsedMail:
    flags = [flag, f"{AMBIGUOUS_SENDER}: the mail does not parse"]
    body = storable(raw.decode("utf-8", errors="replace"), flags)
    return ParsedMail.unread(flags, f"{AMBIGUOUS_SENDER}: the mail does not parse", body)


def _defects(message: EmailMessage) -> set[str]:
    found: set[str] = set()
    for part in message.walk():
        found.update(type(defect).__name__ for defect in part.defects)
    return found


def _body(message: MIMEPart, flags: list[str], depth: int = 0) -> str:
    """The text a person would read first, whatever the shape; line endings made ``\\n``."""
    if message.get_content_type() == "message/rfc822" and depth < MAX_NESTING:
        inner = message.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], MIMEPart):
            flags.append("body taken from an enclosed message")
            return _body(inner[0], flags, depth + 1)
    try:
        part = message.get_body(preferencelist=("plain", "html"))
    except Exception:
        part = None
    if part is None:
        payload = message.get_payload()
        maintype = message.get_content_maintype()
        if not isinstance(payload, str) or maintype not in ("text", "multipart"):
            return ""
        part = message
        if maintype == "multipart":
            flags.append("malformed: a multipart without parts; its raw text is shown")
    text = _text_of(part, flags)
    if part.get_content_type() == "text/html":
        if len(text) > MAX_HTML_CHARACTERS:
            flags.append(f"HTML body read for its first {MAX_HTML_CHARACTERS} characters")
            text = text[:MAX_HTML_CHARACTERS]
        text = html_to_text(text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _text_of(part: MIMEPart, flags: list[str]) -> str:
    try:
        content = part.get_content()
        if isinstance(content, str):
            return content
    except Exception as error:
        flags.append(f"malformed: body ({type(error).__name__}); decoded as UTF-8")
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return payload.decode("utf-8", errors="replace")
    raw = part.get_payload()
    return raw if isinstance(raw, str) else ""


def _attachments(message: EmailMessage, limits: MailSettings, flags: list[str]) -> list[Attachment]:
    if message.get_content_type() == "message/rfc822":
        inner = message.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], EmailMessage):
            message = inner[0]
    found: list[Attachment] = []
    try:
        parts = list(message.iter_attachments())
    except Exception:
        flags.append("malformed: attachments could not be read")
        return found
    for part in parts:
        try:
            decoded = part.get_payload(decode=True)
            # An attached message/rfc822 decodes to nothing: keep it as bytes.
            data = decoded if isinstance(decoded, bytes) else part.as_bytes()
        except Exception:
            flags.append("malformed: an attachment could not be decoded and was left out")
            continue
        content_type = part.get_content_type()
        if len(content_type) > MAX_CONTENT_TYPE or has_control_characters(content_type):
            flags.append("malformed: an attachment's content type replaced")
            content_type = "application/octet-stream"
        try:
            filename = part.get_filename()
        except Exception:
            filename = None
        found.append(Attachment(filename, content_type, data))
        if len(found) > limits.max_attachments:
            raise MailRejected(
                f"message has more than {limits.max_attachments} attachments; "
                f"the limit is {limits.max_attachments}",
                552,
            )
        if len(data) > limits.max_attachment_bytes:
            name = sanitize_filename(filename, default=str(len(found)))
            raise MailRejected(
                f"attachment {name} is {len(data)} bytes; "
                f"the limit is {limits.max_attachment_bytes}",
                552,
            )
    return found


class _TextOf(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("br", "p", "div", "li", "tr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The readable text of an HTML body: tags dropped, scripts and styles skipped."""
    parser = _TextOf()
    parser.feed(html)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
