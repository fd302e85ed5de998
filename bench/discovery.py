"""What reading each plugin's name and version costs discovery, read from its METADATA's
header lines by protege, against ``importlib.metadata``'s own parse, in the same run.

Generates 200 plugin distributions as ``bench/registry.py`` does, each with the METADATA a
wheel has (classifiers, requirements, a project description of a few KiB), and times, each
in a fresh interpreter, interleaved round by round:

- importlib.metadata: ``protege.plugins.discover()`` with each name and version read as
  ``dist.metadata["Name"]`` and ``["Version"]`` (one email parse of the whole file);
- direct: ``discover()`` as protege ships it;
- ``protege tools`` as a whole process, both ways: its CPU time (user and system).

Prints the median of each and their ratios.

    .venv/bin/python bench/discovery.py [--plugins 200] [--rounds 21]
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
from config import TOOLS, _pair, _ratios
from registry import compile_installed, write_plugins

DESCRIPTION = (
    "A protege plugin that looks records up by their key.\n\n"
    + "It answers with the record's fields, or says that no record has the key. " * 60
)

METADATA = """\
Metadata-Version: 2.1
Name: bench-plugin-{n:03d}
Version: 1.{n}.0
Summary: Looks up record {n} by its key
Author-email: Bench <bench@example.com>
License: MIT
Classifier: Programming Language :: Python :: 3
Classifier: License :: OSI Approved :: MIT License
Classifier: Operating System :: OS Independent
Requires-Python: >=3.11
Requires-Dist: protege>=0.1
Requires-Dist: httpx>=0.27
Description-Content-Type: text/markdown

{description}"""

# Reads each name and version as importlib.metadata parses them.
LIBRARY = """
import protege.plugins
def _by_importlib(dist):
    metadata = dist.metadata
    return metadata["Name"] or "", metadata["Version"]
protege.plugins._name_and_version = _by_importlib
"""

TIMED = """
import time
{prelude}
from protege.plugins import discover
started = time.perf_counter()
sources = discover()
elapsed = time.perf_counter() - started
assert len(sources) >= {count}, len(sources)
print(elapsed)
"""


def _run(arguments: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    # The generated plugins first, then whatever path protege itself is found on (in a
    # checkout, PYTHONPATH), so that the code measured is the code at hand.
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PROTEGE_LOAD_PLUGINS", None)
    out = subprocess.run(arguments, env=env, cwd=folder, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out


def write_metadata(folder: Path, count: int) -> None:
    """Give each generated plugin the METADATA of a wheel."""
    for n in range(count):
        info = folder / f"bench_plugin_{n:03d}-1.0.dist-info"
        (info / "METADATA").write_text(METADATA.format(n=n, description=DESCRIPTION))


def time_discovery(folder: Path, prelude: str, count: int) -> float:
    """The time ``discover()`` reports in a new Python (after ``prelude``)."""
    code = TIMED.format(prelude=prelude, count=count)
    return float(_run([sys.executable, "-c", code], folder).stdout.strip().splitlines()[-1])


def time_tools(folder: Path, prelude: str) -> float:
    """The CPU time (user and system) of ``protege tools`` as a whole process (after
    ``prelude``): on a shared machine, less at the mercy of other work than its wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _run([sys.executable, "-c", TOOLS.format(prelude=prelude)], folder)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Time both ways and print their medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    compile_installed()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_plugins(folder, args.plugins)
        write_metadata(folder, args.plugins)
        library, direct, library_tools, direct_tools = [], [], [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            library.append(time_discovery(folder, LIBRARY, args.plugins))
            direct.append(time_discovery(folder, "", args.plugins))
            library_tools.append(time_tools(folder, LIBRARY))
            direct_tools.append(time_tools(folder, ""))
    base, fast = statistics.median(library), statistics.median(direct)
    print(f"plugins: {args.plugins}, rounds: {args.rounds} (medians, fresh interpreter each)")
    print(f"discover(), importlib.metadata:           {base * 1000:7.1f} ms")
    print(f"discover(), header lines read directly:   {fast * 1000:7.1f} ms")
    print(f"ratio importlib.metadata/direct:           {base / fast:7.2f}x")
    print(f"`protege tools` CPU, importlib.metadata:  {_pair(library_tools)}")
    print(f"`protege tools` CPU, directly:            {_pair(direct_tools)}")
    print(f"ratio importlib.metadata/direct:           {_ratios(library_tools, direct_tools)}")


if __name__ == "__main__":
    main()
