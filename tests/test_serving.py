"""Serving embedded in a host's own event loop: mail taken by SMTP, the run carried out, its
reply sent, and nothing left running once the host leaves the block (or cancels it)."""

import asyncio
import email
import smtplib
import socket
import threading
from email import policy
from pathlib import Path

import pytest

from protege import Tool
from protege.config import load_config
from protege.installation import open_installation
from protege.mail import record_inbound
from protege.models import Agent, Message, Run, Toolkit
from protege.queue import queue_reply
from protege.serving import ServeError, serve
from protege.testing import say, tool_call
from tests.harness.conftest import agent_granted, manifest_of
from tests.looping import TURNS, ends, protege_threads, turns, until

EML = (
    b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\nSubject: Melted\r\n"
    b"Message-ID: <j1@acme.com>\r\n\r\nSCP-1042 arrived melted.\r\n"
)


@pytest.fixture
def sundae(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


def send(address, raw=EML):
    with smtplib.SMTP(*address, timeout=30) as client:
        client.sendmail("jane@acme.com", ["sundae@thescoop.example"], raw)


def listening(address):
    try:
        socket.create_connection(address, timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def outbox(installation):
    folder = Path(installation.config.data_dir) / "outbox"
    return [
        email.message_from_bytes(path.read_bytes(), policy=policy.default)
        for path in sorted(folder.glob("*.eml"))
    ]


def test_serve_on_the_hosts_loop_takes_mail_runs_it_sends_the_reply_and_stops(
    protege_app, sundae, scripted_model
):
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), say("Sent."))
    lines, finished = [], []

    async def host():
        done = asyncio.Event()

        def ended(run):
            finished.append(run)
            done.set()

        async with serve(
            protege_app,
            host="127.0.0.1",
            port=0,
            concurrency=2,
            on_line=lines.append,
            on_finished=ended,
        ) as server:
            address = server.smtp_address
            assert address[1] != 0
            await asyncio.to_thread(send, address)  # smtplib blocks: not on the loop it talks to
            await asyncio.wait_for(done.wait(), 60)
            await until(lambda: outbox(protege_app))  # the delivery loop sends it
        return address

    address = asyncio.run(host())
    assert [(run.id, run.status) for run in finished] == [(1, "done")]
    assert lines[:2] == ["mail 1 for Sundae: accepted, run 1 queued", "run 1 (Sundae): done"]
    (outbound,) = Message.select().where(Message.direction == "outbound")
    assert (outbound.subject, outbound.status) == ("Re: Melted", "sent")
    (reply,) = outbox(protege_app)
    assert (reply["To"], reply["Subject"]) == ("jane@acme.com", "Re: Melted")
    assert "On it." in reply.get_content()
    assert protege_threads() == []
    assert not listening(address)


@pytest.mark.parametrize("after", range(TURNS))
def test_cancelling_the_task_serving_stops_everything(protege_app, sundae, after):
    started = []

    async def host():
        async with serve(protege_app, host="127.0.0.1", port=0) as server:
            started.append(server)
            await asyncio.Event().wait()  # serves until cancelled

    async def main():
        serving = asyncio.create_task(host())
        await until(lambda: started and started[0].workers.waiting)
        server = started[0]
        await until(lambda: server.workers.delivery.waiting)
        server.wake()
        await turns(after)
        serving.cancel()
        stopped = await ends(serving)
        if not stopped:
            await server.stop(grace=0)
        return stopped, serving.cancelled(), server

    stopped, cancelled, server = asyncio.run(main())
    assert (stopped, cancelled) == (True, True)
    assert not server.running
    assert protege_threads() == []
    assert not listening(server.smtp_address)


HOLDING, RELEASE = threading.Event(), threading.Event()


class HoldTool(Tool):
    """Holds its run until the test lets it go."""

    description = "Holds."
    timeout = 60

    def use(self, context):
        HOLDING.set()
        RELEASE.wait(30)
        return self.success()


