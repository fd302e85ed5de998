"""Shared fixtures: synthetic plugin distributions, real enough for importlib.metadata."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import attrs
import pytest

from protege.config import Config
from protege.plugins import PluginHost, PluginSource, Selection, discover, normalize
from tests.cli import serving
from tests.mailservers import Certificates, Dovecot, MissingServers, Submission
from tests.mailservers import programs as mail_server_programs


class Site:
    """A folder on ``sys.path`` holding installed-looking distributions written by a test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.modules: list[str] = []

    def add(
        self,
        distribution: str,
        source: str = "",
        *,
        module: str | None = None,
        version: str = "1.0",
        entry_point: str | None = None,
    ) -> str:
        """Install ``distribution`` with one module holding ``source``; returns the module name."""
        module = module or normalize(distribution).replace("-", "_")
        (self.path / f"{module}.py").write_text(dedent(source))
        info = self.path / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
        )
        (info / "entry_points.txt").write_text(f"[protege]\n{entry_point or module} = {module}\n")
        importlib.invalidate_caches()
        self.modules.append(module)
        return module

    @staticmethod
    def tool_plugin(*class_names: str, extra: str = "") -> str:
        """Source of a plugin module registering one valid tool per class name."""
        classes = "".join(
            f"\nclass {name}(Tool):\n"
            f'    description = "Does {name}."\n\n'
            "    def use(self, context):\n"
            "        return self.success(by=__name__)\n"
            for name in class_names
        )
        registers = "".join(f"    register({name})\n" for name in class_names) or "    pass\n"
        return (
            "from protege import Tool, hookimpl\n"
            f"{classes}\n{extra}\n"
            "@hookimpl\ndef register_tools(register):\n" + registers
        )

    def sources(self) -> tuple[PluginSource, ...]:
        """The plugin sources of this site alone."""
        return discover(path=[str(self.path)])

    def host(self, selection: Selection | None = None) -> PluginHost:
        """Load this site's plugins, and nothing else installed, as a process would."""
        return PluginHost(self.sources(), selection or Selection())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty site of synthetic distributions, on ``sys.path`` for the test's duration."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    made = Site(path)
    yield made
    for module in made.modules:
        sys.modules.pop(module, None)


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Whatever a test started with ``tests.cli.serving.start`` ends with it, passed or
    failed (its whole process group, so `serve --processes` leaves no worker behind)."""
    yield
    serving.end_all()


@pytest.fixture
def run_protege(tmp_path: Path):
    """Run the real ``protege`` command in a subprocess, from an empty project folder."""
    project = tmp_path / "project"
    project.mkdir()

    def run(*args: str, env: dict[str, str] | None = None, pythonpath: Path | None = None):
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
        if pythonpath is not None:
            environ["PYTHONPATH"] = str(pythonpath)
        environ.update(env or {})
        # A group of its own, killed whole if the command outlives its wait: a command
        # that hangs under load must not leave itself or its children running.
        with subprocess.Popen(
            [sys.executable, "-m", "protege", *args],
            cwd=project,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as process:
            try:
                out, err = process.communicate(timeout=serving.patience(60))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    run.project = project
    return run


@pytest.fixture
def protege_in_process(tmp_path: Path, monkeypatch):
    """``run_protege``'s twin that runs the command in this process with click's test
    runner (no interpreter to start: several times faster, and nothing to leave running).
    For commands that need no process of their own: not ``serve``, not plugins found by
    entry point from a ``pythonpath``."""
    from click.testing import CliRunner

    from protege.cli import cli

    project = tmp_path / "project"
    project.mkdir()
    runner = CliRunner()
    before = set(sys.modules)

    def run(*args: str, env: dict[str, str] | None = None):
        with monkeypatch.context() as scoped:
            scoped.chdir(project)
            scoped.syspath_prepend(str(project))
            for name in [n for n in os.environ if n.startswith("PROTEGE_")]:
                scoped.delenv(name)
            result = runner.invoke(cli, list(args), env=env or {})
        for name in set(sys.modules) - before:  # the project's tool modules, fresh each time
            module = sys.modules.get(name)
            if str(project) in str(getattr(module, "__file__", "") or ""):
                del sys.modules[name]
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)

    run.project = project
    return run


class HostProject:
    """A host application's folder: tool modules written by a test, and its ``Config``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def module(self, name: str, source: str) -> str:
        """Write a host module (``pkg.sub`` names make packages); returns its name."""
        path = self.root.joinpath(*name.split("."))
        for parent in reversed([p for p in path.parents if self.root in p.parents]):
            parent.mkdir(exist_ok=True)
            (parent / "__init__.py").touch()
        path.with_suffix(".py").write_text(dedent(source))
        importlib.invalidate_caches()
        self.modules.append(name)
        return name

    def config(self, *tool_modules: str) -> Config:
        """The project's configuration naming ``tool_modules``."""
        return attrs.evolve(Config.defaults(self.root), tool_modules=tool_modules)


