"""The spending ledger: what each agent spent on each model each UTC day (``usage_day``),
kept as the model's answers come, and what an answer costs in money.

The harness adds each answer's tokens in the transaction that writes the answer's
``model_response`` event, so the ledger and the runs' trails agree: an attempt that lost
its lease writes neither, and a resumed run does not count what was written before.
``protege.limits.admission.spending_limit_reached`` reads it back against the limits.
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import peewee

from protege.db import database
from protege.limit_settings import MONEY_LIMITS, ModelPrice
from protege.limits.windows import day_key

if TYPE_CHECKING:
    from protege.config import ModelSettings

# One statement, whoever else adds to the same row at the same moment: SQLite and
# PostgreSQL both take the conflict on the unique (agent, day, model) index.
_RECORD_SQL = (
    "INSERT INTO usage_day "
    "(agent_id, day, model, responses, prompt_tokens, completion_tokens, cost_micros) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}) "
    "ON CONFLICT (agent_id, day, model) DO UPDATE SET "
    "responses = usage_day.responses + excluded.responses, "
    "prompt_tokens = usage_day.prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = usage_day.completion_tokens + excluded.completion_tokens, "
    "cost_micros = usage_day.cost_micros + excluded.cost_micros"
)
MODEL_NAME_LENGTH = 200  # usage_day.model
# No endpoint answers one request with more than this: a count above it is a fault or a
# lie, and is counted as this many, so that the ledger's 64-bit columns (SQLite's INTEGER,
# PostgreSQL's BIGINT) hold the sum of millions of such answers in a day.
MAX_TOKENS_PER_ANSWER = 10**9
MAX_COST_MICROS_PER_ANSWER = 10**12  # a million in the price table's currency

logger = logging.getLogger(__name__)


@attrs.frozen
class Spend:
    """One model answer's spending: the tokens sent and written, and their cost in
    millionths of the price table's currency (0 when the model has no price)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_micros: int

    @property
    def tokens(self) -> int:
        """Tokens sent and written, as the token limits count them."""
        return self.prompt_tokens + self.completion_tokens


def tokens_of(usage: Any) -> tuple[int, int]:
    """The tokens sent (prompt) and written (completion) that an answer's reported
    ``usage`` gives. An endpoint that reports only a total has it counted as sent: tokens
    a limit cannot see would let the limit be passed.
    Each count is a whole number from 0 to ``MAX_TOKENS_PER_ANSWER``; one past that is
    counted as that and logged as suspect."""
    if not isinstance(usage, Mapping):
        return 0, 0
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if not prompt and not completion:
        prompt = _count(usage.get("total_tokens"))
    if max(prompt, completion) > MAX_TOKENS_PER_ANSWER:
        logger.warning(
            "suspect usage in a model answer (%s tokens sent, %s written): each counted as "
            "at most %s",
            prompt,
            completion,
            MAX_TOKENS_PER_ANSWER,
        )
    return min(prompt, MAX_TOKENS_PER_ANSWER), min(completion, MAX_TOKENS_PER_ANSWER)


def _count(value: Any) -> int:
    """``value`` as a whole count (floats truncated); 0 for anything not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_TOKENS_PER_ANSWER + 1 if value > 0 else 0  # infinity: absurd, not nothing
    return max(0, int(value))


def cost_micros(price: ModelPrice | None, prompt_tokens: int, completion_tokens: int) -> int:
    """What ``prompt_tokens`` sent and ``completion_tokens`` written cost at ``price`` (per
    million tokens), in millionths of its currency, at most ``MAX_COST_MICROS_PER_ANSWER``;
    0 without a price. Each answer is rounded on its own, the way the ledger adds them up."""
    if price is None:
        return 0
    cost = 0.0
    for tokens, per_million in ((prompt_tokens, price.input), (completion_tokens, price.output)):
        if tokens:  # infinity times no tokens is no cost, not NaN
            cost += tokens * per_million
    if not cost < MAX_COST_MICROS_PER_ANSWER:  # also infinity and NaN: fail closed
        return MAX_COST_MICROS_PER_ANSWER
    return round(cost)


def price_for(
    settings: ModelSettings, model: str | None, limits: Mapping[str, float]
) -> ModelPrice | None:
    """The price to charge an answer of ``model`` at: its own (``settings.price_of``), or,
    when a money limit of ``limits`` applies and the model has none, the highest prices
    known (``settings.highest_price``), with a warning: a limit must not pass unseen
    because the endpoint named its model in a way the price table does not know."""
    price = settings.price_of(model)
    if price is not None or not any(limits.get(name) for name in MONEY_LIMITS):
        return price
    highest = settings.highest_price()
    logger.warning(
        "model %r has no price in [model.prices]; a money limit applies, so its answer is "
        "charged at the highest prices known (%s)",
        model,
        "none: no price is set at all" if highest is None else highest,
    )
    return highest


def spend_of(model: str | None, usage: Any, price: ModelPrice | None) -> Spend:
    """One answer's spending: ``model`` (the name the endpoint answered with) and its
    ``usage``, priced at ``price`` (``ModelSettings.price_of(model)``)."""
    prompt, completion = tokens_of(usage)
    name = (model or "")[:MODEL_NAME_LENGTH]
    return Spend(name, prompt, completion, cost_micros(price, prompt, completion))


def record(
    agent_id: int,
    day: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    cost: int,
    *,
    responses: int = 1,
) -> None:
    """Add one answer (or ``responses`` answers) of ``model`` for the agent ``agent_id`` on
    ``day`` (``YYYY-MM-DD``, UTC) to the ledger: its tokens and its ``cost`` in micros.
    One statement, in the caller's transaction."""
    database.execute_sql(
        _RECORD_SQL.format(p=database.param),
        (
            agent_id,
            day,
            model[:MODEL_NAME_LENGTH],
            responses,
            prompt_tokens,
            completion_tokens,
            cost,
        ),
    )


def record_spend(agent_id: int, when: datetime.datetime, spend: Spend) -> None:
    """Add ``spend``, an answer given at ``when``, to the agent's day in the ledger.

    In a savepoint of the caller's transaction: should the ledger refuse it, the error is
    logged and the answer's event, and the run's end, are still written, for a run whose
    trail cannot be written stays ``running`` until its lease runs out, again and again."""
    try:
        with database.atomic():
            record(
                agent_id,
                day_key(when),
                spend.model,
                spend.prompt_tokens,
                spend.completion_tokens,
                spend.cost_micros,
            )
    except (peewee.DatabaseError, OverflowError, ValueError):
        logger.exception("could not add an answer's spending to the ledger: %s", spend)
