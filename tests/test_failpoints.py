"""Failpoints: a listed point kills the process with SIGKILL; an unlisted one does nothing."""

import os
import signal
import subprocess
import sys

import pytest

from protege import failpoints

REACH = "from protege import failpoints; failpoints.reached('delivery.handoff'); print('alive')"


def _reach(setting: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != failpoints.VARIABLE}
    if setting is not None:
        env[failpoints.VARIABLE] = setting
    return subprocess.run(
        [sys.executable, "-c", REACH], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_point_listed_with_probability_one_kills_the_process():
    result = _reach("run.tool_recorded=0, delivery.handoff=1")
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == ""


@pytest.mark.parametrize("setting", [None, "", "delivery.handoff=0", "run.tool_recorded=1"])
def test_a_point_not_armed_lets_the_process_go_on(setting):
    result = _reach(setting)
    assert (result.returncode, result.stdout) == (0, "alive\n")


def test_a_name_alone_means_always():
    assert failpoints.parse("delivery.handoff") == {"delivery.handoff": 1.0}


@pytest.mark.parametrize("text", ["delivery.handoff=often", "delivery.handoff=1.5", "=0.1"])
def test_a_malformed_setting_is_refused(text):
    with pytest.raises(ValueError, match="PROTEGE_FAILPOINTS"):
        failpoints.parse(text)
