"""protege behind real mail servers: Postfix with OpenDKIM signing the Scoop's mail on its way
to protege, and Postfix with OpenDKIM verifying as the relay protege trusts.

The programs come from Debian's packages, found (or installed, as root) by
``scripts/mail-servers-for-tests``; each test runs private instances from its own folder, on
loopback ports, and stops them however it ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Message, Toolkit
from protege.testing import DkimKey, say

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mail-servers-for-tests"
PROGRAMS = ("postfix", "postconf", "opendkim", "opendkim-genkey", "opendmarc")
AGENT = "sundae@thescoop.example"
AUTHSERV_ID = "mx.thescoop.test"


@pytest.fixture(scope="session")
def sbin() -> Path:
    """The folder holding postfix, opendkim and opendmarc (the script installs them if need
    be, as root)."""
    given = os.environ.get("PROTEGE_TEST_MAIL_SERVERS", "")
    if given and all((Path(given) / name).exists() for name in PROGRAMS):
        return Path(given)
    found = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=900)
    if found.returncode != 0:
        pytest.fail(
            "these tests need Postfix, OpenDKIM and OpenDMARC: run scripts/mail-servers-for-tests"
            f" as root (or set PROTEGE_TEST_MAIL_SERVERS); it said:\n{found.stderr}",
            pytrace=False,
        )
    return Path(found.stdout.strip())


class Daemons:
    """The processes a test started, each in a process group of its own, stopped at the end
    whatever happened; their output goes to files kept for the failure report."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[tuple[str, subprocess.Popen, Path]] = []
        self.logged: list[tuple[str, Path]] = []

    def start(self, name: str, *argv: str | Path) -> subprocess.Popen:
        log = self.folder / f"{name}.log"
        with log.open("ab") as output:
            process = subprocess.Popen(
                [str(arg) for arg in argv],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append((name, process, log))
        self.logged.append((name, log))
        return process

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}:\n{log.read_text()[-3000:] if log.exists() else ''}"
            for name, log in self.logged
        )

    def stop(self) -> None:
        for _, process, _ in reversed(self.started):
            _stop_group(process)


def _stop_group(process: subprocess.Popen, timeout: float = 15) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout)


