"""``[limits]`` settings: the circuit's waits are finite and bounded, whatever is written."""

import math
import re

import pytest

from protege.limit_settings import LimitSettings


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"circuit_backoff_seconds": math.inf}, "circuit_backoff_seconds: must be more than 0"),
        ({"circuit_backoff_seconds": math.nan}, "circuit_backoff_seconds: must be more than 0"),
        ({"circuit_backoff_seconds": 0}, "circuit_backoff_seconds: must be more than 0"),
        (
            {"circuit_max_backoff_seconds": 1e12},
            "circuit_max_backoff_seconds: must be more than 0 and at most 86400",
        ),
        ({"circuit_max_backoff_seconds": math.inf}, "circuit_max_backoff_seconds: must be more"),
        (
            {"circuit_backoff_seconds": 60, "circuit_max_backoff_seconds": 30},
            "circuit_max_backoff_seconds: must be at least circuit_backoff_seconds (60)",
        ),
    ],
    ids=["infinite", "NaN", "zero", "past a day", "infinite maximum", "maximum below the start"],
)
def test_circuit_waits_must_be_finite_at_most_a_day_and_in_order(settings, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        LimitSettings(**settings)


def test_a_day_for_both_is_allowed():
    settings = LimitSettings(circuit_backoff_seconds=86_400, circuit_max_backoff_seconds=86_400)
    assert settings.circuit_max_backoff_seconds == 86_400
