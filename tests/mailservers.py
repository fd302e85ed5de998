"""Real mail servers for the tests of protege's IMAP source and submission transport: a
private Dovecot (IMAP with IDLE or without, LMTP, and SASL for Postfix) and a private Postfix
taking authenticated submission and delivering into that Dovecot, both with certificates of a
test CA made here.

The programs come from Debian's packages, found (or installed, as root) by
``scripts/mail-servers-for-tests``; each server runs from a folder of its own on loopback
ports nothing else listens on, in a process group of its own that ``stop``, ``kill`` and
``close`` end whole, so tests may run in parallel (pytest-xdist) and leave nothing behind.
The fixtures using them are in ``tests/conftest.py``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import grp
import hashlib
import hmac
import imaplib
import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from protege.gateway.smtp import free_port
from tests.cli.serving import patience, until

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mail-servers-for-tests"
HOST = "127.0.0.1"
DOMAIN = "example.test"


class User(NamedTuple):
    address: str
    password: str


AGENT = User(f"agent@{DOMAIN}", "agent's secret 29")
PERSON = User(f"person@{DOMAIN}", "person's secret 29")


class Stored(NamedTuple):
    """One message of a folder as the server holds it (flags without ``\\Recent``, which
    belongs to a session)."""

    uid: int
    flags: frozenset[str]
    raw: bytes


class MissingServers(Exception):
    """Dovecot or Postfix is not installed and could not be."""


# -- programs -----------------------------------------------------------------------------


class Programs(NamedTuple):
    dovecot: Path
    doveadm: Path
    postconf: Path  # names the folder of Postfix's master


@functools.cache
def programs() -> Programs:
    """Dovecot's and Postfix's programs: in $PROTEGE_TEST_MAIL_SERVERS's folder (as ``make
    test`` sets it), or where the script finds or installs them."""

    def found(folder: Path) -> Programs | None:
        path = f"{folder}:/usr/bin:/bin:{os.environ.get('PATH', '')}"
        doveadm = shutil.which("doveadm", path=path)
        made = Programs(folder / "dovecot", Path(doveadm or "doveadm"), folder / "postconf")
        return made if all(os.access(p, os.X_OK) for p in made) else None

    given = os.environ.get("PROTEGE_TEST_MAIL_SERVERS", "")
    if given and (made := found(Path(given))):
        return made
    ran = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=900)
    if ran.returncode == 0 and (made := found(Path(ran.stdout.strip()))):
        return made
    raise MissingServers(
        "these tests need Dovecot and Postfix: run scripts/mail-servers-for-tests as root (or"
        f" set PROTEGE_TEST_MAIL_SERVERS); it said:\n{ran.stderr}"
    )


# -- certificates -------------------------------------------------------------------------


class Certificates(NamedTuple):
    """A test CA and a server certificate it signed for localhost and 127.0.0.1; and a
    second CA, trusted by nobody, with a certificate of its own for the same names."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    untrusted_ca_file: Path
    untrusted_cert_file: Path
    untrusted_key_file: Path

    @classmethod
    def make(cls, folder: Path) -> Certificates:
        folder.mkdir(parents=True, exist_ok=True)
        trusted = _issue(folder, "protege test CA")
        untrusted = _issue(folder, "untrusted test CA")
        return cls(*trusted, *untrusted)


