"""`protege receive` and `protege serve`, as an operator runs them."""

import os
import signal
import smtplib
import subprocess
import sys

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Message, Run, Toolkit
from protege.testing import say, tool_call

from .serving import read_line, start


@pytest.fixture
def env(protege_db, scripted_model, tmp_path):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


EML = (
    b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\nSubject: Melted\r\n"
    b"Message-ID: <j1@acme.com>\r\n\r\nSCP-1042 arrived melted.\r\n"
)


def test_receive_stores_queues_and_runs(run_protege, env, scripted_model, tmp_path):
    eml = tmp_path / "melted.eml"
    eml.write_bytes(EML)
    scripted_model.script(tool_call("send_email", mode="reply", body="So sorry!"), say("Sent."))
    result = run_protege("receive", str(eml), "--run", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Sundae: accepted (run 1 queued): accepted",
        "run 1: done",
    ]
    (reply,) = (tmp_path / "data" / "outbox").glob("*.eml")
    assert b"Subject: Re: Melted" in reply.read_bytes()
    assert b"In-Reply-To: <j1@acme.com>" in reply.read_bytes()


def test_receive_from_standard_input(run_protege, env):
    result = subprocess.run(
        [sys.executable, "-m", "protege", "receive"],
        input=EML,
        capture_output=True,
        env={**os.environ, **env},
        cwd=run_protege.project,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("Sundae: accepted (run 1 queued)")
    assert Run.get_by_id(1).status == "queued"


def test_receive_for_no_agent_is_a_one_line_error(run_protege, env, tmp_path):
    eml = tmp_path / "stray.eml"
    eml.write_bytes(EML.replace(b"sundae@", b"nobody@"))
    result = run_protege("receive", str(eml), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: no agent has any of the recipient addresses"
    assert Message.select().count() == 0


def test_serve_takes_mail_by_smtp_and_runs_it(run_protege, env, scripted_model):
    port = free_port()
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), say("Sent."))
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "1")
    try:
        assert read_line(process) == (
            f"protege: listening for mail on 127.0.0.1:{port}, 1 run(s) at once in each of "
            "1 process(es), the scheduler; Ctrl-C stops"
        )
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            client.sendmail("jane@acme.com", ["sundae@thescoop.example"], EML)
        assert read_line(process) == "mail 1 for Sundae: accepted, run 1 queued"
        assert read_line(process) == "run 1 (Sundae): done"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert b"protege: stopping" in out
    (outbound,) = Message.select().where(Message.direction == "outbound")
    assert (outbound.subject, outbound.status) == ("Re: Melted", "sent")
    assert b"protege: stopped" in out


def test_serve_prints_a_line_for_each_mail_it_refuses_with_nothing_stored(run_protege, env):
    (run_protege.project / "protege.toml").write_text("[mail]\nmax_message_bytes = 1024\n")
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--no-scheduler")
    try:
        assert read_line(process).startswith("protege: listening for mail")
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            with pytest.raises(smtplib.SMTPRecipientsRefused):
                client.sendmail("jane@acme.com", ["nobody@thescoop.example"], EML)
            assert read_line(process) == (
                "mail from jane@acme.com for nobody@thescoop.example: refused "
                "(550 5.1.1 <nobody@thescoop.example>: no agent has this address)"
            )
            over = EML + b"x" * 2000 + b"\r\n"  # over [mail] max_message_bytes
            with pytest.raises(smtplib.SMTPDataError) as refused:
                client.sendmail("jane@acme.com", ["sundae@thescoop.example"], over)
            assert refused.value.smtp_code == 552
            line = read_line(process)
            assert line.startswith(
                "mail from jane@acme.com for sundae@thescoop.example: refused (552 5.3.4 "
            ), line
            # Far over: refused by its declared SIZE, before any recipient.
            with pytest.raises(smtplib.SMTPSenderRefused) as refused:
                client.sendmail("jane@acme.com", ["sundae@thescoop.example"], EML * 2000)
            assert refused.value.smtp_code == 552
            assert read_line(process) == (
                "mail from jane@acme.com: refused "
                "(552 Error: message size exceeds fixed maximum message size)"
            )
            # Far over without a SIZE: refused once its data is in.
            client.ehlo()
            del client.esmtp_features["size"]
            with pytest.raises(smtplib.SMTPDataError) as refused:
                client.sendmail("jane@acme.com", ["sundae@thescoop.example"], EML * 2000)
            assert refused.value.smtp_code == 552
            assert read_line(process) == (
                "mail from jane@acme.com for sundae@thescoop.example: refused "
                "(552 Error: Too much mail data)"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert Message.select().count() == 0


def test_serve_on_a_busy_port_is_a_clear_error(run_protege, env):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_protege("serve", "--port", str(port), env=env)
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: cannot listen for mail on 127.0.0.1:{port}: Address already in use\n"
    )


