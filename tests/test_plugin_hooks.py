"""Hooks are called through pluggy's caller: its order, wrappers and firstresult hold, and
protege's guard keeps one plugin's failure from reaching the others."""

import logging
import time

import pluggy
import pytest

from protege import hookimpl, hookspecs
from protege.plugins import PluginHost, PluginStatus, Selection, current_plugin
from protege.registry import build_manifest


def calls(host, hook="register_tools"):
    """Call ``hook`` with a ``register`` that notes which plugin called it with what."""
    seen = []

    def register(value):
        seen.append((current_plugin().source.distribution, value))

    getattr(host.hook, hook)(register=register)
    return seen


def registering(value, marker="@hookimpl"):
    return (
        f"from protege import hookimpl\n\n{marker}\n"
        f"def register_tools(register):\n    register({value!r})\n"
    )


def test_tryfirst_and_trylast_order_the_calls_whatever_the_names(site):
    site.add("aaa-last", registering("last", "@hookimpl(trylast=True)"))
    site.add("mmm-plain", registering("plain"))
    site.add("zzz-first", registering("first", "@hookimpl(tryfirst=True)"))
    assert [value for _, value in calls(site.host())] == ["first", "plain", "last"]


NEW_STYLE_WRAPPER = """
from protege import Tool, hookimpl

class WrappedTool(Tool):
    description = "Registered by a wrapper."

    def use(self, context):
        return self.success()

@hookimpl(wrapper=True)
def register_tools(register):
    register(WrappedTool)
    return (yield)
"""

OLD_STYLE_WRAPPER = NEW_STYLE_WRAPPER.replace("wrapper=True", "hookwrapper=True").replace(
    "return (yield)", "yield"
)


@pytest.mark.parametrize("source", [NEW_STYLE_WRAPPER, OLD_STYLE_WRAPPER], ids=["new", "old"])
def test_a_plugin_whose_register_tools_is_a_wrapper_registers_its_tools(site, host_project, source):
    site.add("wrapping-tools", source)
    site.add("plain-tools", site.tool_plugin("StampTool"))
    manifest = build_manifest(host_project.config(), site.host())
    assert manifest.ids() == ["stamp", "wrapped"]
    assert manifest.get("wrapped").source == "wrapping-tools"


def test_a_wrapper_runs_around_the_others(site):
    site.add(
        "around-tools",
        "from protege import hookimpl\n\n"
        "@hookimpl(wrapper=True)\n"
        "def register_tools(register):\n"
        "    register('before')\n"
        "    result = yield\n"
        "    register('after')\n"
        "    return result\n",
    )
    site.add("inner-tools", registering("inner"))
    assert [value for _, value in calls(site.host())] == ["before", "inner", "after"]


def test_a_raising_implementation_is_reported_and_the_others_still_run(site, caplog):
    site.add(
        "aaa-broken",
        "from protege import hookimpl\n\n@hookimpl(tryfirst=True)\n"
        "def register_tools(register):\n    register('early')\n    raise ValueError('boom')\n",
    )
    site.add("zzz-fine", registering("fine"))
    host = site.host()
    with caplog.at_level(logging.WARNING):
        seen = calls(host)
    assert ("zzz-fine", "fine") in seen
    broken = next(p for p in host.plugins if p.source.distribution == "aaa-broken")
    assert broken.status is PluginStatus.ERROR
    assert broken.error == "ValueError: boom"
    assert "raise ValueError('boom')" in broken.failures["register_tools"].traceback
    assert "aaa-broken" in caplog.text
    # A broken plugin is not called again.
    assert [d for d, _ in calls(host)] == ["zzz-fine"]


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_wrapper_that_raises_leaves_the_call_as_it_would_be_without_it(site, where):
    before = "    raise ValueError('no')\n" if where == "before" else ""
    after = "    raise ValueError('no')\n" if where == "after" else ""
    site.add(
        "bad-wrapper",
        "from protege import hookimpl\n\n@hookimpl(wrapper=True)\n"
        f"def register_tools(register):\n{before}    result = yield\n{after}    return result\n",
    )
    site.add("inner-tools", registering("inner"))
    host = site.host()
    assert calls(host) == [("inner-tools", "inner")]
    bad = next(p for p in host.plugins if p.source.distribution == "bad-wrapper")
    assert bad.failures["register_tools"].error == "ValueError: no"


