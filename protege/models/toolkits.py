"""Toolkits (bundles of tool ids), grants (a toolkit attached to an agent) and gate rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import peewee

from protege.access import (
    DEFAULT_APPROVAL_TIMEOUT,
    ApprovalPolicy,
    Decision,
    checked_policy,
    decide,
)
from protege.errors import ProtegeError, did_you_mean
from protege.models.base import JSONListField, Record, utcnow
from protege.models.rules import RuleRecord
from protege.tool import TOOL_ID_PATTERN

ALL_TOOLS = "all_tools"
DEFAULT_TOOLS = "default_tools"
SYSTEM_TOOLKIT_NAMES = {ALL_TOOLS: "All Tools", DEFAULT_TOOLS: "Default Tools"}


class Toolkit(Record):
    """A named bundle of tool ids, defined once and attachable to many agents.

    Members are stored as ids, so a member whose tool is gone from the manifest is skipped
    when tools are resolved, never an error. ``system_key`` marks the two toolkits protege
    maintains (*All Tools*, *Default Tools*); those cannot be deleted.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        grants: Any

    name = peewee.CharField(max_length=200, unique=True)
    description = peewee.TextField(default="")
    member_tool_ids = JSONListField(default=list)
    system_key = peewee.CharField(max_length=32, null=True, unique=True)
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)

    @classmethod
    def all_tools(cls) -> Toolkit | None:
        """The *All Tools* system toolkit, or None before the first sync."""
        return cls.get_or_none(cls.system_key == ALL_TOOLS)

    @classmethod
    def default_tools(cls) -> Toolkit | None:
        """The *Default Tools* system toolkit, or None before the first sync."""
        return cls.get_or_none(cls.system_key == DEFAULT_TOOLS)

    @classmethod
    def named(cls, name: str) -> Toolkit:
        """The toolkit called ``name``; ``ProtegeError`` if there is none."""
        toolkit = cls.get_or_none(cls.name == name)
        if toolkit is None:
            names = [row.name for row in cls.select(cls.name)]
            raise ProtegeError(f"no toolkit named {name!r}{did_you_mean(name, names)}")
        return toolkit

    def save(self, *args: Any, **kwargs: Any) -> Any:
        self.name = (self.name or "").strip()
        if not self.name:
            raise ProtegeError("a toolkit needs a name")
        self.member_tool_ids = _checked_ids(self.member_tool_ids)
        clash = Toolkit.get_or_none((Toolkit.name == self.name) & (Toolkit.id != self.id))
        if clash is not None:
            raise ProtegeError(f"a toolkit named {self.name!r} already exists")
        self.updated_at = utcnow()
        return super().save(*args, **kwargs)

    def delete_instance(self, *args: Any, **kwargs: Any) -> Any:
        if self.system_key is not None:
            raise ProtegeError(f"{self.name!r} is a system toolkit and cannot be deleted")
        return super().delete_instance(*args, **kwargs)

    def add_tools(self, tool_ids: Iterable[str]) -> list[str]:
        """Add members; returns the ids that were not members before."""
        added = [i for i in dict.fromkeys(tool_ids) if i not in self.member_tool_ids]
        self.member_tool_ids = [*self.member_tool_ids, *added]
        self.save()
        return added

    def remove_tools(self, tool_ids: Iterable[str]) -> list[str]:
        """Remove members; returns the ids that were members."""
        removing = set(tool_ids)
        removed = [i for i in self.member_tool_ids if i in removing]
        self.member_tool_ids = [i for i in self.member_tool_ids if i not in removing]
        self.save()
        return removed


def _checked_ids(tool_ids: Iterable[str]) -> list[str]:
    ids = list(dict.fromkeys(tool_ids or []))
    bad = [i for i in ids if not (isinstance(i, str) and TOOL_ID_PATTERN.match(i))]
    if bad:
        raise ProtegeError(f"not tool ids: {', '.join(map(repr, bad))}")
    return sorted(ids)


