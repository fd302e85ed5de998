"""A message rebuilt from the parsed fields of SendGrid's Inbound Parse (its default mode,
without the raw MIME): the original header block over the text and the attachments."""

from __future__ import annotations

import json
import re
from email import policy
from email.message import EmailMessage

from protege_dashboard.ingress_requests import Form, Refused, Upload

MIME_FIELDS = ("content-type", "content-transfer-encoding", "mime-version")
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")


def rebuilt_from_fields(form: Form) -> bytes:
    """A message rebuilt from SendGrid's parsed fields: the original header block
    (``headers``) without its MIME fields, over the ``text`` (else the ``html``) part,
    decoded by the charset ``charsets`` names for it and sent on as UTF-8, then the form's
    file parts as attachments."""
    headers = form.get("headers")
    if not headers:
        raise Refused(422, "the form has no 'headers' field")
    kept = _kept_header_lines(headers)
    subtype, content = _body_text(form)
    if not form.files:
        kept += [
            b"MIME-Version: 1.0",
            f"Content-Type: text/{subtype}; charset=utf-8".encode(),
            b"Content-Transfer-Encoding: 8bit",
        ]
        body = content.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")
        return b"\r\n".join(kept) + b"\r\n\r\n" + body
    return b"\r\n".join(kept) + b"\r\n" + _with_attachments(subtype, content, form.files)


def _kept_header_lines(block: bytes) -> list[bytes]:
    """The header block's lines, its MIME fields (and their folded lines) left out."""
    kept: list[bytes] = []
    dropping = False
    for line in block.replace(b"\r\n", b"\n").strip(b"\n").split(b"\n"):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.split(b":", 1)[0].strip().lower().decode("latin-1") in MIME_FIELDS
        if not dropping:
            kept.append(line)
    return kept


def _body_text(form: Form) -> tuple[str, str]:
    """The subtype (plain or html) and text of the part the message is rebuilt around."""
    try:
        charsets = json.loads(form.text("charsets") or "{}")
    except (ValueError, RecursionError):
        charsets = {}
    part, subtype = ("text", "plain") if form.get("text") else ("html", "html")
    charset = charsets.get(part) if isinstance(charsets, dict) else None
    written = form.get(part) or b""
    try:
        return subtype, written.decode(charset if isinstance(charset, str) else "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return subtype, written.decode("utf-8", "replace")


def _with_attachments(subtype: str, content: str, files: tuple[Upload, ...]) -> bytes:
    """The MIME fields and body of a multipart/mixed message: the text, then each file."""
    message = EmailMessage(policy=policy.SMTP)
    message.set_content(content, subtype=subtype, charset="utf-8")
    for upload in files:
        media = (upload.content_type or "").split(";")[0].strip().lower()
        if not _MEDIA_TYPE.match(media) or media.startswith(("multipart/", "message/")):
            media = "application/octet-stream"
        maintype, _, media_subtype = media.partition("/")
        message.add_attachment(
            upload.data,
            maintype=maintype,
            subtype=media_subtype,
            filename=upload.filename or upload.field,
        )
    return message.as_bytes()
