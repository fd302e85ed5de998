"""``protege usage``: the tokens runs used, per run or per agent, and what they cost.

Token counts are read from the runs' ``model_response`` events (the usage the endpoint
reported with each answer). Each answer is priced by the model that gave it
(``[model.prices]``, or ``input_cost_per_million``/``output_cost_per_million`` for the
configured model), the way the spending ledger (``usage_day``) prices it as it comes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs
import click

from protege.cli.database import open_database
from protege.cli.output import echo_json, echo_table
from protege.cli.timing import iso, local, since

MODEL_RESPONSE = "model_response"
MICROS = 1_000_000
UNNAMED = "?"  # an answer whose event names no model


@attrs.define
class ModelTokens:
    """One model's answers: how many, and the tokens sent and written as the ledger
    counts them (``protege.limits.spending.tokens_of``)."""

    responses: int = 0
    prompt: int = 0
    completion: int = 0

    def merge(self, other: ModelTokens) -> None:
        """Add ``other``'s counts to these."""
        self.responses += other.responses
        self.prompt += other.prompt
        self.completion += other.completion


@attrs.define
class Priced:
    """What some answers cost: the ``cost`` of those whose model has a price (None when
    none has one and some answers were given), each model's cost (None: no price), and
    the models that answered without a price."""

    cost: float | None
    by_model: dict[str, float | None]
    unpriced: list[str]


@attrs.define
class Tokens:
    """Tokens used: sent to the model (prompt) and written by it (completion), in all and
    per model that answered."""

    prompt: int = 0
    completion: int = 0
    total: int = 0
    responses: int = 0
    models: dict[str, ModelTokens] = attrs.Factory(dict)
    # Each answer's (model, prompt, completion), priced one by one as the ledger does.
    answers: list[tuple[str, int, int]] = attrs.Factory(list)

    def add(self, usage: Any, model: Any = None) -> None:
        """Count one model answer's reported usage (missing numbers count as 0), given by
        ``model``."""
        from protege.limits.spending import tokens_of

        if not isinstance(usage, dict):
            return
        prompt, completion = (
            _count(usage.get("prompt_tokens")),
            _count(usage.get("completion_tokens")),
        )
        self.prompt += prompt
        self.completion += completion
        self.total += _count(usage.get("total_tokens")) or prompt + completion
        self.responses += 1
        name = model if isinstance(model, str) and model else UNNAMED
        sent, written = tokens_of(usage)
        self.models.setdefault(name, ModelTokens()).merge(ModelTokens(1, sent, written))
        self.answers.append((name, sent, written))

    def merge(self, other: Tokens) -> None:
        """Add ``other``'s counts to these."""
        self.prompt += other.prompt
        self.completion += other.completion
        self.total += other.total
        self.responses += other.responses
        for name, counts in other.models.items():
            self.models.setdefault(name, ModelTokens()).merge(counts)
        self.answers += other.answers

    def priced(self, settings: Any) -> Priced:
        """What these answers cost at ``settings``' (``[model]``) prices."""
        from protege.limits.spending import cost_micros

        micros: dict[str, int | None] = {}
        for name, prompt, completion in self.answers:
            price = settings.price_of(None if name == UNNAMED else name)
            if price is None:
                micros[name] = None
            else:
                micros[name] = (micros.get(name) or 0) + cost_micros(price, prompt, completion)
        unpriced = sorted(name for name, value in micros.items() if value is None)
        known = [value for value in micros.values() if value is not None]
        cost = None if unpriced and not known else _money(sum(known))
        return Priced(
            cost,
            {name: None if value is None else _money(value) for name, value in micros.items()},
            unpriced,
        )

    def cost(self, settings: Any) -> float | None:
        """What these tokens cost at ``settings``' prices, or None when no model that
        answered has a price."""
        return self.priced(settings).cost


def _money(micros: int) -> float:
    return round(micros / MICROS, 6)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tokens_by_run(run_ids: Iterable[int]) -> dict[int, Tokens]:
    """The tokens each of the runs ``run_ids`` used, from their events."""
    from protege.models import Event

    ids = list(run_ids)
    found: dict[int, Tokens] = {run_id: Tokens() for run_id in ids}
    for start in range(0, len(ids), 500):  # bounded IN lists
        rows: Iterable[tuple[int, str]] = (
            Event.select(Event.run, Event.payload_json)
            .where((Event.kind == MODEL_RESPONSE) & (Event.run.in_(ids[start : start + 500])))
            .order_by(Event.run, Event.seq)
            .tuples()  # type: ignore[assignment]  # peewee has no types
        )
        for run_id, payload in rows:
            try:
                answer = json.loads(payload)
                found[run_id].add(answer.get("usage"), answer.get("model"))
            except (ValueError, AttributeError):
                continue  # an event that is not what this version writes: counted as none
    return found


