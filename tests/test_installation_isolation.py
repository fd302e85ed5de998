"""Two installations in one process each keep to their own database and data directory:
opening the second leaves the first as it was, each one's mail, runs and replies stay in
its own records and folders, and code that says neither is refused rather than guessed."""

import contextvars
import json
import threading
from email.message import EmailMessage

import peewee
import pytest

from protege import Tool, db, dbroute
from protege.config import DNS_OFFLINE_VARIABLE, load_config
from protege.dbroute import NoActiveApplication
from protege.installation import InstallationClosed, open_installation
from protege.models import Agent, Message, Run, Toolkit
from protege.registry import Manifest, Origin, ToolEntry
from protege.testing import say, tool_call


def mail(to: str, subject: str, attachment: bytes) -> bytes:
    message = EmailMessage()
    message["From"] = "Mara <mara@customers.example>"
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = f"<{subject.replace(' ', '-')}@customers.example>"
    message.set_content(f"About {subject}.")
    message.add_attachment(attachment, maintype="text", subtype="plain", filename="note.txt")
    return message.as_bytes()


@pytest.fixture
def environment(monkeypatch, scripted_model):
    """What both installations read from the environment: the scripted model, no DNS."""
    monkeypatch.setenv(DNS_OFFLINE_VARIABLE, "1")
    for name in ("PROTEGE_DATABASE_URL", "PROTEGE_DATA_DIR", "PROTEGE_MAIL_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)
    return scripted_model


@pytest.fixture
def nothing_bound_for_the_process():
    """No database bound with ``protege.db.connect`` (an earlier test's), for this test."""
    before = db.database.process_database
    db.database.initialize(None)
    yield
    db.database.initialize(before)


def opened(root, database_url=None, manifest=None):
    """An installation of its own at ``root`` (its database opened for it), synced, with
    the tools of ``manifest`` when given."""
    root.mkdir()
    config = load_config(root)
    if database_url is not None:
        import attrs

        config = attrs.evolve(config, database_url=database_url)
    app = open_installation(config, manifest=manifest)
    app.sync()
    return app


def give_agent(app, name, address):
    with app.activated():
        agent = Agent.create(name=name, address=address)
        agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))


def answer_one(app, model, to, subject, attachment):
    model.script(tool_call("send_email", mode="reply", body=f"Re {subject}"), say("sent"))
    (delivered,) = app.receive(mail(to, subject, attachment))
    assert delivered.run is not None
    (run,) = app.run_queued()
    assert run.status == "done", run.error


def records(app):
    with app.activated():
        return {
            "agents": [a.name for a in Agent.select().order_by(Agent.id)],
            "subjects": sorted(m.subject for m in Message.select()),
            "runs": Run.select().count(),
        }


def test_two_sqlite_installations_keep_to_their_own_files(environment, tmp_path):
    first = opened(tmp_path / "first")
    second = opened(tmp_path / "second")
    try:
        assert not first.database.is_closed()  # opening another left it as it was
        give_agent(first, "Ada", "ada@first.example")
        give_agent(second, "Bea", "bea@second.example")
        answer_one(first, environment, "ada@first.example", "first order", b"for Ada only")
        answer_one(second, environment, "bea@second.example", "second order", b"for Bea only")

        assert records(first) == {
            "agents": ["Ada"],
            "subjects": ["Re: first order", "first order"],
            "runs": 1,
        }
        assert records(second) == {
            "agents": ["Bea"],
            "subjects": ["Re: second order", "second order"],
            "runs": 1,
        }
        pairs = ((first, b"Ada", b"first"), (second, b"Bea", b"second"))
        for (app, mine, subject), (_, theirs, _) in zip(pairs, reversed(pairs), strict=True):
            (reply,) = (app.data_dir / "outbox").glob("*.eml")
            assert b"Re " + subject + b" order" in reply.read_bytes()
            stored = b"".join(p.read_bytes() for p in app.data_dir.rglob("*") if p.is_file())
            assert b"for " + mine + b" only" in stored
            assert b"for " + theirs + b" only" not in stored
    finally:
        first.close()
        second.close()


