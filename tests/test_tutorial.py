"""The tutorial, followed as a newcomer would: its commands run in a shell that has only
protege's environment on its PATH, with the echo model and no API key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from protege.gateway.smtp import free_port

from .cli.serving import read_line

REPO = Path(__file__).parent.parent
TUTORIAL = REPO / "docs" / "tutorial.md"


def block(name: str) -> str:
    match = re.search(
        rf"<!-- tutorial-test: {name} -->\n```\w+\n(.*?)```", TUTORIAL.read_text(), re.DOTALL
    )
    assert match, f"the tutorial has no block marked {name}"
    return match.group(1)


def test_from_a_clone_make_install_installs_the_built_in_plugins_from_their_folders():
    assert block("clone").strip() == "make install && . .venv/bin/activate"
    makefile = (REPO / "Makefile").read_text()
    for name in ("protege-mail", "protege-files", "protege-web"):
        assert f"plugins/{name}" in makefile


def test_the_tutorial_ends_in_an_answered_email_without_an_api_key(tmp_path):
    project = tmp_path / "shop-app"
    project.mkdir()
    # As after `. .venv/bin/activate` in a fresh shell: protege's environment, nothing else.
    environ = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        **{k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR")},
    }

    def shell(script: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["/bin/sh", "-ec", script],
            cwd=project,
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    shell(block("init"))
    (project / "shop").mkdir()
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "tools.py").write_text(block("tool"))
    shell(block("setup"))

    port = free_port()
    echo = subprocess.Popen(
        [*block("echo").split(), "--port", str(port)],
        cwd=project,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert read_line(echo).startswith(
            f"protege: the echo model answers at http://127.0.0.1:{port}/v1"
        )
        settings = block("echo-settings").replace("8700", str(port))
        tried = shell(settings + block("try"))
    finally:
        echo.send_signal(signal.SIGTERM)
        out, err = echo.communicate(timeout=30)
    assert echo.returncode == 0, err
    assert out.decode().splitlines()[-1] == "protege: stopped"

    assert tried.stderr.startswith("mail from this run goes to the outbox")
    assert "call lookup_order" in tried.stdout
    assert "call send_email" in tried.stdout
    (reply,) = (project / ".protege" / "outbox").glob("*.eml")
    text = reply.read_text()
    assert "To: jane@example.org" in text
    assert '"status": "delivered"' in text
