"""Who may do what: routing keys, address patterns, and the allow/deny gate that uses them.

The same gate decides two things: whether a sender may reach an agent at all (the agent's
access rules, checked at the gateway) and whether a sender unlocks a toolkit attached to an
agent (the grant's rules, checked on every run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Protocol

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
    "Decision",
    "InvalidAddress",
    "InvalidPattern",
    "RuleKind",
    "decide",
    "normalize_pattern",
    "pattern_matches",
    "require_address",
    "resolve",
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

    kind: str
    pattern: str


@attrs.frozen
class Decision:
    """A gate's answer for one sender, and the rule or default that gave it."""

    admitted: bool
    reason: str


def decide(rules: Iterable[Rule], sender: str | None) -> Decision:
    """Apply a gate's rules to a sender.

    A deny match wins; else an allow match admits; else the default, derived from the rules:
    any allow rule makes an allow-list (everyone else refused), only deny rules make a
    block-list (everyone else admitted), no rules admit everyone. A sender that does not
    parse matches no rule, and a block-list refuses it, since it cannot be checked.
    """
    rules = list(rules)
    key = routing_key(sender)
    return verdict(
        rule_count=len(rules),
        allow_count=sum(1 for r in rules if r.kind == RuleKind.ALLOW),
        matching=[r for r in rules if pattern_matches(r.pattern, key)],
        sender_parses=key is not None,
    )


def verdict(
    *, rule_count: int, allow_count: int, matching: Iterable[Rule], sender_parses: bool
) -> Decision:
    """The gate's precedence, given what its rules are and which of them match (in order)."""
    matching = list(matching)
    for kind, admitted in ((RuleKind.DENY, False), (RuleKind.ALLOW, True)):
        for rule in matching:
            if rule.kind == kind:
                return Decision(admitted, f"{kind} rule {rule.pattern} matches")
    if rule_count == 0:
        return Decision(True, "no rules: open to every sender")
    if allow_count:
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


@attrs.frozen
class GrantDecision:
    """One attached toolkit's part in a resolution."""

    toolkit: str
    admitted: bool
    reason: str
    tool_ids: tuple[str, ...]
    missing_ids: tuple[str, ...] = ()


@attrs.frozen
class Resolution:
    """The tools one run may use, and how each attached toolkit was decided."""

    grants: tuple[GrantDecision, ...]
    tools: list[Any]

    @property
    def tool_ids(self) -> list[str]:
        """The ids of the resolved tools, in order."""
        return [entry.id for entry in self.tools]


def resolve(
    agent: Any,
    *,
    sender: str | None = None,
    scheduled: bool = False,
    manifest: Any = None,
) -> Resolution:
    """The tools ``agent`` may use for ``sender`` (a reply run) or on a scheduled run.

    On a reply run, each grant's gate is checked against the sender and the members of
    every admitted toolkit are unioned; on a scheduled run only grants with
    ``allow_proactive`` count. Gates only add: a toolkit that refuses the sender takes
    nothing away from another that admits them. Members missing from the manifest are
    skipped. The result is ordered by id.

    At most two queries, however many grants and rules: one for the grants with their rule
    counts, one for the rules that match the sender (found by index, see
    ``candidate_patterns``).
    """
    from protege.registry import manifest as process_manifest

    manifest = process_manifest() if manifest is None else manifest
    grants = _grants_with_rule_counts(agent.id)
    key = routing_key(sender)
    matching: dict[int, list[_MatchedRule]] = {}
    if not scheduled and key is not None and any(g.rule_count for g in grants):
        matching = _rules_matching(agent.id, key)
    decisions = []
    admitted_ids: set[str] = set()
    for grant in grants:
        if scheduled:
            decision = Decision(
                grant.allow_proactive,
                "allowed on scheduled runs"
                if grant.allow_proactive
                else "not allowed on scheduled runs (allow_proactive is off)",
            )
        else:
            decision = verdict(
                rule_count=grant.rule_count,
                allow_count=grant.allow_count,
                matching=matching.get(grant.id, []),
                sender_parses=key is not None,
            )
        members = grant.member_tool_ids
        decisions.append(
            GrantDecision(
                toolkit=grant.toolkit_name,
                admitted=decision.admitted,
                reason=decision.reason,
                tool_ids=tuple(i for i in members if i in manifest),
                missing_ids=tuple(i for i in members if i not in manifest),
            )
        )
        if decision.admitted:
            admitted_ids.update(members)
    tools = [entry for entry in manifest.tools if entry.id in admitted_ids]
    return Resolution(grants=tuple(decisions), tools=tools)


# The two queries below run on every model turn, so they are written as SQL: building them
# with peewee's query builder cost several times more than running them.
_GRANTS_SQL = """
SELECT g.id, g.allow_proactive, t.name, t.member_tool_ids,
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id),
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow')
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
ORDER BY t.name
"""
_MATCHING_RULES_SQL = """
SELECT r.grant_id, r.kind, r.pattern
FROM agent_toolkit_rule r
JOIN agent_toolkit g ON g.id = r.grant_id
WHERE g.agent_id = {p} AND ({narrowing})
ORDER BY r.id
"""


@attrs.frozen
class _Grant:
    id: int
    allow_proactive: bool
    toolkit_name: str
    member_tool_ids: list[str]
    rule_count: int
    allow_count: int


@attrs.frozen
class _MatchedRule:
    kind: str
    pattern: str


def _grants_with_rule_counts(agent_id: int) -> list[_Grant]:
    from protege.db import database

    cursor = database.execute_sql(_GRANTS_SQL.format(p=database.param), (agent_id,))
    return [
        _Grant(grant_id, bool(proactive), name, json.loads(members), int(rules), int(allows))
        for grant_id, proactive, name, members, rules, allows in cursor.fetchall()
    ]


def _rules_matching(agent_id: int, key: str) -> dict[int, list[_MatchedRule]]:
    from protege.db import database

    p = database.param
    candidates = candidate_patterns(key)
    if candidates is None:  # a very long key: narrow to its exact rules and all wildcards
        narrowing, params = f"r.pattern = {p} OR r.pattern LIKE {p}", [key, "%*%"]
    else:
        narrowing, params = f"r.pattern IN ({', '.join([p] * len(candidates))})", candidates
    sql = _MATCHING_RULES_SQL.format(p=p, narrowing=narrowing)
    matching: dict[int, list[_MatchedRule]] = {}
    for grant_id, kind, pattern in database.execute_sql(sql, (agent_id, *params)).fetchall():
        if pattern_matches(pattern, key):
            matching.setdefault(grant_id, []).append(_MatchedRule(kind, pattern))
    return matching


def catalogue(agent: Any, manifest: Any = None) -> list[Any]:
    """Every tool any of ``agent``'s grants could give, gates ignored, ordered by id."""
    from protege.models import AgentToolkit, Toolkit
    from protege.registry import manifest as process_manifest

    manifest = process_manifest() if manifest is None else manifest
    ids: set[str] = set()
    for toolkit in Toolkit.select().join(AgentToolkit).where(AgentToolkit.agent == agent.id):
        ids.update(toolkit.member_tool_ids)
    return [entry for entry in manifest.tools if entry.id in ids]
