"""What operator tools need from protege (public API): the dashboard, scripts, other front ends.

Each name here is what the command line itself uses, so a tool built on this module answers
and acts exactly as the command line does: opening an installation, explaining access,
reading runs and the audit log, and the operator's operations (``protege.operations``:
stopping runs, releasing held runs, granting toolkits, gate and access rules, approvals),
which check, change and record in the audit log in one call. The names and what each is
for are listed once, in docs/api.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from protege.access import Decision, normalize_pattern, routing_key
from protege.audit import Change, change, command_line_actor, snapshot
from protege.audit import entries as audit_entries
from protege.authentication import MethodResult, Verdict, authenticate, sender_of, unverified
from protege.authentication import Resolver as DnsLookup  # not the prompt sections' Resolver
from protege.authentication.dmarc import aligned as dmarc_aligned
from protege.authentication.dmarc import lookup as dmarc_lookup
from protege.config import AuthenticationSettings, Config, load_config
from protege.db import migrate, require_current
from protege.gateway.inbound import Delivered, MailRejected, StorageUnavailable, ingest
from protege.gateway.smtp import start_gateway
from protege.harness.events import KINDS as EVENT_KINDS
from protege.harness.events import printable
from protege.harness.events import read as read_event
from protege.harness.events import render as render_event
from protege.installation import Installation, open_installation
from protege.limits.circuit import describe as model_endpoint
from protege.limits.circuit import summary as _endpoint_summary
from protege.models import Agent
from protege.models.messages import REFUSED
from protege.models.resolution import ApprovalBypass, Resolution, bypassed_approvals, unapprovable
from protege.models.resolution import explain as explain_resolution
from protege.operations import (
    Answered,
    Cancelled,
    CancelledHeld,
    CircuitsClosed,
    NotFound,
    OperationRefused,
    Released,
    add_access_rule,
    add_gate_rule,
    answer_approval,
    attach_toolkit,
    cancel_held,
    cancel_run,
    clear_grant_approval,
    detach_toolkit,
    queue_responsibility,
    release_held,
    remove_access_rule,
    remove_gate_rule,
    require_grant_approval,
    require_tool_approval,
    reset_circuit,
    set_scheduled_runs,
    set_whole_archive,
    unrequire_tool_approval,
)
from protege.plugins import current_plugin
from protege.registry import Manifest
from protege.scheduler import Scheduler
from protege.toolkits import sync
from protege.worker import drain

__all__ = [
    "EVENT_KINDS",
    "Answered",
    "ApprovalBypass",
    "AuthenticationSettings",
    "Cancelled",
    "CancelledHeld",
    "Change",
    "CircuitsClosed",
    "Config",
    "Delivered",
    "DnsLookup",
    "Explanation",
    "Installation",
    "MailRejected",
    "MethodResult",
    "NotFound",
    "OperationRefused",
    "Released",
    "Scheduler",
    "StorageUnavailable",
    "Verdict",
    "add_access_rule",
    "add_gate_rule",
    "all_refused",
    "answer_approval",
    "attach_toolkit",
    "audit_entries",
    "authenticate",
    "bypassed_approvals",
    "cancel_held",
    "cancel_run",
    "change",
    "clear_grant_approval",
    "command_line_actor",
    "current_plugin",
    "detach_toolkit",
    "dmarc_aligned",
    "dmarc_lookup",
    "drain",
    "explain",
    "ingest",
    "load_config",
    "migrate",
    "model_endpoint",
    "model_endpoint_line",
    "normalize_pattern",
    "open_installation",
    "printable",
    "queue_responsibility",
    "read_event",
    "release_held",
    "remove_access_rule",
    "remove_gate_rule",
    "render_event",
    "require_current",
    "require_grant_approval",
    "require_tool_approval",
    "reset_circuit",
    "sender_of",
    "set_scheduled_runs",
    "set_whole_archive",
    "snapshot",
    "start_gateway",
    "sync",
    "unapprovable",
    "unrequire_tool_approval",
    "unverified",
]


@attrs.frozen
class Explanation:
    """Why a run of ``agent`` would get the tools it gets: for a reply to ``sender``, or a
    scheduled run."""

    agent: str
    scheduled: bool
    sender: str | None
    reach: Decision | None  # whether the sender may write to the agent at all (reply runs)
    resolution: Resolution
    authenticated: bool = True  # whether allow rules and approvers may match the sender
    verdict: Verdict | None = None  # the stored mail's sender verdict, when one was explained

    @property
    def routing_key(self) -> str | None:
        """The sender as patterns are compared with it (None when it does not parse)."""
        return None if self.scheduled else routing_key(self.sender)

    def as_json(self) -> dict[str, Any]:
        """The explanation as ``protege access explain --json`` prints it."""
        reach = self.reach
        return {
            "agent": self.agent,
            "run": "scheduled" if self.scheduled else "reply",
            "sender": self.sender,
            "routing_key": self.routing_key,
            "authenticated": None if self.scheduled else self.authenticated,
            "sender_verdict": None if self.verdict is None else self.verdict.as_json(),
            "reaches_agent": None if reach is None else reach.admitted,
            "reach_reason": None if reach is None else reach.reason,
            "toolkits": [
                {
                    "toolkit": g.toolkit,
                    "admitted": g.admitted,
                    "reason": g.reason,
                    "tools": list(g.tool_ids),
                    "missing": list(g.missing_ids),
                    "whole_archive": g.whole_archive,
                }
                for g in self.resolution.grants
            ],
            "tools": self.resolution.tool_ids,
            "mail_scope": self.mail_scope,
            "whole_archive_tools": self.whole_archive_tools,
            "approvals": {
                tool: {
                    "approvers": list(policy.approvers),
                    "requests_to": list(policy.notify),
                    "timeout_seconds": policy.timeout,
                    "self_approval": policy.self_approval,
                    "approved_at_once": policy.self_approves(
                        self.sender, authenticated=self.authenticated
                    ),
                }
                for tool, policy in sorted(self.resolution.approvals.items())
            },
            "withheld": dict(sorted(self.resolution.withheld.items())),
            "approval_skipped": [
                {"tool": b.tool_id, "guarded_by": b.guarded_by, "given_by": b.given_by}
                for b in self.resolution.bypassed
            ],
        }

    @property
    def mail_scope(self) -> str:
        """Which of the agent's mail its mail tools reach on this run, unless a grant opens
        the whole archive for them: ``whole archive``, ``sender's mail`` or ``own message``."""
        if self.scheduled:
            return "whole archive"
        if self.authenticated and self.routing_key is not None:
            return "sender's mail"
        return "own message"

    @property
    def whole_archive_tools(self) -> list[str]:
        """The run's tools that a grant gives with the whole mail archive open."""
        return [i for i in self.resolution.tool_ids if i in self.resolution.whole_archive]

    def _mail_lines(self) -> list[str]:
        reach = {
            "whole archive": "all of the agent's mail (a scheduled run has no sender)",
            "sender's mail": f"only the mail {self.routing_key} took part in (From, To, Cc)",
            "own message": "only the run's own message (the sender is not proven)",
        }[self.mail_scope]
        wide = self.whole_archive_tools
        lines = [f"  mail      mail tools reach {reach}"]
        if wide and self.mail_scope != "whole archive":
            lines.append(f"            all of the agent's mail, through a grant: {', '.join(wide)}")
        return lines

    def lines(self) -> list[str]:
        """The explanation as ``protege access explain`` prints it, line by line."""
        lines = []
        if self.scheduled:
            lines.append(f"{self.agent}, scheduled run")
        elif self.reach is not None:
            key = self.routing_key or "does not parse"
            proof = "proves its sender" if self.authenticated else "does NOT prove its sender"
            lines.append(
                f"{self.agent}, reply to {self.sender} (routing key: {key}), as mail that {proof}"
            )
            if self.verdict is not None:
                lines.append(f"  sender verdict: {printable(self.verdict.summary())}")
            verdict = "may write to" if self.reach.admitted else "may NOT write to"
            lines.append(f"  sender {verdict} {self.agent}: {self.reach.reason}")
        if not self.resolution.grants:
            lines.append("  no toolkits attached: no tools")
        for grant in self.resolution.grants:
            mark = "admitted" if grant.admitted else "refused "
            wide = " (whole mail archive)" if grant.whole_archive else ""
            lines.append(f"  {mark}  {grant.toolkit}{wide}: {grant.reason}")
            if grant.missing_ids:
                skipped = ", ".join(grant.missing_ids)
                lines.append(f"            skipped (not in the manifest): {skipped}")
        for tool, policy in sorted(self.resolution.approvals.items()):
            at_once = " (this sender is one: approved at once)"
            own = (
                at_once
                if policy.self_approves(self.sender, authenticated=self.authenticated)
                else ""
            )
            lines.append(
                f"  approval  {tool}: waits for a yes from {', '.join(policy.approvers)}{own}"
            )
        for bypass in self.resolution.bypassed:
            lines.append(
                f"  NO APPROVAL  {bypass.tool_id}: {bypass.guarded_by} asks for approval but "
                f"does not admit this sender, and {bypass.given_by} gives it without"
            )
        for _tool, reason in sorted(self.resolution.withheld.items()):
            lines.append(f"  withheld  {reason}")
        lines += self._mail_lines()
        lines.append(f"tools: {', '.join(self.resolution.tool_ids) or 'none'}")
        return lines


