"""protege's records, for host apps, scripts and tests (public API)."""

from protege.models.agents import Agent, AgentAccessRule
from protege.models.approvals import Approval, ApprovalPolicy
from protege.models.audit import AuditEntry, Operator
from protege.models.base import Record
from protege.models.blobs import Blob, MessageAttachment
from protege.models.messages import Message, SearchCriteria
from protege.models.participants import MessageParticipant
from protege.models.replays import UsedToken
from protege.models.runs import Event, Responsibility, Run
from protege.models.toolkits import AgentToolkit, AgentToolkitRule, RequiredApproval, Toolkit

__all__ = [
    "Agent",
    "AgentAccessRule",
    "AgentToolkit",
    "AgentToolkitRule",
    "Approval",
    "ApprovalPolicy",
    "AuditEntry",
    "Blob",
    "Event",
    "Message",
    "MessageAttachment",
    "MessageParticipant",
    "Operator",
    "Record",
    "RequiredApproval",
    "Responsibility",
    "Run",
    "SearchCriteria",
    "Toolkit",
    "UsedToken",
]
