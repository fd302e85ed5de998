"""Who may do what: address patterns and the allow/deny gate that applies them. Pure: no
database (resolution, which reads the records, is ``protege.models.resolution``).

The same gate decides two things: whether a sender may reach an agent at all (the agent's
access rules, checked at the gateway) and whether a sender unlocks a toolkit attached to an
agent (the grant's rules, checked on every run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Protocol

import attrs

from protege.addresses import (
    MAX_ADDRESS_LENGTH,
    InvalidAddress,
    normalize_domain,
    normalize_local_part,
    require_address,
    routing_key,
)
from protege.errors import ProtegeError

__all__ = [
    "ApprovalPolicy",
    "Decision",
    "InvalidAddress",
    "InvalidPattern",
    "RuleKind",
    "checked_policy",
    "decide",
    "normalize_pattern",
    "pattern_matches",
    "require_address",
    "routing_key",
]

_FORBIDDEN_IN_PATTERN = re.compile(r"[\s<>,;\"()\[\]\\]")


class RuleKind(StrEnum):
    """What a matching rule does."""

    ALLOW = "allow"
    DENY = "deny"


class InvalidPattern(ProtegeError):
    """An address pattern that is neither an exact address nor a single-``*`` wildcard."""


def normalize_pattern(pattern: str) -> str:
    """The stored form of a rule pattern; ``InvalidPattern`` if it is not one.

    A pattern is an exact address (compared as a routing key, so ``Mara+x@TheScoop.com`` is
    stored as ``mara@thescoop.com``) or text with exactly one ``*``, which stands for any run
    of characters (``*@thescoop.com``, ``mara@*``, ``*``).
    """
    text = pattern.strip() if isinstance(pattern, str) else ""
    if _FORBIDDEN_IN_PATTERN.search(text) or text.count("*") > 1 or text.count("@") > 1:
        raise InvalidPattern(
            f"{pattern!r} is not a rule pattern: use a bare address (mara@thescoop.com) "
            "or one with a single * (*@thescoop.com)"
        )
    if "*" in text:
        if len(text) > MAX_ADDRESS_LENGTH:
            raise InvalidPattern(f"a rule pattern is at most {MAX_ADDRESS_LENGTH} characters")
        return _normalize_wildcard(text, pattern)
    key = routing_key(text)
    if key is None:
        raise InvalidPattern(
            f"{pattern!r} is not a rule pattern: it is neither an email address "
            "nor a pattern with a single *"
        )
    return key


def _normalize_wildcard(text: str, pattern: str) -> str:
    # Keys hold IDNA domains, so a wildcard's whole domain is put in the same form.
    local, at, domain = text.rpartition("@")
    if not at or "*" in domain:
        return normalize_local_part(text)
    normalized = normalize_domain(domain)
    if normalized is None:
        raise InvalidPattern(f"{pattern!r} is not a rule pattern: {domain!r} is not a domain")
    return f"{normalize_local_part(local)}@{normalized}"


def pattern_matches(pattern: str, key: str | None) -> bool:
    """Whether a stored pattern matches a routing key (None matches nothing)."""
    if key is None:
        return False
    if "*" not in pattern:
        return pattern == key
    prefix, suffix = pattern.split("*")
    return len(key) >= len(prefix) + len(suffix) and key.startswith(prefix) and key.endswith(suffix)


class Rule(Protocol):
    """Anything with a kind and a pattern: a toolkit gate rule or an agent access rule."""

    @property
    def kind(self) -> str: ...

    @property
    def pattern(self) -> str: ...


@attrs.frozen
class Decision:
    """A gate's answer for one sender, and the rule or default that gave it."""

    admitted: bool
    reason: str


def decide(rules: Iterable[Rule], sender: str | None, *, authenticated: bool = True) -> Decision:
    """Apply a gate's rules to a sender.

    A deny match wins; else an allow match admits, if the sender is ``authenticated`` (its
    mail proved its domain); else the default, derived from the rules: any allow rule makes
    an allow-list (everyone else refused), only deny rules make a block-list (everyone else
    admitted), no rules admit everyone. A sender that does not parse matches no rule, and a
    block-list refuses it, since it cannot be checked.
    """
    rules = list(rules)
    key = routing_key(sender)
    return verdict(
        rule_count=len(rules),
        allow_count=sum(1 for r in rules if r.kind == RuleKind.ALLOW),
        matching=[r for r in rules if pattern_matches(r.pattern, key)],
        sender_parses=key is not None,
        authenticated=authenticated,
    )


