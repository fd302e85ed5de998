"""What reading ``protege.toml`` costs with protege's direct reading of plain tables, against
cattrs alone, in the same run.

``protege.config`` reads a table that already has its class's exact shape directly, and
hands anything else to cattrs (imported only then). The script writes a typical
``protege.toml`` (model, runs, mail, authentication and a plugin's table, every value plain)
into a temporary folder and times, each in a fresh interpreter, interleaved round by round
(protege's bytecode written first, as installing it does):

- cattrs: ``load_config()`` with every table handed to cattrs (the direct reading turned
  off), cattrs' import and converter included, as a process reading its configuration
  through cattrs pays them;
- direct: ``load_config()`` as protege ships it;
- ``protege tools`` as a whole process, both ways, for what either costs a command: its
  CPU time (user and system), which other work on the machine sways less than wall time.

Prints the median of each and their ratios.

    .venv/bin/python bench/config.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from registry import compile_installed

CONFIG = """\
tool_modules = []
[model]
model = "gpt-4o-mini"
input = ["text", "pdf"]
timeout = 30
max_output_tokens = 2000
[runs]
max_model_turns = 12
timezone = "Europe/Berlin"
[serve]
processes = 2
[mail]
transport = "smtp"
smtp_host = "mail.example.com"
smtp_username = "colleague"
max_recipients = 20
[mail.authentication]
mode = "report"
trusted_relays = ["192.0.2.0/24"]
[responsibilities]
notify = "ops@example.com"
[plugins.protege-web]
allow_networks = ["10.0.0.0/8"]
"""

# Turns the direct reading off: every table goes to cattrs, as it would without it.
CATTRS_ONLY = """
import protege.config
protege.config._plainly_structured = lambda value, type_: protege.config._UNSURE
"""

TIMED = """
import sys, time
{prelude}
import protege.config
started = time.perf_counter()
config = protege.config.load_config()
elapsed = time.perf_counter() - started
assert config.mail.transport == "smtp" and config.runs.timezone == "Europe/Berlin"
print(elapsed, "cattrs" in sys.modules)
"""

TOOLS = """
import sys
{prelude}
sys.argv = ["protege", "tools"]
from protege.cli import main
main()
"""


def _run(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("PROTEGE_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out


def time_load(folder: Path, prelude: str, expect_cattrs: bool) -> float:
    """The time ``load_config()`` takes in a new Python (after ``prelude``)."""
    elapsed, loaded = _run(TIMED.format(prelude=prelude), folder).stdout.split()
    assert (loaded == "True") == expect_cattrs, "the path timed is not the one meant"
    return float(elapsed)


def time_tools(folder: Path, prelude: str) -> float:
    """The CPU time (user and system) of ``protege tools`` as a whole process (after
    ``prelude``): on a shared machine, less at the mercy of other work than its wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _run(TOOLS.format(prelude=prelude), folder)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _pair(times: list[float]) -> str:
    """The median and the best of ``times``, in ms (CPU time that others' work adds to)."""
    return f"{statistics.median(times) * 1000:8.1f} ms (best {min(times) * 1000:.1f} ms)"


def _ratios(slower: list[float], faster: list[float]) -> str:
    median = statistics.median(slower) / statistics.median(faster)
    return f"{median:8.2f}x (best {min(slower) / min(faster):.2f}x)"


def main() -> None:
    """Time both ways and print their medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    compile_installed()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "protege.toml").write_text(CONFIG)
        time_tools(folder, "")  # warm the file cache
        library, direct, library_tools, direct_tools = [], [], [], []
        for _ in range(rounds):  # interleaved, so drift hits both alike
            library.append(time_load(folder, CATTRS_ONLY, expect_cattrs=True))
            direct.append(time_load(folder, "", expect_cattrs=False))
            library_tools.append(time_tools(folder, CATTRS_ONLY))
            direct_tools.append(time_tools(folder, ""))
    base, fast = statistics.median(library), statistics.median(direct)
    print(f"rounds: {rounds} (medians, fresh interpreter each)")
    print(f"load_config through cattrs:          {base * 1000:8.2f} ms")
    print(f"load_config, plain tables directly:  {fast * 1000:8.2f} ms")
    print(f"ratio cattrs/direct:                 {base / fast:8.2f}x")
    print(f"`protege tools` CPU, through cattrs: {_pair(library_tools)}")
    print(f"`protege tools` CPU, directly:       {_pair(direct_tools)}")
    print(f"ratio cattrs/direct:                 {_ratios(library_tools, direct_tools)}")


if __name__ == "__main__":
    main()
