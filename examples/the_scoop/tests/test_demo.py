"""`protege demo` (what `make demo` runs) plays the seed's thread with the scripted model."""

import json
import os
import subprocess
import sys
from pathlib import Path

from the_scoop.demo import demo_config

REFUNDS = (
    "import sys; from pathlib import Path; from the_scoop.shop import Refund, open_shop; "
    "open_shop(Path(sys.argv[1])); print(*[r.order.number for r in Refund.select()])"
)


def test_demo_shows_the_seed_outcome(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "OPENAI_"))}
    result = subprocess.run(
        [sys.executable, "-m", "protege", "demo", "--dir", str(tmp_path / "scoop")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == (
        "The Scoop demo, with the scripted model (no model is configured: set"
    )
    jane, forged, mara, jane_again, mara_again = out.split("=== Email ")[1:6]
    assert (
        "tools offered: check_flavor_stock, create_file, lookup_order, process_refund, "
        "read_attachment, search_emails, send_email"
    ) in jane
    assert "    Attached: melted-order.png\n" in jane
    assert "    read_attachment: ran, showed melted-order.png to the model\n" in jane
    assert "--- run 1 for Jane <jane@acme.com>: waiting" in jane
    assert "    process_refund: waits for approval (asked mara@thescoop.com)\n" in jane
    # A forged "Mara" with the request's token: nothing proves it is hers, nothing happens.
    assert "Mara <mara@thescoop.com> -> sundae+approve-" in forged
    assert "does NOT prove it is from thescoop.com" in forged
    assert "protege: approval 1: the sender is not authenticated" in forged
    assert "--- run" not in forged
    assert "Mara <mara@thescoop.com> -> sundae+approve-" in mara
    assert "protege: the mail proves it is from thescoop.com (dkim); answer" in mara
    assert "--- run 1 for Jane <jane@acme.com> (resumed: an approval was answered): done" in mara
    assert "    process_refund: approved by mara@thescoop.com, ran\n" in mara
    assert "--- run 2 for Jane <jane@acme.com>: waiting" in jane_again
    assert "    process_refund: denied by mara@thescoop.com, not run\n" in mara_again
    outbox = out.split("=== The outbox: 6 mails")[1]
    assert outbox.count("--- Sundae <sundae@thescoop.example> -> mara@thescoop.com") == 2
    assert outbox.count("--- Sundae <sundae@thescoop.example> -> jane@acme.com") == 4
    assert "Good news: SCP-1042 is refunded in full ($24.50)." in outbox
    assert "Subject: Approval needed: process_refund for jane@acme.com" in outbox
    folder = tmp_path / "scoop"
    refunds = subprocess.run(
        [sys.executable, "-c", REFUNDS, str(folder / "data")], capture_output=True, text=True
    )
    assert refunds.stdout.split() == ["SCP-1042"]  # once, and only the approved one
    scout = out.split("=== A responsibility: Scout's 'morning stock report'")[1]
    assert "the scheduler, at Mon 02 Mar 07:00 CET, queued run 3" in scout
    assert "tools offered: check_flavor_stock, send_email\n" in scout  # not process_refund
    assert "--- Scout <scout@thescoop.example> -> mara@thescoop.com" in scout
    assert "Pistachio: OUT (0 pints)" in scout
    assert len(list((tmp_path / "scoop" / "data" / "outbox").glob("*.eml"))) == 7
    ending = out.split("=== See it all in the dashboard")[1].splitlines()
    activate = Path(sys.prefix) / "bin" / "activate"
    assert ending[1:] == [
        f"    . {activate}  # protege's environment",
        f"    cd {tmp_path / 'scoop'}",
        "    protege operators add admin  # asks for a password",
        "    protege dashboard  # then open http://127.0.0.1:8025/",
    ]
    # The hints work in a fresh shell, where nothing of this environment is on the PATH.
    opened = subprocess.run(
        ["/bin/sh", "-c", "\n".join([*ending[1:3], "protege runs list --json"])],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert opened.returncode == 0, opened.stderr
    assert len(json.loads(opened.stdout)) == 3
    listed = subprocess.run(
        [sys.executable, "-m", "protege", "runs", "list", "--json"],
        env=env,
        cwd=tmp_path / "scoop",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3  # the folder's protege.toml finds the demo's data


def test_demo_with_a_configured_model_says_which(tmp_path):
    (tmp_path / "protege.toml").write_text('[model]\nmodel = "llama3"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        config, scripted = demo_config(tmp_path / "scoop")
    finally:
        os.chdir(cwd)
    assert not scripted
    assert config.model.model == "llama3"
    assert config.tool_modules == ("the_scoop.tools",)


def test_without_the_scoop_protege_has_no_demo_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "OPENAI_"))}
    env["PROTEGE_DISABLE_PLUGINS"] = "the-scoop"
    result = subprocess.run(
        [sys.executable, "-m", "protege", "demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.rstrip().endswith("Error: No such command 'demo'.")
    assert not (tmp_path / "protege.db").exists()