def test_a_run_in_flight_when_the_host_cancels_goes_back_to_the_queue(
    tmp_path, protege_db, scripted_model
):
    HOLDING.clear()
    RELEASE.clear()
    app = open_installation(load_config(tmp_path), manifest=manifest_of([HoldTool]), connect=False)
    agent = agent_granted([HoldTool])
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="hold on"))
    scripted_model.script(tool_call("hold"), say("held"))

    async def host():
        async with serve(app, gateway=False, scheduler=False, grace=3600):
            await asyncio.Event().wait()

    async def main():
        serving = asyncio.create_task(host())
        assert await asyncio.to_thread(HOLDING.wait, 30)  # the run is inside its tool
        serving.cancel()  # no grace on a cancel, not the hour asked for
        RELEASE.set()
        return await ends(serving, 60)

    try:
        assert asyncio.run(main())
    finally:
        RELEASE.set()
    assert Run.get_by_id(run.id).status == "queued"  # it resumes with the next serve
    assert protege_threads() == []


def test_a_port_taken_is_a_serve_error_and_nothing_is_left_running(protege_app):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        async def host():
            async with serve(protege_app, host="127.0.0.1", port=port):
                raise AssertionError("it served on a port taken")

        with pytest.raises(ServeError, match=f"cannot listen for mail on 127.0.0.1:{port}: "):
            asyncio.run(host())
    assert protege_threads() == []


def test_leaving_the_block_ends_the_smtp_sessions_still_open(protege_app):
    async def host():
        async with serve(protege_app, host="127.0.0.1", port=0, scheduler=False) as server:
            reader, writer = await asyncio.open_connection(*server.smtp_address)
            greeting = await reader.readline()
            writer.write(b"EHLO client.example\r\n")
            await writer.drain()
            while not (await reader.readline()).startswith(b"250 "):
                pass  # the EHLO answer's last line: the session is open and idle
        try:
            ended = await asyncio.wait_for(reader.read(), 30)  # the server closed the session
        except ConnectionResetError:  # closed with data unread: as closed
            ended = b""
        writer.close()
        return greeting, ended, server.smtp_address

    greeting, ended, address = asyncio.run(host())
    assert greeting.startswith(b"220 ")
    assert ended == b""
    assert not listening(address)
    assert protege_threads() == []


def test_a_callback_that_raises_is_logged_and_serving_goes_on(
    protege_app, sundae, scripted_model, caplog
):
    scripted_model.script(say("Noted."))
    finished = []

    def broken(line):
        raise RuntimeError("the host's log is full")

    async def host():
        done = asyncio.Event()

        def ended(run):
            finished.append(run.status)
            done.set()

        async with serve(
            protege_app, host="127.0.0.1", port=0, on_line=broken, on_finished=ended
        ) as server:
            await asyncio.to_thread(send, server.smtp_address)
            await asyncio.wait_for(done.wait(), 60)

    asyncio.run(host())
    assert finished == ["done"]
    assert "a serve callback failed" in caplog.text


def test_an_on_started_that_raises_is_logged_and_serving_goes_on(
    protege_app, sundae, scripted_model, caplog
):
    scripted_model.script(say("Noted."))
    finished = []

    def broken(server):
        raise RuntimeError("the host's dashboard is down")

    async def host():
        done = asyncio.Event()

        def ended(run):
            finished.append(run.status)
            done.set()

        async with serve(
            protege_app, host="127.0.0.1", port=0, on_started=broken, on_finished=ended
        ) as server:
            running = server.running
            await asyncio.to_thread(send, server.smtp_address)
            await asyncio.wait_for(done.wait(), 60)
        return running

    assert asyncio.run(host())
    assert finished == ["done"]
    assert "a serve callback failed" in caplog.text
    assert "the host's dashboard is down" in caplog.text
    assert protege_threads() == []
