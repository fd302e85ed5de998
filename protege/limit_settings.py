"""``[limits]``: what one sender, one agent and the installation may spend, and per-agent
overrides; read into frozen attrs classes by ``protege.config``.

Every limit counts in a fixed window of UTC time (the hour, the day or the month now under
way) and is a positive number; ``0`` turns that limit off. Money limits count in the
currency of ``[model.prices]`` and need prices to mean anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from protege.addresses import canonical_address
from protege.reprs import fields_repr

# The names of the limits, as protege.toml, events, `status --json` and the alerts say them.
SENDER_RUNS_PER_HOUR = "sender_runs_per_hour"
SENDER_RUNS_PER_DAY = "sender_runs_per_day"
AGENT_RUNS_PER_HOUR = "agent_runs_per_hour"
UNPROVEN_RUNS_PER_HOUR = "unproven_runs_per_hour"
AGENT_RUNS_IN_FLIGHT = "agent_runs_in_flight"
AGENT_TOKENS_PER_DAY = "agent_tokens_per_day"
AGENT_TOKENS_PER_MONTH = "agent_tokens_per_month"
INSTALLATION_TOKENS_PER_DAY = "installation_tokens_per_day"
AGENT_COST_PER_DAY = "agent_cost_per_day"
AGENT_COST_PER_MONTH = "agent_cost_per_month"
INSTALLATION_COST_PER_DAY = "installation_cost_per_day"

RUN_LIMITS = (
    SENDER_RUNS_PER_HOUR,
    SENDER_RUNS_PER_DAY,
    AGENT_RUNS_PER_HOUR,
    UNPROVEN_RUNS_PER_HOUR,
)
SPENDING_LIMITS = (
    AGENT_TOKENS_PER_DAY,
    AGENT_TOKENS_PER_MONTH,
    INSTALLATION_TOKENS_PER_DAY,
    AGENT_COST_PER_DAY,
    AGENT_COST_PER_MONTH,
    INSTALLATION_COST_PER_DAY,
)
MONEY_LIMITS = (AGENT_COST_PER_DAY, AGENT_COST_PER_MONTH, INSTALLATION_COST_PER_DAY)
# The limits one agent's table may change (the installation's own are the installation's).
AGENT_LIMITS = (*RUN_LIMITS, AGENT_RUNS_IN_FLIGHT, *SPENDING_LIMITS[:2], *SPENDING_LIMITS[3:5])

_count = attrs.validators.ge(0)
_money = attrs.validators.ge(0.0)


# The circuit's waits: finite, and at most a day, so that no setting stops the workers for
# good (or makes its doubling overflow).
MAX_CIRCUIT_SECONDS = 86_400.0


def _circuit_seconds(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not (0 < value <= MAX_CIRCUIT_SECONDS):  # also NaN and infinity
        raise ValueError(
            f"{attribute.name}: must be more than 0 and at most {MAX_CIRCUIT_SECONDS:g} "
            f"seconds (a day), not {value!r}"
        )


def _max_backoff(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    _circuit_seconds(instance, attribute, value)
    if value < instance.circuit_backoff_seconds:
        raise ValueError(
            f"{attribute.name}: must be at least circuit_backoff_seconds "
            f"({instance.circuit_backoff_seconds!r}), not {value!r}"
        )


def _optional_count(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name}: must be 0 (no limit) or more, not {value!r}")


def _address(instance: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and canonical_address(value) is None:
        raise ValueError(f"{attribute.name}: {value!r} is not an email address")


@attrs.frozen(kw_only=True, repr=False)
class AgentLimits:
    """``[limits.agents.NAME]``: one agent's own values for the limits ``AGENT_LIMITS``
    names; a limit left out is the installation's."""

    __repr__ = fields_repr

    sender_runs_per_hour: int | None = attrs.field(default=None, validator=_optional_count)
    sender_runs_per_day: int | None = attrs.field(default=None, validator=_optional_count)
    agent_runs_per_hour: int | None = attrs.field(default=None, validator=_optional_count)
    unproven_runs_per_hour: int | None = attrs.field(default=None, validator=_optional_count)
    agent_runs_in_flight: int | None = attrs.field(default=None, validator=_optional_count)
    agent_tokens_per_day: int | None = attrs.field(default=None, validator=_optional_count)
    agent_tokens_per_month: int | None = attrs.field(default=None, validator=_optional_count)
    agent_cost_per_day: float | None = attrs.field(default=None, validator=_optional_count)
    agent_cost_per_month: float | None = attrs.field(default=None, validator=_optional_count)