def _issue(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA named ``name`` and a server certificate signed by it: their files (CA, cert,
    key). EC keys: made in a millisecond."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    stem = name.split()[0]
    paths = folder / f"{stem}-ca.pem", folder / f"{stem}-cert.pem", folder / f"{stem}-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[2].chmod(0o600)
    return paths


# -- processes ----------------------------------------------------------------------------


class Daemon:
    """A server's master process, started in a process group of its own, its output
    appended to ``log``; ended with every process of its group."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv = argv
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def members(self) -> list[int]:
        """The live processes of the group (none once ended)."""
        if self.process is None:
            return []
        return group_processes(self.process.pid)

    def end(self, *, gently: bool) -> None:
        """SIGTERM to the master, which stops its children, then SIGKILL to whatever of the
        group is left (``gently=False``: SIGKILL to all at once); returns once none is."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if gently and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(patience(10))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(patience(10))
        until(
            lambda: not group_processes(process.pid),
            10,
            f"processes of {self.argv[0]} outlived it",
        )


def group_processes(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (a zombie, ended and waiting for init
    to reap it, is not)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _await_ports(daemon: Daemon, ports: Iterable[int], what: str, seconds: float = 10) -> None:
    """Return once every port accepts connections on HOST; fail if the daemon ends first
    or the deadline passes."""
    deadline = time.monotonic() + patience(seconds)
    for port in ports:
        while True:
            if not daemon.running:
                raise RuntimeError(f"{what} ended before listening:\n{_tail(daemon.log)}")
            with socket.socket() as probe:
                if probe.connect_ex((HOST, port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on {port}:\n{_tail(daemon.log)}")
            time.sleep(0.005)  # a look at the port again, not a synchronisation


def _free_ports(count: int) -> list[int]:
    """``count`` loopback ports nothing listens on, all different (the kernel may give
    the port it gave last time again, once it is free)."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port(HOST))
    return list(ports)


def _tail(path: Path, size: int = 4000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else ""


def _home_folder(prefix: str) -> Path:
    """A folder outside pytest's (which only its owner may enter), for servers whose
    processes drop to other users: they open its files by full path. In memory where the
    machine has a tmpfs at /dev/shm: a file is made there a hundred times faster than on
    a disk (a 10,000-message mailbox is 10,000 files)."""
    shm = "/dev/shm"
    memory = shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=memory))
    folder.chmod(0o755)
    return folder


# -- Dovecot ------------------------------------------------------------------------------

# Dovecot 2.3's capabilities after login, less IDLE (for ``Dovecot(idle=False)``).
CAPABILITIES_WITHOUT_IDLE = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE SORT SORT=DISPLAY THREAD=REFERENCES"
    " THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN"
    " NAMESPACE UIDPLUS LIST-EXTENDED I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES"
    " WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE SNIPPET=FUZZY PREVIEW=FUZZY PREVIEW"
    " STATUS=SIZE SAVEDATE LITERAL+ NOTIFY SPECIAL-USE"
)

SPECIAL_FOLDERS = {"Sent": "\\Sent", "Drafts": "\\Drafts", "Trash": "\\Trash", "Junk": "\\Junk"}

DOVECOT_CONF = """\
# A private Dovecot for protege's tests: nothing of the system's configuration is read.
base_dir = {folder}/run
state_dir = {folder}/state
instance_name = {instance}
protocols = imap lmtp
listen = {host}
log_path = {folder}/dovecot.log
{users_and_chroots}
mail_location = maildir:~/Maildir
mail_fsync = never
ssl = required
ssl_cert = <{cert}
ssl_key = <{key}
ssl_min_protocol = TLSv1.2
auth_mechanisms = plain login xoauth2 oauthbearer
auth_verbose = yes
auth_failure_delay = 0
{capability}
namespace inbox {{
  inbox = yes
{special_folders}
}}
passdb {{
  driver = dict
  mechanisms = plain login
  args = {folder}/users.conf
}}
passdb {{
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = {folder}/oauth2.conf
}}
userdb {{
  driver = dict
  args = {folder}/users.conf
}}
protocol lmtp {{
  ssl = no
}}
service imap-login {{
  inet_listener imap {{
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = {imaps_port}
    ssl = yes
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    port = {lmtp_port}
  }}
}}
service auth {{
  inet_listener sasl {{
    port = {auth_port}
  }}
}}
# No growing delay for logins from an address after failed ones (up to 15 seconds): the
# tests log in with wrong passwords, and all from 127.0.0.1.
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
"""

# Users are files, <folder>/users/passdb/<address> and .../userdb/<address>, which Dovecot
# reads at each login (a passwd-file is read again only when it changed, looked at once a
# second: a user added just after a login would be unknown for up to a second).
USERS_CONF = """\
uri = fs:posix:prefix={folder}/users/
password_key = passdb/%u
user_key = userdb/%u
iterate_disable = yes
"""

# OAuth2 bearer tokens are JWTs checked by Dovecot itself against a key in a folder: no
# token server to run. The key for HS256 tokens, base64, at <prefix>/default/HS256/default.
OAUTH2_CONF = """\
introspection_mode = local
local_validation_key_dict = fs:posix:prefix={folder}/oauth2-keys/
username_attribute = email
"""


class Dovecot:
    """A private Dovecot on loopback: IMAP with implicit TLS (``imaps_port``) and with
    STARTTLS (``imap_port``; TLS is required before logging in, though Dovecot counts a
    connection from its own address as secure and lets it log in without: the ``TLS``
    or ``secured`` of a Login line in ``logs()`` tells which), LMTP (``lmtp_port``) and
    SASL for Postfix (``auth_port``). Users log in with PLAIN or LOGIN and their password,
    or with XOAUTH2 or OAUTHBEARER and a token from ``oauth_token``. A failed login is
    answered after half a second, with no penalty for the next. Mail is kept in Maildirs
    (as ``nobody`` when run as root: Dovecot refuses root), which ``restart`` keeps; a
    stop takes a second (Dovecot gives its log process that long), a start a few
    hundredths.

    With ``idle=False`` the server does not advertise IDLE (it would still answer the
    command), as servers that make their clients poll."""

    host = HOST

    def __init__(
        self,
        *,
        idle: bool = True,
        users: Iterable[User] = (AGENT, PERSON),
        certificates: Certificates | None = None,
    ) -> None:
        self.programs = programs()
        self.folder = _home_folder("protege-dovecot-")
        try:
            self._certificates = certificates or Certificates.make(self.folder / "tls")
            self.ca_file = self._certificates.ca_file
            self.untrusted_ca_file = self._certificates.untrusted_ca_file
            ports = _free_ports(4)
            self.imaps_port, self.imap_port, self.lmtp_port, self.auth_port = ports
            self.users: dict[str, User] = {}
            self._uid, self._gid, self._user_name = _mail_user()
            self._mail = self.folder / "mail"
            self._mail.mkdir()
            os.chown(self._mail, self._uid, self._gid)
            self._oauth_key = os.urandom(32)
            self._configure(idle)
            for user in users:
                self.add_user(*user)
            self.daemon = Daemon(
                [str(self.programs.dovecot), "-F", "-c", str(self.config)],
                self.folder / "master.log",
            )
            self.start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Dovecot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def agent(self) -> User:
        return self.users[AGENT.address]

    @property
    def person(self) -> User:
        return self.users[PERSON.address]

    def _configure(self, idle: bool) -> None:
        if os.geteuid() == 0:
            users_and_chroots = ""
        else:  # all of Dovecot as this user: no other users to drop to, no chroots
            users_and_chroots = (
                f"default_internal_user = {self._user_name}\n"
                f"default_internal_group = {grp.getgrgid(self._gid).gr_name}\n"
                f"default_login_user = {self._user_name}\n"
                "service imap-login {\n  chroot =\n}\nservice anvil {\n  chroot =\n}\n"
            )
        special = "".join(
            f"  mailbox {name} {{\n    special_use = {use}\n    auto = subscribe\n  }}\n"
            for name, use in SPECIAL_FOLDERS.items()
        )
        self.config = self.folder / "dovecot.conf"
        self.config.write_text(
            DOVECOT_CONF.format(
                folder=self.folder,
                instance=self.folder.name,
                host=HOST,
                users_and_chroots=users_and_chroots,
                cert=self._certificates.cert_file,
                key=self._certificates.key_file,
                capability="" if idle else f"imap_capability = {CAPABILITIES_WITHOUT_IDLE}",
                special_folders=special.rstrip("\n"),
                imap_port=self.imap_port,
                imaps_port=self.imaps_port,
                lmtp_port=self.lmtp_port,
                auth_port=self.auth_port,
            )
        )
        (self.folder / "oauth2.conf").write_text(OAUTH2_CONF.format(folder=self.folder))
        keys = self.folder / "oauth2-keys" / "default" / "HS256"
        keys.mkdir(parents=True)
        (keys / "default").write_text(base64.b64encode(self._oauth_key).decode())
        (self.folder / "users.conf").write_text(USERS_CONF.format(folder=self.folder))
        for kind in ("passdb", "userdb"):
            (self.folder / "users" / kind).mkdir(parents=True)

    # -- the server's life

    def start(self) -> None:
        """Start the server (on the ports it had, with the mail it had); returns once it
        listens on all of them."""
        assert not self.daemon.running, "Dovecot is running already"
        self.daemon.start()
        _await_ports(
            self.daemon,
            (self.imaps_port, self.imap_port, self.lmtp_port, self.auth_port),
            "Dovecot",
        )

    def stop(self) -> None:
        """Stop the server as its operator would (SIGTERM), its connections with it."""
        self.daemon.end(gently=True)

    def kill(self) -> None:
        """Kill every process of the server at once (SIGKILL), as a crash would."""
        self.daemon.end(gently=False)

    def restart(self) -> None:
        """Stop the server and start it again, on the same ports, with the same mail."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Kill the server and remove its folder."""
        with contextlib.suppress(AttributeError):
            self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def logs(self) -> str:
        """The end of Dovecot's log, for a failure's report."""
        return _tail(self.folder / "master.log") + _tail(self.folder / "dovecot.log")

    # -- users

    def add_user(self, address: str, password: str) -> User:
        """A user who logs in as ``address`` with ``password`` (or an OAuth2 token) and is
        delivered mail for ``address`` over LMTP."""
        assert "/" not in address, address  # a file's name
        user = User(address, password)
        records = {
            "passdb": {"password": _ssha256(password)},
            "userdb": {"uid": self._uid, "gid": self._gid, "home": str(self._mail / address)},
        }
        for kind, record in records.items():
            staged = self.folder / "users" / f"{kind}.new"
            staged.write_text(json.dumps(record))
            staged.replace(self.folder / "users" / kind / address)  # whole, never half
        self.users[address] = user
        return user

    def oauth_token(self, address: str, *, lifetime: float = 3600, valid: bool = True) -> str:
        """A bearer token (a JWT, HS256) Dovecot accepts for ``address`` over XOAUTH2 and
        OAUTHBEARER until ``lifetime`` seconds from now (a negative one: expired already);
        ``valid=False``: one signed with another key, which it refuses."""
        now = int(time.time())
        claims = {
            "sub": address,
            "email": address,
            "iat": min(now, now + int(lifetime) - 60),
            "nbf": min(now, now + int(lifetime) - 60),
            "exp": now + int(lifetime),
        }
        key = self._oauth_key if valid else os.urandom(32)
        return _jwt(claims, key)

    def kick(self, address: str) -> None:
        """Drop the user's live connections (``doveadm kick``); returns once they are
        gone."""
        self._doveadm("kick", address, ok=(0, 68))  # 68: nobody was connected
        until(
            lambda: address not in self._doveadm("who", "-1", address, ok=(0, 68)),
            10,
            f"{address} stayed connected after doveadm kick",
        )

    def _doveadm(self, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        ran = subprocess.run(
            [str(self.programs.doveadm), "-c", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=patience(30),
        )
        assert ran.returncode in ok, f"doveadm {' '.join(args)}: {ran.stderr}\n{self.logs()}"
        return ran.stdout

    # -- mail, read and written as the user would, over IMAP

    def imap(self, address: str) -> imaplib.IMAP4_SSL:
        """A connection logged in as the user over implicit TLS (the caller logs out)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        client = imaplib.IMAP4_SSL(
            self.host, self.imaps_port, ssl_context=context, timeout=patience(30)
        )
        try:
            client.login(address, self.users[address].password)
        except BaseException:
            client.shutdown()
            raise
        return client

    @contextlib.contextmanager
    def _session(self, address: str):
        client = self.imap(address)
        try:
            yield client
        finally:
            with contextlib.suppress(imaplib.IMAP4.abort, OSError):
                client.logout()

    def append(
        self, address: str, raw: bytes, folder: str = "INBOX", flags: Iterable[str] = ()
    ) -> int:
        """Put a message in the user's folder; returns its UID."""
        (uid,) = self.append_many(address, [raw], folder, flags)
        return uid

    def append_many(
        self,
        address: str,
        raws: Iterable[bytes],
        folder: str = "INBOX",
        flags: Iterable[str] = (),
    ) -> list[int]:
        """Put many messages in the user's folder, a few hundred per command (MULTIAPPEND
        with non-synchronising literals: a 10,000-message backlog takes seconds); returns
        their UIDs in order."""
        flag_list = f"({' '.join(flags)})".encode()
        messages = list(raws)
        uids: list[int] = []
        with self._session(address) as client:
            for start in range(0, len(messages), 500):
                tag = f"P{start}".encode()
                parts = [tag, b" APPEND ", _quote(folder)]
                for raw in messages[start : start + 500]:
                    parts += [b" ", flag_list, b" {%d+}\r\n" % len(raw), raw]
                client.send(b"".join(parts) + b"\r\n")
                while not (line := client.readline()).startswith(tag + b" "):
                    assert line, "the server closed the connection during APPEND"
                found = re.match(rb"\S+ OK \[APPENDUID \d+ ([\d:,]+)\]", line)
                assert found, f"APPEND failed: {line!r}"
                uids += _uid_set(found[1].decode())
        return uids

    def messages(self, address: str, folder: str = "INBOX") -> list[Stored]:
        """Every message of the user's folder, by UID, with its flags and bytes."""
        with self._session(address) as client:
            status, data = client.select(_quote(folder).decode(), readonly=True)
            assert status == "OK", data
            if int(data[0] or 0) == 0:
                return []
            status, data = client.uid("FETCH", "1:*", "(UID FLAGS BODY.PEEK[])")
            assert status == "OK", data
        found = []
        for item in data:
            if not isinstance(item, tuple):
                continue
            header, raw = item
            uid = re.search(rb"UID (\d+)", header)
            flags = re.search(rb"FLAGS \(([^)]*)\)", header)
            assert uid, header
            assert flags, header
            names = frozenset(flags[1].decode().split()) - {"\\Recent"}
            found.append(Stored(int(uid[1]), names, raw))
        return sorted(found)

    def await_messages(
        self, address: str, count: int, folder: str = "INBOX", seconds: float = 30
    ) -> list[Stored]:
        """The folder's messages once it holds at least ``count`` (mail in flight through
        Postfix, say); a failure if it does not within ``seconds``."""
        deadline = time.monotonic() + patience(seconds)
        while len(held := self.messages(address, folder)) < count:
            assert time.monotonic() < deadline, (
                f"{address}'s {folder} holds {len(held)} messages, not {count}, after"
                f" {seconds}s\n{self.logs()}"
            )
            time.sleep(0.02)  # a look at the folder again, not a synchronisation
        return held

    def folders(self, address: str) -> list[str]:
        """The names of the user's folders."""
        with self._session(address) as client:
            status, data = client.list()
        assert status == "OK", data
        names = []
        for line in data:
            assert isinstance(line, bytes), line
            found = re.match(rb'\([^)]*\) (?:"[^"]*"|NIL) (.*)$', line)
            assert found, line
            name = found[1]
            if name.startswith(b'"'):
                name = re.sub(rb"\\(.)", rb"\1", name[1:-1])
            names.append(name.decode())
        return sorted(names)

    def create_folder(self, address: str, name: str) -> None:
        with self._session(address) as client:
            status, data = client.create(_quote(name).decode())
        assert status == "OK", data

    def uidvalidity(self, address: str, folder: str = "INBOX") -> int:
        with self._session(address) as client:
            status, data = client.status(_quote(folder).decode(), "(UIDVALIDITY)")
        assert status == "OK", data
        found = re.search(rb"UIDVALIDITY (\d+)", data[0] if isinstance(data[0], bytes) else b"")
        assert found, data
        return int(found[1])

    def change_uidvalidity(self, address: str, folder: str = "INBOX") -> int:
        """Make the server give the folder a new UIDVALIDITY, as a restored or rebuilt
        mailbox has: with the server stopped, its index and UID list are removed, so the
        messages (flags kept) are numbered again from 1 under a new UIDVALIDITY. The server
        restarts, so connections drop. Returns the new UIDVALIDITY."""
        before = self.uidvalidity(address, folder)
        assert folder.isascii(), "a folder name in modified UTF-7 is not supported here"
        maildir = self._mail / address / "Maildir"
        path = maildir if folder.upper() == "INBOX" else maildir / f".{folder}"
        assert path.is_dir(), f"no folder {folder!r} at {path}"
        self.stop()
        for stale in [*path.glob("dovecot.index*"), path / "dovecot-uidlist"]:
            stale.unlink(missing_ok=True)
        for stale in maildir.glob("dovecot.list.index*"):  # caches each folder's status
            stale.unlink()
        self.start()
        after = self.uidvalidity(address, folder)
        assert after != before, f"UIDVALIDITY stayed {before}"
        return after


def _mail_user() -> tuple[int, int, str]:
    """The user mail is kept as: Dovecot refuses root, so as root the ``nobody`` user;
    otherwise this process's own."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        return nobody.pw_uid, nobody.pw_gid, nobody.pw_name
    return os.geteuid(), os.getegid(), pwd.getpwuid(os.geteuid()).pw_name


def _ssha256(password: str) -> str:
    salt = os.urandom(8)
    digest = hashlib.sha256(password.encode() + salt).digest()
    return "{SSHA256}" + base64.b64encode(digest + salt).decode()


def _jwt(claims: dict[str, object], key: bytes) -> str:
    def part(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signed = part(b'{"alg":"HS256","typ":"JWT"}') + b"." + part(json.dumps(claims).encode())
    return (signed + b"." + part(hmac.new(key, signed, hashlib.sha256).digest())).decode()


def _quote(name: str) -> bytes:
    return b'"' + name.replace("\\", "\\\\").replace('"', '\\"').encode() + b'"'


def _uid_set(text: str) -> list[int]:
    uids: list[int] = []
    for piece in text.split(","):
        first, _, last = piece.partition(":")
        uids += range(int(first), int(last or first) + 1)
    return uids


# -- Postfix ------------------------------------------------------------------------------

QUEUE_FOLDERS = ("active", "bounce", "corrupt", "defer", "deferred", "flush", "hold")
QUEUE_FOLDERS += ("incoming", "private", "saved", "trace")

POSTFIX_MASTER_CF = """\
{host}:{starttls_port} inet n - n - - smtpd
{host}:{tls_port} inet n - n - - smtpd -o smtpd_tls_wrappermode=yes
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
tlsmgr unix - - n 1000? 1 tlsmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 1 bounce
verify unix - - n - 1 verify
flush unix n - n 1000? 0 flush
proxymap unix - - n - - proxymap
smtp unix - - n - - smtp
relay unix - - n - - smtp
lmtp unix - - n - - lmtp
showq unix n - n - - showq
error unix - - n - - error
retry unix - - n - - error
discard unix - - n - - discard
local unix - n n - - local
anvil unix - - n - 1 anvil
scache unix - - n - 1 scache
postlog unix-dgram n - n - 1 postlogd
"""


class Submission:
    """A private Postfix taking mail submission on loopback: STARTTLS then AUTH on
    ``starttls_port`` (as 587), implicit TLS then AUTH on ``tls_port`` (as 465), both with
    the test CA's certificate; AUTH is checked by ``dovecot`` (its users and passwords, or
    OAuth2 tokens), and a user may send only as their own address. Mail for the test domain
    is delivered into ``dovecot`` over LMTP; recipients in any other domain are refused at
    RCPT (550 5.7.1): nothing leaves the machine."""

    host = HOST

    def __init__(self, dovecot: Dovecot, *, domain: str = DOMAIN) -> None:
        self.dovecot = dovecot
        self.ca_file = dovecot.ca_file
        self.domain = domain
        self.folder = _home_folder("protege-postfix-")
        try:
            self.starttls_port, self.tls_port = _free_ports(2)
            self._configure()
            self._make_queue()
            postconf = [str(self.programs.postconf), "-c", str(self.folder / "etc")]
            daemon_directory = subprocess.run(
                [*postconf, "-h", "daemon_directory"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            # -d: master stays in the foreground, in the process group ended at the end.
            self.daemon = Daemon(
                [f"{daemon_directory}/master", "-c", str(self.folder / "etc"), "-d"],
                self.folder / "master.log",
            )
            self.daemon.start()
            _await_ports(self.daemon, (self.starttls_port, self.tls_port), "Postfix")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Submission:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def programs(self) -> Programs:
        return self.dovecot.programs

    def _configure(self) -> None:
        etc = self.folder / "etc"
        etc.mkdir()
        (self.folder / "queue").mkdir()
        # Every address is owned by the login of the same name: a user sends as themself.
        logins = etc / "logins"
        logins.write_text("/^(.*)$/ ${1}\n")
        certificates = self.dovecot._certificates
        dovecot = self.dovecot
        settings = {
            "compatibility_level": "3.6",
            "queue_directory": self.folder / "queue",
            "data_directory": self.folder / "data",
            "maillog_file": self.folder / "maillog",
            "maillog_file_prefixes": self.folder,
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": f"mail.{self.domain}",
            "mydomain": self.domain,
            "myorigin": "$mydomain",
            "mydestination": "",
            "relay_domains": "",
            "local_recipient_maps": "",
            "alias_maps": "",
            "alias_database": "",
            "inet_interfaces": "loopback-only",
            "inet_protocols": "ipv4",
            "mynetworks": "",
            "smtp_dns_support_level": "disabled",
            "virtual_mailbox_domains": self.domain,
            "virtual_transport": f"lmtp:inet:{HOST}:{dovecot.lmtp_port}",
            "default_transport": "error:5.7.1 the test server sends no mail out",
            "relay_transport": "error:5.7.1 the test server sends no mail out",
            "smtpd_tls_cert_file": certificates.cert_file,
            "smtpd_tls_key_file": certificates.key_file,
            "smtpd_tls_security_level": "encrypt",
            "smtpd_tls_auth_only": "yes",
            "smtpd_sasl_auth_enable": "yes",
            "smtpd_sasl_type": "dovecot",
            "smtpd_sasl_path": f"inet:{HOST}:{dovecot.auth_port}",
            "smtpd_sender_login_maps": f"regexp:{logins}",
            "smtpd_client_restrictions": "permit_sasl_authenticated, reject",
            "smtpd_sender_restrictions": "reject_sender_login_mismatch",
            "smtpd_relay_restrictions": "permit_sasl_authenticated, reject",
            "smtpd_recipient_restrictions": "permit_sasl_authenticated, reject",
            "biff": "no",
        }
        (etc / "main.cf").write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        (etc / "master.cf").write_text(
            POSTFIX_MASTER_CF.format(
                host=HOST, starttls_port=self.starttls_port, tls_port=self.tls_port
            )
        )
        # Postfix waits for a configuration file changed within the last second or two to
        # settle (it could be half written): these are written whole, so date them back.
        past = time.time() - 60
        for written in etc.iterdir():
            os.utime(written, (past, past))

    def _make_queue(self) -> None:
        """The queue's folders with the owners and modes Debian's postfix-files gives them,
        as ``postfix check`` makes them (it takes half a second, checking the files of the
        installation too)."""
        owner, group = pwd.getpwnam("postfix").pw_uid, grp.getgrnam("postdrop").gr_gid
        queue = self.folder / "queue"
        (queue / "pid").mkdir(mode=0o755)
        for name, mode, gid in [
            *((name, 0o700, -1) for name in QUEUE_FOLDERS),
            ("maildrop", 0o730, group),
            ("public", 0o710, group),
        ]:
            (queue / name).mkdir()
            os.chown(queue / name, owner, gid)
            (queue / name).chmod(mode)  # mkdir's mode is cut by the umask
        data = self.folder / "data"
        data.mkdir(mode=0o700)
        os.chown(data, owner, -1)

    def logs(self) -> str:
        """The end of Postfix's log, for a failure's report."""
        return _tail(self.folder / "master.log") + _tail(self.folder / "maillog")

    def stop(self) -> None:
        """Stop Postfix as its operator would (SIGTERM)."""
        self.daemon.end(gently=True)

    def close(self) -> None:
        """Kill Postfix and remove its folder."""
        with contextlib.suppress(AttributeError):
            self.daemon.end(gently=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def order_mail(number: int, *, sender: str = "jane@acme.example", headers: str = "") -> bytes:
    """A customer's mail to the agent asking after order ``number``, as a mailbox holds it
    (CRLF line ends), with ``headers`` written on top (as a provider adds its own)."""
    from email import policy
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"] = sender
    message["To"] = AGENT.address
    message["Subject"] = f"Order {number}"
    message["Message-ID"] = f"<order-{number}@acme.example>"
    message.set_content(f"Where is order {number}?")
    return headers.encode() + message.as_bytes(policy=policy.SMTP)
