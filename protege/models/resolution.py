"""Resolution: the tools one run may use, read from an agent's grants and their rules.

Pure decisions (patterns, the gate's precedence) are ``protege.access``; this module reads
the records they apply to.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import attrs

from protege.access import (
    ApprovalPolicy,
    Decision,
    candidate_patterns,
    pattern_matches,
    routing_key,
    verdict,
)
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


@attrs.frozen
class Resolution:
    """The tools one run may use, and how each attached toolkit was decided."""

    grants: tuple[GrantDecision, ...]
    tools: list[ToolEntry]
    # The resolved tools whose calls wait for approval: every grant that gives them asks.
    approvals: dict[str, ApprovalPolicy] = attrs.Factory(dict)

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

    At most two queries, however many grants and rules: one for the grants with their rule
    counts, one for the rules that match the sender (found by index, see
    ``candidate_patterns``).
    """
    grants = _grants_with_rule_counts(agent.id)
    key = routing_key(sender)
    matching: dict[int, list[_MatchedRule]] = {}
    if not scheduled and key is not None and any(g.rule_count for g in grants):
        matching = _rules_matching(agent.id, key)
    decisions = []
    admitted_ids: set[str] = set()
    free_ids: set[str] = set()
    guarded: dict[str, list[ApprovalPolicy]] = {}
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
            if grant.approval is None:
                free_ids.update(members)
            else:
                for member in members:
                    guarded.setdefault(member, []).append(grant.approval)
    tools = [entry for entry in manifest.tools if entry.id in admitted_ids]
    approvals = {
        tool_id: ApprovalPolicy.merged(policies)
        for tool_id, policies in guarded.items()
        if tool_id not in free_ids and tool_id in manifest
    }
    return Resolution(grants=tuple(decisions), tools=tools, approvals=approvals)


# The two queries below run once per run (and per catalogue view), so they are plain SQL:
# building them with peewee's query builder cost several times more than running them.
_GRANTS_SQL = """
SELECT g.id, g.allow_proactive, t.name, t.member_tool_ids,
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval,
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
    approval: ApprovalPolicy | None = None


@attrs.frozen
class _MatchedRule:
    kind: str
    pattern: str


def _grants_with_rule_counts(agent_id: int) -> list[_Grant]:
    cursor = database.execute_sql(_GRANTS_SQL.format(p=database.param), (agent_id,))
    return [
        _Grant(
            grant_id,
            bool(proactive),
            name,
            json.loads(members),
            int(rules),
            int(allows),
            _policy(by, to, timeout, own),
        )
        for grant_id, proactive, name, members, by, to, timeout, own, rules, allows in (
            cursor.fetchall()
        )
    ]


def _policy(by: str, to: str, timeout: int, own: object) -> ApprovalPolicy | None:
    approvers = json.loads(by or "[]")
    if not approvers:
        return None
    return ApprovalPolicy(tuple(approvers), tuple(json.loads(to or "[]")), int(timeout), bool(own))


def _rules_matching(agent_id: int, key: str) -> dict[int, list[_MatchedRule]]:
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


def catalogue(agent: Agent, manifest: Manifest) -> list[ToolEntry]:
    """Every tool any of ``agent``'s grants could give, gates ignored, ordered by id."""
    ids: set[str] = set()
    for grant in _grants_with_rule_counts(agent.id):
        ids.update(grant.member_tool_ids)
    return [entry for entry in manifest.tools if entry.id in ids]
