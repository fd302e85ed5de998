"""Plugin settings: declared by a plugin, written in [plugins.NAME], checked when the
manifest is built, handed to the plugin's tools through the installation's config."""

from __future__ import annotations

import attrs
import pytest

from protege.config import Config
from protege.installation import open_installation
from protege.registry import build_manifest

ATTRS_PLUGIN = """
import attrs
from protege import Tool, hookimpl

@attrs.frozen
class Settings:
    units: str = attrs.field(
        default="metric", validator=attrs.validators.in_(["metric", "imperial"])
    )
    days: int = 3
    api_key_env: str = "ACME_KEY"

class ReadSettingsTool(Tool):
    description = "Returns its settings."
    def use(self, context):
        return self.success(settings=attrs.asdict(context.config.plugin_settings("acme-tools")))

@hookimpl
def register_tools(register):
    register(ReadSettingsTool)

@hookimpl
def plugin_settings():
    return Settings
"""

SCHEMA_PLUGIN = """
from protege import hookimpl

@hookimpl
def plugin_settings():
    return {
        "type": "object",
        "properties": {
            "region": {"type": "string", "enum": ["eu", "us"], "default": "eu"},
            "limit": {"type": "integer", "minimum": 1},
        },
    }
"""


def _config(tmp_path, **tables) -> Config:
    return attrs.evolve(Config.defaults(tmp_path), plugins=tables)


def _report(manifest, name):
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == name]
    return report


def test_attrs_settings_reach_the_plugins_tools_through_the_config(site, tmp_path):
    site.add("acme-tools", ATTRS_PLUGIN)
    config = _config(tmp_path, **{"acme-tools": {"units": "imperial"}})
    installation = open_installation(config, plugins=site.host(), connect=False)
    settings = installation.config.plugin_settings("Acme_Tools")
    assert (settings.units, settings.days, settings.api_key_env) == ("imperial", 3, "ACME_KEY")
    assert installation.manifest.problems() == []


def test_a_plugin_with_wrong_settings_is_reported_and_its_tools_are_not_offered(site, tmp_path):
    site.add("acme-tools", ATTRS_PLUGIN)
    config = _config(tmp_path, **{"acme-tools": {"units": "kelvin", "dayz": 4}})
    manifest = build_manifest(config, site.host())
    assert "read_settings" not in manifest
    report = _report(manifest, "acme-tools")
    assert report.status == "error"
    assert report.error.startswith("protege.toml has settings it cannot use: ")
    assert report.error.endswith("unknown key dayz (did you mean days?) @ plugins.acme-tools")
    wrong_value = _config(tmp_path, **{"acme-tools": {"units": "kelvin"}})
    error = _report(build_manifest(wrong_value, site.host()), "acme-tools").error
    assert "'units' must be in ['metric', 'imperial'] (got 'kelvin')" in error
    # The plugin host is not changed: the same plugins with good settings work.
    host = site.host()
    assert "read_settings" in build_manifest(_config(tmp_path), host)


def test_a_secret_written_in_the_file_is_refused(site, tmp_path):
    site.add("acme-tools", ATTRS_PLUGIN)
    config = _config(tmp_path, **{"acme-tools": {"api_key": "sk-live-123"}})
    report = _report(build_manifest(config, site.host()), "acme-tools")
    assert report.error == (
        "protege.toml has settings it cannot use: plugins.acme-tools.api_key: a secret is "
        "never written in protege.toml; name the environment variable that holds it "
        "(api_key_env)"
    )
    assert "sk-live" not in report.error


def test_json_schema_settings_are_checked_and_get_their_defaults(site, tmp_path):
    site.add("geo-tools", SCHEMA_PLUGIN)
    good = build_manifest(_config(tmp_path, **{"geo-tools": {"limit": 5}}), site.host())
    assert good.settings["geo-tools"] == {"region": "eu", "limit": 5}
    bad = build_manifest(
        _config(tmp_path, **{"geo-tools": {"limit": 0, "regoin": "us"}}), site.host()
    )
    error = _report(bad, "geo-tools").error
    assert "plugins.geo-tools.regoin: extra key, not one of limit, region" in error
    assert "(did you mean region?)" in error
    assert "plugins.geo-tools.limit: 0 is less than the minimum of 1" in error


def test_a_table_for_no_installed_plugin_is_a_problem_with_a_suggestion(site, tmp_path):
    site.add("acme-tools", ATTRS_PLUGIN)
    site.add("plain-tools", "")
    config = _config(tmp_path, **{"acme-tool": {}, "plain-tools": {"x": 1}})
    problems = build_manifest(config, site.host()).problems()
    assert (
        "protege.toml has [plugins.acme-tool], but no installed plugin is named acme-tool "
        "(did you mean acme-tools?)"
    ) in problems
    assert (
        "protege.toml has [plugins.plain-tools], but plain-tools declares no settings "
        "(no plugin_settings hook): the table is not used"
    ) in problems