def explain(
    agent: Agent,
    manifest: Manifest,
    *,
    sender: str | None = None,
    scheduled: bool = False,
    authenticated: bool = True,
    verdict: Verdict | None = None,
) -> Explanation:
    """What a reply run to ``sender`` (or, with ``scheduled``, a scheduled run) of ``agent``
    would be offered, and which rule decided each toolkit: for mail that proves its sender
    (``authenticated``, the default) or, with ``authenticated=False``, for mail that does
    not (a forger's). ``verdict``, the sender verdict of a stored mail, is shown with it."""
    if (sender is None) == (not scheduled):
        raise ValueError("explain needs exactly one of a sender or scheduled=True")
    resolution = explain_resolution(
        agent, manifest, sender=sender, scheduled=scheduled, authenticated=authenticated
    )
    reach = None if scheduled else agent.admits(sender, authenticated=authenticated)
    return Explanation(agent.name, scheduled, sender, reach, resolution, authenticated, verdict)


def all_refused(delivered: Sequence[Delivered]) -> bool:
    """Whether every agent the message was for refused its sender (the SMTP gateway then
    answers 550 and keeps the reason to itself)."""
    return bool(delivered) and all(d.status == REFUSED for d in delivered)


def model_endpoint_line(described: dict[str, Any]) -> str:
    """One printable line for operators saying what ``model_endpoint`` found: the
    endpoint's last error is its own text, and may hold control characters."""
    return printable(_endpoint_summary(described))
