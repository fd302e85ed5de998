import logging

import pytest

from protege.config import Config
from protege.installation import open_installation
from protege.plugins import PluginHost, PluginStatus
from protege.registry import Origin, build_manifest

STAMP_TOOL = """
from protege import Tool

class StampTool(Tool):
    description = "Stamps a document for the host."

    def use(self, context):
        return self.success(by="host")
"""


def test_plugin_tools_enter_the_manifest_with_their_origin(site, host_project):
    site.add("acme-tools", site.tool_plugin("StampTool", "AlarmTool"), version="1.4")
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["alarm", "stamp"]
    stamp = manifest.get("stamp")
    assert (stamp.origin, stamp.source, stamp.version) == (Origin.PLUGIN, "acme-tools", "1.4")
    assert stamp.class_path == "acme_tools:StampTool"
    (report,) = manifest.plugins
    assert report.tool_ids == ("alarm", "stamp")


def test_tools_are_ordered_by_id_whatever_their_origin(site, host_project):
    site.add("acme-tools", site.tool_plugin("ZebraTool", "MangoTool"))
    site.add("protege-web", site.tool_plugin("BananaTool"), module="fake_web")
    host_project.module("shop_tools", STAMP_TOOL)
    manifest = build_manifest(host_project.config("shop_tools"), site.host())
    assert manifest.ids() == ["banana", "mango", "stamp", "zebra"]


def test_host_tool_wins_over_plugin_tool(site, host_project):
    site.add("acme-tools", site.tool_plugin("StampTool"))
    host_project.module("shop_tools", STAMP_TOOL)
    manifest = build_manifest(host_project.config("shop_tools"), site.host())
    assert manifest.get("stamp").origin is Origin.HOST
    (loser,) = manifest.shadowed
    assert (loser.entry.source, loser.winner.source) == ("acme-tools", "shop_tools")


def test_host_tool_wins_over_builtin_tool(site, host_project):
    site.add("protege-mail", site.tool_plugin("StampTool"), module="fake_mail")
    host_project.module("shop_tools", STAMP_TOOL)
    manifest = build_manifest(host_project.config("shop_tools"), site.host())
    assert manifest.get("stamp").origin is Origin.HOST
    assert [s.entry.origin for s in manifest.shadowed] == [Origin.BUILTIN]


def test_builtin_tool_wins_over_plugin_tool_whatever_the_names(site, host_project):
    site.add("aaa-tools", site.tool_plugin("StampTool"))
    site.add("protege-web", site.tool_plugin("StampTool"), module="fake_web")
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.get("stamp").source == "protege-web"
    assert manifest.shadowed[0].entry.source == "aaa-tools"


@pytest.mark.parametrize("order", [("beta-tools", "alpha-tools"), ("alpha-tools", "beta-tools")])
def test_between_two_plugins_the_first_by_distribution_name_wins(site, host_project, order):
    for name in order:
        site.add(name, site.tool_plugin("StampTool"))
    for _ in range(2):  # the same on every run
        manifest = build_manifest(host_project.config(), site.host())
        assert manifest.get("stamp").source == "alpha-tools"
        assert [s.entry.source for s in manifest.shadowed] == ["beta-tools"]


def test_shadowed_tool_is_reported_and_logged_once(site, host_project, caplog):
    site.add("alpha-tools", site.tool_plugin("StampTool"))
    site.add("beta-tools", site.tool_plugin("StampTool"))
    with caplog.at_level(logging.WARNING, logger="protege.registry"):
        manifest = build_manifest(host_project.config(), site.host())
    assert manifest.problems() == [
        "tool stamp from plugin beta-tools 1.0 is shadowed by plugin alpha-tools 1.0"
    ]
    shadow_logs = [r for r in caplog.records if "shadowed" in r.getMessage()]
    assert len(shadow_logs) == 1


def test_exception_inside_register_tools_withdraws_that_plugins_tools_only(site, host_project):
    site.add(
        "flaky-tools",
        site.tool_plugin("AlarmTool").replace(
            "    register(AlarmTool)\n", "    register(AlarmTool)\n    raise KeyError('cfg')\n"
        ),
    )
    site.add("good-tools", site.tool_plugin("StampTool"))
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["stamp"]
    flaky = next(r for r in manifest.plugins if r.plugin.source.distribution == "flaky-tools")
    assert flaky.plugin.status is PluginStatus.ERROR
    assert flaky.plugin.error == "KeyError: 'cfg'"
    assert flaky.tool_ids == ()
    assert "plugin flaky-tools 1.0: KeyError: 'cfg'" in manifest.problems()


def test_plugin_offering_a_broken_class_keeps_its_valid_tools(site, host_project):
    extra = """
class NoDescriptionTool(Tool):
    def use(self, context):
        return None

class NotATool:
    pass
"""
    source = site.tool_plugin("StampTool", extra=extra).replace(
        "    register(StampTool)\n",
        "    register(NoDescriptionTool)\n    register(NotATool)\n    register(StampTool)\n",
    )
    site.add("mixed-tools", source)
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["stamp"]
    reasons = [r.reason for r in manifest.rejected]
    assert reasons[0] == "NoDescriptionTool: description must be a non-empty string"
    assert "NotATool" in reasons[1]
    assert "not a subclass of protege.Tool" in reasons[1]
    assert {r.source for r in manifest.rejected} == {"mixed-tools"}


def test_registering_the_same_class_twice_is_harmless(site, host_project):
    source = site.tool_plugin("StampTool").replace(
        "    register(StampTool)\n", "    register(StampTool)\n    register(StampTool)\n"
    )
    site.add("eager-tools", source)
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["stamp"]
    assert manifest.shadowed == ()


def test_membership_and_lookup(site, host_project):
    site.add("acme-tools", site.tool_plugin("StampTool"))
    manifest = build_manifest(host_project.config(), site.host())
    assert "stamp" in manifest
    assert "alarm" not in manifest
    assert manifest.get("alarm") is None
    assert [e.id for e in manifest] == ["stamp"]
    assert len(manifest) == 1


def test_each_installation_loads_its_own_plugins_and_builds_its_own_manifest(tmp_path):
    config = Config.defaults(tmp_path)
    first = open_installation(config, connect=False)
    second = open_installation(config, connect=False)
    assert first.manifest is not second.manifest
    assert first.plugins is not second.plugins
    assert first.manifest.ids() == second.manifest.ids()


def test_installed_weather_example_is_a_plugin_tool(tmp_path):
    manifest = build_manifest(Config.defaults(tmp_path), PluginHost())
    forecast = manifest.get("get_forecast")
    assert forecast.origin is Origin.PLUGIN
    assert forecast.source == "protege-weather"


@pytest.mark.parametrize(
    "raised", ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "asyncio.CancelledError"]
)
def test_register_tools_raising_any_base_exception_is_reported_and_the_others_load(
    site, host_project, raised
):
    site.add(
        "hostile-tools",
        "import asyncio\n"
        + site.tool_plugin("AlarmTool").replace(
            "    register(AlarmTool)\n", f"    register(AlarmTool)\n    raise {raised}('x')\n"
        ),
    )
    site.add("good-tools", site.tool_plugin("StampTool"))
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["stamp"]
    hostile = next(r for r in manifest.plugins if r.plugin.source.distribution == "hostile-tools")
    assert hostile.plugin.status is PluginStatus.ERROR
    assert hostile.plugin.error == f"{raised.split('.')[-1]}: x"
