"""``protege usage``: the tokens runs used, per run or per agent, and what they cost.

Token counts are read from the runs' ``model_response`` events (the usage the endpoint
reported with each answer); cost is counted only when ``[model]`` gives prices per million
tokens.
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


@attrs.define
class Tokens:
    """Tokens used: sent to the model (prompt) and written by it (completion)."""

    prompt: int = 0
    completion: int = 0
    total: int = 0
    responses: int = 0

    def add(self, usage: Any) -> None:
        """Count one model answer's reported usage (missing numbers count as 0)."""
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

    def merge(self, other: Tokens) -> None:
        """Add ``other``'s counts to these."""
        self.prompt += other.prompt
        self.completion += other.completion
        self.total += other.total
        self.responses += other.responses

    def cost(self, model: Any) -> float | None:
        """What these tokens cost at ``model``'s prices per million, or None without them."""
        if model.input_cost_per_million is None or model.output_cost_per_million is None:
            return None
        return round(
            (
                self.prompt * model.input_cost_per_million
                + self.completion * model.output_cost_per_million
            )
            / 1_000_000,
            6,
        )


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
            .tuples()  # type: ignore[assignment]  # peewee has no types
        )
        for run_id, payload in rows:
            try:
                found[run_id].add(json.loads(payload).get("usage"))
            except (ValueError, AttributeError):
                continue  # an event that is not what this version writes: counted as none
    return found


@click.command()
@click.option("--by", type=click.Choice(["agent", "run"]), default="agent", show_default=True)
@click.option("--agent", help="Only this agent's runs.")
@click.option("--since", "since_value", help="Only runs created since: 30m, 2h, 7d, or a date.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def usage(by: str, agent: str | None, since_value: str | None, as_json: bool) -> None:
    """Tokens used per agent (or per run), and their cost when [model] gives prices
    (input_cost_per_million, output_cost_per_million)."""
    from protege.config import load_config
    from protege.models import Agent, Run

    model = load_config().model
    open_database()
    query = Run.select(Run, Agent).join(Agent).order_by(Run.id.desc())
    if agent:
        query = query.where(Run.agent == Agent.named(agent))
    if since_value:
        query = query.where(Run.created_at >= since(since_value))
    runs = list(query)
    tokens = tokens_by_run(run.id for run in runs)
    if by == "run":
        rows = [
            {
                "id": run.id,
                "agent": run.agent.name,
                "status": run.status,
                "created_at": iso(run.created_at),
                **_numbers(tokens[run.id], model),
            }
            for run in runs
        ]
        headers = ["RUN", "AGENT", "STATUS", "CREATED"]
        cells = [
            [r["id"], r["agent"], r["status"], local(run.created_at)]
            for r, run in zip(rows, runs, strict=True)
        ]
    else:
        per_agent: dict[str, Tokens] = {}
        counts: dict[str, int] = {}
        for run in runs:
            per_agent.setdefault(run.agent.name, Tokens()).merge(tokens[run.id])
            counts[run.agent.name] = counts.get(run.agent.name, 0) + 1
        rows = [
            {"agent": name, "runs": counts[name], **_numbers(per_agent[name], model)}
            for name in sorted(per_agent)
        ]
        headers = ["AGENT", "RUNS"]
        cells = [[r["agent"], r["runs"]] for r in rows]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No runs yet.")
        return
    echo_table(
        [*headers, "PROMPT", "COMPLETION", "TOTAL", "COST"],
        [
            [*cell, r["prompt_tokens"], r["completion_tokens"], r["total_tokens"], _money(r)]
            for cell, r in zip(cells, rows, strict=True)
        ],
    )
    if model.input_cost_per_million is None or model.output_cost_per_million is None:
        click.echo(
            "Cost needs input_cost_per_million and output_cost_per_million under [model].",
            err=True,
        )


def _numbers(tokens: Tokens, model: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": tokens.prompt,
        "completion_tokens": tokens.completion,
        "total_tokens": tokens.total,
        "cost": tokens.cost(model),
    }


def _money(row: dict[str, Any]) -> str:
    return "-" if row["cost"] is None else f"{row['cost']:.4f}"
