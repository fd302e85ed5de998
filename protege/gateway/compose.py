"""Outgoing mail as bytes: every header protege writes is plain text it chose, and the bytes
are parsed back and compared with what was meant before any transport sees them.

Header values come from outside (an inbound subject, carried-over addresses) or from a model.
Python's email package decodes RFC 2047 encoded-words in a value it is given and, on some
versions, writes what they decode to (CR LF included) straight into the header block. So text
is decoded here first, stripped of control characters, and left with no ``=?`` that could be
read as an encoded-word again; and whatever the email package does, the result is checked.

Plain mail (ASCII headers with nothing to quote, encode or fold; a text body) is written
directly, as the same bytes the email package would write at a small part of the cost; it is
checked all the same. bench/compose.py measures the saving on every reply;
tests/gateway/test_compose_fast.py compares the two writers byte for byte on a generated
corpus of mail.
"""

from __future__ import annotations

import binascii
import email.utils
import re
import unicodedata
from collections.abc import Sequence
from email import policy, quoprimime
from email.errors import NonASCIILocalPartDefect
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesParser, Parser

import attrs

from protege.errors import ProtegeError
from protege.gateway.parse import LOOP_HEADER, SharedHeaders

MAX_ID_LENGTH = 250
MAX_REFERENCES = 20
# Characters that end a line or are invisible controls: C0, DEL, C1, and Unicode's line and
# paragraph separators (str.splitlines breaks on several of them).
_LINE_BREAKING = {"Cc", "Zl", "Zp"}
_MESSAGE_ID = re.compile(r"<[!#-;=?-\[\]-~]+@[!#-;=?-\[\]-~]+>")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SIMPLE_PARTS = {
    "content-type",
    "content-transfer-encoding",
    "content-disposition",
    "mime-version",
}
_BODY_HEADERS = {"content-type", "mime-version"}
_OPTIONAL = {"content-transfer-encoding"}
# What plain_bytes writes: the longest header line the email package leaves unfolded, the
# parts of plain headers and bodies, and the headers set_content adds for 7bit ASCII text.
_UNFOLDED = 78
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOT_ATOM = rf"{_ATEXT}(?:\.{_ATEXT})*"
_PLAIN_ADDRESS = re.compile(rf"{_DOT_ATOM}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*")
_PLAIN_NAME = re.compile(rf"{_ATEXT}(?: {_ATEXT})*")
_PLAIN_ID = re.compile(rf"<{_DOT_ATOM}@{_DOT_ATOM}>")
_PLAIN_TEXT = re.compile(r"(?:[!-~]+(?: [!-~]+)*)?")
# A body of text and tabs: no control character but the line end (a lone CR is one to
# set_content, and it is left to the email package).
_PLAIN_BODY = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]*")
_SNIFFED_LINES = 10  # set_content chooses quoted-printable or base64 by the first ten lines


class DeliveryRefused(ProtegeError):
    """The mail cannot be sent as asked (no recipient, over a limit, headers that would not
    come out as meant...). Nothing was stored and nothing left."""


@attrs.frozen(kw_only=True)
class Outgoing:
    """One mail exactly as protege means to send it: plain, already sanitised values."""

    sender_name: str
    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    subject: str
    date: str
    message_id: str
    in_reply_to: str | None
    references: tuple[str, ...]
    loop: int
    body: str
    attachments: tuple[tuple[str, str, bytes], ...] = ()  # filename, content type, data
    reply_to: tuple[str, ...] = ()  # where answers go, when not to the sender
    # RFC 3834's Auto-Submitted, on protege's own automatic mail (a held sender's notice):
    # auto-responders and other agents answer none of it.
    auto_submitted: str | None = None

    @property
    def international(self) -> bool:
        """Whether an address needs SMTPUTF8 (a non-ASCII local part or domain)."""
        return not all(a.isascii() for a in (self.sender, *self.to, *self.cc))


def header_text(value: object) -> str:
    """``value`` as one line of plain text safe in any header protege writes.

    It is decoded as a mail reader would decode it, line breaks and control characters
    become spaces, runs of whitespace one space, and ``=?`` becomes ``= ?`` so nothing in it
    can be taken for an encoded-word and decoded again.
    """
    text = _spaced(str(value or ""))
    text = _spaced(str(policy.default.header_factory("Subject", text)))
    return " ".join(text.split()).replace("=?", "= ?")


def body_text(value: object) -> str:
    """``value`` as a body: text as given, with unpaired surrogates (which no charset can
    encode) replaced."""
    return _unsurrogated(str(value or ""))