@pytest.mark.usefixtures("nothing_bound_for_the_process")
def test_code_that_names_no_installation_is_refused_while_two_are_open(environment, tmp_path):
    first = opened(tmp_path / "first")
    second = opened(tmp_path / "second")
    give_agent(first, "Ada", "ada@first.example")
    with pytest.raises(NoActiveApplication, match="2 protege applications are open"):
        Agent.select().count()
    with pytest.raises(NoActiveApplication):
        Agent.create(name="Stray", address="stray@nowhere.example")
    second.close()
    # With one left open, its records are the ones meant.
    assert [a.name for a in Agent.select()] == ["Ada"]
    first.close()
    assert db.database.obj is None  # none open, nothing bound: peewee's own refusal


def test_a_closed_installation_is_refused_and_its_database_closed(environment, tmp_path):
    with opened(tmp_path / "only") as app:
        database = app.database
    assert app.closed
    assert database.is_closed()
    with pytest.raises(InstallationClosed):
        app.sync()
    app.close()  # a second close does nothing


def test_threads_protege_starts_work_on_their_installation_s_database(environment, tmp_path):
    from protege.worker import Workers

    first = opened(tmp_path / "first")
    second = opened(tmp_path / "second")
    try:
        give_agent(second, "Bea", "bea@second.example")
        environment.script(tool_call("send_email", mode="reply", body="Re threads"), say("ok"))
        second.receive(mail("bea@second.example", "threads", b"x"))
        finished = []
        done = __import__("threading").Event()

        def on_finished(run):
            finished.append(run.status)
            done.set()

        workers = Workers(second, max_concurrent_runs=2, on_finished=on_finished)
        workers.start()
        try:
            assert done.wait(60)
        finally:
            workers.stop()
        assert finished == ["done"]
        assert records(first)["runs"] == 0
        assert records(second)["runs"] == 1
    finally:
        first.close()
        second.close()


class ThreadedQueueTool(Tool):
    description = "Queues mail from a plain thread it starts, and waits for that thread."

    def use(self, context):
        outcomes = []

        def queue():
            try:
                outcome = context.queue_mail({**MORE, "to": [context.message.sender]})
                # Whichever database it used, this thread holds no connection to it now.
                held = sum(not database.is_closed() for database in dbroute.owned())
                outcomes.append({**outcome, "connections_held": held})
            except Exception as error:
                outcomes.append(error)

        helper = threading.Thread(target=queue)  # it starts with no context of its own
        helper.start()
        helper.join()
        (outcome,) = outcomes
        if isinstance(outcome, Exception):
            return self.failure(f"{type(outcome).__name__}: {outcome}")
        return self.success(**outcome)


class ThreadedReadTool(Tool):
    description = "Reads the agents from a thread it starts in a copy of the call's context."

    def use(self, context):
        seen = []
        work = contextvars.copy_context().run  # as docs/tools.md says a tool's thread should
        helper = threading.Thread(target=work, args=(lambda: seen.extend(Agent.select()),))
        helper.start()
        helper.join()
        return self.success(agents=[agent.name for agent in seen])


MORE = {"subject": "More about your order", "body": "Queued from a thread."}


@pytest.mark.usefixtures("nothing_bound_for_the_process")
def test_a_tools_own_thread_queues_mail_and_reads_in_its_installation_while_two_are_open(
    environment, tmp_path
):
    tools = Manifest(
        tools=tuple(
            ToolEntry(tool, Origin.HOST, "tests") for tool in (ThreadedQueueTool, ThreadedReadTool)
        )
    )
    first = opened(tmp_path / "first", manifest=tools)
    second = opened(tmp_path / "second", manifest=tools)
    try:
        for app, name in ((first, "Ada"), (second, "Bea")):
            with app.activated():
                agent = Agent.create(name=name, address=f"{name.lower()}@x.example")
                agent.grant(
                    Toolkit.create(name="Mail", member_tool_ids=["threaded_queue", "threaded_read"])
                )
        environment.script(tool_call("threaded_queue"), tool_call("threaded_read"), say("queued"))
        second.receive(mail("bea@x.example", "thread order", b"x"))
        (run,) = second.run_queued()
        assert run.status == "done", run.error
        with second.activated():
            result, read = [e.payload for e in run.timeline() if e.kind == "tool_result"]
            assert result["ok"], result["content"]
            assert '"connections_held": 0' in result["content"]
            assert json.loads(read["content"]) == {"ok": True, "agents": ["Bea"]}
            (queued,) = Message.select().where(Message.direction == "outbound")
            assert (queued.subject, queued.run_id) == (MORE["subject"], run.id)
        assert records(first)["subjects"] == []
    finally:
        first.close()
        second.close()


