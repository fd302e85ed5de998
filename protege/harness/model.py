"""The model: any OpenAI-compatible Chat Completions endpoint, through the official client."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import math
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import attrs

from protege.config import ModelSettings
from protege.errors import ProtegeError
from protege.schema import MAX_ARGUMENT_DEPTH, nested_deeper_than

PLACEHOLDER_KEY = "not-set"  # the client insists on a key; local endpoints ignore it


class ModelError(ProtegeError):
    """The model endpoint could not give an answer; the message says what to fix."""


class EndpointFailing(ModelError):
    """The endpoint failed on its own side (5xx, 429, a time-out, no connection), after
    the client's own retries: the run is not at fault and may be tried again later.
    ``retry_after`` is how many seconds the endpoint asked callers to wait, when it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@attrs.frozen
class ModelReply:
    """One answer of the model: its text, its tool calls, and what it cost."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    usage: dict[str, Any]
    latency_ms: float
    model: str

    def as_message(self) -> dict[str, Any]:
        """The reply as the assistant message to send back in the next request."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


class ModelClient:
    """Sends a run's conversation to the configured model."""

    def __init__(self, settings: ModelSettings) -> None:
        if not settings.model:
            raise ModelError(
                'no model is configured: set model = "..." under [model] in protege.toml'
            )
        self.settings = settings
        self.base_url = settings.base_url
        self.api_key_env = settings.api_key_env

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """One Chat Completions call (retried by the client on 429 and 5xx), over within
        ``max_call_seconds`` whatever the endpoint does; it waits on the running event
        loop, so one loop carries many runs' calls at once."""
        import openai  # heavy (~200 ms): loaded by the first model call, not at start-up

        request: dict[str, Any] = {"model": self.settings.model, "messages": messages}
        if tools:
            request["tools"] = tools
        if self.settings.max_output_tokens:
            request[self.settings.token_parameter] = self.settings.max_output_tokens
        if self.settings.temperature is not None:
            request["temperature"] = self.settings.temperature
        start = time.perf_counter()
        try:
            client = _client(
                self.base_url,
                self.settings.api_key or PLACEHOLDER_KEY,
                self.settings.timeout,
                self.settings.max_retries,
            )
            # The client's own POST, as its README shows for requests it does not type:
            # `chat.completions.create` would walk the whole conversation through its
            # TypedDict transform on every call (a third of the client's CPU per call, more
            # as the conversation grows) to turn plain JSON into the same plain JSON.
            # Retries, timeouts, auth and error classes are the client's as before. The
            # answer is read here (`read_reply`), strictly: it comes from outside.
            async with asyncio.timeout(self.settings.max_call_seconds):
                body: bytes = await client.post(
                    "/chat/completions", cast_to=bytes, body=request, options=_AUTH
                )
        except TimeoutError:
            raise EndpointFailing(
                f"the model endpoint did not finish answering within "
                f"{self.settings.max_call_seconds:g} s (raise max_call_seconds under [model])"
            ) from None
        except openai.AuthenticationError:
            raise ModelError(
                f"the model endpoint refused the API key (401): set {self.api_key_env} "
                "to a valid key, or api_key_env under [model] to the variable that holds it"
            ) from None
        except openai.PermissionDeniedError as error:
            raise ModelError(f"the model endpoint denied access (403): {_said(error)}") from None
        except openai.NotFoundError:
            raise ModelError(
                f"the model endpoint has no model {self.settings.model!r} (404): check "
                f"model and base_url under [model] (base_url: {self.base_url or 'OpenAI'})"
            ) from None
        except openai.RateLimitError as error:
            raise EndpointFailing(
                f"the model endpoint is still rate limiting after "
                f"{self.settings.max_retries} retries: {_said(error)}",
                retry_after(error.response.headers),
            ) from None
        except openai.APIStatusError as error:
            said = f"the model endpoint answered {error.status_code}: {_said(error)}"
            if endpoint_side(error.status_code):
                raise EndpointFailing(said, retry_after(error.response.headers)) from None
            raise ModelError(said) from None
        except openai.APITimeoutError:
            raise EndpointFailing(
                f"the model endpoint did not answer within {self.settings.timeout} s "
                "(raise timeout under [model])"
            ) from None
        except openai.APIConnectionError:
            raise EndpointFailing(
                f"cannot reach the model endpoint at {self.base_url or 'OpenAI'}: "
                "check base_url under [model] or OPENAI_BASE_URL"
            ) from None
        latency_ms = (time.perf_counter() - start) * 1000
        return read_reply(body, latency_ms, self.settings.model or "")


def endpoint_side(status: int) -> bool:
    """Whether an HTTP error ``status`` is the endpoint's trouble rather than the request's:
    a time-out (408), too many requests (429) or a server error (5xx)."""
    return status in (408, 429) or status >= 500