@attrs.frozen(kw_only=True, repr=False)
class LimitSettings:
    """``[limits]``: runs and spending each sender, agent and the installation may have.

    Mail over a run limit, or arriving while a spending limit is reached, is stored and
    held: its run starts when the window reopens (the scheduler's pass releases it) or an
    operator releases it (``protege runs release``). A run that reaches a spending limit
    mid-run is held at its next model call and resumes from its events when released.
    ``agent_runs_in_flight`` is not a window: workers leave an agent's queued runs alone
    while that many of its runs are running. ``unproven_runs_per_hour`` counts, together,
    the runs of mail that did not prove its sender while ``[mail.authentication]``
    enforces: a forger who changes address at every mail uses up that share, never the
    rest of ``agent_runs_per_hour``.

    With ``notify_held``, a sender whose mail is held is told so once per window, in the
    thread, and only when protege could prove who sent it (a forged From must not turn
    protege into a source of backscatter). ``alert_to`` receives one mail when a limit is
    first reached in its window, and one when the model endpoint's circuit opens.

    The circuit breaker: after ``circuit_failures`` model calls in a row failed on the
    endpoint's side (5xx, 429, time-outs, connection errors), workers take no runs for
    ``circuit_backoff_seconds`` (doubled each time it opens again, up to
    ``circuit_max_backoff_seconds``; longer when the endpoint's ``Retry-After`` says so),
    then try one run; its success closes the circuit.
    """

    __repr__ = fields_repr

    sender_runs_per_hour: int = attrs.field(default=20, validator=_count)
    sender_runs_per_day: int = attrs.field(default=100, validator=_count)
    agent_runs_per_hour: int = attrs.field(default=500, validator=_count)
    unproven_runs_per_hour: int = attrs.field(default=100, validator=_count)
    agent_runs_in_flight: int = attrs.field(default=0, validator=_count)
    agent_tokens_per_day: int = attrs.field(default=5_000_000, validator=_count)
    agent_tokens_per_month: int = attrs.field(default=100_000_000, validator=_count)
    installation_tokens_per_day: int = attrs.field(default=20_000_000, validator=_count)
    agent_cost_per_day: float = attrs.field(default=0.0, validator=_money)
    agent_cost_per_month: float = attrs.field(default=0.0, validator=_money)
    installation_cost_per_day: float = attrs.field(default=0.0, validator=_money)
    notify_held: bool = False
    alert_to: str | None = attrs.field(default=None, validator=_address)
    circuit_failures: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    circuit_backoff_seconds: float = attrs.field(default=30.0, validator=_circuit_seconds)
    circuit_max_backoff_seconds: float = attrs.field(default=600.0, validator=_max_backoff)
    agents: Mapping[str, AgentLimits] = attrs.field(factory=dict, hash=False)

    def money_limited(self) -> bool:
        """Whether any money limit is set, the installation's or an agent's own."""
        own = (
            getattr(agent, name, None) for agent in self.agents.values() for name in MONEY_LIMITS
        )
        return any(getattr(self, name) for name in MONEY_LIMITS) or any(own)

    def strays(self, agent_names: list[str]) -> list[str]:
        """A line for each ``[limits.agents.NAME]`` naming none of ``agent_names``: its
        limits hold nobody (a typo, or an agent renamed), which ``protege doctor`` reports."""
        return [
            f"[limits.agents.{name}] names no agent, so its limits apply to nobody"
            + (f" (did you mean {close[0]}?)" if (close := _close(name, agent_names)) else "")
            for name in sorted(self.agents)
            if name not in agent_names
        ]

    def for_agent(self, name: str) -> Mapping[str, float]:
        """Every limit as it applies to the agent called ``name`` (0: no limit)."""
        own = self.agents.get(name)
        values: dict[str, float] = {}
        for limit in (*RUN_LIMITS, AGENT_RUNS_IN_FLIGHT, *SPENDING_LIMITS):
            value = getattr(own, limit, None) if own is not None else None
            values[limit] = getattr(self, limit) if value is None else value
        return values


def _close(name: str, names: list[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, names, n=1) or [
        other for other in names if other.lower() == name.lower()
    ]


@attrs.frozen(kw_only=True)
class ModelPrice:
    """What a model's provider charges, per million tokens sent (``input``) and written
    (``output``), in the currency the money limits count in."""

    input: float = attrs.field(validator=_money)
    output: float = attrs.field(validator=_money)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What these tokens cost."""
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000