@pytest.mark.usefixtures("protege_db")
def test_an_installation_beside_one_on_another_database(environment, tmp_path, protege_db):
    """The test database (PostgreSQL under ``make test-postgres``) beside a SQLite file."""
    server = opened(tmp_path / "server", database_url=protege_db.url)
    local = opened(tmp_path / "local")
    try:
        give_agent(server, "Ada", "ada@server.example")
        give_agent(local, "Bea", "bea@local.example")
        answer_one(server, environment, "ada@server.example", "server order", b"on the server")
        answer_one(local, environment, "bea@local.example", "local order", b"on the laptop")
        assert records(server)["agents"] == ["Ada"]
        assert records(local)["agents"] == ["Bea"]
        assert records(server)["subjects"] == ["Re: server order", "server order"]
        assert records(local)["subjects"] == ["Re: local order", "local order"]
        # Outside both, the database the process bound (the fixture's, the server's URL)
        # is the one used: what was bound on purpose is never taken for another.
        assert [a.name for a in Agent.select()] == ["Ada"]
        assert isinstance(local.database, peewee.SqliteDatabase)
    finally:
        server.close()
        local.close()


def test_a_database_bound_for_the_process_is_not_overridden_by_an_open_installation(
    environment, tmp_path, protege_db
):
    """A host app's installation is open; a script or test bound its own database: that
    one gets the records, and an installation opened without a database of its own uses
    it, never the host's."""
    host = opened(tmp_path / "host", database_url=f"sqlite:///{tmp_path / 'host.db'}")
    try:
        Agent.create(name="Tess", address="tess@test.example")  # the fixture's database
        borrowed = open_installation(load_config(tmp_path / "host"), connect=False)
        assert borrowed.database is db.database.process_database
        assert borrowed.database is not host.database
        with borrowed.activated():
            assert [a.name for a in Agent.select()] == ["Tess"]
        assert records(host)["agents"] == []
    finally:
        host.close()


def test_closing_closes_the_connections_its_threads_opened(environment, tmp_path):
    import threading

    app = opened(tmp_path / "pooled")
    connections = []

    def query():
        with app.activated():
            Agent.select().count()
            connections.append(app.database.connection())

    threads = [threading.Thread(target=query) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(c) for c in connections}) == 3
    app.close()
    for connection in connections:  # closed from here, though other threads opened them
        with pytest.raises(Exception, match="closed"):
            connection.execute("select 1")


@pytest.mark.usefixtures("nothing_bound_for_the_process")
def test_functions_handed_an_installation_work_on_its_database(environment, tmp_path):
    from protege import admin

    first = opened(tmp_path / "first")
    second = opened(tmp_path / "second")
    try:
        give_agent(second, "Bea", "bea@second.example")
        environment.script(tool_call("send_email", mode="reply", body="Re handed"), say("ok"))
        (delivered,) = admin.ingest(
            mail("bea@second.example", "handed", b"x"), config=second.config, app=second
        )
        (run,) = admin.drain(second)
        assert (run.id, run.status) == (delivered.run.id, "done")
        assert records(second)["runs"] == 1
        assert records(first)["runs"] == 0
    finally:
        first.close()
        second.close()


@pytest.mark.usefixtures("nothing_bound_for_the_process")
def test_an_installation_dropped_unclosed_gives_its_database_back(environment, tmp_path):
    app = opened(tmp_path / "dropped")
    database = app.database
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del app  # its last reference
    assert database.is_closed()
    with opened(tmp_path / "again") as again:  # the only one open: used outside its work
        assert db.database.obj is again.database


def test_connections_of_threads_that_ended_are_not_kept(environment, tmp_path):
    import threading

    with opened(tmp_path / "churn") as app:
        for _ in range(6):  # pools come and go; each thread opens a connection and ends
            thread = threading.Thread(target=lambda: records(app))
            thread.start()
            thread.join()
        # Each new connection closed those of the threads ended before: the opener's
        # and the last thread's are left.
        assert len(app.database._tracked) <= 2
