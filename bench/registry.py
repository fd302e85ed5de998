"""How much building the manifest costs over the bare minimum any plugin system pays.

Generates 200 plugin distributions (one tool each) into a temporary folder, then times, each
in a fresh interpreter so no import is cached:

- baseline: ``importlib.metadata.entry_points(group="protege")`` plus importing every module
  they name (the 200, and the plugins installed with protege);
- manifest: ``protege.registry.build_manifest`` (discovery, selection, import, pluggy
  registration, ``register_tools`` per plugin, contract checks, collision resolution);
- ``protege tools``, the whole command as a user runs it, against the baseline as a whole
  process (``python -c`` with the same scan and imports): both include starting Python.

The timed runs do not write bytecode, so the generated plugins are compiled afresh on both
sides alike; protege and its installed plugins get theirs written first, as installing them
does (in a checkout with stale ``.pyc`` files, every run would otherwise compile protege's
changed modules too: a cost no installed protege pays, and only on the manifest's side).

Prints the median of each and their ratios. Targets: manifest at most 1.5x the baseline;
``protege tools`` at most 1.2x the baseline process.

    .venv/bin/python bench/registry.py [--plugins 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN_SOURCE = """\
from protege import Tool, hookimpl


class Bench{n:03d}LookupTool(Tool):
    description = "Looks up record {n} by its key. Returns its fields."
    input_schema = {{
        "type": "object",
        "additionalProperties": False,
        "required": ["key"],
        "properties": {{
            "key": {{"type": "string", "pattern": "^R{n:03d}-"}},
            "verbose": {{"type": "boolean"}},
        }},
    }}

    def use(self, context, key, verbose=False):
        return self.success(key=key)


@hookimpl
def register_tools(register):
    register(Bench{n:03d}LookupTool)
"""

BASELINE = """
import importlib, importlib.metadata, time
import protege
start = time.perf_counter()
for ep in importlib.metadata.entry_points(group="protege"):
    importlib.import_module(ep.value)
print(time.perf_counter() - start)
"""

MANIFEST = """
import time
import protege
from protege.config import Config
from protege.plugins import PluginHost
from protege.registry import build_manifest
start = time.perf_counter()
manifest = build_manifest(Config.defaults(__import__("pathlib").Path.cwd()), PluginHost())
elapsed = time.perf_counter() - start
assert len(manifest) >= {count}, len(manifest)
print(elapsed)
"""


def write_plugins(folder: Path, count: int) -> None:
    for n in range(count):
        module = f"bench_plugin_{n:03d}"
        (folder / f"{module}.py").write_text(PLUGIN_SOURCE.format(n=n))
        info = folder / f"bench_plugin_{n:03d}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: bench-plugin-{n:03d}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(f"[protege]\n{module} = {module}\n")


def compile_installed() -> None:
    """Write the bytecode of protege and of each installed plugin's package, if stale."""
    import compileall
    import importlib.metadata
    import importlib.util

    packages = {"protege"} | {
        entry_point.value.split(":")[0].split(".")[0]
        for entry_point in importlib.metadata.entry_points(group="protege")
    }
    for package in sorted(packages):
        spec = importlib.util.find_spec(package)
        if spec is None:
            continue
        for location in spec.submodule_search_locations or ():
            compileall.compile_dir(location, quiet=1)
        if spec.submodule_search_locations is None and spec.origin:
            compileall.compile_file(spec.origin, quiet=1)


def _run(arguments: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PROTEGE_LOAD_PLUGINS", None)
    out = subprocess.run(arguments, env=env, cwd=folder, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out


def time_in_fresh_interpreter(code: str, folder: Path) -> float:
    """The time ``code`` reports for itself, run in a new Python."""
    return float(_run([sys.executable, "-c", code], folder).stdout.strip().splitlines()[-1])


def time_process(arguments: list[str], folder: Path) -> float:
    """The wall time of a whole process, start to exit."""
    start = time.perf_counter()
    _run(arguments, folder)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    compile_installed()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_plugins(folder, args.plugins)
        baseline, manifest, base_process, tools = [], [], [], []
        for _ in range(args.rounds):  # interleaved, so drift hits all alike
            baseline.append(time_in_fresh_interpreter(BASELINE, folder))
            manifest.append(time_in_fresh_interpreter(MANIFEST.format(count=args.plugins), folder))
            base_process.append(time_process([sys.executable, "-c", BASELINE], folder))
            tools.append(time_process([sys.executable, "-m", "protege", "tools"], folder))
    base, built = statistics.median(baseline), statistics.median(manifest)
    whole, listed = statistics.median(base_process), statistics.median(tools)
    print(f"plugins: {args.plugins}, rounds: {args.rounds} (medians, fresh interpreter each)")
    print(f"baseline (entry-point scan + import): {base * 1000:8.1f} ms")
    print(f"manifest build:                       {built * 1000:8.1f} ms")
    print(f"ratio manifest/baseline:              {built / base:8.2f}x  (target <= 1.5x)")
    print(f"baseline as a whole process:          {whole * 1000:8.1f} ms")
    print(f"`protege tools`, whole process:       {listed * 1000:8.1f} ms")
    print(f"ratio tools/baseline process:         {listed / whole:8.2f}x  (target <= 1.2x)")


if __name__ == "__main__":
    main()
