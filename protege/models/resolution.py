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
import peewee

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
    whole_archive: bool = False


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
        approvals: dict[str, ApprovalPolicy] | None = None,
        withheld: dict[str, str] | None = None,
        bypassed: tuple[ApprovalBypass, ...] = (),
        whole_archive: frozenset[str] = frozenset(),
    ) -> None:
        if grants is None and explain is None:
            raise ValueError("a Resolution needs its grants or the means to explain them")
        self.tools = tools
        # The resolved tools whose calls wait for approval: every grant giving them asks,
        # and so do a tool's own requirement and the agent's.
        self.approvals: dict[str, ApprovalPolicy] = approvals or {}
        # Tools a grant gives that must wait for approval but have nobody to approve them:
        # left out (fail closed), each with why.
        self.withheld: dict[str, str] = withheld or {}
        # Tools this sender gets without the approval another grant asks for (explain only).
        self.bypassed = bypassed
        # The resolved tools an admitting grant gives with the whole mail archive open.
        self.whole_archive = whole_archive
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
    authenticated: bool = False,
    scheduled: bool = False,
) -> Resolution:
    """The tools ``agent`` may use for ``sender`` (a reply run) or on a scheduled run.

    On a reply run, each grant's gate is checked against the sender and the members of
    every admitted toolkit are unioned; allow rules match only an ``authenticated`` sender
    (deny rules match whatever the From says); on a scheduled run only grants with
    ``allow_proactive`` count. Gates only add: a toolkit that refuses the sender takes
    nothing away from another that admits them. Members missing from the manifest are
    skipped. The result is ordered by id.

    One query, however many grants and rules, in which the database applies each gate to
    the sender and returns only the member lists of admitted toolkits; the rules that match
    are found by index (see ``candidate_patterns``). A sender too long for that takes two
    queries and the check in Python. ``Resolution.grants``, each decision with its reason,
    is worked out only when asked for.
    """
    p = database.param
    required = _REQUIRED_UNION.format(p=p)
    if scheduled:
        rows = database.execute_sql(_PROACTIVE_SQL.format(p=p) + required, (agent.id, agent.id))
    else:
        key = routing_key(sender)
        candidates = None if key is None else candidate_patterns(key)
        if key is None:  # a sender that does not parse: only open gates admit it
            sql = _OPEN_GATES_SQL.format(p=p) + required
            rows = database.execute_sql(sql, (agent.id, agent.id))
        elif candidates is None:
            rows = _admitted_for_long_key(agent.id, key, authenticated)
        else:
            sql = _ADMITTED_SQL.format(
                p=p,
                candidates=", ".join([p] * len(candidates)),
                by_pattern=_by_pattern(),
                kinds="" if authenticated else "AND r.kind = 'deny'",
            )
            rows = database.execute_sql(sql + required, (agent.id, *candidates, agent.id, agent.id))
    admitted: set[str] = set()
    opened: set[str] = set()
    guards = []
    requirements: dict[str, ApprovalPolicy] = {}
    for source, members, whole, *approval in rows:
        policy = _policy(*approval)
        if source == "required":
            if policy is not None:
                requirements[members] = policy
            continue
        admitted |= _members(members)
        if whole:
            opened |= _members(members)
        guards.append((_members(members), policy))
    approvals, withheld = _approvals(agent, guards, admitted, manifest, requirements)
    return Resolution(
        tools=[entry for entry in manifest.tools if entry.id in admitted - withheld.keys()],
        explain=lambda: explain(
            agent, manifest, sender=sender, authenticated=authenticated, scheduled=scheduled
        ),
        approvals=approvals,
        withheld=withheld,
        whole_archive=frozenset(opened),
    )


@attrs.frozen
class ApprovalBypass:
    """A tool that one grant gives only on approval and another gives without: a sender
    the second admits and the first does not gets it at once."""

    tool_id: str
    guarded_by: str  # the toolkit whose grant asks for approval
    given_by: str  # the toolkit whose grant gives the tool without approval

    def describe(self, agent: str) -> str:
        """One line for an operator."""
        return (
            f"{agent}: {self.tool_id} waits for approval through {self.guarded_by}, but "
            f"{self.given_by} gives it without approval to every sender its gate admits; "
            f"to make every call wait: protege approvals require {agent} {self.tool_id} "
            "--by PATTERN"
        )


