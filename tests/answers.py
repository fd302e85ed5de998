"""Model answers with a chosen model name and usage, as an endpoint sends them, for tests
of what answers cost (the scripted model names the model asked for and counts its own)."""

import json

from protege.testing import raw_answer
from protege.testing.model import Step


def answer(
    model: str,
    prompt: int,
    completion: int,
    *,
    call: str | None = None,
    tool: str = "count",
    text: str | None = None,
) -> Step:
    """An answer named ``model`` reporting this usage, calling ``tool`` with the argument
    ``label`` = ``call`` (also its call id) or saying ``text``."""
    message: dict = {"role": "assistant", "content": text}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": f"call-{call}",
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps({"label": call})},
            }
        ]
    return raw_answer(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )
