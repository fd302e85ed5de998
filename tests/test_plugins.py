import sys

import pytest

from protege.plugins import (
    PluginHost,
    PluginStatus,
    Selection,
    discover,
    normalize,
)
from protege.registry import build_manifest


def by_distribution(host: PluginHost):
    return {p.source.distribution: p for p in host.plugins}


def test_installed_example_plugin_is_found_through_its_entry_point():
    (weather,) = [s for s in discover() if s.distribution == "protege-weather"]
    assert (weather.entry_point, weather.value) == ("protege_weather", "protege_weather")
    assert weather.origin == "plugin"
    builtins = {s.distribution for s in discover() if s.builtin}
    assert builtins == {"protege-mail", "protege-files", "protege-web"}


def test_synthetic_distribution_is_discovered_and_loaded(site):
    site.add("acme-tools", site.tool_plugin("StampTool"), version="2.3")
    (source,) = site.sources()
    assert (source.distribution, source.version, source.entry_point) == (
        "acme-tools",
        "2.3",
        "acme_tools",
    )
    (plugin,) = site.host().plugins
    assert plugin.status is PluginStatus.OK
    assert plugin.hooks == ("register_tools",)


def test_sources_are_ordered_by_distribution_name(site):
    for name in ("zeta-tools", "Alpha_Tools", "mid-tools"):
        site.add(name, site.tool_plugin())
    assert [s.distribution for s in site.sources()] == ["Alpha_Tools", "mid-tools", "zeta-tools"]


def test_plugin_that_fails_to_import_is_reported_and_the_others_load(site):
    site.add("broken-tools", "raise ImportError('needs libfoo')\n")
    site.add("good-tools", site.tool_plugin("StampTool"))
    plugins = by_distribution(site.host())
    assert plugins["broken-tools"].status is PluginStatus.ERROR
    assert plugins["broken-tools"].error == "ImportError: needs libfoo"
    assert plugins["good-tools"].status is PluginStatus.OK


def test_plugin_that_exits_on_import_is_reported_not_fatal(site):
    site.add("exiting-tools", "import sys\nsys.exit(3)\n")
    (plugin,) = site.host().plugins
    assert plugin.status is PluginStatus.ERROR
    assert plugin.error == "SystemExit: 3"


def test_plugin_implementing_an_unknown_hook_is_reported(site):
    site.add(
        "typo-tools",
        "from protege import hookimpl\n\n@hookimpl\ndef register_tool(register):\n    pass\n",
    )
    (plugin,) = site.host().plugins
    assert plugin.status is PluginStatus.ERROR
    assert plugin.error == "implements unknown hook(s): register_tool"


def test_hookimpl_with_a_wrong_signature_is_reported(site):
    site.add(
        "odd-tools",
        "from protege import hookimpl\n\n"
        "@hookimpl\ndef register_tools(register, extra):\n    pass\n",
    )
    (plugin,) = site.host().plugins
    assert plugin.status is PluginStatus.ERROR
    assert "extra" in plugin.error


def test_two_distributions_using_one_entry_point_name_are_both_reported_and_neither_loads(site):
    # Whichever sorted first used to load: a squatter could pick its name to come first.
    site.add("first-tools", site.tool_plugin(), module="first_tools", entry_point="shared")
    site.add("second-tools", site.tool_plugin(), module="second_tools", entry_point="shared")
    plugins = by_distribution(site.host())
    assert plugins["first-tools"].status is PluginStatus.ERROR
    assert plugins["first-tools"].error == (
        "entry point name 'shared' is also used by second-tools; "
        "neither is loaded until one is uninstalled"
    )
    assert "used by first-tools" in plugins["second-tools"].error
    assert "first_tools" not in sys.modules
    assert "second_tools" not in sys.modules


def test_a_disabled_distribution_does_not_keep_another_from_its_entry_point_name(site):
    site.add("first-tools", site.tool_plugin(), module="first_tools", entry_point="shared")
    site.add("second-tools", site.tool_plugin(), module="second_tools", entry_point="shared")
    selection = Selection.from_environment({"PROTEGE_DISABLE_PLUGINS": "first-tools"})
    plugins = by_distribution(site.host(selection))
    assert plugins["second-tools"].status is PluginStatus.OK


def test_a_squatter_on_a_builtins_entry_point_name_leaves_the_builtin_in_place(site, host_project):
    site.add(
        "protege-mail",
        site.tool_plugin("SendEmailTool"),
        module="real_mail",
        entry_point="protege_mail",
    )
    site.add(
        "aaa-evil",
        site.tool_plugin("SendEmailTool"),
        module="evil_mail",
        entry_point="protege_mail",
    )
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.get("send_email").source == "protege-mail"
    evil = next(r for r in manifest.plugins if r.plugin.source.distribution == "aaa-evil")
    assert evil.plugin.status is PluginStatus.ERROR
    assert evil.plugin.error == (
        "entry point name 'protege_mail' belongs to the built-in plugin protege-mail; "
        "aaa-evil is not loaded"
    )
    assert "evil_mail" not in sys.modules


