"""The files ``protege init`` and ``protege plugin new`` write, as templates."""

from __future__ import annotations

PROTEGE_TOML = """\
# protege.toml: the settings of this protege installation, read by every `protege`
# command run in this folder or below it (or named by PROTEGE_CONFIG).
# Every key is optional; a key protege does not know is an error, not silently ignored.
# `protege doctor` checks this file, the plugins and the tools.

# The modules holding your app's tools (packages are searched with their submodules).
tool_modules = {tool_modules}

# Where blobs and the outbox live, relative to this file. PROTEGE_DATA_DIR overrides.
# data_dir = ".protege"

# The database: SQLite in the data directory unless set. PROTEGE_DATABASE_URL overrides.
# PostgreSQL needs `pip install "protege[postgres]"`.
# database_url = "postgresql://protege@127.0.0.1/protege"

# Tool ids your own tools take from a plugin on purpose: `protege doctor` stays green.
# overrides = ["send_email"]

[model]
# Any OpenAI-compatible Chat Completions endpoint. PROTEGE_MODEL and
# PROTEGE_MODEL_BASE_URL override; without base_url, OPENAI_BASE_URL, else OpenAI's.
# model = "gpt-5-mini"
# base_url = "http://127.0.0.1:8000/v1"
# The environment variable holding the API key: the key itself is never written here.
api_key_env = "OPENAI_API_KEY"
# What the model reads besides text: "image", "pdf".
# input = ["text"]
# Prices per million tokens, per model that answers: `protege usage --cost`, `runs show`
# and the money limits under [limits] count with them.
# [model.prices]
# "gpt-5-mini" = {{ input = 0.25, output = 2.0 }}

[runs]
# The budgets of one run.
# max_model_turns = 20
# max_tool_failures = 5

[mail]
# Outgoing mail: "outbox" writes .eml files in the data directory; "smtp" sends.
# transport = "outbox"
# smtp_host = "smtp.example.com"
# smtp_port = 587
# smtp_username = "sundae"
# The variable holding the SMTP password.
# smtp_password_env = "PROTEGE_SMTP_PASSWORD"
# Seconds the relay may take to answer each step.
# smtp_timeout = 30
# The name protege greets the relay with (default: this machine's name, if it has a
# real one, else the address of the connection, such as [192.0.2.7]).
# ehlo_name = "mail.example.com"
# Where `protege serve` listens for inbound mail.
# listen_host = "127.0.0.1"
# listen_port = 2525

[mail.authentication]
# Allow rules and approvers admit only mail that proves its sender (DKIM or SPF aligned
# with From, a trusted relay or ARC sealer): "enforce"; "report" shows verdicts only.
# mode = "enforce"
# The relays in front of protege whose Authentication-Results are read, and their ids.
# trusted_relays = ["127.0.0.1"]
# trusted_authserv_ids = ["mx.example.com"]
# trusted_arc_sealers = []

[responsibilities]
# Where a scheduled run that failed for good is reported.
# notify = "ops@example.com"

[limits]
# What one sender, one agent and the installation may use, per UTC hour, day or month;
# 0 turns a limit off. Mail over a limit is stored and held: its run starts when the
# window reopens, or `protege runs release` starts it now.
# sender_runs_per_hour = 20
# sender_runs_per_day = 100
# agent_runs_per_hour = 500
# agent_tokens_per_day = 5000000
# installation_tokens_per_day = 20000000
# agent_cost_per_day = 0.0       # in the currency of [model.prices]
# Tell a held sender once per window (only a sender whose mail proves who sent it).
# notify_held = false
# Mail the operators when a limit is first reached, and when the model endpoint fails.
# alert_to = "ops@example.com"
# One agent's own limits:
# [limits.agents.Sundae]
# sender_runs_per_hour = 5

# Each plugin's own settings, in a table named after its distribution; `protege doctor`
# checks them against what the plugin declares. Secrets are named by environment variable.
# [plugins.protege-weather]
# units = "metric"
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{distribution}"
version = "0.1.0"
description = "A protege plugin: {summary}"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["protege", "attrs"]

[project.optional-dependencies]
test = ["pytest"]

# How protege finds the plugin: an entry point in the "protege" group, named after the module.
[project.entry-points.protege]
{module} = "{module}"

[tool.setuptools.packages.find]
include = ["{module}*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

MODULE = '''\
"""{distribution}: a protege plugin. {summary}"""

from __future__ import annotations

import attrs

from protege import RunContext, Tool, hookimpl

DISTRIBUTION = "{distribution}"


@attrs.frozen
class Settings:
    """The plugin's settings: ``[plugins.{distribution}]`` in protege.toml.

    A secret is never written there: add a field such as ``api_key_env`` naming the
    environment variable that holds it, and read the variable in the tool.
    """

    greeting: str = "Hello"


class {class_name}(Tool):
    description = (
        "Greets a person by name and returns the greeting. Use it when asked to say hello."
    )
    summary = "Greet a person by name."
    input_schema = {{
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {{"name": {{"type": "string", "minLength": 1}}}},
    }}

    def use(self, context: RunContext, name: str):
        settings = context.config.plugin_settings(DISTRIBUTION) or Settings()
        return self.success(greeting=f"{{settings.greeting}}, {{name}}!")


@hookimpl
def register_tools(register):
    """Offer the plugin's tools to protege."""
    register({class_name})


