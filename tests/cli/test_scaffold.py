"""`protege init` and `protege plugin new`; the new plugin installed into a fresh virtual
environment with `protege install`, where its own tests pass as generated."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from protege.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
# Distributions of the development environment a fresh one must not see: protege itself
# (installed anew from the repo) and the plugins and examples installed in editable mode.
OWN = ("protege", "the_scoop", "__editable__", "_protege", "distutils-precedence")


def test_init_writes_a_commented_protege_toml_protege_accepts(run_protege):
    result = run_protege("init", "--tool-module", "myapp.tools")
    assert result.returncode == 0, result.stderr
    path = run_protege.project / "protege.toml"
    text = path.read_text()
    assert text.count("\n# ") > 20  # it explains itself
    config = load_config(run_protege.project, environ={})
    defaults = Config.defaults(run_protege.project)
    assert config.tool_modules == ("myapp.tools",)
    assert (config.model, config.mail, config.runs) == (
        defaults.model,
        defaults.mail,
        defaults.runs,
    )


def test_init_does_not_overwrite_an_existing_file(run_protege):
    (run_protege.project / "protege.toml").write_text("# mine\n")
    result = run_protege("init")
    assert result.returncode == 1
    assert "already exists: --force overwrites it" in result.stderr
    assert (run_protege.project / "protege.toml").read_text() == "# mine\n"


def test_plugin_new_refuses_a_name_pip_could_not_install(run_protege):
    result = run_protege("plugin", "new", "dice!")
    assert result.returncode == 1
    assert "'dice!' is not a distribution name" in result.stderr


def _pytest_in(project: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    """The project's own tests, run as its developer runs them, from its folder."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON", "PYTEST"))
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tool_new_writes_a_tool_into_the_tool_module_with_a_test_that_passes(run_protege):
    assert run_protege("init", "--tool-module", "shop.tools").returncode == 0
    made = run_protege("tool", "new", "greet")
    assert made.returncode == 0, made.stderr
    project = run_protege.project
    assert (project / "shop" / "__init__.py").exists()
    assert "class GreetTool(Tool):" in (project / "shop" / "tools.py").read_text()
    # A second tool joins the first in the module the app already has.
    (project / "shop" / "tools.py").write_text(
        '"""The shop\'s tools."""\n\nimport json\n\n'
        + (project / "shop" / "tools.py").read_text().replace("from protege import Tool\n", "")
    )
    assert run_protege("tool", "new", "lookup_order").returncode == 0
    text = (project / "shop" / "tools.py").read_text()
    assert text.startswith('"""The shop\'s tools."""\n\nimport json\nfrom protege import Tool\n')
    assert text.count("from protege import Tool") == 1

    tests = _pytest_in(project, "tests/test_greet.py", "tests/test_lookup_order.py")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout
    listed = run_protege("tools", "--json")
    assert '"id": "greet"' in listed.stdout
    assert '"id": "lookup_order"' in listed.stdout


def test_tool_new_writes_a_module_of_its_own_in_a_tool_package(run_protege):
    assert run_protege("init", "--tool-module", "shop.tools").returncode == 0
    (run_protege.project / "shop" / "tools").mkdir(parents=True)
    (run_protege.project / "shop" / "__init__.py").touch()
    (run_protege.project / "shop" / "tools" / "__init__.py").touch()
    assert run_protege("tool", "new", "greet").returncode == 0
    assert (run_protege.project / "shop" / "tools" / "greet.py").exists()
    tests = _pytest_in(run_protege.project, "tests/test_greet.py")
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("Greet",), "'Greet' is not a tool id"),
        (("send_email",), "there is a tool send_email already (builtin, protege-mail)"),
        (("greet", "--module", "shop.other"), "shop.other is not one of protege.toml's"),
    ],
)
def test_tool_new_refuses_what_it_cannot_write_in_one_line(run_protege, args, said):
    assert run_protege("init", "--tool-module", "shop.tools").returncode == 0
    result = run_protege("tool", "new", *args)
    assert result.returncode == 1
    assert said in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (run_protege.project / "shop").exists()


def test_tool_new_without_tool_modules_says_how_to_name_one(run_protege):
    result = run_protege("tool", "new", "greet")
    assert result.returncode == 1
    assert "protege.toml names no tool_modules" in result.stderr


def _filtered_site_packages(into: Path) -> Path:
    """A folder holding links to the development environment's third-party packages, so a
    fresh environment gets pytest, attrs, openai... without installing them again."""
    into.mkdir()
    (source,) = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    for entry in Path(source).iterdir():
        if not entry.name.startswith(OWN):
            (into / entry.name).symlink_to(entry)
    return into


def _copy_of_protege(into: Path) -> Path:
    # Built from a copy, so the build leaves nothing in the working tree.
    shutil.copytree(
        REPO / "protege", into / "protege", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, into / name)
    return into


def test_a_new_plugin_installs_into_a_fresh_environment_and_passes_its_tests(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    packages = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    shared = _filtered_site_packages(tmp_path / "shared")
    (packages / "development.pth").write_text(f"{shared}\n")
    python, protege = venv / "bin" / "python", venv / "bin" / "protege"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "--quiet"]

    def run(*command: object, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(part) for part in command],
            cwd=cwd,
            env=environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    run(python, "-m", "pip", "install", *offline, _copy_of_protege(tmp_path / "src"))
    run(protege, "plugin", "new", "protege-dice", "--summary", "Rolls dice.")
    plugin = tmp_path / "protege-dice"
    assert sorted(p.name for p in plugin.iterdir()) == [
        ".gitignore",
        "README.md",
        "protege_dice",
        "pyproject.toml",
        "tests",
    ]

    run(protege, "install", *offline, plugin)
    listed = run(protege, "plugins", "--json").stdout
    assert '"distribution": "protege-dice"' in listed
    assert '"tools": [\n      "dice"\n    ]' in listed

    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=plugin)
    assert "4 passed" in tests.stdout

    run(protege, "uninstall", "--yes", "protege-dice")
    assert "protege-dice" not in run(protege, "plugins", "--json").stdout

    # The README's plugin, as its two blocks are written.
    readme = tmp_path / "readme-dice"
    (readme / "protege_dice").mkdir(parents=True)
    (readme / "protege_dice" / "__init__.py").write_text(readme_block("plugin"))
    (readme / "pyproject.toml").write_text(readme_block("plugin-pyproject", "toml"))
    run(protege, "install", *offline, readme)
    assert '"id": "roll_dice"' in run(protege, "tools", "--json").stdout


def readme_block(name: str, language: str = "python") -> str:
    pattern = rf"<!-- readme-test: {name} -->\n```{language}\n(.*?)```"
    match = re.search(pattern, (REPO / "README.md").read_text(), re.DOTALL)
    assert match, f"README has no block marked {name}"
    return match.group(1)


def test_uninstall_will_not_remove_protege_itself(run_protege):
    result = run_protege("uninstall", "--yes", "Protege")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: protege uninstall will not remove Protege")


def test_install_exits_with_pips_status_when_pip_fails(run_protege, tmp_path):
    missing = tmp_path / "no-such-plugin"
    result = run_protege("install", "--no-index", "--quiet", str(missing))
    assert result.returncode != 0
    assert "Run `protege plugins`" not in result.stdout
