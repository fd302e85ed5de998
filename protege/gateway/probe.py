"""What ``protege doctor`` finds at each mailbox and at the submission server, changing
nothing: the mailbox is examined read-only (no flag set, no mail moved), the submission
server is logged in to and left without a mail."""

from __future__ import annotations

import smtplib
from pathlib import Path
from typing import Any

from protege.gateway.imap import MailboxUnavailable, connect, describe, log_out
from protege.gateway.relay import FinalFailure
from protege.mailbox_settings import MOVE, MailboxSettings


def probe_mailbox(
    name: str, settings: MailboxSettings, root: Path, checkpoint: Any | None
) -> dict[str, Any]:
    """Log in to mailbox ``name`` and report its folders, what the server offers, the
    folder read and how it compares with ``checkpoint`` (a ``MailboxCheckpoint`` or None);
    ``problems`` lists what would keep it from being read, ``warnings`` the rest."""
    host, port = settings.address
    report: dict[str, Any] = {
        "mailbox": name,
        "agent": settings.agent,
        "server": f"{host}:{port} ({settings.security})",
        "problems": [],
        "warnings": [],
    }
    try:
        client = connect(name, settings, root)
    except Exception as error:  # MailboxUnavailable, or anything else: said, not raised
        report["problems"].append(
            str(error)
            if isinstance(error, MailboxUnavailable)
            else f"mailbox {name}: {describe(error)}"
        )
        return report
    try:
        capabilities = {c.decode("ascii", "replace").upper() for c in client.capabilities()}
        report["idle"] = "IDLE" in capabilities
        report["move"] = "MOVE" in capabilities or "UIDPLUS" in capabilities
        folders = [f[2] for f in client.list_folders()]
        report["folders"] = folders
        wanted = [("folder", settings.folder)]
        if settings.done == MOVE and settings.move_to:
            wanted.append(("move_to", settings.move_to))
        if settings.sent_folder:
            wanted.append(("sent_folder", settings.sent_folder))
        for key, folder in wanted:
            if folder not in folders and not (folder.upper() == "INBOX" and "INBOX" in folders):
                report["problems"].append(f"mailbox {name}: {key} {folder!r} is not a folder there")
        if settings.done == MOVE and not report["move"]:
            report["problems"].append(
                f'mailbox {name}: done = "move" needs MOVE or UIDPLUS, which the server lacks'
            )
        if settings.idle and not report["idle"]:
            report["warnings"].append(
                f"mailbox {name}: the server does not offer IDLE: it is polled every "
                f"{settings.poll_seconds:g} s"
            )
        if settings.folder in folders or settings.folder.upper() == "INBOX":
            examined = client.select_folder(settings.folder, readonly=True)
            validity = int(examined[b"UIDVALIDITY"])
            report["uidvalidity"] = validity
            report["messages"] = int(examined.get(b"EXISTS") or 0)
            report["checkpoint"] = _compared(name, client, checkpoint, validity, report)
    except Exception as error:  # a server that answers oddly: said, not raised
        report["problems"].append(f"mailbox {name}: {describe(error)}")
    finally:
        log_out(client)
    return report


def _compared(
    name: str, client: Any, checkpoint: Any | None, validity: int, report: dict[str, Any]
) -> dict[str, Any] | None:
    if checkpoint is None or checkpoint.uidvalidity is None:
        return None
    found: dict[str, Any] = {
        "uidvalidity": checkpoint.uidvalidity,
        "last_uid": checkpoint.last_uid,
        "taken": checkpoint.taken,
    }
    if checkpoint.uidvalidity != validity:
        report["warnings"].append(
            f"mailbox {name}: UIDVALIDITY is {validity}, the checkpoint's "
            f"{checkpoint.uidvalidity}: serve will look at its recent mail again"
        )
        return found
    above = [
        u for u in client.search(["UID", f"{checkpoint.last_uid + 1}:*"]) if u > checkpoint.last_uid
    ]
    found["waiting"] = len(above)
    return found


def probe_submission(transport: Any) -> dict[str, Any]:
    """Log in to the submission server of ``transport`` (a ``SubmissionTransport``) and
    leave; what it offered, or the problem."""
    settings = transport.settings
    host, port = settings.address
    report: dict[str, Any] = {
        "server": f"{host}:{port} ({settings.tls})",
        "username": settings.username,
        "problems": [],
    }
    try:
        smtp = transport.open_connection()
    except Exception as error:
        report["problems"].append(f"submission: {_said(error)}")
        return report
    try:
        report["auth"] = sorted((smtp.esmtp_features.get("auth") or "").upper().split())
        report["size"] = smtp.esmtp_features.get("size")
    finally:
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            smtp.close()
    return report


def _said(error: BaseException) -> str:
    if isinstance(error, FinalFailure):
        return str(error)
    if isinstance(error, smtplib.SMTPResponseException):
        return f"SMTP {error.smtp_code}: {error.smtp_error!r}"
    return describe(error)
