"""The README's code is run here, so what newcomers copy works."""

import re
from pathlib import Path

from protege.config import Config, RunSettings
from protege.registry import Origin, build_manifest
from protege.tool import check_tool_class

README = Path(__file__).parent.parent / "README.md"


def readme_block(name: str) -> str:
    pattern = rf"<!-- readme-test: {name} -->\n```python\n(.*?)```"
    match = re.search(pattern, README.read_text(), re.DOTALL)
    assert match, f"README has no block marked {name}"
    return match.group(1)


def test_the_tool_example_is_a_valid_tool_that_works():
    namespace: dict = {}
    exec(readme_block("tool"), namespace)
    tool_class = namespace["LookupOrderTool"]
    check_tool_class(tool_class)
    assert (tool_class.id, tool_class.display_name) == ("lookup_order", "Lookup Order")
    found = tool_class().use(context=None, order_number="SCP-1042")
    assert found.for_model() == {"ok": True, "status": "delivered", "total_cents": 2450}
    missing = tool_class().use(context=None, order_number="SCP-1")
    assert missing.reason == "no order SCP-1"


def test_the_plugin_example_registers_its_tool_when_installed(site, tmp_path):
    site.add("protege-dice", readme_block("plugin"))
    manifest = build_manifest(Config.defaults(tmp_path), site.host())
    roll = manifest.get("roll_dice")
    assert (roll.origin, roll.source) == (Origin.PLUGIN, "protege-dice")
    faces = roll.tool_class().use(context=None, count=3).data["faces"]
    assert len(faces) == 3
    assert all(1 <= face <= 6 for face in faces)


def test_the_scripted_model_example_is_the_weather_examples_test():
    example = (README.parent / "examples/protege-weather/tests/test_agent.py").read_text()
    block = readme_block("scripted")
    body = block[block.index("def test_an_agent_answers_with_the_forecast") :]
    for line in body.strip().splitlines():
        assert line in example, line


def test_the_configuration_examples_are_settings_protege_accepts(tmp_path):
    from protege.config import load_config

    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.DOTALL)
    settings = "\n".join(
        block for block in blocks if re.match(r"\[(model|runs|mail|blobs)\]", block)
    )
    assert "[mail]" in settings
    assert "[runs]" in settings
    (tmp_path / "protege.toml").write_text(settings)
    config = load_config(tmp_path, environ={})
    assert config.mail.max_recipients == 50
    assert config.runs.max_tool_calls_per_turn == 16
    assert config.model.input == ("text", "image", "pdf")
    assert config.runs == RunSettings()  # the README gives the defaults
    assert (config.blobs.store, config.blobs.bucket) == ("s3", "scoop-protege")


def test_the_parts_example_returns_the_picture_as_an_image_part(tmp_path, monkeypatch):
    namespace: dict = {}
    exec(readme_block("parts"), namespace)
    tool_class = namespace["FreezerCameraTool"]
    check_tool_class(tool_class)
    picture = (README.parent / "examples/the_scoop/the_scoop/melted-order.png").read_bytes()
    (tmp_path / "cameras").mkdir()
    (tmp_path / "cameras" / "B.png").write_bytes(picture)
    monkeypatch.chdir(tmp_path)
    result = tool_class().use(context=None, freezer="B")
    assert result.for_model() == {"ok": True, "freezer": "B", "celsius": -18}
    (part,) = result.parts
    assert (part.kind, part.media_type, part.filename, part.data) == (
        "image",
        "image/png",
        "B.png",
        picture,
    )


def test_the_install_line_brings_the_built_in_tools():
    import tomllib

    assert 'pip install "protege[builtins]"' in README.read_text()
    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    builtins = project["optional-dependencies"]["builtins"]
    assert sorted(builtins) == ["protege-files", "protege-mail", "protege-web"]
    for name in builtins:  # each is a distribution of this repository, of that name
        plugin = tomllib.loads((README.parent / "plugins" / name / "pyproject.toml").read_text())
        assert plugin["project"]["name"] == name


BUILT_IN_TOOLS = re.compile(r"`(protege-\w+)`\s+carries\s+`(\w+)`\s+and\s+`(\w+)`")


def _built_in_tools_said(text: str) -> dict[str, list[str]]:
    return {name: sorted(tools) for name, *tools in BUILT_IN_TOOLS.findall(text)}


