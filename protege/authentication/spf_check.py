"""SPF (RFC 7208) through pyspf, asking protege's resolver instead of pyspf's own DNS."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from protege.authentication.resolver import Resolver


@attrs.frozen
class SpfResult:
    """What SPF said of the SMTP client: ``result`` (pass, fail, softfail, neutral, none,
    temperror, permerror) for ``domain`` (the MAIL FROM domain, or the HELO name when the
    envelope sender is empty), and why."""

    result: str
    domain: str | None
    identity: str | None  # mailfrom or helo
    reason: str


def check_spf(
    client_ip: str | None, mail_from: str | None, helo: str | None, resolver: Resolver
) -> SpfResult:
    """SPF's result for a client at ``client_ip`` that said ``helo`` and ``MAIL FROM``."""
    if not client_ip:
        return SpfResult("none", None, None, "no SMTP client address: SPF not checked")
    mail_from = (mail_from or "").strip().strip("<>")
    helo = (helo or "").strip().strip("[]")
    if not mail_from and not helo:
        return SpfResult("none", None, None, "no envelope sender and no HELO name")
    identity = domain = None
    try:
        query = _query_class()(client_ip, mail_from, helo, resolver=resolver)
        identity = query.ident
        domain = (query.o or "").lower().rstrip(".") or None
        result, _code, explanation = query.check()
    except Exception as error:  # pyspf raises for some malformed inputs rather than answering
        return SpfResult("permerror", domain, identity, f"SPF could not be evaluated: {error}")
    said = " ".join(str(explanation).split())[:200]
    return SpfResult(result, domain, identity, said or f"SPF {result} for {domain}")


@functools.cache
def _query_class() -> Any:
    import spf  # loaded by the first SPF check

    class Query(spf.query):
        """pyspf's query with its DNS through a protege resolver (pins, cache, timeouts)."""

        def __init__(self, i: str, s: str, h: str, *, resolver: Resolver) -> None:
            # Its DNS time is bounded by the resolver it is given (one mail's budget).
            super().__init__(i=i, s=s, h=h)
            self._resolver = resolver

        def dns(self, name: Any, qtype: str, cnames: Any = None, ignore_void: bool = False) -> list:
            name = str(name).rstrip(".").lower()
            if not name or not all(0 < len(label) < 64 for label in name.split(".")):
                return []
            key = (name, qtype)
            if key not in self.cache:
                try:
                    answers = self._resolver(name, qtype)
                except TimeoutError as error:
                    raise spf.TempError(f"DNS {error}") from None
                self.cache[key] = [_pyspf_form(qtype, answer) for answer in answers]
            result = self.cache[key]
            if not result and not ignore_void:
                self.void_lookups += 1
                if self.void_lookups > spf.MAX_VOID_LOOKUPS:
                    raise spf.PermError(f"Void lookup limit of {spf.MAX_VOID_LOOKUPS} exceeded")
            return list(result)

    return Query


def _pyspf_form(qtype: str, answer: str) -> Any:
    # What pyspf's own DNS layer hands back: TXT as a list of byte strings, MX as
    # (preference, host), addresses and names as text.
    if qtype in ("TXT", "SPF"):
        return [answer.encode("utf-8")]
    if qtype == "MX":
        preference, _, host = answer.partition(" ")
        return (int(preference) if preference.isdigit() else 0, host)
    return answer
