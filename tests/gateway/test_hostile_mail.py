"""The hostile-mail corpus through both ways in: `protege receive` and the SMTP gateway."""

from __future__ import annotations

import smtplib
from pathlib import Path

import pytest
from click.testing import CliRunner

from protege.access import resolve
from protege.blobs import blob_path
from protege.cli import cli
from protege.gateway.smtp import free_port, start_gateway
from protege.models import Agent, Blob, Message, Run, Toolkit

from .hostile import AGENT, OPERATOR, cases

CASES = [(case, path) for case in cases() for path in case.paths]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    monkeypatch.setenv("PROTEGE_DATA_DIR", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.fixture
def sundae(protege_db, data_dir):
    agent = Agent.create(name="Sundae", address=AGENT)
    agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"])).add_rule(
        "allow", OPERATOR
    )
    return agent


def through_receive(raw: bytes) -> tuple[int | None, str]:
    result = CliRunner().invoke(cli, ["receive", "-", "--to", AGENT], input=raw)
    assert "Traceback" not in result.output
    return (None if result.exit_code == 0 else result.exit_code), result.output


def through_smtp(raw: bytes, case, data_dir: Path) -> tuple[int | None, str]:
    from protege.config import load_config

    controller = start_gateway(load_config(), "127.0.0.1", free_port())
    options = ["SMTPUTF8"] if case.smtputf8 else []
    try:
        with smtplib.SMTP(controller.hostname, controller.port, timeout=60) as client:
            client.sendmail(case.envelope_sender, [AGENT], raw, mail_options=options)
    except smtplib.SMTPResponseException as error:
        return error.smtp_code, error.smtp_error.decode(errors="replace")
    finally:
        controller.stop()
    return None, ""


@pytest.mark.parametrize(
    ("case", "path"), CASES, ids=[f"{path}-{case.name}" for case, path in CASES]
)
def test_hostile_mail_is_answered_flagged_or_refused_never_lost(
    case, path, sundae, data_dir, scoop_manifest
):
    if path == "receive":
        code, said = through_receive(case.raw)
    else:
        code, said = through_smtp(case.raw, case, data_dir)
    assert code != 451, said
    stored = list(Message.select())
    if case.outcome == "refused":
        assert code == case.code if path == "smtp" else code == 1, said
        assert "limit" in said
        assert stored == []
    else:
        assert code is None, said
        (message,) = stored
        assert message.status == ("accepted" if case.outcome == "answered" else "ignored")
        assert Run.select().count() == (1 if case.outcome == "answered" else 0)
        if case.flag is not None:
            assert any(case.flag in flag for flag in message.flags), message.flags
        # Whatever the From header said, the operator's toolkit stays shut.
        finance = resolve(sundae, sender=message.sender, manifest=scoop_manifest).grants[0]
        assert not finance.admitted
    assert_no_orphan_files(data_dir)


def assert_no_orphan_files(data_dir: Path) -> None:
    on_disk = {p for p in (data_dir / "blobs").glob("*/*")} if data_dir.exists() else set()
    rows = {blob_path(data_dir, blob.sha256) for blob in Blob.select()}
    assert on_disk == rows