def test_empty_load_list_loads_no_third_party_plugin_and_never_imports_it(site):
    module = site.add("acme-tools", "raise RuntimeError('must not be imported')\n")
    site.add("protege-mail", site.tool_plugin(), module="fake_protege_mail")
    plugins = by_distribution(site.host(Selection.from_environment({"PROTEGE_LOAD_PLUGINS": ""})))
    assert plugins["acme-tools"].status is PluginStatus.DISABLED
    assert plugins["acme-tools"].error == "not named in PROTEGE_LOAD_PLUGINS"
    assert module not in sys.modules
    assert plugins["protege-mail"].status is PluginStatus.OK  # built-ins still load


def test_load_list_admits_the_plugins_it_names(site):
    site.add("acme-tools", site.tool_plugin())
    skipped = site.add("other-tools", "raise RuntimeError('must not be imported')\n")
    selection = Selection.from_environment({"PROTEGE_LOAD_PLUGINS": " Acme_Tools , "})
    plugins = by_distribution(site.host(selection))
    assert plugins["acme-tools"].status is PluginStatus.OK
    assert plugins["other-tools"].status is PluginStatus.DISABLED
    assert skipped not in sys.modules


def test_disable_list_skips_a_plugin_before_import(site):
    module = site.add("protege-weather-fake", "raise RuntimeError('must not be imported')\n")
    selection = Selection.from_environment({"PROTEGE_DISABLE_PLUGINS": "protege-weather-fake"})
    (plugin,) = site.host(selection).plugins
    assert plugin.status is PluginStatus.DISABLED
    assert plugin.error == "disabled by PROTEGE_DISABLE_PLUGINS"
    assert module not in sys.modules


def test_disable_list_also_applies_to_builtins(site):
    site.add("protege-web", "raise RuntimeError('must not be imported')\n", module="fake_web")
    selection = Selection.from_environment({"PROTEGE_DISABLE_PLUGINS": "protege_web"})
    (plugin,) = site.host(selection).plugins
    assert plugin.status is PluginStatus.DISABLED


def test_load_list_naming_an_uninstalled_plugin_is_noticed(site):
    site.add("acme-tools", site.tool_plugin())
    selection = Selection.from_environment({"PROTEGE_LOAD_PLUGINS": "acme-tools,ghost-tools"})
    assert site.host(selection).missing == ("ghost-tools",)


def test_distribution_names_compare_in_canonical_form():
    assert normalize("Protege_Weather") == normalize("protege.weather") == "protege-weather"


@pytest.mark.parametrize(
    ("raised", "error"),
    [
        ("KeyboardInterrupt('no')", "KeyboardInterrupt: no"),
        ("GeneratorExit()", "GeneratorExit"),
        ("__import__('asyncio').CancelledError()", "CancelledError"),
    ],
)
def test_plugin_raising_any_base_exception_on_import_is_reported(site, raised, error):
    site.add("hostile-tools", f"raise {raised}\n")
    site.add("good-tools", site.tool_plugin("StampTool"))
    plugins = by_distribution(site.host())
    assert plugins["hostile-tools"].status is PluginStatus.ERROR
    assert plugins["hostile-tools"].error == error
    assert plugins["good-tools"].status is PluginStatus.OK


def test_a_broken_distribution_on_the_path_spoils_no_plugin(site, run_protege, tmp_path):
    import os
    from pathlib import Path

    site.add("acme-tools", site.tool_plugin("StampTool"))
    egg = tmp_path / "broken.egg"  # an egg with no PKG-INFO: a distribution without a name
    (egg / "EGG-INFO").mkdir(parents=True)
    result = run_protege("tools", pythonpath=Path(f"{egg}{os.pathsep}{site.path}"))
    assert result.returncode == 0, result.stderr
    assert "acme-tools" in result.stdout


def test_a_squatter_on_the_dashboard_s_entry_point_name_leaves_the_dashboard_in_place(site):
    site.add("protege-dashboard", "", module="real_dashboard", entry_point="protege_dashboard")
    site.add("aaa-evil", "", module="evil_dashboard", entry_point="protege_dashboard")
    plugins = by_distribution(site.host())
    assert plugins["protege-dashboard"].status is PluginStatus.OK
    assert plugins["aaa-evil"].status is PluginStatus.ERROR
    assert "belongs to the built-in plugin protege-dashboard" in plugins["aaa-evil"].error
