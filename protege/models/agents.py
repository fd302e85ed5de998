"""Agents: the colleagues people write to, each with its own address and access rules."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import peewee

from protege.access import (
    DEFAULT_APPROVAL_TIMEOUT,
    ApprovalPolicy,
    Decision,
    checked_policy,
    decide,
    require_address,
    routing_key,
)
from protege.db import database
from protege.errors import ProtegeError, did_you_mean
from protege.models.base import Record, utcnow
from protege.models.resolution import Resolution, catalogue, resolve
from protege.models.rules import RuleRecord
from protege.models.toolkits import AgentToolkit, RequiredApproval, Toolkit
from protege.tool import TOOL_ID_PATTERN

if TYPE_CHECKING:
    from protege.context import RunContext
    from protege.registry import Manifest, ToolEntry

logger = logging.getLogger(__name__)


class Agent(Record):
    """An AI colleague: a name, an email address, and the instructions it works by.

    It has no tools of its own: it gets them from the toolkits granted to it. On create it
    is granted *Default Tools*, if ``protege sync`` has created it.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        access_rules: Any
        grants: Any
        messages: Any
        runs: Any
        responsibilities: Any
        blobs: Any
        required_approvals: Any

    name = peewee.CharField(max_length=200, unique=True)
    address = peewee.CharField(max_length=320, unique=True)
    instructions = peewee.TextField(default="")
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)
    archived_at = peewee.DateTimeField(null=True)

    @classmethod
    def active(cls) -> peewee.ModelSelect[Agent]:
        """The agents that are not archived: the ones listed and written to."""
        return cls.select().where(cls.archived_at.is_null())

    @property
    def archived(self) -> bool:
        """Whether the agent is archived: kept with its mail and runs, hidden from listings,
        and unknown to mail routing until restored."""
        return self.archived_at is not None

    @classmethod
    def named(cls, name: str) -> Agent:
        """The agent called ``name``; ``ProtegeError`` if there is none."""
        agent = cls.get_or_none(cls.name == name)
        if agent is None:
            names = [row.name for row in cls.select(cls.name)]
            raise ProtegeError(f"no agent named {name!r}{did_you_mean(name, names)}")
        return agent

    def save(self, force_insert: bool = False, only: Any = None) -> Any:
        self.name = (self.name or "").strip()
        if not self.name:
            raise ProtegeError("an agent needs a name")
        self.address = require_address(self.address or "")
        for field, value in (("name", self.name), ("address", self.address)):
            column = getattr(Agent, field)
            other = Agent.get_or_none((column == value) & (Agent.id != self.id))
            if other is not None:
                archived = " (archived)" if other.archived else ""
                raise ProtegeError(f"an agent with {field} {value!r} already exists{archived}")
        self._refuse_a_shared_mailbox()
        creating = force_insert or self.id is None
        self.updated_at = utcnow()
        with database.atomic():
            result = super().save(force_insert=force_insert, only=only)
            if creating:
                self._grant_default_tools()
        return result

    def edit(
        self,
        *,
        name: str | None = None,
        address: str | None = None,
        instructions: str | None = None,
    ) -> list[str]:
        """Change what is given (None: unchanged) and save; the names of the fields that
        changed. ``ProtegeError`` for an invalid address or a name or address another agent
        has, and then nothing changes."""
        given = {"name": name, "address": address, "instructions": instructions}
        before = {field: getattr(self, field) for field in given}
        for field, value in given.items():
            if value is not None:
                setattr(self, field, value)
        try:
            self.save()
        except ProtegeError:
            for field, value in before.items():
                setattr(self, field, value)
            raise
        return [field for field in given if getattr(self, field) != before[field]]

    def history(self) -> dict[str, int]:
        """How many messages, runs and approvals the agent has: what purging it deletes."""
        p = database.param
        # Written out: the message, run and approval records import this module.
        row = database.execute_sql(
            f"SELECT (SELECT COUNT(*) FROM message WHERE agent_id = {p}), "
            f"(SELECT COUNT(*) FROM run WHERE agent_id = {p}), "
            "(SELECT COUNT(*) FROM approval JOIN run ON run.id = approval.run_id "
            f"WHERE run.agent_id = {p})",
            (self.id, self.id, self.id),
        ).fetchone()
        return {"messages": row[0], "runs": row[1], "approvals": row[2]}

    def archive(self) -> None:
        """Keep the agent with its mail and runs, hidden from listings; mail to it is then
        refused as mail for no known agent, and its responsibilities do not run."""
        if self.archived:
            raise ProtegeError(f"{self.name} is archived already")
        self.archived_at = utcnow()
        self.save()

    def restore(self) -> None:
        """Bring an archived agent back: listed, and written to, again."""
        if not self.archived:
            raise ProtegeError(f"{self.name} is not archived")
        self.archived_at = None
        self.save()

    def _refuse_a_shared_mailbox(self) -> None:
        # Mail is routed by routing key ("sundae+orders@" reaches "sundae@"): two agents
        # whose addresses share one could not both be written to.
        key = routing_key(self.address) or self.address
        local, _, domain = key.rpartition("@")
        others = Agent.select().where(
            (Agent.id != self.id)
            & Agent.address.startswith(local)
            & Agent.address.endswith(f"@{domain}")
        )
        for other in others:
            if routing_key(other.address) == key:
                raise ProtegeError(
                    f"{self.address!r} is the same mailbox as {other.name}'s address "
                    f"{other.address!r} (a +tag or letter case does not tell them apart)"
                )

    def _grant_default_tools(self) -> None:
        default = Toolkit.default_tools()
        if default is None:
            logger.warning(
                "agent %s was created with no toolkits, so it has no tools: "
                "run `protege sync` to create Default Tools, then attach it",
                self.name,
            )
            return
        self.grant(default)

    def grant(self, toolkit: Toolkit, *, allow_proactive: bool = False) -> AgentToolkit:
        """Attach ``toolkit`` to this agent, with an open gate; returns the grant."""
        existing = AgentToolkit.get_or_none(agent=self, toolkit=toolkit)
        if existing is not None:
            raise ProtegeError(f"{toolkit.name!r} is already attached to {self.name}")
        return AgentToolkit.create(agent=self, toolkit=toolkit, allow_proactive=allow_proactive)

    def grant_of(self, toolkit: Toolkit) -> AgentToolkit:
        """The grant attaching ``toolkit`` to this agent; ``ProtegeError`` if not attached."""
        grant = AgentToolkit.get_or_none(agent=self, toolkit=toolkit)
        if grant is None:
            raise ProtegeError(f"{toolkit.name!r} is not attached to {self.name}")
        return grant

    def require_approval(
        self,
        tool_id: str,
        by: Iterable[str] | ApprovalPolicy,
        to: Iterable[str] = (),
        timeout: int = DEFAULT_APPROVAL_TIMEOUT,
        self_approval: bool = True,
    ) -> ApprovalPolicy:
        """Make every call to ``tool_id`` on this agent's runs wait for a yes from a sender
        matching one of ``by``, whichever toolkit gives the tool (no grant can lift it);
        terms as ``AgentToolkit.require_approval``. Replaces an earlier requirement."""
        if not isinstance(tool_id, str) or not TOOL_ID_PATTERN.match(tool_id):
            raise ProtegeError(f"{tool_id!r} is not a tool id")
        policy = (
            by if isinstance(by, ApprovalPolicy) else checked_policy(by, to, timeout, self_approval)
        )
        with database.atomic():
            RequiredApproval.delete().where(
                (RequiredApproval.agent == self.id) & (RequiredApproval.tool_id == tool_id)
            ).execute()
            RequiredApproval.create(
                agent=self,
                tool_id=tool_id,
                approval_by=list(policy.approvers),
                approval_to=list(policy.notify),
                approval_timeout=policy.timeout,
                self_approval=policy.self_approval,
            )
        return policy

    def drop_required_approval(self, tool_id: str) -> bool:
        """Take back ``require_approval`` for ``tool_id``; whether there was one. Grants that
        ask for approval, and a tool that requires it itself, still wait."""
        deleted = (
            RequiredApproval.delete()
            .where((RequiredApproval.agent == self.id) & (RequiredApproval.tool_id == tool_id))
            .execute()
        )
        return bool(deleted)

    def approvals_required(self) -> dict[str, ApprovalPolicy]:
        """The tools an operator made wait for approval on this agent, by tool id."""
        query = RequiredApproval.select().where(RequiredApproval.agent == self.id)
        return {row.tool_id: row.policy for row in query.order_by(RequiredApproval.tool_id)}

    def add_access_rule(self, kind: str, pattern: str) -> AgentAccessRule:
        """Add an allow or deny rule deciding who may reach this agent at all."""
        return AgentAccessRule.create(agent=self, kind=kind, pattern=pattern)

    def admits(self, sender: str | None, *, authenticated: bool = True) -> Decision:
        """Whether ``sender`` may reach this agent, and why (checked at the gateway). Allow
        rules admit only an ``authenticated`` sender (mail that proved its domain)."""
        return decide(self.access_rules, sender, authenticated=authenticated)

    def available_tools(self, manifest: Manifest) -> list[ToolEntry]:
        """Every tool any grant could give, ignoring gates: the catalogue view."""
        return catalogue(self, manifest)

    def available_tools_for(self, context: RunContext, manifest: Manifest) -> list[ToolEntry]:
        """The tools this run may use: what the harness offers and dispatch enforces."""
        return self.resolve_for(context, manifest).tools

    def resolve_for(self, context: RunContext, manifest: Manifest) -> Resolution:
        """The tools this run may use, with each grant's decision."""
        if context.message is None:
            return resolve(self, manifest, scheduled=True)
        proven = context.message.proves_sender(context.config.mail.authentication)
        return resolve(self, manifest, sender=context.message.sender, authenticated=proven)


class AgentAccessRule(RuleRecord):
    """One allow/deny pattern deciding who may reach an agent at all."""

    agent = peewee.ForeignKeyField(Agent, backref="access_rules", on_delete="CASCADE")

    class Meta:
        table_name = "agent_access_rule"
