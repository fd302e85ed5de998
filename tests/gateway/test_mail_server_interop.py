"""protege behind real mail servers: Postfix with OpenDKIM signing the Scoop's mail on its way
to protege, Postfix with OpenDKIM verifying as the relay protege trusts, and Postfix with
OpenDKIM and OpenDMARC as that relay, recording DMARC's result.

The programs come from Debian's packages, found (or installed, as root) by
``scripts/mail-servers-for-tests``; each test runs private instances from its own folder, on
loopback ports, and stops them however it ends. OpenDMARC has no test records: it asks the
system's resolver, so it runs in a mount namespace of its own where a private resolv.conf
names a dnsmasq the test runs on a loopback address of its own.
"""

from __future__ import annotations

import contextlib
import email
import os
import random
import re
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

from protege import blobs
from protege.gateway.smtp import free_port
from protege.models import Agent, Message, Run, Toolkit
from protege.testing import DkimKey, say

from ..cli.serving import read_line

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mail-servers-for-tests"
PROGRAMS = ("postfix", "postconf", "opendkim", "opendkim-genkey", "opendmarc", "dnsmasq")
AGENT = "sundae@thescoop.example"
AUTHSERV_ID = "mx.thescoop.test"


@pytest.fixture(scope="session")
def sbin() -> Path:
    """The folder holding postfix, opendkim, opendmarc and dnsmasq (the script installs them
    if need be, as root)."""
    given = os.environ.get("PROTEGE_TEST_MAIL_SERVERS", "")
    if given and all((Path(given) / name).exists() for name in PROGRAMS):
        return Path(given)
    found = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=900)
    if found.returncode != 0:
        pytest.fail(
            "these tests need Postfix, OpenDKIM, OpenDMARC and dnsmasq: run"
            " scripts/mail-servers-for-tests"
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


def wait_for_port(
    port: int,
    process: subprocess.Popen,
    daemons: Daemons,
    deadline: float = 30,
    host: str = "127.0.0.1",
):
    """Return once ``port`` on ``host`` accepts connections; fail if ``process`` dies first
    or the deadline passes."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode} before listening\n{daemons.logs()}")
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"nothing listened on {host} port {port} within {deadline}s\n{daemons.logs()}")


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


def free_loopback_address() -> str:
    """A loopback address nothing listens on for DNS (port 53): a resolv.conf cannot name
    another port, so parallel runs each take an address of their own."""
    for _ in range(100):
        address = f"127.53.{random.randrange(256)}.{random.randrange(1, 255)}"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((address, 53))
            except OSError:
                continue
        return address
    pytest.fail("no free loopback address for a DNS server")


def start_dns(sbin: Path, daemons: Daemons, records: dict[str, str]) -> str:
    """Run dnsmasq on a loopback address of its own, port 53, answering TXT ``records`` and
    NXDOMAIN for every other name (nothing is forwarded); returns its address."""
    dnsmasq = shutil.which("dnsmasq", path=f"{sbin}:/usr/sbin:/sbin")
    assert dnsmasq, "dnsmasq (Debian's dnsmasq-base) is missing: run scripts/mail-servers-for-tests"
    address = free_loopback_address()
    argv = [
        dnsmasq,
        "--no-daemon",
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--local=/#/",
        "--user=root",
        f"--listen-address={address}",
        "--bind-interfaces",
        "--port=53",
        "--log-queries",
    ]
    # dnsmasq splits a record's strings at commas; none of ours has one.
    argv += [f"--txt-record={name},{text}" for name, text in records.items()]
    process = daemons.start("dnsmasq", *argv)
    wait_for_port(53, process, daemons, host=address)  # dnsmasq answers on TCP too
    return address


def start_opendmarc(sbin: Path, daemons: Daemons, folder: Path, nameserver: str) -> int:
    """Run OpenDMARC in the foreground as a milter on a loopback port, trusting the results
    of the relay's OpenDKIM and rejecting nothing; it resolves through ``nameserver`` alone,
    which a private mount namespace's own /etc/resolv.conf names. Returns the port."""
    port = free_port()
    folder.mkdir()
    resolv = folder / "resolv.conf"
    resolv.write_text(f"nameserver {nameserver}\noptions attempts:1 timeout:2\n")
    ignored = folder / "ignore-hosts"
    ignored.write_text("192.0.2.1\n")  # not 127.0.0.1, its default: the tests mail from there
    config = folder / "opendmarc.conf"
    lines = {
        "Socket": f"inet:{port}@127.0.0.1",
        "Syslog": "false",
        "UserID": "root",
        "PidFile": str(folder / "opendmarc.pid"),
        "AuthservID": AUTHSERV_ID,
        "TrustedAuthservIDs": AUTHSERV_ID,
        "IgnoreHosts": str(ignored),
        "IgnoreAuthenticatedClients": "false",
        "RejectFailures": "false",
        "SPFSelfValidate": "false",
        "SPFIgnoreResults": "true",
        "FailureReports": "false",
        "PublicSuffixList": "/usr/share/publicsuffix/public_suffix_list.dat",
    }
    config.write_text("".join(f"{key} {value}\n" for key, value in lines.items()))
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    assert unshare, "unshare (util-linux) is missing"
    # unshare makes the namespace's mounts private: the bind mount never reaches the host.
    # It and sh exec, so the process the test stops is OpenDMARC itself.
    process = daemons.start(
        "opendmarc",
        unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        'mount --bind "$1" /etc/resolv.conf && exec "$2" -f -c "$3"',
        "sh",
        resolv,
        sbin / "opendmarc",
        config,
    )
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


def start_postfix(
    sbin: Path,
    daemons: Daemons,
    folder: Path,
    protege_port: int,
    milters: str,
    **changes: str | Path,
):
    """Run a private Postfix relaying all mail to protege through ``milters`` (or as
    ``changes`` to its main.cf say); returns the port it takes mail on."""
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
        **changes,
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
        try:
            line = read_line(process, left)
        except AssertionError:
            break
        seen.append(line)
        if line.startswith(prefix):
            return line
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


def relay_settings(extra: str = "") -> str:
    """protege.toml trusting the Postfix in front (loopback) and its authserv-id, pinning
    no key: only the relay's Authentication-Results can prove a sender."""
    return (
        "[mail.authentication]\noffline = true\n"
        'trusted_relays = ["127.0.0.1"]\n'
        f'trusted_authserv_ids = ["{AUTHSERV_ID}"]\n' + extra
    )


def start_verifying_opendkim(sbin: Path, daemons: Daemons, folder: Path, key: DkimKey) -> int:
    """OpenDKIM verifying, its DNS answered from a file holding ``key``'s record."""
    folder.mkdir()
    keys = folder / "dns.txt"
    keys.write_text(f"{key.name} {key.record}\n")
    return start_opendkim(
        sbin,
        daemons,
        folder / "milter",
        Mode="v",
        AuthservID=AUTHSERV_ID,
        TestDNSData=f"file:{keys}",
        # Not 127.0.0.1: mail from an internal host would be signed, not verified.
        InternalHosts="192.0.2.1",
    )


def test_postfix_verifying_with_opendkim_as_the_trusted_relay(
    sbin, daemons, postfix_home, run_protege, env, tmp_path
):
    key = DkimKey.generate("thescoop.com", "sel")
    with serving(run_protege, env, relay_settings()) as (serve, protege_port):
        milter = start_verifying_opendkim(sbin, daemons, tmp_path / "opendkim", key)
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


def results_headers(message: Message, env: dict[str, str]) -> list[str]:
    """The Authentication-Results headers of the mail as protege stored it, topmost first."""
    raw = blobs.read(message.raw_blob, data_dir=Path(env["PROTEGE_DATA_DIR"]))
    parsed = email.message_from_bytes(raw)
    return [" ".join(str(value).split()) for value in parsed.get_all("Authentication-Results", [])]


def test_postfix_with_opendkim_and_opendmarc_as_the_trusted_relay(
    sbin, daemons, postfix_home, run_protege, env, tmp_path
):
    key = DkimKey.generate("thescoop.com", "sel")
    impostor = DkimKey.generate("thescoop.com", "sel")  # the same selector, not published
    policy = "v=DMARC1; p=reject"
    # protege pins the Scoop's DMARC policy but no key: only the relay's results prove Mara.
    settings = relay_settings(f'\n[mail.authentication.dns]\n"_dmarc.thescoop.com" = "{policy}"\n')
    with serving(run_protege, env, settings) as (serve, protege_port):
        nameserver = start_dns(sbin, daemons, {"_dmarc.thescoop.com": policy})
        dkim = start_verifying_opendkim(sbin, daemons, tmp_path / "opendkim", key)
        dmarc = start_opendmarc(sbin, daemons, tmp_path / "opendmarc", nameserver)
        # OpenDKIM first: OpenDMARC reads the results OpenDKIM recorded.
        milters = f"inet:127.0.0.1:{dkim}, inet:127.0.0.1:{dmarc}"
        postfix = start_postfix(sbin, daemons, postfix_home, protege_port, milters)
        send(postfix, key.sign(scoop_mail("Passes DMARC")), source="127.0.0.2")
        assert await_line(serve, "mail ").startswith("mail 1 for Sundae: accepted")
        send(postfix, impostor.sign(scoop_mail("Fails DMARC")), source="127.0.0.2")
        refused = await_line(serve, "mail ")
        assert refused.startswith("mail 2 for Sundae: ignored (fails DMARC"), refused

    passed = stored("Passes DMARC")
    recorded = results_headers(passed, env)
    assert any(
        h.startswith(f"{AUTHSERV_ID}; dmarc=pass") and "header.from=thescoop.com" in h
        for h in recorded
    ), (recorded, daemons.logs())
    assert passed.sender_authenticated, (passed.verdict, recorded, daemons.logs())
    assert (passed.verdict.method, passed.verdict.domain) == ("relay", "thescoop.com")
    assert passed.verdict.reason == f"{AUTHSERV_ID} recorded dmarc=pass for thescoop.com", (
        passed.verdict,
        recorded,
    )
    assert passed.verdict.policy == "reject"
    assert Run.select().where(Run.message == passed).count() == 1

    failed = stored("Fails DMARC")
    recorded = results_headers(failed, env)
    assert any(
        h.startswith(f"{AUTHSERV_ID}; dmarc=fail") and "header.from=thescoop.com" in h
        for h in recorded
    ), (recorded, daemons.logs())
    assert not failed.sender_authenticated, (failed.verdict, recorded)
    assert (failed.verdict.dmarc, failed.verdict.policy) == ("fail", "reject")
    assert [r.result for r in failed.verdict.results if r.method == "relay"] == ["fail"]
    assert any("fails DMARC for thescoop.com" in flag for flag in failed.flags), failed.flags
    assert Run.select().where(Run.message == failed).count() == 0


def postfix_example(name: str) -> str:
    """A block of docs/postfix.md: the one holding ``name``."""
    blocks = re.findall(r"```\n(.*?)```", (ROOT / "docs" / "postfix.md").read_text(), re.DOTALL)
    (found,) = [b for b in blocks if name in b]
    return found


def test_the_postfix_example_of_the_docs_relays_the_agents_domain_to_protege(
    sbin, daemons, postfix_home, run_protege, env, tmp_path
):
    documented = {}
    for line in postfix_example("transport_maps").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            documented[key.strip()] = value.strip()
    assert documented["relay_domains"] == "thescoop.example"
    assert int(documented["message_size_limit"]) < 25 * 1024 * 1024  # below protege's
    maps = postfix_home / "maps"
    maps.mkdir()
    with serving(run_protege, env, "") as (serve, protege_port):
        transport = postfix_example("smtp:[127.0.0.1]:2525").replace("2525", str(protege_port))
        (maps / "transport").write_text(transport)
        (maps / "agents").write_text(postfix_example("sundae@thescoop.example    OK"))
        (maps / "main.cf").write_text("compatibility_level = 3.6\n")  # for postmap alone
        for table in ("transport", "agents"):
            subprocess.run(
                [sbin / "postmap", "-c", maps, f"hash:{maps / table}"], check=True, timeout=60
            )
        postfix = start_postfix(
            sbin,
            daemons,
            postfix_home,
            protege_port,
            "",
            relayhost="",
            relay_domains=documented["relay_domains"],
            transport_maps=f"hash:{maps / 'transport'}",
            relay_recipient_maps=f"hash:{maps / 'agents'}",
            message_size_limit=documented["message_size_limit"],
        )
        with (
            smtplib.SMTP("127.0.0.1", postfix, timeout=30) as client,
            pytest.raises(smtplib.SMTPRecipientsRefused) as refused,
        ):
            client.sendmail("mara@thescoop.com", ["nobody@thescoop.example"], b"Hi\r\n")
        ((code, said),) = refused.value.recipients.values()
        assert code == 550, said  # refused by Postfix: protege never hears of it
        # Over Postfix's default limit (10240000 bytes), within the documented one.
        big = scoop_mail("Eleven megabytes", body="x" * 76 + ("\n" + "y" * 76) * 140_000)
        assert len(big) > 10_240_000
        send(postfix, big)
        line = await_line(serve, "mail ", timeout=120)
        assert line.startswith("mail 1 for Sundae: accepted"), (line, daemons.logs())
    assert stored("Eleven megabytes").direction == "inbound"
