"""pytest loads protege's plugin into every session wherever protege is installed: loading it
imports only what registering its fixtures, markers and hooks needs."""

import subprocess
import sys

# All of protege a session that uses none of its fixtures may import.
ALLOWED = ["protege", "protege.testing", "protege.testing.plugin"]

LIST_IMPORTED = """
import sys
import protege.testing.plugin
print(" ".join(sorted(name for name in sys.modules if name.split(".")[0] == "protege")))
"""

SESSION_TEST = """
import sys


def test_only_the_plugin_of_protege_is_loaded():
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "protege")
    print("PROTEGE-MODULES", " ".join(loaded))
"""


def _protege_modules(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith("PROTEGE-MODULES"))
    return line.split()[1:]


def test_importing_the_plugin_imports_no_more_of_protege_than_the_plugin():
    out = subprocess.run(
        [sys.executable, "-c", LIST_IMPORTED], capture_output=True, text=True, timeout=120
    )

    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ALLOWED


def test_a_session_using_none_of_the_fixtures_loads_only_the_plugin(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_plain.py").write_text(SESSION_TEST)

    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", "--trace-config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert out.returncode == 0, out.stdout + out.stderr
    assert "protege.testing.plugin" in out.stdout  # the plugin was loaded, through pytest11
    assert _protege_modules(out.stdout) == ALLOWED


def test_the_public_names_of_protege_testing_load_when_first_used():
    import protege.testing

    assert sorted(protege.testing.__all__) == sorted(protege.testing._EXPORTS)
    for name in protege.testing.__all__:
        assert getattr(protege.testing, name).__name__ == name