def required_approvals(agent_id: int) -> dict[str, ApprovalPolicy]:
    """The tools an operator made wait for approval on this agent, whatever grants them."""
    cursor = database.execute_sql(_REQUIRED_SQL.format(p=database.param), (agent_id,))
    found = {}
    for tool_id, by, to, timeout, own in cursor.fetchall():
        policy = _policy(by, to, timeout, own)
        if policy is not None:
            found[tool_id] = policy
    return found


def _approvals(
    agent: Agent,
    admitting: list[tuple[frozenset[str], ApprovalPolicy | None]],
    admitted: set[str],
    manifest: Manifest,
    required: dict[str, ApprovalPolicy],
) -> tuple[dict[str, ApprovalPolicy], dict[str, str]]:
    """The admitted tools whose calls wait for approval, each with its merged policy, and
    the tools withheld because they must wait but nobody may approve them.

    An approval is a restriction, and no other grant undoes it: a tool that one admitting
    grant guards waits for approval even when another grant (All Tools, say) also gives
    it. A tool whose class says ``requires_approval``, or that an operator made wait on
    this agent, waits whichever grant gives it: its approvers are the operator's for this
    agent and those of the admitting grants that guard it, else those of any grant of the
    agent that guards it."""
    guarded: dict[str, list[ApprovalPolicy]] = {}
    for members, policy in admitting:
        if policy is not None:
            for member in members:
                guarded.setdefault(member, []).append(policy)
    withheld: dict[str, str] = {}
    anywhere: dict[str, list[ApprovalPolicy]] | None = None
    for tool_id in sorted(admitted):
        entry = manifest.get(tool_id)
        if entry is None or not (entry.requires_approval or tool_id in required):
            continue
        policies = [required[tool_id]] if tool_id in required else []
        policies += guarded.get(tool_id, [])
        if not policies:
            if anywhere is None:
                anywhere = _guarded_by_any_grant(agent.id)
            policies = anywhere.get(tool_id, [])
        if policies:
            guarded[tool_id] = policies
        else:
            withheld[tool_id] = (
                f"{tool_id} requires approval and nobody approves it on {agent.name}: "
                f"protege approvals require {agent.name} {tool_id} --by PATTERN"
            )
    approvals = {
        tool_id: ApprovalPolicy.merged(policies)
        for tool_id, policies in guarded.items()
        if tool_id in manifest and tool_id not in withheld
    }
    return approvals, withheld


def _guarded_by_any_grant(agent_id: int) -> dict[str, list[ApprovalPolicy]]:
    guarded: dict[str, list[ApprovalPolicy]] = {}
    for grant in _grants_with_rule_counts(agent_id):
        if grant.approval is not None:
            for member in grant.member_tool_ids:
                guarded.setdefault(member, []).append(grant.approval)
    return guarded


def unapprovable(agent: Agent, manifest: Manifest) -> list[str]:
    """Why each tool ``agent``'s grants give is never offered: it must wait for approval
    and no grant or operator of the agent names an approver (for ``doctor``)."""
    offered = {entry.id for entry in catalogue(agent, manifest)}
    _, withheld = _approvals(agent, [], offered, manifest, required_approvals(agent.id))
    return [f"{agent.name}: {reason}" for _, reason in sorted(withheld.items())]


def bypassed_approvals(agent: Agent, manifest: Manifest) -> list[ApprovalBypass]:
    """Where a grant's approval can be skipped through another grant of ``agent`` that
    gives the same tool without approval (for ``doctor``, ``grants attach``, the dashboard).

    Tools that must wait whatever grants them (the tool's own ``requires_approval``, or an
    operator's requirement on this agent) cannot be skipped, so are not listed."""
    grants = _grants_with_rule_counts(agent.id)
    required = required_approvals(agent.id)
    found = []
    for guard in grants:
        if guard.approval is None:
            continue
        for tool_id in guard.member_tool_ids:
            entry = manifest.get(tool_id)
            if entry is None or entry.requires_approval or tool_id in required:
                continue
            for other in grants:
                if other.approval is None and tool_id in other.member_tool_ids:
                    found.append(ApprovalBypass(tool_id, guard.toolkit_name, other.toolkit_name))
    return sorted(set(found), key=lambda b: (b.tool_id, b.guarded_by, b.given_by))


