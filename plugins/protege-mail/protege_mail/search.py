"""``search_emails``: the agent's memory of its own mail beyond the current thread."""

from __future__ import annotations

from protege import Result, RunContext, Tool, Trust
from protege.mail import MAX_SEARCH_RESULTS, attachments_of, search

BODY_LIMIT = 4000


class SearchEmailsTool(Tool):
    """Full-text search over the agent's own mail."""

    description = (
        "Searches your own mail (sent and received) for messages containing every word of "
        "query, in the participants' addresses, the subject or the body. Use it to recall "
        "earlier conversations that are not in the current thread. Returns the newest "
        "matches first, each with its body and its attachments (id, filename, type, size)."
    )
    summary = "Full-text search over the agent's own mail."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["query"],
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
        },
    }
    trust = Trust.UNTRUSTED  # other people's mail

    def use(self, context: RunContext, query: str, limit: int = 10) -> Result:
        matches = search(context.agent, query, limit)
        attachments = attachments_of(matches)
        return self.success(
            query=query,
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
                            "id": blob.id,
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