@pytest.fixture
def host_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty host application folder; its modules are forgotten after the test."""
    root = tmp_path / "app"
    root.mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    project = HostProject(root)
    yield project
    for name in list(sys.modules):
        if any(name == m or name.startswith(f"{m.split('.')[0]}.") for m in project.modules):
            sys.modules.pop(name, None)
    for name in project.modules:
        sys.modules.pop(name.split(".")[0], None)


def _scoop_tool(name: str, description: str) -> type:
    from protege import Tool

    def use(self, context):
        return self.success(tool=self.id)

    return type(name, (Tool,), {"description": description, "use": use, "__module__": "scoop"})


@pytest.fixture(scope="session")
def scoop_manifest():
    """The Scoop's tools from the toolkits seed, plus a built-in ``send_email``."""
    from protege.registry import Manifest, Origin, ToolEntry

    host = [
        _scoop_tool("LookupOrderTool", "Looks up an order."),
        _scoop_tool("CheckFlavorStockTool", "Checks flavor stock."),
        _scoop_tool("ProcessRefundTool", "Refunds an order."),
    ]
    entries = [ToolEntry(cls, Origin.HOST, "scoop") for cls in host]
    entries.append(
        ToolEntry(_scoop_tool("SendEmailTool", "Sends mail."), Origin.BUILTIN, "protege-mail")
    )
    return Manifest(tools=tuple(sorted(entries, key=lambda e: e.id)))


class Inbound:
    """The part of an inbound message tool resolution reads: who sent it, and whether the
    mail proved it."""

    def __init__(self, sender: str, authenticated: bool = True) -> None:
        self.sender = sender
        self.authenticated = authenticated

    def proves_sender(self, settings) -> bool:
        return self.authenticated or not settings.enforced


def run_context(
    agent,
    *,
    sender: str | None = None,
    responsibility: object = None,
    authenticated: bool = True,
    mode: str = "enforce",
):
    """A RunContext for a reply run from ``sender`` (whose mail proved it, unless
    ``authenticated`` is false) or a scheduled run."""
    import logging

    from protege import RunContext
    from protege.config import AuthenticationSettings, MailSettings

    config = Config.defaults(Path("."))
    mail = MailSettings(authentication=AuthenticationSettings(mode=mode))
    return RunContext(
        agent=agent,
        message=None if sender is None else Inbound(sender, authenticated),
        responsibility=responsibility,
        mail_queue=lambda mail, attachments=(), *, call: None,
        config=attrs.evolve(config, mail=mail),
        logger=logging.getLogger("test"),
        correlation_id="test",
    )


@pytest.fixture
def context_for():
    """Build a RunContext: ``context_for(agent, sender=...)`` or ``(agent, responsibility=...)``."""
    return run_context


class _Statements(logging.Handler):
    def __init__(self, sql: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sql = sql

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, tuple):  # peewee logs (sql, params)
            self.sql.append(record.msg[0])


@contextlib.contextmanager
def sql_run() -> Iterator[list[str]]:
    """The SQL of every statement peewee runs inside the block, from whatever thread."""
    sql: list[str] = []
    handler, peewee_log = _Statements(sql), logging.getLogger("peewee")
    level = peewee_log.level
    peewee_log.addHandler(handler)
    peewee_log.setLevel(logging.DEBUG)
    try:
        yield sql
    finally:
        peewee_log.removeHandler(handler)
        peewee_log.setLevel(level)


@pytest.fixture(scope="session")
def mail_certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """The test CA, its certificate for localhost and 127.0.0.1, and an untrusted pair."""
    return Certificates.make(tmp_path_factory.mktemp("mail-certificates"))


def _mail_servers_installed() -> None:
    try:
        mail_server_programs()
    except MissingServers as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def dovecot(mail_certificates: Certificates) -> Iterator[Dovecot]:
    """A fresh private Dovecot (IMAP with IDLE, LMTP, SASL) with the users ``AGENT`` and
    ``PERSON`` of ``tests.mailservers`` (``dovecot.agent``, ``dovecot.person``), ended
    and removed after the test however it went."""
    _mail_servers_installed()
    with Dovecot(certificates=mail_certificates) as server:
        yield server


@pytest.fixture
def dovecot_no_idle(mail_certificates: Certificates) -> Iterator[Dovecot]:
    """``dovecot``'s twin that does not advertise IDLE: its clients must poll."""
    _mail_servers_installed()
    with Dovecot(idle=False, certificates=mail_certificates) as server:
        yield server


@pytest.fixture
def submission(dovecot: Dovecot) -> Iterator[Submission]:
    """A private Postfix taking authenticated submission (STARTTLS or implicit TLS) for
    ``dovecot``'s users and delivering mail for example.test into it."""
    with Submission(dovecot) as server:
        yield server