class AgentToolkit(Record):
    """A grant: one toolkit attached to one agent, on terms of its own.

    The sender gate (``rules``) decides which senders unlock the toolkit on reply runs;
    ``allow_proactive`` decides whether its tools are offered on scheduled runs;
    ``whole_archive`` lets its mail tools show a sender any of the agent's mail, not only
    the mail that sender took part in. With
    approvers (``approval_by``), a call to one of its tools waits for an approver's yes:
    the gate decides who may ask, approval who must agree.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        agent_id: Any
        toolkit_id: Any
        rules: Any

    # Deferred: the agent module imports this one, to grant toolkits to its agents.
    agent = peewee.DeferredForeignKey("Agent", backref="grants", on_delete="CASCADE")
    toolkit = peewee.ForeignKeyField(Toolkit, backref="grants", on_delete="CASCADE")
    allow_proactive = peewee.BooleanField(default=False)
    created_at = peewee.DateTimeField(default=utcnow)
    approval_by = JSONListField(default=list)  # approver patterns; empty: no approval
    approval_to = JSONListField(default=list)  # where approval requests are mailed
    approval_timeout = peewee.IntegerField(default=DEFAULT_APPROVAL_TIMEOUT)  # seconds
    self_approval = peewee.BooleanField(default=True)
    # Whether its mail tools reach the agent's whole archive, rather than only the mail
    # the run's sender took part in.
    whole_archive = peewee.BooleanField(default=False)

    class Meta:
        table_name = "agent_toolkit"
        indexes = ((("agent", "toolkit"), True),)

    def add_rule(self, kind: str, pattern: str) -> AgentToolkitRule:
        """Add an allow or deny rule to this grant's sender gate."""
        return AgentToolkitRule.create(grant=self, kind=kind, pattern=pattern)

    def decide(self, sender: str | None, *, authenticated: bool = True) -> Decision:
        """Whether ``sender`` passes this grant's gate, and why."""
        return decide(self.rules, sender, authenticated=authenticated)

    def permits(self, sender: str | None, *, authenticated: bool = True) -> bool:
        """Whether ``sender`` passes this grant's gate (as mail that proved its sender, unless
        ``authenticated`` is false: then allow rules do not match)."""
        return self.decide(sender, authenticated=authenticated).admitted

    @property
    def approval(self) -> ApprovalPolicy | None:
        """The approval this grant's tools need, or None when they run at once."""
        if not self.approval_by:
            return None
        return ApprovalPolicy(
            tuple(self.approval_by),
            tuple(self.approval_to),
            self.approval_timeout,
            self.self_approval,
        )

    def require_approval(
        self,
        by: Iterable[str] | ApprovalPolicy | None,
        to: Iterable[str] = (),
        timeout: int = DEFAULT_APPROVAL_TIMEOUT,
        self_approval: bool = True,
    ) -> ApprovalPolicy | None:
        """Make calls to this grant's tools wait for a yes from a sender matching one of
        the patterns ``by`` (requests mailed to ``to``, or to the plain addresses among
        ``by``; refused after ``timeout`` seconds unanswered; an approver asking is
        approved at once unless ``self_approval`` is false), and save. ``by`` may also be
        a whole ``ApprovalPolicy``; None lets the tools run at once again. Returns the
        policy; ``ProtegeError`` for one that cannot work."""
        if by is None:
            policy = None
            self.approval_by, self.approval_to = [], []
        else:
            policy = (
                by
                if isinstance(by, ApprovalPolicy)
                else checked_policy(by, to, timeout, self_approval)
            )
            self.approval_by, self.approval_to = list(policy.approvers), list(policy.notify)
            self.approval_timeout, self.self_approval = policy.timeout, policy.self_approval
        self.save()
        return policy


class RequiredApproval(Record):
    """An operator's rule that one tool waits for approval on one agent's runs, whichever
    toolkit gives it: a restriction no grant can lift."""

    if TYPE_CHECKING:
        agent_id: Any

    agent = peewee.DeferredForeignKey("Agent", backref="required_approvals", on_delete="CASCADE")
    tool_id = peewee.CharField(max_length=64)
    approval_by = JSONListField(default=list)
    approval_to = JSONListField(default=list)
    approval_timeout = peewee.IntegerField(default=DEFAULT_APPROVAL_TIMEOUT)
    self_approval = peewee.BooleanField(default=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_tool_approval"
        indexes = ((("agent", "tool_id"), True),)

    @property
    def policy(self) -> ApprovalPolicy:
        """Who approves the tool's calls, where requests go, how long they wait."""
        return ApprovalPolicy(
            tuple(self.approval_by),
            tuple(self.approval_to),
            self.approval_timeout,
            self.self_approval,
        )


class AgentToolkitRule(RuleRecord):
    """One allow/deny pattern on a grant's sender gate."""

    grant = peewee.ForeignKeyField(
        AgentToolkit, backref="rules", on_delete="CASCADE", column_name="grant_id"
    )

    class Meta:
        table_name = "agent_toolkit_rule"
