"""``search_emails``: the agent's memory of its own mail beyond the current thread."""

from __future__ import annotations

from typing import Any

from protege import Result, RunContext, Tool, Trust

BODY_LIMIT = 4000
MAX_RESULTS = 50  # protege.mail.MAX_SEARCH_RESULTS, which a test holds it to
_TEXT = {"type": "string", "minLength": 1, "maxLength": 500}
_DATE = {"type": "string", "minLength": 1, "maxLength": 40}


class SearchEmailsTool(Tool):
    """Full-text search over the agent's own mail, with the filters mail search has."""

    description = (
        "Searches your own mail (sent and received) that you may show the person you are "
        "answering: the mail they took part in, unless you were given all of it. query: words"
        " that must all appear in the participants' addresses, the subject or the body. "
        "Filters, all optional and combined: from (words or an address in the sender), to (in"
        " the To, Cc or Bcc recipients), subject (words in the subject), direction (inbound: "
        "mail you received; outbound: mail you sent), after and before (a date like "
        "2026-03-01 or a date and time like 2026-03-01T09:30:00Z; after includes that moment,"
        " before does not; UTC unless an offset is given), has_attachment. Use it to recall "
        "earlier conversations that are not in the current thread. Returns the newest matches"
        " first, each with its body and its attachments (id, filename, type, size)."
    )
    summary = "Search the agent's own mail by words, sender, recipient, subject and date."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": _TEXT,
            "from": _TEXT,
            "to": _TEXT,
            "subject": _TEXT,
            "direction": {"type": "string", "enum": ["inbound", "outbound"]},
            "after": _DATE,
            "before": _DATE,
            "has_attachment": {"type": "boolean"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
        },
    }
    trust = Trust.UNTRUSTED  # other people's mail

    def use(self, context: RunContext, **arguments: Any) -> Result:
        # protege.mail brings the database layer: loaded on first use, not with the manifest.
        from protege.mail import attachments_of, search, search_date

        # ``from`` is a Python keyword, so the arguments come as a mapping.
        dates = {}
        for name in ("after", "before"):
            if name in arguments:
                try:
                    dates[name] = search_date(arguments[name])
                except ValueError as error:
                    return self.failure(f"{name}: {error}")
        matches = search(
            context.agent,
            arguments.get("query", ""),
            arguments.get("limit", 10),
            sender=arguments.get("from", ""),
            recipient=arguments.get("to", ""),
            subject=arguments.get("subject", ""),
            direction=arguments.get("direction"),
            has_attachment=arguments.get("has_attachment"),
            scope=context.mail_scope(self.id),
            **dates,
        )
        attachments = attachments_of(matches)
        return self.success(
            **{k: v for k, v in arguments.items() if k != "limit"},
            matches=[
                {
                    "id": message.id,
                    "date": message.created_at.isoformat(timespec="seconds"),
                    "direction": message.direction,
                    "from": message.sender,
                    "to": message.to_addresses,
                    "cc": message.cc_addresses,
                    "subject": message.subject,
                    "body": _capped(message.body_text),
                    "attachments": [
                        {
                            "id": blob.token,
                            "filename": blob.filename,
                            "content_type": blob.content_type,
                            "size": blob.size,
                        }
                        for blob in attachments[message.id]
                    ],
                }
                for message in matches
            ],
        )


def _capped(body: str) -> str:
    if len(body) <= BODY_LIMIT:
        return body
    return body[:BODY_LIMIT] + f"\n[cut: {len(body) - BODY_LIMIT} more characters]"