def _policy(by: str, to: str, timeout: int, own: object) -> ApprovalPolicy | None:
    if not by or by == "[]":
        return None
    approvers = json.loads(by)
    if not approvers:
        return None
    return ApprovalPolicy(tuple(approvers), tuple(json.loads(to or "[]")), int(timeout), bool(own))


def _admitted_for_long_key(agent_id: int, key: str, authenticated: bool) -> list[tuple]:
    grants = database.execute_sql(_GATES_SQL.format(p=database.param), (agent_id,)).fetchall()
    denied: set[int] = set()
    allowed: set[int] = set()
    if any(has_rules for _, _, _, has_rules, *_ in grants):
        for grant_id, kind, _ in _rules_matching(agent_id, key):
            if kind == "deny":
                denied.add(grant_id)
            elif authenticated:
                allowed.add(grant_id)
    required = [
        ("required", tool_id, False, *approval)
        for tool_id, *approval in database.execute_sql(
            _REQUIRED_SQL.format(p=database.param), (agent_id,)
        ).fetchall()
    ]
    return [
        ("grant", members, whole, *approval)
        for grant_id, members, whole, has_rules, allow_list, *approval in grants
        if grant_id not in denied and (grant_id in allowed or not has_rules or not allow_list)
    ] + required


def explain(
    agent: Agent,
    manifest: Manifest,
    *,
    sender: str | None = None,
    authenticated: bool = False,
    scheduled: bool = False,
) -> Resolution:
    """What ``resolve`` decides, with each grant's decision and the rule or default behind
    it (for ``protege access explain``). Two queries, however many grants and rules."""
    grants = _grants_with_rule_counts(agent.id)
    key = routing_key(sender)
    matching: dict[int, list[_MatchedRule]] = {}
    if not scheduled and key is not None and any(g.rule_count for g in grants):
        for grant_id, kind, pattern in _rules_matching(agent.id, key):
            matching.setdefault(grant_id, []).append(_MatchedRule(kind, pattern))
    decisions = []
    admitted_ids: set[str] = set()
    admitting: list[tuple[frozenset[str], ApprovalPolicy | None]] = []
    opened: set[str] = set()
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
                authenticated=authenticated,
            )
        members = grant.member_tool_ids
        decisions.append(
            GrantDecision(
                toolkit=grant.toolkit_name,
                admitted=decision.admitted,
                reason=decision.reason,
                tool_ids=tuple(i for i in members if i in manifest),
                missing_ids=tuple(i for i in members if i not in manifest),
                whole_archive=grant.whole_archive,
            )
        )
        if decision.admitted:
            admitted_ids.update(members)
            if grant.whole_archive:
                opened.update(members)
            admitting.append((frozenset(members), grant.approval))
    approvals, withheld = _approvals(
        agent, admitting, admitted_ids, manifest, required_approvals(agent.id)
    )
    tools = [entry for entry in manifest.tools if entry.id in admitted_ids - withheld.keys()]
    bypassed = tuple(
        ApprovalBypass(tool.id, grant.toolkit_name, giver)
        for tool in tools
        if tool.id not in approvals
        for grant in grants
        if grant.approval is not None and tool.id in grant.member_tool_ids
        for giver in _givers_without_approval(tool.id, grants, decisions)
    )
    return Resolution(
        tools=tools,
        grants=tuple(decisions),
        approvals=approvals,
        withheld=withheld,
        bypassed=bypassed,
        whole_archive=frozenset(i for i in opened if i in manifest),
    )


def _givers_without_approval(
    tool_id: str, grants: list[_Grant], decisions: list[GrantDecision]
) -> list[str]:
    return [
        grant.toolkit_name
        for grant, decision in zip(grants, decisions, strict=True)
        if decision.admitted and grant.approval is None and tool_id in grant.member_tool_ids
    ]