def test_receive_to_names_the_recipient_over_the_headers(run_protege, env, tmp_path):
    Agent.create(name="Scout", address="scout@thescoop.example")
    eml = tmp_path / "forwarded.eml"
    eml.write_bytes(EML)  # addressed to Sundae
    result = run_protege("receive", str(eml), "--to", "Scout+fwd@thescoop.example", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Scout: accepted (run 1 queued)")
    assert Message.select().count() == 1


def test_serve_warns_about_a_host_module_that_fails_to_import_and_goes_on(run_protege, env):
    (run_protege.project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (run_protege.project / "shop_tools.py").write_text("import no_such_dependency\n")
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "1")
    try:
        assert read_line(process).startswith("protege: listening for mail on ")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert err.decode().splitlines() == [
        "warning: cannot import tool module shop_tools: ModuleNotFoundError: "
        "No module named 'no_such_dependency'; its tools are not offered"
    ]


def test_serve_with_two_processes_takes_mail_here_and_runs_it_in_a_worker_process(
    run_protege, env, scripted_model
):
    import os

    port = free_port()
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), say("Sent."))
    process = start(
        run_protege,
        env,
        *("serve", "--port", str(port), "--processes", "2", "--concurrency", "1"),
        "--no-scheduler",
    )
    seen = []
    try:
        assert read_line(process).endswith("in each of 2 process(es), no scheduler; Ctrl-C stops")
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            client.sendmail("jane@acme.com", ["sundae@thescoop.example"], EML)
        while "run 1 (Sundae): done" not in seen and len(seen) < 10:
            seen.append(read_line(process))  # the processes print in whatever order
        helpers = [
            int(line.split()[3]) for line in seen if line.startswith("protege: worker process")
        ]
        # Runs yield the CPU to the process taking mail ([serve] worker_niceness, 10).
        priorities = [os.getpriority(os.PRIO_PROCESS, pid) for pid in (process.pid, *helpers)]
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "mail 1 for Sundae: accepted, run 1 queued" in seen
    assert len(helpers) == 2
    assert priorities[1:] == [min(19, priorities[0] + 10)] * 2
    assert out.decode().splitlines()[-1] == "protege: stopped"
    for helper in helpers:
        with pytest.raises(ProcessLookupError):
            os.kill(helper, 0)  # stopped and reaped with their parent
    (outbound,) = Message.select().where(Message.direction == "outbound")
    assert outbound.status == "sent"


def test_worker_processes_stop_when_their_serve_is_killed(run_protege, env):
    port = free_port()
    process = start(
        run_protege,
        env,
        *("serve", "--port", str(port), "--processes", "2", "--no-scheduler"),
    )
    seen = [read_line(process)]
    while sum("worker process" in line for line in seen) < 2:
        seen.append(read_line(process))
    process.kill()  # kill -9: no chance to stop its workers itself
    process.wait(30)
    rest = []
    while line := read_line(process, timeout=60):  # "" once every worker closed the pipe
        rest.append(line)
    gone = "protege: the serve that started this worker process is gone; stopping"
    assert rest.count(gone) == 2
    assert rest.count("protege: stopped") == 2


def test_receive_checks_the_dkim_signature_of_the_file(run_protege, env, tmp_path):
    from protege.testing import DkimKey

    key = DkimKey.generate("acme.com", "mail")
    (run_protege.project / "protege.toml").write_text(
        "[mail.authentication]\noffline = true\n\n[mail.authentication.dns]\n"
        f'"{key.name}" = "{key.record}"\n'
    )
    signed, forged = tmp_path / "signed.eml", tmp_path / "forged.eml"
    signed.write_bytes(key.sign(EML.replace(b"<j1@", b"<j2@")))
    forged.write_bytes(key.sign(EML).replace(b"arrived melted", b"arrived frozen"))
    for path in (signed, forged):
        result = run_protege("receive", str(path), env=env)
        assert result.returncode == 0, result.stderr
    proven, changed = Message.select().order_by(Message.id)
    assert (proven.sender_authenticated, proven.verdict.method) == (True, "dkim")
    assert not changed.sender_authenticated
    spf = [r for r in changed.verdict.results if r.method == "spf"]
    assert [r.result for r in spf] == ["none"]  # a file has no SMTP session: no SPF


def test_receive_takes_a_mail_with_a_non_ascii_byte_in_an_unrelated_header(
    run_protege, env, tmp_path
):
    eml = tmp_path / "odd.eml"
    eml.write_bytes(EML.replace(b"Subject: Melted\r\n", "X-Protege-Loop: ²\r\n".encode()))
    result = run_protege("receive", str(eml), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Sundae: ")


def test_serve_with_a_transport_nothing_registers_refuses_to_start_in_one_line(run_protege, env):
    # Third-party plugins left out: the example protege-staging would add its transport.
    only_protege = {**env, "PROTEGE_MAIL_TRANSPORT": "pigeon", "PROTEGE_LOAD_PLUGINS": ""}
    result = run_protege("serve", env=only_protege)
    assert result.returncode == 1
    assert result.stderr == (
        "Error: [mail] transport = 'pigeon': no mail transport has that name; "
        "the known ones: outbox, smtp, submission\n"
    )