def clean_id(value: object) -> str | None:
    """``value`` if it is one plain ``<left@right>`` id protege may write, else None."""
    text = str(value or "").strip()
    if len(text) > MAX_ID_LENGTH or not _MESSAGE_ID.fullmatch(text) or "=?" in text:
        return None
    return text


def references(ids: Sequence[str]) -> tuple[str, ...]:
    """The usable ids of ``ids``, at most ``MAX_REFERENCES``: the first (the thread's root)
    and the latest, as RFC 5322 suggests when a list is trimmed."""
    usable = [i for i in (clean_id(item) for item in ids) if i is not None]
    if len(usable) > MAX_REFERENCES:
        usable = [usable[0], *usable[-(MAX_REFERENCES - 1) :]]
    return tuple(usable)


_NOT_PLAIN = re.compile(r"[^A-Za-z0-9 .,:;!'()\[\]/&+#@_-]+")


def plain_text(text: str) -> str:
    """``text`` reduced to characters every mail program writes and reads back unchanged."""
    return " ".join(_NOT_PLAIN.sub(" ", text).split())


def rendered(outgoing: Outgoing) -> tuple[Outgoing, bytes]:
    """``render(outgoing)``; if the email package would not write its subject or attachment
    names back exactly (it refolds some hostile text), once more with those reduced to
    ``plain_text``, so that hostile mail cannot make a reply impossible. Anything else that
    would not come out as meant is still refused."""
    try:
        return outgoing, render(outgoing)
    except DeliveryRefused:
        plain = attrs.evolve(
            outgoing,
            subject=plain_text(outgoing.subject),
            attachments=tuple(
                (plain_text(name) or "attachment", kind, data)
                for name, kind, data in outgoing.attachments
            ),
        )
        if plain == outgoing:
            raise
        return plain, render(plain)


def render(outgoing: Outgoing) -> bytes:
    """The bytes of ``outgoing``, CR LF line ends, checked to parse back to exactly it.

    Plain mail is written directly (``plain_bytes``), anything else by the email package
    (``package_bytes``); either way the bytes are parsed back and compared with what was
    meant. Raises ``DeliveryRefused`` with the difference when they do not match.
    """
    raw = plain_bytes(outgoing)
    if raw is None:
        raw = package_bytes(outgoing)
    problem = difference(raw, outgoing)
    if problem is not None:
        raise DeliveryRefused(f"the mail would not go out as meant: {problem}")
    return raw


def package_bytes(outgoing: Outgoing) -> bytes:
    """The bytes of ``outgoing`` as the email package writes them, unchecked.

    Raises ``DeliveryRefused`` when the email package cannot write it at all.
    """
    message = EmailMessage(policy=policy.default.clone(header_factory=SharedHeaders()))
    try:
        message["From"] = _address(outgoing.sender, outgoing.sender_name)
        if outgoing.to:
            message["To"] = [_address(a) for a in outgoing.to]
        if outgoing.cc:
            message["Cc"] = [_address(a) for a in outgoing.cc]
        if outgoing.reply_to:
            message["Reply-To"] = [_address(a) for a in outgoing.reply_to]
        message["Subject"] = outgoing.subject
        message["Date"] = outgoing.date
        message["Message-ID"] = outgoing.message_id
        if outgoing.in_reply_to:
            message["In-Reply-To"] = outgoing.in_reply_to
        if outgoing.references:
            message["References"] = " ".join(outgoing.references)
        message[LOOP_HEADER] = str(outgoing.loop)
        if outgoing.auto_submitted:
            message["Auto-Submitted"] = outgoing.auto_submitted
        message.set_content(outgoing.body)
        for filename, content_type, data in outgoing.attachments:
            maintype, _, subtype = content_type.partition("/")
            message.add_attachment(
                data,
                maintype=maintype or "application",
                subtype=subtype or "octet-stream",
                filename=filename,
            )
        return message.as_bytes(
            policy=policy.default.clone(linesep="\r\n", utf8=outgoing.international)
        )
    except (ValueError, TypeError, UnicodeError) as error:
        raise DeliveryRefused(f"the mail cannot be written: {error}") from None


