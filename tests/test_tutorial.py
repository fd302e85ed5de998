"""The tutorial, followed as a newcomer would: its commands run in a shell that has only
protege's environment on its PATH, with the echo model and no API key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


class ShopApp:
    """The tutorial's folder after its steps 2 to 4, and a shell as after
    `. .venv/bin/activate` in a fresh terminal: protege's environment, nothing else."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "shop-app"
        self.folder.mkdir()
        self.environ = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            **{k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR")},
        }
        self.shell(block("init"))
        (self.folder / "shop").mkdir()
        (self.folder / "shop" / "__init__.py").write_text("")
        (self.folder / "shop" / "tools.py").write_text(block("tool"))
        self.shell(block("setup"))

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run ``script`` here; it must succeed."""
        done = subprocess.run(
            ["/bin/sh", "-ec", script],
            cwd=self.folder,
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    @contextmanager
    def running(self, command: str, *args: str) -> Iterator[subprocess.Popen]:
        """``command`` (a block of the tutorial) with ``args``, stopped however the test ends."""
        process = subprocess.Popen(
            [*command.split(), *args],
            cwd=self.folder,
            env=self.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)

    def replies(self) -> list[str]:
        return [p.read_text() for p in sorted((self.folder / ".protege" / "outbox").glob("*.eml"))]


def test_from_a_clone_make_install_installs_the_built_in_plugins_from_their_folders():
    assert block("clone").strip() == "make install && . .venv/bin/activate"
    makefile = (REPO / "Makefile").read_text()
    for name in ("protege-mail", "protege-files", "protege-web"):
        assert f"plugins/{name}" in makefile


def test_the_tutorial_ends_in_an_answered_email_without_an_api_key(tmp_path):
    app = ShopApp(tmp_path)
    port = free_port()
    with app.running(block("echo"), "--port", str(port)) as echo:
        said = read_line(echo)
        assert said.startswith(f"protege: the echo model answers at http://127.0.0.1:{port}/v1")
        tried = app.shell(block("echo-settings").replace("8700", str(port)) + block("try"))
    assert echo.returncode == 0

    assert tried.stderr.startswith("mail from this run goes to the outbox")
    assert "call lookup_order" in tried.stdout
    assert "call send_email" in tried.stdout
    (reply,) = app.replies()
    assert "To: jane@example.org" in reply
    assert '"status": "delivered"' in reply


def test_the_tutorials_serve_step_answers_mail_sent_by_smtp(tmp_path):
    app = ShopApp(tmp_path)
    model_port, mail_port = free_port(), free_port()
    with app.running(block("echo"), "--port", str(model_port)) as echo:
        read_line(echo)
        app.environ["PROTEGE_MODEL"] = "echo"
        app.environ["PROTEGE_MODEL_BASE_URL"] = f"http://127.0.0.1:{model_port}/v1"
        with app.running(block("serve"), "--port", str(mail_port), "--no-scheduler") as serve:
            listening = read_line(serve)
            assert listening.startswith(f"protege: listening for mail on 127.0.0.1:{mail_port}")
            sent = subprocess.run(
                [sys.executable, "-"],
                input=block("send").replace("2525", str(mail_port)),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sent.returncode == 0, sent.stderr
            assert read_line(serve) == "mail 1 for Sundae: accepted, run 1 queued"
            assert read_line(serve) == "run 1 (Sundae): done"
    (reply,) = app.replies()
    assert "> Where is my order SCP-1042?" in reply
