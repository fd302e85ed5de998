import json

import attrs
import pytest

from protege import Result, Trust, failure, success


def test_success_carries_its_data_for_the_model():
    result = success(status="shipped", total_cents=1299)
    assert result.ok
    assert result.for_model() == {"ok": True, "status": "shipped", "total_cents": 1299}


def test_failure_reason_may_be_text_or_an_exception():
    assert failure("no order SCP-1").reason == "no order SCP-1"
    assert failure(KeyError("SCP-1")).reason == "KeyError: 'SCP-1'"
    assert failure(TimeoutError()).reason == "TimeoutError"


def test_failure_shows_the_model_its_reason_and_data():
    result = failure("order already refunded", refund_id=7)
    assert not result.ok
    assert result.for_model() == {"ok": False, "reason": "order already refunded", "refund_id": 7}


def test_details_never_reach_the_model():
    result = success(a=1).with_details(trace="secret", rows=3)
    assert result.details == {"trace": "secret", "rows": 3}
    assert "trace" not in json.dumps(result.for_model())


def test_results_are_trusted_unless_marked():
    result = success(text="hi")
    assert result.trust is Trust.TRUSTED
    assert result.untrusted().trust is Trust.UNTRUSTED
    assert result.trust is Trust.TRUSTED  # marking returns a copy


def test_results_are_immutable():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        success().ok = False  # type: ignore[misc]


def test_trust_accepts_its_string_form():
    assert Result(ok=True, trust="untrusted").trust is Trust.UNTRUSTED
