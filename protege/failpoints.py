"""Failpoints: named places where a crash test may have this process killed on purpose.

``PROTEGE_FAILPOINTS`` lists them with a probability, ``name=p`` separated by commas
(``delivery.handoff=0.05,run.tool_recorded=0.02``): on reaching a listed point, the process
sends itself SIGKILL with that probability, exactly as ``kill -9`` from outside would, but at
a moment an outside kill almost never hits. Read once, at the first point reached; with the
variable unset a point costs one dictionary lookup.

The points: ``delivery.handoff`` (a pending mail claimed, not yet handed to the transport)
and ``run.tool_recorded`` (a turn's tool results committed, the next model call not made).
"""

from __future__ import annotations

import os
import random
import signal

VARIABLE = "PROTEGE_FAILPOINTS"

_armed: dict[str, float] | None = None


def parse(text: str) -> dict[str, float]:
    """The points and probabilities ``text`` names; ``ValueError`` on anything else, so a
    crash test with a typo in it fails instead of quietly never crashing."""
    points: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, chance = item.partition("=")
        try:
            probability = float(chance) if equals else 1.0
        except ValueError:
            probability = -1.0
        if not name.strip() or not 0.0 <= probability <= 1.0:
            raise ValueError(f"{VARIABLE}: {item!r} is not name=probability (0 to 1)")
        points[name.strip()] = probability
    return points


def reached(name: str) -> None:
    """The process is at point ``name``: die here if the failpoint says so."""
    global _armed
    if _armed is None:
        _armed = parse(os.environ.get(VARIABLE, ""))
    chance = _armed.get(name)
    if chance and random.random() < chance:
        os.kill(os.getpid(), signal.SIGKILL)
