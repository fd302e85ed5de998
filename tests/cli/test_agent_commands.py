"""`protege agents edit`, and deleting an agent that has mail: refused, archived or purged."""

import datetime
import json

import pytest
from click.testing import CliRunner

from protege.cli import cli
from protege.config import load_config
from protege.gateway.inbound import MailRejected, ingest
from protege.models import Agent, Approval, AuditEntry, Blob, Event, Message, Run

SUNDAE = "sundae@thescoop.example"


@pytest.fixture
def protege(protege_db, tmp_path, monkeypatch):
    """Runs `protege ...` in-process against the test database."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args, ok=True, stdin=None):
        result = runner.invoke(
            cli, list(args), input=stdin, env={"PROTEGE_DATABASE_URL": protege_db.url}
        )
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return run


@pytest.fixture
def sundae(protege):
    protege("agents", "create", "Sundae", "--address", SUNDAE, "--instructions", "Be kind.")
    return Agent.named("Sundae")


def _mail(number: int = 1, to: str = SUNDAE) -> bytes:
    return (
        f"From: Jane <jane@acme.com>\r\nTo: {to}\r\nSubject: Melted\r\n"
        f"Message-ID: <jane.{number}@acme.com>\r\n\r\nSCP-1042 arrived melted.\r\n"
    ).encode()


@pytest.fixture
def config(tmp_path, protege_db):
    return load_config(tmp_path)


@pytest.fixture
def answered(sundae, config):
    """Sundae with two messages in, their runs, and an approval one of them waited for."""
    first, _ = (ingest(_mail(n), config=config, recipients=[SUNDAE])[0] for n in (1, 2))
    Event.append(first.run.id, [(1, "error", '{"message": "stopped"}')])
    Approval.create(
        run=first.run,
        call_id="call-1",
        tool="process_refund",
        arguments="{}",
        expires_at=datetime.datetime(2030, 1, 1),
    )
    return sundae


def _one_line_error(result) -> str:
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    return line


def test_edit_changes_name_address_and_instructions_and_is_audited(protege, sundae, tmp_path):
    (tmp_path / "instructions.txt").write_text("Answer about ice cream.\n")
    said = protege(
        "agents",
        "edit",
        "Sundae",
        "--name",
        "Sundae Bot",
        "--address",
        "Bot@TheScoop.example",
        "--instructions-file",
        "instructions.txt",
    ).stdout
    assert said == ("edited agent Sundae Bot <bot@thescoop.example>: name, address, instructions\n")
    data = json.loads(protege("agents", "show", "Sundae Bot", "--json").stdout)
    assert (data["address"], data["instructions"]) == (
        "bot@thescoop.example",
        "Answer about ice cream.\n",
    )
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).first()
    assert entry.action == "agent edited"
    assert entry.actor.startswith("cli:")
    assert (entry.before["name"], entry.after["name"]) == ("Sundae", "Sundae Bot")
    assert entry.after["address"] == "bot@thescoop.example"


def test_edit_instructions_alone(protege, sundae):
    said = protege("agents", "edit", "Sundae", "--instructions", "Be brief.").stdout
    assert said == f"edited agent Sundae <{SUNDAE}>: instructions\n"
    assert Agent.named("Sundae").instructions == "Be brief."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--address", "scout@thescoop.example"), "an agent with address"),
        (("--name", "Scout"), "an agent with name 'Scout' already exists"),
        (("--address", "not an address"), "'not an address' is not an email address"),
        ((), "nothing to change: give --name, --address, --instructions or --instructions-file"),
        (("--instructions", "a", "--instructions-file", "f"), "not both"),
        (("--instructions-file", "missing.txt"), "cannot read missing.txt"),
    ],
)
def test_edit_mistakes_are_one_line_errors_and_change_nothing(protege, sundae, args, message):
    protege("agents", "create", "Scout", "--address", "scout@thescoop.example")
    entries = AuditEntry.select().count()
    line = _one_line_error(protege("agents", "edit", "Sundae", *args, ok=False))
    assert line.startswith("Error: ")
    assert message in line
    kept = Agent.named("Sundae")
    assert (kept.name, kept.address, kept.instructions) == ("Sundae", SUNDAE, "Be kind.")
    assert AuditEntry.select().count() == entries


def test_an_agent_with_mail_is_not_deleted_without_archive_or_purge(protege, answered):
    line = _one_line_error(protege("agents", "delete", "Sundae", "--yes", ok=False))
    assert line == (
        "Error: Sundae has 2 messages, 2 runs and 1 approval: give --archive to keep them "
        "(the agent hidden, restorable) or --purge to delete them with it"
    )
    assert (Message.select().count(), Run.select().count(), Approval.select().count()) == (2, 2, 1)
    assert Agent.get_or_none(Agent.name == "Sundae") is not None


def test_an_archived_agent_is_hidden_refuses_mail_and_is_restored(protege, answered, config):
    said = protege("agents", "delete", "Sundae", "--archive").stdout
    assert said.startswith("archived agent Sundae: its mail and runs are kept")
    assert json.loads(protege("agents", "list", "--json").stdout) == []
    archived = json.loads(protege("agents", "list", "--archived", "--json").stdout)
    assert [row["name"] for row in archived] == ["Sundae"]
    assert json.loads(protege("agents", "show", "Sundae", "--json").stdout)["archived"] is True
    assert (Message.select().count(), Run.select().count(), Approval.select().count()) == (2, 2, 1)
    with pytest.raises(MailRejected, match="no agent") as refused:
        ingest(_mail(3), config=config, recipients=[SUNDAE])
    assert refused.value.code == 550
    assert Message.select().count() == 2

    assert protege("agents", "restore", "Sundae").stdout == f"restored agent Sundae <{SUNDAE}>\n"
    assert [r["name"] for r in json.loads(protege("agents", "list", "--json").stdout)] == ["Sundae"]
    (delivered,) = ingest(_mail(4), config=config, recipients=[SUNDAE])
    assert delivered.status == "accepted"
    actions = [e.action for e in AuditEntry.select().order_by(AuditEntry.id)][-2:]
    assert actions == ["agent archived", "agent restored"]
    archived_entry = AuditEntry.select().where(AuditEntry.action == "agent archived").get()
    assert (archived_entry.before.get("archived"), archived_entry.after["archived"]) == (
        None,
        True,
    )


def test_restoring_an_agent_that_is_not_archived_is_an_error(protege, sundae):
    line = _one_line_error(protege("agents", "restore", "Sundae", ok=False))
    assert line == "Error: Sundae is not archived"


def test_purge_says_what_it_deletes_and_asks_first(protege, answered):
    declined = protege("agents", "delete", "Sundae", "--purge", stdin="n\n", ok=False)
    assert declined.exit_code == 1
    assert declined.stdout.startswith(
        "deleting agent Sundae deletes 2 messages, 2 runs and 1 approval\n"
    )
    assert (Message.select().count(), Run.select().count(), Approval.select().count()) == (2, 2, 1)

    done = protege("agents", "delete", "Sundae", "--purge", stdin="y\n")
    assert done.stdout.endswith("deleted agent Sundae\n")
    assert Agent.select().count() == 0
    assert (Message.select().count(), Run.select().count(), Approval.select().count()) == (0, 0, 0)
    assert Event.select().count() == 0
    assert Blob.select().where(Blob.agent.is_null(False)).count() == 0
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).first()
    assert entry.action == "agent purged with 2 messages, 2 runs and 1 approval"
    assert entry.after is None


def test_archive_and_purge_together_is_an_error(protege, answered):
    line = _one_line_error(protege("agents", "delete", "Sundae", "--archive", "--purge", ok=False))
    assert line == "Error: give --archive or --purge, not both"


def test_an_agent_without_mail_is_deleted_as_before(protege, sundae):
    assert protege("agents", "delete", "Sundae", "--yes").stdout == "deleted agent Sundae\n"
    assert AuditEntry.select().order_by(AuditEntry.id.desc()).first().action == "agent deleted"
