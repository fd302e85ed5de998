"""DKIM (RFC 6376) through dkimpy, with RFC 8301's floor and protege's own reading of ``l=``.

Every signature of a mail is checked (up to ``MAX_SIGNATURES``), each giving its own
result: which ``d=`` passed or failed, and why.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from typing import Any

import attrs

from protege.authentication.resolver import Resolver

MAX_SIGNATURES = 8  # each costs a DNS lookup: a mail with thousands checks only the first few
EXPIRY_SLACK = 300  # seconds a signature is honoured past its x= (clocks differ a little)
REFUSED_ALGORITHMS = {b"rsa-sha1": "rsa-sha1 is not accepted (RFC 8301)"}
PASS, FAIL, TEMPERROR, PERMERROR = "pass", "fail", "temperror", "permerror"


@attrs.frozen
class Signature:
    """What one DKIM signature proved: ``result`` (pass, fail, temperror, permerror) for the
    signing domain ``domain`` (``d=``, lowercased), and why."""

    result: str
    domain: str | None
    selector: str | None
    reason: str


def bytes_to_int(data: bytes) -> int:
    """dkimpy's ``str2int``, done by ``int.from_bytes`` (dkimpy loops byte by byte)."""
    return int.from_bytes(bytes(data), "big")


def int_to_bytes(number: int, length: int = -1) -> bytearray:
    """dkimpy's ``int2str``: ``number`` big-endian in ``length`` bytes (its low bytes when
    it needs more), or in as few as it needs (one at least) when ``length`` is negative."""
    assert number >= 0
    if length < 0:
        return bytearray(number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big"))
    return bytearray((number & ((1 << (8 * length)) - 1)).to_bytes(length, "big"))


KEYS_KEPT = 1024  # parsed public keys kept, by their record's text


@functools.lru_cache(maxsize=KEYS_KEPT)
def _parsed_key(name: bytes, record: bytes) -> Any:
    import dkim

    return dkim.evaluate_pk(name, record)


def load_key(name: bytes, dnsfunc: Callable[..., Any], timeout: float = 5) -> Any:
    """dkimpy's ``load_pk_from_dns``: the record is looked up every time (a rotated key is
    seen at once), and only its parsing is kept, by the record's text."""
    record = dnsfunc(name, timeout=timeout)
    if not record:
        import dkim

        return dkim.evaluate_pk(name, record)  # raises, saying the key is missing
    return _parsed_key(bytes(name), bytes(record))


@functools.cache
def _dkim() -> Any:
    """dkimpy, with its two integer conversions done by Python's own and each public key
    parsed once per record: together they were over a third of a verification's time
    (``bench/authentication.py``; the differential test of the conversions is
    ``tests/authentication/test_integer_conversions.py``)."""
    import dkim
    import dkim.crypto

    dkim.crypto.int2str = int_to_bytes
    dkim.crypto.str2int = bytes_to_int
    dkim.load_pk_from_dns = load_key
    return dkim


class _Lookups:
    """dkimpy's DNS function, over a protege resolver; remembers whether a lookup timed out."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.timed_out = False
        self.record: bytes | None = None  # the last key record found

    def __call__(self, name: bytes, timeout: float = 5) -> bytes | None:
        import dkim

        try:
            records = self.resolver(name.decode("ascii", "replace").rstrip("."), "TXT")
        except TimeoutError as error:
            self.timed_out = True
            raise dkim.DnsTimeoutError(str(error)) from None
        self.record = records[0].encode("utf-8") if records else None
        return self.record


def reader(raw: bytes) -> Any:
    """dkimpy's reading of ``raw`` (headers and body), made once for every check of it;
    ``ValueError`` when it cannot be read."""
    dkim = _dkim()
    try:
        return dkim.DKIM(raw, minkey=1024, timeout=5)
    except Exception as error:
        raise ValueError(f"the mail cannot be read for DKIM: {type(error).__name__}") from None


def check_signatures(
    signer: Any, resolver: Resolver, now: Callable[[], float] = time.time
) -> list[Signature]:
    """Each DKIM signature of the mail ``signer`` read (``reader``), checked, in order."""
    from dkim.util import InvalidTagValueList, parse_tag_value

    count = sum(1 for name, _ in signer.headers if name.lower() == b"dkim-signature")
    results = []
    for index in range(min(count, MAX_SIGNATURES)):
        value = [v for n, v in signer.headers if n.lower() == b"dkim-signature"][index]
        try:
            fields = parse_tag_value(value)
        except InvalidTagValueList as error:
            results.append(Signature(PERMERROR, None, None, f"unreadable signature: {error}"))
            continue
        results.append(_check(signer, index, fields, resolver, now()))
    return results


def _text(fields: dict[bytes, bytes], tag: bytes) -> str | None:
    value = fields.get(tag)
    return None if value is None else value.decode("ascii", "replace").strip().lower()


def _check(
    signer: Any, index: int, fields: dict[bytes, bytes], resolver: Resolver, now: float
) -> Signature:
    import dkim

    domain, selector = _text(fields, b"d"), _text(fields, b"s")

    def result(kind: str, reason: str) -> Signature:
        return Signature(kind, domain, selector, reason)

    algorithm = (fields.get(b"a") or b"").strip().lower()
    if algorithm in REFUSED_ALGORITHMS:
        return result(FAIL, REFUSED_ALGORITHMS[algorithm])
    signed = {h.strip().lower() for h in (fields.get(b"h") or b"").split(b":")}
    if b"from" not in signed:
        # RFC 6376 §5.4: a signature that leaves From out says nothing about the sender.
        return result(FAIL, "the signature does not cover the From header (h=)")
    expires = (fields.get(b"x") or b"").strip()
    if re.fullmatch(rb"\d{1,12}", expires) and int(expires) + EXPIRY_SLACK < now:
        return result(FAIL, "the signature has expired (x=)")
    lookups = _Lookups(resolver)
    try:
        verified = signer.verify(idx=index, dnsfunc=lookups)
    except dkim.DKIMException as error:
        return result(FAIL, _plain(error))
    if lookups.timed_out:
        return result(TEMPERROR, f"the key {selector}._domainkey.{domain} could not be looked up")
    if not verified:
        return result(FAIL, "the signature does not verify (no key, or the mail was changed)")
    refusal = _key_refusal(lookups.record, algorithm)
    if refusal is not None:
        return result(FAIL, refusal)
    unsigned = _unsigned_body_bytes(signer, fields)
    if unsigned:
        return result(FAIL, f"l= leaves {unsigned} bytes of the body unsigned")
    return result(PASS, "the signature verifies")


@functools.lru_cache(maxsize=KEYS_KEPT)  # pure, and asked of the same few keys mail after mail
def _key_refusal(record: bytes | None, algorithm: bytes) -> str | None:
    """Why the key record itself says not to trust the signature (RFC 6376 §3.6.1): a key
    in testing mode (``t=y``), or one restricted to hashes (``h=``) the signature did not
    use; None when it says nothing of the kind."""
    from dkim.util import InvalidTagValueList, parse_tag_value

    if not record:
        return None
    try:
        tags = parse_tag_value(record)
    except InvalidTagValueList:
        return "the key record cannot be read"
    flags = {flag.strip() for flag in (tags.get(b"t") or b"").lower().split(b":")}
    if b"y" in flags:
        return "the key is in testing mode (t=y): treated as unsigned"
    hashes = tags.get(b"h")
    if hashes is not None:
        allowed = {h.strip() for h in hashes.lower().split(b":")}
        used = algorithm.rpartition(b"-")[2]
        if used not in allowed:
            return f"the key allows only {b', '.join(sorted(allowed)).decode()} (h=)"
    return None


def _unsigned_body_bytes(signer: Any, fields: dict[bytes, bytes]) -> int:
    """How much body follows the length an ``l=`` signature covers (0 without ``l=``): a
    signature over part of the body proves nothing about text appended after it."""
    if b"l" not in fields:
        return 0
    from dkim.canonicalization import CanonicalizationPolicy

    policy = CanonicalizationPolicy.from_c_value(fields.get(b"c", b"simple/simple"))
    body = policy.canonicalize_body(signer.body)
    return max(0, len(body) - int(fields[b"l"]))


def _plain(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text[:200] if text and text != "None" else type(error).__name__