def usage_json(tokens: Tokens, settings: Any) -> dict[str, Any]:
    """What ``tokens`` were and cost, as ``usage --json`` and ``runs show --json`` give
    them: totals, the cost, each model's share, and the models with no price."""
    priced = tokens.priced(settings)
    return {
        "responses": tokens.responses,
        "prompt_tokens": tokens.prompt,
        "completion_tokens": tokens.completion,
        "total_tokens": tokens.total,
        "cost": priced.cost,
        "models": {
            name: {
                "responses": counts.responses,
                "prompt_tokens": counts.prompt,
                "completion_tokens": counts.completion,
                "cost": priced.by_model.get(name),
            }
            for name, counts in sorted(tokens.models.items())
        },
        "unpriced_models": priced.unpriced,
    }


def unpriced_note(models: Iterable[str]) -> str | None:
    """The line that says which models have no price (their answers are not in the
    cost), or None when every model has one."""
    names = sorted(set(models))
    if not names:
        return None
    whose = "its answers are" if len(names) == 1 else "their answers are"
    return (
        f"No price for {', '.join(names)}: {whose} not in the cost "
        "(give prices under [model.prices])."
    )


def money(cost: float | None, unpriced: Iterable[str] = ()) -> str:
    """A cost as tables show it: ``-`` for none, a ``*`` when some answers had no price."""
    if cost is None:
        return "-"
    return f"{cost:.4f}" + ("*" if list(unpriced) else "")


@click.command()
@click.option("--by", type=click.Choice(["agent", "run"]), default="agent", show_default=True)
@click.option("--agent", help="Only this agent's runs.")
@click.option("--since", "since_value", help="Only runs created since: 30m, 2h, 7d, or a date.")
@click.option("--cost", "by_model", is_flag=True, help="Show each model's tokens and cost.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def usage(
    by: str, agent: str | None, since_value: str | None, by_model: bool, as_json: bool
) -> None:
    """Tokens used per agent (or per run), and their cost, each answer priced by the model
    that gave it ([model.prices]); --cost shows each model's share."""
    from protege.config import load_config
    from protege.models import Agent, Run

    settings = load_config().model
    open_database()
    query = Run.select(Run, Agent).join(Agent).order_by(Run.id.desc())
    if agent:
        query = query.where(Run.agent == Agent.named(agent))
    if since_value:
        query = query.where(Run.created_at >= since(since_value))
    runs = list(query)
    tokens = tokens_by_run(run.id for run in runs)
    groups: list[tuple[dict[str, Any], list[object], Tokens]] = []
    if by == "run":
        for run in runs:
            head = {
                "id": run.id,
                "agent": run.agent.name,
                "status": run.status,
                "created_at": iso(run.created_at),
            }
            groups.append(
                (head, [run.id, run.agent.name, run.status, local(run.created_at)], tokens[run.id])
            )
        headers = ["RUN", "AGENT", "STATUS", "CREATED"]
    else:
        per_agent: dict[str, Tokens] = {}
        counts: dict[str, int] = {}
        for run in runs:
            per_agent.setdefault(run.agent.name, Tokens()).merge(tokens[run.id])
            counts[run.agent.name] = counts.get(run.agent.name, 0) + 1
        for name in sorted(per_agent):
            head = {"agent": name, "runs": counts[name]}
            groups.append((head, [name, counts[name]], per_agent[name]))
        headers = ["AGENT", "RUNS"]
    rows = [{**head, **usage_json(used, settings)} for head, _, used in groups]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No runs yet.")
        return
    if by_model:
        echo_table(
            [*headers, "MODEL", "ANSWERS", "PROMPT", "COMPLETION", "COST"],
            [
                [
                    *cells,
                    model,
                    m["responses"],
                    m["prompt_tokens"],
                    m["completion_tokens"],
                    _cost(m),
                ]
                for (_, cells, _), row in zip(groups, rows, strict=True)
                for model, m in row["models"].items()
            ],
        )
    else:
        echo_table(
            [*headers, "PROMPT", "COMPLETION", "TOTAL", "COST"],
            [
                [
                    *cells,
                    r["prompt_tokens"],
                    r["completion_tokens"],
                    r["total_tokens"],
                    money(r["cost"], r["unpriced_models"]),
                ]
                for (_, cells, _), r in zip(groups, rows, strict=True)
            ],
        )
    note = unpriced_note(name for r in rows for name in r["unpriced_models"])
    if note is not None:
        click.echo(note, err=True)


def _cost(share: dict[str, Any]) -> str:
    return "no price" if share["cost"] is None else f"{share['cost']:.4f}"