@pytest.fixture
def postfix_home() -> Iterator[Path]:
    """A folder for Postfix's queue outside pytest's, which only root may enter: Postfix's
    daemons open some of their files by full path after dropping to the postfix user."""
    folder = Path(tempfile.mkdtemp(prefix="protege-postfix-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def daemons(tmp_path: Path, postfix_home: Path) -> Iterator[Daemons]:
    folder = tmp_path / "daemons"
    folder.mkdir()
    started = Daemons(folder)
    try:
        yield started
    finally:
        started.stop()


def wait_for_port(port: int, process: subprocess.Popen, daemons: Daemons, deadline: float = 30):
    """Return once ``port`` on 127.0.0.1 accepts connections; fail if ``process`` dies first
    or the deadline passes."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode} before listening\n{daemons.logs()}")
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"nothing listened on port {port} within {deadline}s\n{daemons.logs()}")


def start_opendkim(sbin: Path, daemons: Daemons, folder: Path, **settings: str) -> int:
    """Run OpenDKIM in the foreground as a milter on a loopback port; returns the port."""
    port = free_port()
    folder.mkdir()
    config = folder / "opendkim.conf"
    lines = {
        "Socket": f"inet:{port}@127.0.0.1",
        "Syslog": "no",
        "RequireSafeKeys": "no",
        "Canonicalization": "relaxed/simple",
        "PidFile": str(folder / "opendkim.pid"),
        **settings,
    }
    config.write_text("".join(f"{key} {value}\n" for key, value in lines.items()))
    process = daemons.start("opendkim", sbin / "opendkim", "-f", "-x", config)
    wait_for_port(port, process, daemons)
    return port


MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 0 bounce
verify unix - - n - 1 verify
flush unix n - n 1000? 0 flush
proxymap unix - - n - - proxymap
smtp unix - - n - - smtp
relay unix - - n - - smtp
showq unix n - n - - showq
error unix - - n - - error
retry unix - - n - - error
discard unix - - n - - discard
local unix - n n - - local
anvil unix - - n - 1 anvil
scache unix - - n - 1 scache
postlog unix-dgram n - n - 1 postlogd
"""


def start_postfix(sbin: Path, daemons: Daemons, folder: Path, protege_port: int, milters: str):
    """Run a private Postfix relaying all mail to protege through ``milters``; returns the
    port it takes mail on."""
    port = free_port()
    config = folder / "etc"
    config.mkdir(parents=True)
    (folder / "queue").mkdir()
    settings = {
        "compatibility_level": "3.6",
        "queue_directory": folder / "queue",
        "data_directory": folder / "data",
        "maillog_file": folder / "maillog",
        "maillog_file_prefixes": folder,
        "mail_owner": "postfix",
        "setgid_group": "postdrop",
        # protege's banner names this host too: Postfix must not take it for itself.
        "myhostname": AUTHSERV_ID,
        "mydomain": "thescoop.test",
        "myorigin": "$myhostname",
        "mydestination": "",
        "relay_domains": "",
        "local_recipient_maps": "",
        "alias_maps": "",
        "alias_database": "",
        "inet_interfaces": "loopback-only",
        "inet_protocols": "ipv4",
        "mynetworks": "127.0.0.0/8",
        "relayhost": f"[127.0.0.1]:{protege_port}",
        "smtpd_milters": milters,
        "milter_default_action": "tempfail",
        "smtputf8_enable": "no",
        "biff": "no",
    }
    (config / "main.cf").write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    (config / "master.cf").write_text(MASTER_CF.format(port=port))
    # `postfix check` makes the queue's folders with their owners and modes.
    checked = subprocess.run(
        [sbin / "postfix", "-c", config, "check"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
    daemon_directory = subprocess.run(
        [sbin / "postconf", "-c", config, "-h", "daemon_directory"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # -d: master stays in the foreground, in the process group the test stops.
    process = daemons.start("postfix", Path(daemon_directory) / "master", "-c", config, "-d")
    daemons.logged.append(("postfix's maillog", folder / "maillog"))
    wait_for_port(port, process, daemons)
    return port


def await_line(process: subprocess.Popen, prefix: str, timeout: float = 60) -> str:
    """The first line serve prints starting with ``prefix`` (skipping the others)."""
    end = time.monotonic() + timeout
    seen = []
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            break
        line = process.stdout.readline().decode()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return line.rstrip("\n")
    pytest.fail(f"serve printed no line starting {prefix!r}; it printed {seen}")


@contextlib.contextmanager
def serving(run_protege, env, settings: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """``protege serve`` on a loopback port, with ``settings`` as its protege.toml."""
    (run_protege.project / "protege.toml").write_text(settings)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "protege", "serve", "--port", str(port), "--concurrency", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        cwd=run_protege.project,
        start_new_session=True,
    )
    try:
        await_line(process, "protege: listening for mail on ")
        yield process, port
    finally:
        _stop_group(process, timeout=30)


def scoop_mail(subject: str, body: str = "The SCP-1042 order is ready.") -> bytes:
    message = EmailMessage()
    message["From"] = "Mara <mara@thescoop.com>"
    message["To"] = AGENT
    message["Subject"] = subject
    message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    message["Message-ID"] = f"<{subject.replace(' ', '.')}@thescoop.com>"
    message.set_content(body)
    return message.as_bytes()


def send(port: int, raw: bytes, source: str = "127.0.0.1") -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30, source_address=(source, 0)) as client:
        client.sendmail("mara@thescoop.com", [AGENT], raw)


def stored(subject: str) -> Message:
    return Message.get(Message.subject == subject)


@pytest.fixture
def env(protege_db, scripted_model, tmp_path):
    agent = Agent.create(name="Sundae", address=AGENT)
    agent.grant(Toolkit.create(name="Desk", member_tool_ids=[])).add_rule("allow", "*@thescoop.com")
    scripted_model.script(*(say("Noted.") for _ in range(4)))
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


def genkey(sbin: Path, folder: Path) -> tuple[Path, str]:
    """A key made by opendkim-genkey: its private key file and its TXT record's text."""
    folder.mkdir()
    subprocess.run(
        [sbin / "opendkim-genkey", "-D", folder, "-d", "thescoop.com", "-s", "sel"],
        check=True,
        timeout=60,
    )
    zone = (folder / "sel.txt").read_text()
    return folder / "sel.private", "".join(re.findall(r'"([^"]*)"', zone))


def test_postfix_signing_with_opendkim_in_front_of_protege(
    sbin, daemons, postfix_home, run_protege, env, tmp_path
):
    private, record = genkey(sbin, tmp_path / "keys")
    settings = (
        "[mail.authentication]\noffline = true\n\n"
        f'[mail.authentication.dns]\n"sel._domainkey.thescoop.com" = "{record}"\n'
    )
    with serving(run_protege, env, settings) as (serve, protege_port):
        milter = start_opendkim(
            sbin,
            daemons,
            tmp_path / "opendkim",
            Mode="s",
            Domain="thescoop.com",
            Selector="sel",
            KeyFile=str(private),
        )
        postfix = start_postfix(
            sbin, daemons, postfix_home, protege_port, f"inet:127.0.0.1:{milter}"
        )
        send(postfix, scoop_mail("Signed by the Scoop"))
        assert await_line(serve, "mail ").startswith("mail 1 for Sundae: accepted")
        send(protege_port, scoop_mail("Straight from Mara"))
        assert await_line(serve, "mail ").startswith("mail 2 for Sundae: accepted")

    signed = stored("Signed by the Scoop")
    assert signed.sender_authenticated, (signed.verdict, daemons.logs())
    assert (signed.verdict.method, signed.verdict.domain) == ("dkim", "thescoop.com")
    direct = stored("Straight from Mara")
    assert not direct.sender_authenticated
    assert direct.verdict.method == "none"


def test_postfix_verifying_with_opendkim_as_the_trusted_relay(
    sbin, daemons, postfix_home, run_protege, env, tmp_path
):
    key = DkimKey.generate("thescoop.com", "sel")
    # protege pins no key: only the relay's Authentication-Results can prove Mara.
    settings = (
        "[mail.authentication]\noffline = true\n"
        'trusted_relays = ["127.0.0.1"]\n'
        f'trusted_authserv_ids = ["{AUTHSERV_ID}"]\n'
    )
    keys = tmp_path / "dns.txt"
    keys.write_text(f"{key.name} {key.record}\n")
    with serving(run_protege, env, settings) as (serve, protege_port):
        milter = start_opendkim(
            sbin,
            daemons,
            tmp_path / "opendkim",
            Mode="v",
            AuthservID=AUTHSERV_ID,
            TestDNSData=f"file:{keys}",
            # Not 127.0.0.1: mail from an internal host would be signed, not verified.
            InternalHosts="192.0.2.1",
        )
        postfix = start_postfix(
            sbin, daemons, postfix_home, protege_port, f"inet:127.0.0.1:{milter}"
        )
        send(postfix, key.sign(scoop_mail("Verified by the relay")), source="127.0.0.2")
        assert await_line(serve, "mail ").startswith("mail 1 for Sundae: accepted")
        forged = (
            f"Authentication-Results: {AUTHSERV_ID}; dkim=pass header.d=thescoop.com\r\n".encode()
            + scoop_mail("Forged results")
        )
        send(protege_port, forged, source="127.0.0.2")
        assert await_line(serve, "mail ").startswith("mail 2 for Sundae: accepted")

    relayed = stored("Verified by the relay")
    assert relayed.sender_authenticated, (relayed.verdict, daemons.logs())
    assert (relayed.verdict.method, relayed.verdict.domain) == ("relay", "thescoop.com")
    assert relayed.verdict.reason == f"{AUTHSERV_ID} recorded dkim=pass for d=thescoop.com"
    assert [r.result for r in relayed.verdict.results if r.method == "dkim"] == ["fail"]
    forged_message = stored("Forged results")
    assert not forged_message.sender_authenticated
    assert forged_message.verdict.method == "none"