def test_a_declaration_protege_cannot_use_breaks_only_that_plugin(site, tmp_path):
    site.add(
        "odd-tools",
        "from protege import hookimpl\n\n@hookimpl\ndef plugin_settings():\n    return 42\n",
    )
    report = _report(build_manifest(_config(tmp_path), site.host()), "odd-tools")
    assert report.error.endswith(
        "plugins.odd-tools: plugin_settings must return an attrs class or a JSON Schema "
        "(a dict), not int"
    )


MUTATING_PLUGIN = """
from protege import Tool, hookimpl

class MeddleTool(Tool):
    description = "Tries to change the settings every run reads."
    input_schema = {
        "type": "object",
        "required": ["how"],
        "additionalProperties": False,
        "properties": {"how": {"type": "string"}},
    }
    def use(self, context, how):
        settings = context.config.plugin_settings("geo-tools")
        if how == "replace":
            context.config.plugins["geo-tools"] = {"region": "us"}
        elif how == "key":
            settings["region"] = "us"
        else:
            settings["zones"].append("moon")
        return self.success()

@hookimpl
def register_tools(register):
    register(MeddleTool)

@hookimpl
def plugin_settings():
    return {
        "type": "object",
        "properties": {
            "region": {"type": "string", "default": "eu"},
            "zones": {"type": "array", "default": ["north"]},
        },
    }
"""


def test_a_tool_cannot_change_the_settings_other_runs_read(site, tmp_path, protege_db):
    from protege.testing import make_context, run_tool

    site.add("geo-tools", MUTATING_PLUGIN)
    installation = open_installation(_config(tmp_path), plugins=site.host(), connect=False)
    for how in ("replace", "key", "append"):
        context = make_context(config=installation.config)
        result = run_tool("meddle", context=context, manifest=installation.manifest, how=how)
        assert not result.ok
        assert result.reason.startswith("TypeError: these settings are read-only")
    settings = installation.config.plugin_settings("geo-tools")
    assert settings == {"region": "eu", "zones": ["north"]}


MUTABLE_SETTINGS_PLUGIN = """
import attrs
from protege import hookimpl

@attrs.define
class Settings:
    units: str = "metric"

@hookimpl
def plugin_settings():
    return Settings
"""


def test_a_settings_class_whose_fields_can_be_set_is_refused(site, tmp_path):
    site.add("loose-tools", MUTABLE_SETTINGS_PLUGIN)
    report = _report(build_manifest(_config(tmp_path), site.host()), "loose-tools")
    assert report.status == "error"
    assert report.error.endswith(
        "plugins.loose-tools: plugin_settings returned Settings, whose fields can be set "
        "(Settings): "
        "declare it with @attrs.frozen, so that no tool can change the settings other runs "
        "read"
    )


def test_a_frozen_settings_class_s_tables_and_lists_are_read_only(site, tmp_path):
    site.add(
        "list-tools",
        "import attrs\nfrom protege import hookimpl\n\n"
        "@attrs.frozen\nclass Settings:\n    hosts: list = attrs.Factory(list)\n\n"
        "@hookimpl\ndef plugin_settings():\n    return Settings\n",
    )
    config = _config(tmp_path, **{"list-tools": {"hosts": ["a.example"]}})
    installation = open_installation(config, plugins=site.host(), connect=False)
    hosts = installation.config.plugin_settings("list-tools").hosts
    assert hosts == ["a.example"]
    with pytest.raises(TypeError, match="read-only"):
        hosts.append("b.example")


def test_a_settings_class_settable_below_its_top_or_past_its_first_field_is_refused(site, tmp_path):
    site.add(
        "deep-tools",
        "import attrs\nfrom protege import hookimpl\n\n"
        "@attrs.define\nclass Limits:\n    rows: int = 10\n\n"
        "@attrs.frozen\nclass Settings:\n    limits: Limits = attrs.Factory(Limits)\n\n"
        "@hookimpl\ndef plugin_settings():\n    return Settings\n",
    )
    site.add(
        "half-tools",
        "import attrs\nfrom protege import hookimpl\n\n"
        "@attrs.define\nclass Settings:\n"
        "    fixed: int = attrs.field(default=1, on_setattr=attrs.setters.frozen)\n"
        "    loose: int = 2\n\n"
        "@hookimpl\ndef plugin_settings():\n    return Settings\n",
    )
    site.add("acme-tools", ATTRS_PLUGIN)
    manifest = build_manifest(_config(tmp_path), site.host())
    assert "fields can be set (Settings.limits)" in _report(manifest, "deep-tools").error
    assert "fields can be set (Settings)" in _report(manifest, "half-tools").error
    assert "read_settings" in manifest  # the others load