# The queries below run once per run (and per catalogue view), so they are plain SQL:
# building them with peewee's query builder cost several times more than running them.
#
# A gate's decision (``protege.access.verdict``) as SQL: a matching deny rule refuses, else a
# matching allow rule admits; a gate no rule of which matches refuses if it has allow rules
# (an allow-list) and admits otherwise (a block-list, or no rules). The matching rules are
# looked up by pattern first (CROSS JOIN and INDEXED BY keep SQLite from scanning every
# rule of every grant instead).
_ADMITTED_SQL = """
SELECT 'grant', t.member_tool_ids, g.whole_archive,
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
LEFT JOIN (
    SELECT r.grant_id, MAX(CASE WHEN r.kind = 'deny' THEN 1 ELSE 0 END) AS denied
    FROM agent_toolkit_rule r {by_pattern} CROSS JOIN agent_toolkit mine
    WHERE mine.id = r.grant_id AND mine.agent_id = {p} AND r.pattern IN ({candidates}) {kinds}
    GROUP BY r.grant_id
) matched ON matched.grant_id = g.id
WHERE g.agent_id = {p} AND CASE
    WHEN matched.grant_id IS NOT NULL THEN matched.denied = 0
    ELSE NOT EXISTS (
        SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow'
    )
END
"""
_OPEN_GATES_SQL = """
SELECT 'grant', t.member_tool_ids, g.whole_archive,
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
  AND NOT EXISTS (SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id)
"""
_PROACTIVE_SQL = """
SELECT 'grant', t.member_tool_ids, g.whole_archive,
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p} AND g.allow_proactive
"""
# Whether a gate has rules, and allow rules: one index probe each, where counting them
# would read them all.
_GATES_SQL = """
SELECT g.id, t.member_tool_ids, g.whole_archive,
       EXISTS (SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id),
       EXISTS (SELECT 1 FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow'),
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
"""
_GRANTS_SQL = """
SELECT g.id, g.allow_proactive, t.name, t.member_tool_ids, g.whole_archive,
       g.approval_by, g.approval_to, g.approval_timeout, g.self_approval,
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id),
       (SELECT COUNT(*) FROM agent_toolkit_rule r WHERE r.grant_id = g.id AND r.kind = 'allow')
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
ORDER BY t.name
"""
# Appended to a run's grant query, so a run still reads its tools in one statement.
_REQUIRED_UNION = """
UNION ALL
SELECT 'required', tool_id, FALSE, approval_by, approval_to, approval_timeout, self_approval
FROM agent_tool_approval
WHERE agent_id = {p}
"""
_REQUIRED_SQL = """
SELECT tool_id, approval_by, approval_to, approval_timeout, self_approval
FROM agent_tool_approval
WHERE agent_id = {p}
"""
_MEMBERS_SQL = """
SELECT t.member_tool_ids
FROM agent_toolkit g
JOIN toolkit t ON t.id = g.toolkit_id
WHERE g.agent_id = {p}
"""
_MATCHING_RULES_SQL = """
SELECT r.grant_id, r.kind, r.pattern
FROM agent_toolkit_rule r {by_pattern}
{join} agent_toolkit g
WHERE g.id = r.grant_id AND g.agent_id = {p} AND ({narrowing})
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
    whole_archive: bool = False


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
            bool(whole),
        )
        for grant_id, proactive, name, members, whole, by, to, timeout, own, rules, allows in (
            cursor.fetchall()
        )
    ]


def _rules_matching(agent_id: int, key: str) -> list[tuple[int, str, str]]:
    """The agent's gate rules that match ``key``: (grant id, kind, pattern), in rule order."""
    p = database.param
    candidates = candidate_patterns(key)
    if candidates is None:  # a very long key: the agent's rules, its exact ones and wildcards
        narrowing, params = f"r.pattern = {p} OR r.pattern LIKE {p}", [key, "%*%"]
        join, by_pattern = ",", ""  # the planner chooses: the agent's grants first
    else:  # by the pattern index first
        narrowing, params = f"r.pattern IN ({', '.join([p] * len(candidates))})", candidates
        join, by_pattern = "CROSS JOIN", _by_pattern()
    sql = _MATCHING_RULES_SQL.format(p=p, narrowing=narrowing, join=join, by_pattern=by_pattern)
    rows = database.execute_sql(sql, (agent_id, *params)).fetchall()
    if candidates is None:
        return [row for row in rows if pattern_matches(row[2], key)]
    return rows  # each candidate is a pattern that matches the key


def _by_pattern() -> str:
    # SQLite's statistics count how many rules share a pattern, not how few of the
    # candidates exist at all; with them it would rather read every rule of every grant.
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        return ""
    return "INDEXED BY agent_toolkit_rule_pattern"


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