def verdict(
    *,
    rule_count: int,
    allow_count: int,
    matching: Iterable[Rule],
    sender_parses: bool,
    authenticated: bool = True,
) -> Decision:
    """The gate's precedence, given what its rules are and which of them match (in order).
    An allow rule matches only an authenticated sender; a deny rule matches whatever the
    From says."""
    matching = list(matching)
    for rule in matching:
        if rule.kind == RuleKind.DENY:
            return Decision(False, f"deny rule {rule.pattern} matches")
    allowing = [rule for rule in matching if rule.kind == RuleKind.ALLOW]
    if allowing and authenticated:
        return Decision(True, f"allow rule {allowing[0].pattern} matches")
    if rule_count == 0:
        return Decision(True, "no rules: open to every sender")
    if allow_count:
        if allowing:
            return Decision(
                False,
                f"allow rule {allowing[0].pattern} matches only an authenticated sender, "
                "and this mail does not prove its sender (allow-list)",
            )
        return Decision(False, "no allow rule matches (allow-list)")
    if not sender_parses:
        return Decision(False, "sender address does not parse (block-list cannot check it)")
    return Decision(True, "no deny rule matches (block-list)")


MAX_EXPANDED_KEY = 64


def candidate_patterns(key: str) -> list[str] | None:
    """Every pattern that can match ``key``: the key, and each ``prefix*suffix`` around a cut.

    A single-``*`` pattern matches exactly when it is one of these, so the database can find
    a sender's matching rules by index instead of testing every rule. None for keys longer
    than ``MAX_EXPANDED_KEY``, whose expansion would be too large to be worth it.
    """
    if len(key) > MAX_EXPANDED_KEY:
        return None
    size = len(key)
    return [key] + [
        f"{key[:start]}*{key[end:]}" for start in range(size + 1) for end in range(start, size + 1)
    ]


DEFAULT_APPROVAL_TIMEOUT = 72 * 3600  # seconds an approval waits for its answer


@attrs.frozen
class ApprovalPolicy:
    """Who must agree before a grant's tools run: approver patterns, where requests go,
    how long they wait, and whether an approver who asked is approved at once."""

    approvers: tuple[str, ...]
    notify: tuple[str, ...]
    timeout: int = DEFAULT_APPROVAL_TIMEOUT
    self_approval: bool = True

    def approves(self, sender: str | None, *, authenticated: bool = True) -> bool:
        """Whether ``sender`` (one mailbox, as the gateway read it) is an approver: approver
        patterns are allow rules, so they match only an ``authenticated`` sender."""
        key = routing_key(sender)
        return (
            authenticated
            and key is not None
            and any(pattern_matches(p, key) for p in self.approvers)
        )

    def self_approves(self, sender: str | None, *, authenticated: bool = True) -> bool:
        """Whether a call asked for by ``sender`` needs nobody else's yes."""
        return self.self_approval and self.approves(sender, authenticated=authenticated)

    @staticmethod
    def merged(policies: Sequence[ApprovalPolicy]) -> ApprovalPolicy:
        """One policy for a tool several grants guard: any of their approvers may answer,
        requests go to all, the shortest wait applies, self-approval only if all allow it."""
        return ApprovalPolicy(
            approvers=tuple(dict.fromkeys(p for policy in policies for p in policy.approvers)),
            notify=tuple(dict.fromkeys(a for policy in policies for a in policy.notify)),
            timeout=min(policy.timeout for policy in policies),
            self_approval=all(policy.self_approval for policy in policies),
        )


def checked_policy(
    approvers: Iterable[str],
    notify: Iterable[str] = (),
    timeout: int = DEFAULT_APPROVAL_TIMEOUT,
    self_approval: bool = True,
) -> ApprovalPolicy:
    """A policy from what an operator typed; ``ProtegeError`` saying what is wrong.

    Approvers are rule patterns (``*@thescoop.com``). Requests go to ``notify``, or to the
    approvers that are plain addresses; each address notified must be an approver.
    """
    patterns = tuple(dict.fromkeys(normalize_pattern(p) for p in approvers))
    if not patterns:
        raise ProtegeError("approval needs at least one approver pattern")
    addresses = []
    for address in notify:
        key = routing_key(address)
        if key is None:
            raise ProtegeError(f"{address!r} is not an email address to send requests to")
        if not any(pattern_matches(p, key) for p in patterns):
            raise ProtegeError(f"{address} is not among the approvers ({', '.join(patterns)})")
        addresses.append(key)
    if not addresses:
        addresses = [p for p in patterns if "*" not in p]
    if not addresses:
        raise ProtegeError(
            "say where approval requests go (--approval-to ADDRESS): no approver pattern "
            "is a plain address"
        )
    if not isinstance(timeout, int) or timeout < 60:
        raise ProtegeError("the approval timeout must be at least one minute")
    return ApprovalPolicy(patterns, tuple(dict.fromkeys(addresses)), timeout, bool(self_approval))
