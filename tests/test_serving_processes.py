"""``serve(installation, processes=N)``: the worker processes carry the runs of the
installation served, wherever the host runs from, or serving is refused when they could not
open that installation from its ``protege.toml`` and the environment."""

import asyncio

import attrs
import pytest

from protege.config import load_config
from protege.installation import open_installation
from protege.models import Agent, Run
from protege.serving import ServeError, serve
from protege.testing import say
from tests.looping import protege_threads, until

RAW = (
    b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\nSubject: Melted\r\n"
    b"Message-ID: <j1@acme.com>\r\n\r\nSCP-1042 arrived melted.\r\n"
)


@pytest.fixture
def elsewhere(tmp_path, monkeypatch, scripted_model):
    """The host runs from a folder of its own, with no protege variable naming a database
    or data directory: only the installation's protege.toml says where they are."""
    for name in ("PROTEGE_CONFIG", "PROTEGE_DATABASE_URL", "PROTEGE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROTEGE_DNS_OFFLINE", "1")
    folder = tmp_path / "host"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def app(tmp_path, elsewhere):
    root = tmp_path / "app"
    root.mkdir()
    (root / "protege.toml").write_text('data_dir = "state"\n[mail]\ntransport = "outbox"\n')
    with open_installation(load_config(root)) as installation:
        installation.sync()
        with installation.activated():
            Agent.create(name="Sundae", address="sundae@thescoop.example")
        yield installation


def status(app, run_id):
    with app.activated():
        return Run.get_by_id(run_id).status


def test_worker_processes_carry_the_runs_of_the_installation_served(app, elsewhere, scripted_model):
    scripted_model.script(say("Noted."))
    (delivered,) = app.receive(RAW)
    lines = []

    async def host():
        async with serve(
            app, processes=2, gateway=False, scheduler=False, grace=0, on_line=lines.append
        ):
            await until(lambda: status(app, delivered.run.id) == "done", 90)

    asyncio.run(host())
    assert sum(line.endswith(" started") for line in lines) == 2  # two worker processes did
    assert list(elsewhere.iterdir()) == []  # nothing of theirs where the host runs from
    assert protege_threads() == []


def test_serving_with_processes_is_refused_when_they_would_open_another_installation(app):
    moved = attrs.evolve(app.config, mail=attrs.evolve(app.config.mail, listen_port=2601))
    changed = attrs.evolve(app, config=moved)  # set in code: no worker process can read it

    async def host():
        async with serve(changed, processes=2, host="127.0.0.1", port=0):
            raise AssertionError("it served with processes that read another configuration")

    with pytest.raises(ServeError) as refused:
        asyncio.run(host())
    assert str(refused.value) == (
        "cannot serve this installation with worker processes, which open it from "
        f"{app.config.path} and the environment: it would read another [mail] listen_port "
        "(serve it with processes=1, or describe it in protege.toml)"
    )
    assert protege_threads() == []
