"""How much building the manifest costs over the bare minimum any plugin system pays.

Generates 200 plugin distributions (one tool each) into a temporary folder, then times, each
in a fresh interpreter so no import is cached:

- baseline: ``importlib.metadata.entry_points(group="protege")`` plus importing the 200 modules;
- manifest: ``protege.registry.build_manifest`` (discovery, selection, import, pluggy
  registration, ``register_tools`` per plugin, contract checks, collision resolution).

Prints the median of each and their ratio. Target: at most 1.5x.

    .venv/bin/python bench/registry.py [--plugins 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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


def time_in_fresh_interpreter(code: str, folder: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PROTEGE_LOAD_PLUGINS", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=folder, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_plugins(folder, args.plugins)
        baseline, manifest = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            baseline.append(time_in_fresh_interpreter(BASELINE, folder))
            manifest.append(time_in_fresh_interpreter(MANIFEST.format(count=args.plugins), folder))
    base, built = statistics.median(baseline), statistics.median(manifest)
    print(f"plugins: {args.plugins}, rounds: {args.rounds} (medians, fresh interpreter each)")
    print(f"baseline (entry-point scan + import): {base * 1000:8.1f} ms")
    print(f"manifest build:                       {built * 1000:8.1f} ms")
    print(f"ratio manifest/baseline:              {built / base:8.2f}x  (target <= 1.5x)")


if __name__ == "__main__":
    main()
