"""Email addresses: exactly one unambiguous mailbox or none, and the key addresses compare by.

Everything here is pure (no database, no configuration): the gateway, the gates and the
command line all read addresses through it, so a header an attacker shaped cannot look like
one address to one of them and another address to the next.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import attrs

from protege.errors import ProtegeError
from protege.reprs import fields_repr

MAX_ADDRESS_LENGTH = 320
MAX_MAILBOX_TEXT = 2 * 998  # a display name and an address, as one header line may hold
# A bare ASCII address needs no parser: the common case, on every gate decision.
_BARE = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9.-]+")
_FORBIDDEN_IN_ADDRESS = re.compile(r"[\s<>,;\"()\[\]\\]")
# One final dot closes a fully qualified domain (RFC 1034); it names the same domain.
_FINAL_DOT = re.compile(r"(?<=[^.@])\.(>?)$")
_FULL_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_FOLD = re.compile(r"\r?\n(?=[ \t])")
# C0 and C1 controls (tab aside), DEL, and the Unicode line and paragraph separators.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


class InvalidAddress(ProtegeError):
    """Text that is not exactly one email address."""


@attrs.frozen(repr=False)
class Mailbox:
    """One mailbox: a display name (decoded, possibly empty) and its address."""

    __repr__ = fields_repr

    name: str
    address: str

    def __str__(self) -> str:
        if not self.name:
            return self.address
        from email.headerregistry import Address  # see parse_mailbox

        local, _, domain = self.address.rpartition("@")
        return str(Address(display_name=self.name, username=local, domain=domain))


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a control character (tab aside) or a Unicode line break."""
    return CONTROL_CHARACTERS.search(text) is not None


def parse_mailbox(text: str) -> Mailbox:
    """The one mailbox ``text`` names, or ``InvalidAddress`` saying why it names none.

    ``text`` is a header value as written (encoded-words allowed, folding allowed) or an
    address typed by a person. Refused: several mailboxes, group syntax, control characters
    (also inside encoded-words), and any defect the standard library's parser reports, which
    is how stray brackets, an address used as a display name and other shapes that hide a
    second address show up. Internationalised addresses (RFC 6532) are accepted.
    """
    if not isinstance(text, str):
        raise InvalidAddress("no address")
    return _parse_mailbox(text)


@functools.lru_cache(maxsize=4096)  # pure, and the same people write mail after mail
def _parse_mailbox(text: str) -> Mailbox:
    if not text.strip():
        raise InvalidAddress("no address")
    if len(text) > MAX_MAILBOX_TEXT:
        raise InvalidAddress(f"longer than {MAX_MAILBOX_TEXT} characters")
    unfolded = _FOLD.sub("", text)
    if has_control_characters(unfolded):
        raise InvalidAddress("control characters")
    unfolded = _FINAL_DOT.sub(r"\1", unfolded.strip())
    if _BARE.fullmatch(unfolded):
        return Mailbox("", unfolded)
    # The parser is loaded here, not at import: a command that reads no address (such as
    # `protege tools`) does not pay for it, nor does the bare address above.
    from email import policy
    from email.errors import NonASCIILocalPartDefect

    try:
        header = policy.default.header_factory("from", unfolded)
        groups = header.groups
    except Exception as error:  # the parser raises for CR or LF decoded out of an encoded-word
        raise InvalidAddress(f"does not parse ({type(error).__name__})") from None
    defects = [d for d in header.defects if not isinstance(d, NonASCIILocalPartDefect)]
    if defects:
        detail = " ".join(str(defects[0]).split())[:120]
        raise InvalidAddress(f"malformed ({type(defects[0]).__name__}: {detail})")
    if len(groups) != 1 or sum(len(g.addresses) for g in groups) != 1:
        count = sum(len(g.addresses) for g in groups)
        raise InvalidAddress("no mailbox" if count == 0 else f"{count} mailboxes")
    if groups[0].display_name is not None:
        raise InvalidAddress("group syntax")
    mailbox = groups[0].addresses[0]
    if not mailbox.username or not mailbox.domain:
        raise InvalidAddress("not a full address")
    if has_control_characters(mailbox.display_name):
        raise InvalidAddress("control characters")
    address = f"{mailbox.username}@{mailbox.domain}"
    if (
        _FORBIDDEN_IN_ADDRESS.search(address)
        or address.count("@") != 1
        or len(address) > MAX_ADDRESS_LENGTH
    ):
        raise InvalidAddress("not a plain address")
    return Mailbox(" ".join(mailbox.display_name.split()), address)


def normalize_domain(domain: str) -> str | None:
    """``domain`` in the form keys use: ASCII (IDNA 2008, UTS 46), lowercase, no final dot.

    ``café.example`` and ``xn--caf-dma.example`` give the same result. None if it is not a
    domain.
    """
    # UTS 46 maps these full stops to "."; map them first, so that the one final dot
    # dropped is the same whichever way it is written.
    domain = domain.translate(_FULL_STOPS)
    domain = domain[:-1] if domain.endswith(".") else domain
    if not domain or domain.startswith(".") or domain.endswith(".") or ".." in domain:
        return None
    if domain.isascii():
        return domain.lower()
    import idna  # only international domains need it (see parse_mailbox)

    try:
        return idna.encode(domain, uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def normalize_local_part(local: str) -> str:
    """A local part as keys use it: Unicode composed (NFC) and lowercased."""
    return unicodedata.normalize("NFC", local).lower()


def routing_key(address: str | None) -> str | None:
    """The form addresses are compared in: the bare address, ``+tag`` dropped, lowercased,
    the domain in IDNA form.

    ``"Mara <Mara+billing@TheScoop.com>"`` gives ``mara@thescoop.com``. Anything that is not
    exactly one well-formed mailbox gives None, and None matches no pattern.
    """
    key = canonical_address(address)
    if key is None:
        return None
    local, _, domain = key.rpartition("@")
    local = local.split("+", 1)[0]
    return f"{local}@{domain}" if local else None


def participant_keys(sender: str | None, to: list[str], cc: list[str]) -> list[str]:
    """The routing keys of the people a message was from, to and copied to, each once;
    an address that names no one mailbox is left out."""
    keys = (routing_key(address) for address in [sender, *to, *cc])
    return list(dict.fromkeys(key for key in keys if key is not None))


@functools.lru_cache(maxsize=4096)  # pure, and asked for the same senders on every turn
def canonical_address(address: str | None) -> str | None:
    """The bare address of the one mailbox in ``address``, lowercased with an IDNA domain
    and any ``+tag`` kept; None if ``address`` is not exactly one mailbox."""
    if not address:
        return None
    try:
        mailbox = parse_mailbox(address)
    except InvalidAddress:
        return None
    local, _, domain = mailbox.address.rpartition("@")
    domain_key = normalize_domain(domain)
    if not local or domain_key is None:
        return None
    key = f"{normalize_local_part(local)}@{domain_key}"
    return key if len(key) <= MAX_ADDRESS_LENGTH else None


def require_address(address: str) -> str:
    """``canonical_address(address)``, or ``InvalidAddress`` saying why there is none."""
    key = canonical_address(address)
    if key is None:
        raise InvalidAddress(f"{address!r} is not an email address")
    return key
