"""What installing protege adds to the start of a pytest session that uses none of its fixtures.

pytest loads protege's plugin (the ``pytest11`` entry point ``protege``) into every session
wherever protege is installed. The script writes a project of one trivial test into a
temporary folder and times, as whole processes, interleaved round by round:

- baseline: ``python -m pytest -q -p no:cacheprovider -p no:protege`` (protege's plugin not
  loaded; every other installed plugin is, on both sides);
- with protege: the same command without ``-p no:protege``.

protege's bytecode is written first, as installing it does. Prints the median of each and
their ratio. Target: at most 1.1x (installing protege adds at most 10 %).

    .venv/bin/python bench/pytest_start.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIVIAL_TEST = "def test_arithmetic():\n    assert 1 + 1 == 2\n"
COMMAND = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def compile_protege() -> None:
    """Write protege's bytecode where it is stale, as installing it would."""
    spec = importlib.util.find_spec("protege")
    for location in (spec and spec.submodule_search_locations) or ():
        compileall.compile_dir(location, quiet=1)


def time_session(folder: Path, *extra: str) -> float:
    """The wall time of one pytest session in ``folder``, start to exit."""
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_PLUGINS", None)
    started = time.perf_counter()
    out = subprocess.run(
        [*COMMAND, *extra], cwd=folder, env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if out.returncode != 0 or "1 passed" not in out.stdout:
        raise SystemExit(out.stdout + out.stderr)
    return elapsed


def loads_protege(folder: Path) -> bool:
    """Whether the session with the plugin enabled has it registered (else the bench would
    compare two sessions without it)."""
    out = subprocess.run(
        [*COMMAND, "--trace-config", "--co"], cwd=folder, capture_output=True, text=True
    )
    return "protege.testing.plugin" in out.stdout


def main() -> None:
    """Time both sessions and print their medians and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    rounds = parser.parse_args().rounds
    compile_protege()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: no other config
        (folder / "test_trivial.py").write_text(TRIVIAL_TEST)
        if not loads_protege(folder):
            raise SystemExit("protege's pytest plugin is not installed (entry point pytest11)")
        for _ in range(2):  # warm the file cache on both sides
            time_session(folder, "-p", "no:protege")
            time_session(folder)
        baseline, with_protege = [], []
        for _ in range(rounds):  # interleaved, so drift hits both alike
            baseline.append(time_session(folder, "-p", "no:protege"))
            with_protege.append(time_session(folder))
    base, loaded = statistics.median(baseline), statistics.median(with_protege)
    print(f"rounds: {rounds} (medians, whole processes)")
    print(f"pytest without protege's plugin: {base * 1000:8.1f} ms")
    print(f"pytest with protege's plugin:    {loaded * 1000:8.1f} ms")
    print(f"ratio with/without:              {loaded / base:8.2f}x  (target <= 1.1x)")


if __name__ == "__main__":
    main()