class FirstResultSpecs:
    hookspec = pluggy.HookspecMarker("protege")

    @hookspec(firstresult=True)
    def pick_one(self, offered):
        """A hook answered by its first implementation to return something."""


def test_firstresult_passes_over_a_raising_implementation_to_the_next(site):
    site.add(
        "aaa-raises",
        "from protege import hookimpl\n\n@hookimpl(tryfirst=True)\n"
        "def pick_one(offered):\n    raise RuntimeError('down')\n",
    )
    site.add(
        "bbb-answers",
        "from protege import hookimpl\n\n@hookimpl\n"
        "def pick_one(offered):\n    return offered * 2\n",
    )
    site.add(
        "ccc-never",
        "from protege import hookimpl\n\n@hookimpl(trylast=True)\n"
        "def pick_one(offered):\n    raise AssertionError('not reached')\n",
    )
    host = PluginHost(site.sources(), Selection(), specs=(hookspecs, FirstResultSpecs))
    assert host.hook.pick_one(offered=21) == 42
    plugins = {p.source.distribution: p for p in host.plugins}
    assert "pick_one" in plugins["aaa-raises"].failures
    assert plugins["aaa-raises"].status is PluginStatus.OK  # one failed call, not a broken plugin
    assert plugins["ccc-never"].failures == {}


def test_a_register_callback_kept_and_called_later_is_refused(site, host_project):
    site.add(
        "late-tools",
        site.tool_plugin("StampTool").replace(
            "    register(StampTool)\n", "    KEPT.append(register)\n"
        )
        + "\nKEPT = []\n",
    )
    import importlib

    manifest = build_manifest(host_project.config(), site.host())
    kept = importlib.import_module("late_tools").KEPT
    assert manifest.ids() == []
    with pytest.raises(RuntimeError, match="while it runs"):
        kept[0](importlib.import_module("late_tools").StampTool)


class Slow:
    """Takes at least SLOW seconds: a lower bound no load can break."""

    @hookimpl
    def register_tools(self, register):
        time.sleep(SLOW)
        register("slow")


SLOW = 0.05


class Failing:
    @hookimpl
    def register_tools(self, register):
        raise LookupError("nothing here")


def test_observing_tells_each_implementation_s_time_and_failure_by_plugin():
    from protege.plugins import observing

    host = PluginHost(sources=(), selection=Selection(), internal=())
    host.add(Slow(), "slow-one")
    host.add(Failing(), "failing-one")
    seen = []

    def observe(plugin, took, error):
        seen.append((plugin.name, took, None if error is None else type(error).__name__))

    with observing(observe):
        registered = calls(host)
    assert registered == [("slow-one", "slow")]
    by_name = {name: (took, error) for name, took, error in seen}
    assert by_name["failing-one"][1] == "LookupError"
    assert by_name["slow-one"][1] is None
    assert by_name["slow-one"][0] >= SLOW


def test_a_plugin_s_failures_are_in_its_report(site, host_project):
    site.add(
        "broken-tools",
        "from protege import hookimpl\n\n@hookimpl\n"
        "def register_tools(register):\n    raise ValueError('no tools today')\n",
    )
    manifest = build_manifest(host_project.config(), site.host())
    (report,) = manifest.plugins
    assert report.as_dict()["failures"] == [
        {"hook": "register_tools", "error": "ValueError: no tools today", "count": 1}
    ]
    assert report.as_dict()["status"] == "error"