def test_the_built_in_tools_named_in_the_readme_and_docs_are_those_the_manifest_has(tmp_path):
    from protege.plugins import PluginHost, Selection, discover

    builtins = [
        s for s in discover() if s.distribution in ("protege-mail", "protege-files", "protege-web")
    ]
    manifest = build_manifest(Config.defaults(tmp_path), PluginHost(tuple(builtins), Selection()))
    offered: dict[str, list[str]] = {}
    for entry in manifest.tools:
        assert entry.origin == Origin.BUILTIN
        offered.setdefault(entry.source, []).append(entry.id)
    offered = {name: sorted(tools) for name, tools in offered.items()}
    assert sorted(offered) == ["protege-files", "protege-mail", "protege-web"]
    assert _built_in_tools_said(README.read_text()) == offered
    assert _built_in_tools_said((README.parent / "docs" / "index.md").read_text()) == offered


def test_the_readme_names_every_run_status_the_dashboard_filters_by():
    from protege.migrations import RUN_STATUSES

    match = re.search(r"\*\*Runs\*\*: filtered by agent, status \(([^)]*)\)", README.read_text())
    assert match
    said = re.findall(r"`(\w+)`", match.group(1))
    assert sorted(said) == sorted(RUN_STATUSES)


def test_the_readme_outlines_the_staging_example_with_the_hooks_it_implements():
    import protege_staging

    readme = README.read_text()
    outline = readme.split("[`examples/protege-staging`]", 1)[1].split("```python", 1)[1]
    outline = outline.split("```", 1)[0]
    implemented = {
        name for name, value in vars(protege_staging).items() if hasattr(value, "protege_impl")
    }
    assert implemented == {"plugin_settings", "register_transports", "prompt_sections", "on_event"}
    for hook in implemented - {"plugin_settings"}:
        assert f"def {hook}(" in outline, hook


def test_the_embedding_example_serves_mail_on_the_hosts_loop_and_stops(
    tmp_path, monkeypatch, scripted_model
):
    import asyncio
    import email
    import smtplib
    from email import policy

    from protege.config import DNS_OFFLINE_VARIABLE
    from protege.testing import free_port, say, tool_call
    from tests.looping import protege_threads, until

    for name in ("PROTEGE_DATABASE_URL", "PROTEGE_DATA_DIR", "PROTEGE_MAIL_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(DNS_OFFLINE_VARIABLE, "1")
    monkeypatch.chdir(tmp_path)
    port = free_port()
    (tmp_path / "protege.toml").write_text(
        f'[mail]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\n'
    )
    namespace: dict = {"__name__": "the_readme"}
    exec(readme_block("embedding"), namespace)
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), say("Sent."))
    outbox = tmp_path / ".protege" / "outbox"
    seen = []

    def send(address):
        raw = (
            b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\n"
            b"Subject: Melted\r\nMessage-ID: <j1@acme.com>\r\n\r\nIt arrived melted.\r\n"
        )
        with smtplib.SMTP(*address, timeout=30) as client:
            client.sendmail("jane@acme.com", ["sundae@thescoop.example"], raw)

    async def host_work(server):
        seen.append(server.smtp_address)
        await asyncio.to_thread(send, server.smtp_address)  # smtplib blocks
        await until(lambda: list(outbox.glob("*.eml")))  # the delivery loop sends it

    asyncio.run(namespace["serve_beside"](host_work))
    assert seen == [("127.0.0.1", port)]
    (path,) = outbox.glob("*.eml")
    reply = email.message_from_bytes(path.read_bytes(), policy=policy.default)
    assert (reply["To"], reply["Subject"]) == ("jane@acme.com", "Re: Melted")
    assert "On it." in reply.get_content()
    assert protege_threads() == []
    # Run again, the example finds Sundae and serves as before (nothing left open).
    asyncio.run(namespace["serve_beside"](lambda server: asyncio.sleep(0)))


def test_every_mailbox_example_is_settings_protege_accepts(tmp_path):
    from protege.config import load_config

    section = README.read_text().split("## Connect an existing mailbox", 1)[1].split("\n## ")[0]
    blocks = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 5  # the settings, then Gmail, Microsoft 365, Fastmail and Dovecot
    hosts = set()
    for block in blocks:
        (tmp_path / "protege.toml").write_text(block)
        config = load_config(tmp_path, environ={})
        (mailbox,) = config.mail.imap.values()
        assert mailbox.agent == "support@company.com"
        assert config.mail.submission.host is not None
        hosts.add(mailbox.host)
    assert {"imap.gmail.com", "outlook.office365.com", "imap.fastmail.com"} <= hosts