@hookimpl
def plugin_settings():
    """Declare the settings protege reads from [plugins.{distribution}]."""
    return Settings
'''

TESTS = '''\
"""{distribution}'s tests, with the fixtures protege's pytest plugin provides."""

import pytest

from protege import ProtegeError
from protege.testing import make_context, run_tool, with_plugin_settings


def test_the_tool_is_on_offer_and_greets(protege_app):
    context = make_context(config=protege_app.config)
    result = run_tool("{tool_id}", context=context, manifest=protege_app.manifest, name="Mara")
    assert result.ok
    assert result.data["greeting"] == "Hello, Mara!"


def test_a_call_without_a_name_is_a_failure_the_model_sees(protege_app):
    context = make_context(config=protege_app.config)
    result = run_tool("{tool_id}", context=context, manifest=protege_app.manifest)
    assert not result.ok
    assert "name" in result.reason


def test_the_greeting_is_read_from_protege_toml(protege_app):
    app = with_plugin_settings(protege_app, "{distribution}", {{"greeting": "Hi"}})
    context = make_context(config=app.config)
    result = run_tool("{tool_id}", context=context, manifest=app.manifest, name="Mara")
    assert result.data["greeting"] == "Hi, Mara!"


def test_an_unknown_setting_is_refused_with_its_name(protege_app):
    with pytest.raises(ProtegeError, match="greting"):
        with_plugin_settings(protege_app, "{distribution}", {{"greting": "Hi"}})
'''

README = """\
# {distribution}

A [protege](https://pypi.org/project/protege/) plugin. {summary}

## Install

```sh
protege install {distribution}      # or: pip install {distribution}, where protege runs
protege sync                        # adds its tools to the All Tools toolkit
```

`protege tools` then lists `{tool_id}`; grant it to an agent through a toolkit.

## Settings

In `protege.toml`:

```toml
[plugins.{distribution}]
greeting = "Hello"
```

## Develop

```sh
pip install -e ".[test]"
pytest
```
"""

GITIGNORE = """\
__pycache__/
*.egg-info/
build/
dist/
.protege/
"""

TOOL_CLASS = """\
class {class_name}(Tool):
    # What the model reads to decide when to call the tool: say what it does and when.
    description = "Repeats the text it is given. Use it when asked to echo something."
    summary = "Repeat a text."  # what operators read in `protege tools`
    input_schema = {{
        "type": "object",
        "additionalProperties": False,
        "required": ["text"],
        "properties": {{"text": {{"type": "string", "minLength": 1}}}},
    }}

    def use(self, context, text):
        return self.success(text=text)
"""

TOOL_TESTS = '''\
"""The {tool_id} tool, through dispatch as a run calls it, with protege's pytest plugin."""

from protege.testing import make_context, run_tool


def test_{tool_id}_gives_back_the_text(protege_app):
    context = make_context(config=protege_app.config)
    result = run_tool("{tool_id}", context=context, manifest=protege_app.manifest, text="hi")
    assert result.ok
    assert result.data == {{"text": "hi"}}


def test_{tool_id}_without_a_text_is_a_failure_the_model_sees(protege_app):
    context = make_context(config=protege_app.config)
    result = run_tool("{tool_id}", context=context, manifest=protege_app.manifest)
    assert not result.ok
    assert "text" in result.reason
'''
