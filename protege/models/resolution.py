"""Resolution: the tools one run may use, read from an agent's grants and their rules.

Pure decisions (patterns, the gate's precedence) are ``protege.access``; this module reads
the records they apply to.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from protege.access import Decision, candidate_patterns, pattern_matches, routing_key, verdict
from protege.db import database

if TYPE_CHECKING:
    from protege.models.agents import Agent
    from protege.registry import Manifest, ToolEntry


@attrs.frozen
class GrantDecision:
    """One attached toolkit's part in a resolution."""

    toolkit: str
    admitted: bool
    reason: str
    tool_ids: tuple[str, ...]
    missing_ids: tuple[str, ...] = ()


class Resolution:
    """The tools one run may use, and how each attached toolkit was decided.

    A run reads only ``tools``; ``grants``, the decision per toolkit with its reason, is
    worked out when first asked for (by ``explain``), so runs never pay for it.
    """

    def __init__(
        self,
        tools: list[ToolEntry],
        grants: tuple[GrantDecision, ...] | None = None,
        explain: Callable[[], Resolution] | None = None,
    ) -> None:
        if grants is None and explain is None:
            raise ValueError("a Resolution needs its grants or the means to explain them")
        self.tools = tools
        self._grants = grants
        self._explain = explain

    @property
    def grants(self) -> tuple[GrantDecision, ...]:
        """Each attached toolkit's decision, ordered by toolkit name."""
        if self._grants is None:
            assert self._explain is not None
            self._grants = self._explain().grants
        return self._grants

    @property
    def tool_ids(self) -> list[str]:
        """The ids of the resolved tools, in order."""
        return [entry.id for entry in self.tools]


def resolve(
    agent: Agent,
    manifest: Manifest,
    *,
    sender: str | None = None,
    scheduled: bool = False,
) -> Resolution:
    """The tools ``agent`` may use for ``sender`` (a reply run) or on a scheduled run.

    On a reply run, each grant's gate is checked against the sender and the members of
    every admitted toolkit are unioned; on a scheduled run only grants with
    ``allow_proactive`` count. Gates only add: a toolkit that refuses the sender takes
    nothing away from another that admits them. Members missing from the manifest are
    skipped. The result is ordered by id.

    At most two queries, however many grants and rules: one for the grants, one for the
    rules that match the sender (found by index, see ``candidate_patterns``). Per grant it
    does only what the tools need: ``Resolution.grants`` is worked out on demand.
    """
    admitted: set[str] = set()
    if scheduled:
        for (members,) in database.execute_sql(
            _PROACTIVE_SQL.format(p=database.param), (agent.id,)
        ):
            admitted |= _members(members)
    else:
        key = routing_key(sender)
        grants = database.execute_sql(_GATES_SQL.format(p=database.param), (agent.id,)).fetchall()
        denied: set[int] = set()
        allowed: set[int] = set()
        if key is not None and any(has_rules for _, _, has_rules, _ in grants):
            for grant_id, kind, _ in _rules_matching(agent.id, key):
                (denied if kind == "deny" else allowed).add(grant_id)
        for grant_id, members, has_rules, allow_list in grants:
            # verdict()'s precedence, reduced to a yes or no: a matching deny rule refuses,
            # then a matching allow rule admits; otherwise an allow-list refuses, a block-list
            # admits a sender that parses, and a gate without rules admits everyone.
            if grant_id in denied:
                continue
            if grant_id in allowed or not has_rules or (key is not None and not allow_list):
                admitted |= _members(members)
    return Resolution(
        tools=[entry for entry in manifest.tools if entry.id in admitted],
        explain=lambda: explain(agent, manifest, sender=sender, scheduled=scheduled),
    )


def explain(
    agent: Agent,
    manifest: Manifest,
    *,
    sender: str | None = None,
    scheduled: bool = False,
) -> Resolution:
    """What ``resolve`` decides, with each grant's decision and the rule or default behind
    it (for ``protege access explain``). Two queries, as ``resolve``."""
    grants = _grants_with_rule_counts(agent.id)
    key = routing_key(sender)
    matching: dict[int, list[_MatchedRule]] = {}
    if not scheduled and key is not None and any(g.rule_count for g in grants):
        for grant_id, kind, pattern in _rules_matching(agent.id, key):
            matching.setdefault(grant_id, []).append(_MatchedRule(kind, pattern))
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
    return Resolution(tools=tools, grants=tuple(decisions))


# The queries below run once per run (and per catalogue view), so they are plain SQL:
# building them with peewee's query builder cost several times more than running them.
_PROACTIVE_SQL = """
SELECT t.member_tool_ids
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p} AND g.allow_proactive
"""
# Whether a gate has rules, and allow rules: one index probe each, where counting them
# would read them all.
_GATES_SQL = """
SELECT g.id, t.member_tool_ids,
       EXISTS (SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id),
       EXISTS (SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow')
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
"""
_GRANTS_SQL = """
SELECT g.id, g.allow_proactive, t.name, t.member_tool_ids,
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id),
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow')
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
ORDER BY t.name
"""
_MEMBERS_SQL = """
SELECT t.member_tool_ids
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
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
    cursor = database.execute_sql(_GRANTS_SQL.format(p=database.param), (agent_id,))
    return [
        _Grant(grant_id, bool(proactive), name, json.loads(members), int(rules), int(allows))
        for grant_id, proactive, name, members, rules, allows in cursor.fetchall()
    ]


def _rules_matching(agent_id: int, key: str) -> list[tuple[int, str, str]]:
    """The agent's gate rules that match ``key``: (grant id, kind, pattern), in rule order."""
    p = database.param
    candidates = candidate_patterns(key)
    if candidates is None:  # a very long key: narrow to its exact rules and all wildcards
        narrowing, params = f"r.pattern = {p} OR r.pattern LIKE {p}", [key, "%*%"]
    else:
        narrowing, params = f"r.pattern IN ({', '.join([p] * len(candidates))})", candidates
    sql = _MATCHING_RULES_SQL.format(p=p, narrowing=narrowing)
    rows = database.execute_sql(sql, (agent_id, *params)).fetchall()
    if candidates is None:
        return [row for row in rows if pattern_matches(row[2], key)]
    return rows  # each candidate is a pattern that matches the key


@functools.lru_cache(maxsize=4096)
def _members(member_tool_ids: str) -> frozenset[str]:
    # Keyed by the stored JSON text, so a toolkit whose members change is simply a new key.
    return frozenset(json.loads(member_tool_ids))


def catalogue(agent: Agent, manifest: Manifest) -> list[ToolEntry]:
    """Every tool any of ``agent``'s grants could give, gates ignored, ordered by id."""
    ids: set[str] = set()
    for (members,) in database.execute_sql(_MEMBERS_SQL.format(p=database.param), (agent.id,)):
        ids |= _members(members)
    return [entry for entry in manifest.tools if entry.id in ids]
