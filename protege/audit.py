"""The audit log: every change to who may use what (and every run an operator stopped),
with who made it and the subject before and after.

The dashboard and the command line record their changes through ``change``::

    with audit.change("operator:mara", "rule added", grant):
        grant.add_rule("allow", "*@thescoop.com")

The subject is read before and after the block, in the block's transaction, so the entry
holds exactly what changed. A subject made inside the block is named with ``created``.
"""

from __future__ import annotations

import contextlib
import getpass
import json
from collections.abc import Iterator
from typing import Any

from protege.access import ApprovalPolicy
from protege.db import database
from protege.models import (
    Agent,
    AgentToolkit,
    AuditEntry,
    Record,
    Responsibility,
    Run,
    Toolkit,
)

__all__ = ["Change", "change", "command_line_actor", "entries", "record", "snapshot"]


def command_line_actor() -> str:
    """Who a change made from the command line is recorded as: the system user."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name in this environment (a bare container)
        return "cli:unknown"


def snapshot(record: Record | None) -> dict[str, Any] | None:
    """What the audit log keeps of a toolkit, an agent, a grant, a responsibility or a run."""
    if record is None:
        return None
    if isinstance(record, Toolkit):
        return {
            "name": record.name,
            "description": record.description,
            "members": list(record.member_tool_ids),
        }
    if isinstance(record, Agent):
        required = record.approvals_required()
        return {
            "name": record.name,
            "address": record.address,
            "instructions": record.instructions,
            "access_rules": [str(r) for r in sorted(record.access_rules, key=lambda r: r.id)],
            **(
                {
                    "approvals_required": {
                        tool: _policy_snapshot(policy) for tool, policy in required.items()
                    }
                }
                if required
                else {}
            ),
            **({"archived": True} if record.archived_at is not None else {}),
        }
    if isinstance(record, AgentToolkit):
        return {
            "agent": record.agent.name,
            "toolkit": record.toolkit.name,
            "allow_on_scheduled_runs": record.allow_proactive,
            "rules": [str(r) for r in sorted(record.rules, key=lambda r: r.id)],
            **(
                {"approval": _policy_snapshot(record.approval)}
                if record.approval is not None
                else {}
            ),
        }
    if isinstance(record, Responsibility):
        return {
            "agent": record.agent.name,
            "name": record.name,
            "prompt": record.prompt,
            "schedule": record.schedule,
            "timezone": record.timezone,
            "enabled": record.enabled,
        }
    if isinstance(record, Run):
        return {
            "run": record.id,
            "agent": record.agent.name,
            "kind": record.kind,
            "status": record.status,
            "cancel_requested": record.cancel_requested_at is not None,
        }
    raise TypeError(f"the audit log does not record {type(record).__name__}")


def _policy_snapshot(policy: ApprovalPolicy) -> dict[str, Any]:
    return {
        "by": list(policy.approvers),
        "to": list(policy.notify),
        "timeout_seconds": policy.timeout,
        "self_approval": policy.self_approval,
    }


def _subject_name(kind: str, state: dict[str, Any]) -> str:
    if kind == "grant":
        return f"{state['toolkit']} on {state['agent']}"
    if kind == "responsibility":
        return f"{state['name']} of {state['agent']}"
    if kind == "run":
        return f"run {state['run']} of {state['agent']}"
    return str(state["name"])


_KINDS = {
    Toolkit: "toolkit",
    Agent: "agent",
    AgentToolkit: "grant",
    Responsibility: "responsibility",
    Run: "run",
}


class Change:
    """One change being made; ``created`` names a subject that did not exist before."""

    def __init__(self, subject: Record | None) -> None:
        self.subject = subject
        self.before = snapshot(subject)

    def created(self, subject: Record) -> None:
        """Name the record the change made."""
        self.subject = subject


@contextlib.contextmanager
def change(actor: str, action: str, subject: Record | None = None) -> Iterator[Change]:
    """Make a change in one transaction and record it: ``actor`` did ``action`` to
    ``subject`` (read before and after the block). Nothing is recorded if the block raises."""
    with database.atomic():
        made = Change(subject)
        yield made
        if made.subject is None:
            raise ValueError("an audited change needs a subject: call created(record)")
        current = type(made.subject).get_or_none(type(made.subject).id == made.subject.id)
        after = snapshot(current)
        state = after if after is not None else made.before
        kind = _KINDS[type(made.subject)]
        AuditEntry.create(
            actor=actor,
            action=action,
            subject_kind=kind,
            subject=_subject_name(kind, state or {"name": "?"})[:500],
            before_json=None if made.before is None else json.dumps(made.before),
            after_json=None if after is None else json.dumps(after),
        )


def record(
    actor: str,
    action: str,
    subject_kind: str,
    subject: str,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry:
    """Record a decision that is no operator's change of a record (an inspector held a
    mail, say): ``actor`` did ``action`` to ``subject``, in the caller's transaction."""
    return AuditEntry.create(
        actor=actor[:300],
        action=action[:200],
        subject_kind=subject_kind,
        subject=subject[:500],
        before_json=None if before is None else json.dumps(before),
        after_json=None if after is None else json.dumps(after),
    )


def entries(limit: int = 100, *, subject_kind: str | None = None) -> list[AuditEntry]:
    """The newest entries of the audit log, newest first."""
    query = AuditEntry.select().order_by(AuditEntry.id.desc()).limit(limit)
    if subject_kind is not None:
        query = query.where(AuditEntry.subject_kind == subject_kind)
    return list(query)