def retry_after(headers: Mapping[str, str], now: datetime.datetime | None = None) -> float | None:
    """The seconds an answer's headers ask a caller to wait before trying again:
    ``retry-after-ms``, else ``Retry-After`` in seconds or as an HTTP date (measured from
    the answer's own ``Date``, so that the two clocks need not agree; else from ``now``,
    by default the time of this machine, naive meaning UTC). None when they say nothing
    readable."""
    lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    milliseconds = _seconds(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    given = lowered.get("retry-after")
    if not given:
        return None
    seconds = _seconds(given)
    if seconds is not None:
        return seconds
    at = _http_date(given)
    if at is None:
        return None
    base = _http_date(lowered.get("date", "")) or now or datetime.datetime.now(datetime.UTC)
    if base.tzinfo is None:  # naive, as protege keeps times: UTC
        base = base.replace(tzinfo=datetime.UTC)
    return max(0.0, (at - base).total_seconds())


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def _http_date(value: str) -> datetime.datetime | None:
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=datetime.UTC)


_USAGE_KEYS = 32
_MAX_CALL_ID = 256  # longer ids are replaced: they are echoed and stored


MAX_TOOL_CALLS = 1024  # in one answer; the run's budget runs only a few of them per turn


def read_reply(body: bytes, latency_ms: float, asked_for: str) -> ModelReply:
    """The reply in a Chat Completions answer ``body``; ``ModelError`` saying what is wrong
    when it is not one. Loose where endpoints differ harmlessly (arguments given as an
    object, content as a list of text parts, no call id), strict where a wrong shape would
    be acted on."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python reads
        raise ModelError("the model endpoint answered with something that is not JSON") from None
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices:
        raise ModelError("the model endpoint answered with no choices")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ModelError("the model endpoint's answer has no message")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ModelError("the model endpoint's answer has tool calls that are not a list")
    if len(calls) > MAX_TOOL_CALLS:  # each would be recorded before the budget declined it
        raise ModelError(
            f"the model endpoint's answer has {len(calls)} tool calls; protege reads at most "
            f"{MAX_TOOL_CALLS}"
        )
    model = answer.get("model")
    return ModelReply(
        content=_content(message.get("content")),
        tool_calls=[_call(call) for call in calls],
        usage=_usage(answer.get("usage")),
        latency_ms=latency_ms,
        model=(_text(model) or "")[:200] if isinstance(model, str) else asked_for,
    )


def _content(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return _text(value)
    if isinstance(value, list):  # content parts: their text, in order
        return _text("".join(p["text"] for p in value if _is_text_part(p)))
    raise ModelError("the model endpoint's answer has content that is not text")


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def _call(call: Any) -> dict[str, Any]:
    """One tool call as protege answers it. A call that names no tool gets the name ""
    (which no tool has: the dispatcher refuses it and tells the model); one without an id
    gets a new one, so that no two calls of a run share an id."""
    call = call if isinstance(call, dict) else {}
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):  # some endpoints send the object itself
        if nested_deeper_than(arguments, MAX_ARGUMENT_DEPTH):
            raise ModelError("the model endpoint's answer has arguments nested too deep")
        try:
            arguments = json.dumps(arguments)
        except (ValueError, RecursionError):
            raise ModelError(
                "the model endpoint's answer has arguments json cannot write"
            ) from None
    usable = isinstance(call_id, str) and 0 < len(call_id) <= _MAX_CALL_ID
    return {
        "id": _text(call_id) if usable else _new_call_id(),
        "type": "function",
        "function": {
            "name": _text(name) if isinstance(name, str) else "",
            "arguments": _text(arguments),
        },
    }


def _new_call_id() -> str:
    return "call_protege_" + uuid.uuid4().hex


def _usage(value: Any) -> dict[str, Any]:
    """The token counts of ``value``: numbers, and objects of numbers, nothing else."""
    if not isinstance(value, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, item in list(value.items())[:_USAGE_KEYS]:
        if _is_count(item):
            kept[str(key)[:64]] = item
        elif isinstance(item, dict):
            counts = {str(k)[:64]: v for k, v in list(item.items())[:_USAGE_KEYS] if _is_count(v)}
            if counts:
                kept[str(key)[:64]] = counts
    return kept


def _is_count(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def _text(value: str | None) -> str | None:
    # JSON lets a model write a lone surrogate ("\\ud800"); no request or row can carry it.
    return None if value is None else value.encode("utf-8", "replace").decode("utf-8")


def _said(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or body.get("error", {}).get("message")
        if message:
            return " ".join(str(message).split())
    return " ".join(str(error).split())


_AUTH: Any = {"security": {"bearer_auth": True}}  # what `create` sends: the API key only

# One client per endpoint and event loop, so its connection pool is reused across runs: an
# async client's connections belong to the loop that opened them.
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def load_library() -> None:
    """Import the model client library now: a long-lived process (``serve``) does it before
    it takes runs, so that the first model call does not stall the event loop its runs
    share (and their leases) while the import runs."""
    import openai  # noqa: F401


async def close_clients() -> None:
    """Close the clients of the running event loop (before the loop itself closes)."""
    for client in _CLIENTS.pop(asyncio.get_running_loop(), {}).values():
        await client.close()


def _client(base_url: str | None, api_key: str, timeout: float, max_retries: int) -> Any:
    import openai  # heavy: see ModelClient.complete

    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    key = (base_url, api_key, timeout, max_retries)
    found = clients.get(key)
    if found is None:
        found = clients[key] = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
    return found