def plain_bytes(outgoing: Outgoing) -> bytes | None:
    """The bytes ``package_bytes`` would give for ``outgoing``, built as plain text, when it
    is plain mail; None for anything else.

    Plain mail has no attachments and ASCII headers with nothing the email package would
    quote, encode or fold (every header line within 78 characters, a display name of atoms,
    bare dot-atom addresses, no ``=?``); its body is text without control characters, sent
    as 7bit, 8bit or quoted-printable as ``set_content`` would choose (one it would send as
    base64 is left to it). The email package writes such mail the same way whatever it
    holds, and writing it directly costs a fraction of building and generating an
    ``EmailMessage``.
    """
    if outgoing.attachments or outgoing.international:
        return None
    headers = _plain_headers(outgoing)
    body = _plain_body(outgoing.body)
    if headers is None or body is None:
        return None
    encoding, data = body
    head = "".join(headers) + (
        'Content-Type: text/plain; charset="utf-8"\r\n'
        f"Content-Transfer-Encoding: {encoding}\r\n"
        "MIME-Version: 1.0\r\n\r\n"
    )
    return head.encode("ascii") + data


def difference(raw: bytes, outgoing: Outgoing) -> str | None:
    """How the mail in ``raw`` differs from ``outgoing`` (its header block, body and
    attachments' names), or None when it is exactly that mail."""
    reading = policy.default.clone(header_factory=SharedHeaders())
    if outgoing.international:  # RFC 6532: the headers are UTF-8, as a reader decodes them
        parsed = Parser(policy=reading).parsestr(raw.decode("utf-8", "surrogateescape"))
    else:
        parsed = BytesParser(policy=reading).parsebytes(raw)
    wanted = ["from", "subject", "date", "message-id", LOOP_HEADER.lower(), *_BODY_HEADERS]
    wanted += [n for n, v in (("to", outgoing.to), ("cc", outgoing.cc)) if v]
    wanted += ["in-reply-to"] if outgoing.in_reply_to else []
    wanted += ["reply-to"] if outgoing.reply_to else []
    wanted += ["references"] if outgoing.references else []
    wanted += ["auto-submitted"] if outgoing.auto_submitted else []
    names = [name.lower() for name in parsed]
    if len(names) != len(set(names)):
        return f"a header appears twice ({', '.join(parsed.keys())})"
    if set(names) - _OPTIONAL != set(wanted):
        return f"headers {sorted(set(names))} instead of {sorted(wanted)}"
    for name in names:
        defects = [d for d in parsed[name].defects if not isinstance(d, NonASCIILocalPartDefect)]
        if defects:
            return f"{name} has defects"
    senders = parsed["From"].addresses
    checks = [
        (
            "From",
            [((a.username, a.domain), a.display_name) for a in senders],
            [(_parts(outgoing.sender), outgoing.sender_name)],
        ),
        ("To", _addresses_of(parsed, "To"), [_parts(a) for a in outgoing.to]),
        ("Cc", _addresses_of(parsed, "Cc"), [_parts(a) for a in outgoing.cc]),
        ("Reply-To", _addresses_of(parsed, "Reply-To"), [_parts(a) for a in outgoing.reply_to]),
        ("Subject", str(parsed["Subject"]), outgoing.subject),
        ("Message-ID", str(parsed["Message-ID"]).strip(), outgoing.message_id),
        ("In-Reply-To", str(parsed.get("In-Reply-To", "")).strip(), outgoing.in_reply_to or ""),
        ("References", str(parsed.get("References", "")).split(), list(outgoing.references)),
        (LOOP_HEADER, str(parsed[LOOP_HEADER]), str(outgoing.loop)),
        (
            "Auto-Submitted",
            str(parsed.get("Auto-Submitted", "")).strip(),
            outgoing.auto_submitted or "",
        ),
        ("body", _lines(_body_of(parsed)), _lines(outgoing.body)),
        (
            "attachments",
            [part.get_filename() for part in parsed.iter_attachments()],
            [filename for filename, _, _ in outgoing.attachments],
        ),
    ]
    for what, found, meant in checks:
        if found != meant:
            return f"{what} would be {found!r}, not {meant!r}"
    for part in parsed.iter_parts():
        extra = {name.lower() for name in part} - _SIMPLE_PARTS
        if extra:
            return f"a part has headers {sorted(extra)}"
    return None


def now() -> str:
    """The Date of a mail sent now."""
    return email.utils.formatdate(localtime=False)


def _spaced(text: str) -> str:
    return "".join(
        " " if unicodedata.category(c) in _LINE_BREAKING else c for c in _unsurrogated(text)
    )


def _unsurrogated(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _address(address: str, name: str = "") -> Address:
    local, _, domain = address.rpartition("@")
    return Address(display_name=name, username=local, domain=domain)


def _parts(address: str) -> tuple[str, str]:
    local, _, domain = address.rpartition("@")
    return local, domain


def _addresses_of(parsed: EmailMessage, name: str) -> list[tuple[str, str]]:
    header = parsed.get(name)
    if header is None:
        return []
    return [(a.username, a.domain) for a in header.addresses]


def _body_of(parsed: EmailMessage) -> str:
    part = parsed.get_body(preferencelist=("plain",))
    return "" if part is None else part.get_content()


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")


def _plain_headers(outgoing: Outgoing) -> list[str] | None:
    fields: list[tuple[str, str | None]] = [
        ("From", _plain_mailbox(outgoing.sender, outgoing.sender_name))
    ]
    for name, addresses in (
        ("To", outgoing.to),
        ("Cc", outgoing.cc),
        ("Reply-To", outgoing.reply_to),
    ):
        if addresses:
            fields.append((name, _plain_addresses(addresses)))
    fields += [
        ("Subject", _plain_unstructured(outgoing.subject)),
        ("Date", _plain_date(outgoing.date)),
        ("Message-ID", _plain_id(outgoing.message_id)),
    ]
    if outgoing.in_reply_to:
        fields.append(("In-Reply-To", _plain_unstructured(outgoing.in_reply_to)))
    if outgoing.references:
        fields.append(("References", _plain_unstructured(" ".join(outgoing.references))))
    fields.append((LOOP_HEADER, _plain_unstructured(str(outgoing.loop))))
    if outgoing.auto_submitted:
        fields.append(("Auto-Submitted", _plain_unstructured(outgoing.auto_submitted)))
    lines = []
    for name, value in fields:
        if value is None:
            return None
        # The email package writes a header with an empty value without the space.
        line = f"{name}: {value}" if value else f"{name}:"
        if len(line) > _UNFOLDED:
            return None
        lines.append(line + "\r\n")
    return lines


def _plain_mailbox(address: str, name: str) -> str | None:
    if not _plain_address(address) or (name and not _plain_name(name)):
        return None
    return f"{name} <{address}>" if name else address


def _plain_addresses(addresses: Sequence[str]) -> str | None:
    if not all(_plain_address(a) for a in addresses):
        return None
    return ", ".join(addresses)


def _plain_address(address: str) -> bool:
    return _PLAIN_ADDRESS.fullmatch(address) is not None and "=?" not in address


def _plain_name(name: str) -> bool:
    return _PLAIN_NAME.fullmatch(name) is not None and "=?" not in name


def _plain_unstructured(text: str) -> str | None:
    if _PLAIN_TEXT.fullmatch(text) is None or "=?" in text:
        return None
    return text


def _plain_id(text: str) -> str | None:
    if _PLAIN_ID.fullmatch(text) is None or "=?" in text:
        return None
    return text


def _plain_date(text: str) -> str | None:
    """``text`` if the email package would write it unchanged (it writes a Date as it
    formats the moment it reads, not as given)."""
    if _PLAIN_TEXT.fullmatch(text) is None:
        return None
    try:
        written = email.utils.format_datetime(email.utils.parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return text if written == text else None


def _plain_body(text: str) -> tuple[str, bytes] | None:
    """The Content-Transfer-Encoding and CR LF bytes ``set_content`` and the generator give
    ``text``: 7bit for ASCII lines within 78 characters, 8bit for other such lines, else
    quoted-printable when it is shorter than base64 (base64 is left to the email package).
    None for text with control characters or a lone CR."""
    text = text.replace("\r\n", "\n")
    if "\r" in text or _PLAIN_BODY.fullmatch(text) is None:
        return None
    lines = text.encode("utf-8").splitlines()
    whole = b"\n".join(lines) + b"\n"
    if max((len(line) for line in lines), default=0) <= _UNFOLDED:
        encoding = "7bit" if whole.isascii() else "8bit"
        return encoding, whole.replace(b"\n", b"\r\n")
    sniff = b"\n".join(lines[:_SNIFFED_LINES]) + b"\n"
    quoted = quoprimime.body_encode(sniff.decode("latin-1"), _UNFOLDED)
    if len(quoted) > len(binascii.b2a_base64(sniff)):
        return None
    if len(lines) > _SNIFFED_LINES:
        quoted = quoprimime.body_encode(whole.decode("latin-1"), _UNFOLDED)
    return "quoted-printable", quoted.replace("\n", "\r\n").encode("ascii")
