"""Tools that live outside the process: listed and recorded by sync (``refresh_tools``),
offered from that record by every manifest (``register_tools(register, config, recorded)``),
withheld while their source is down, never silently dropped from toolkits."""

from __future__ import annotations

import contextlib
import json

import attrs
import pytest

from protege.config import Config
from protege.installation import open_installation
from protege.models import Toolkit
from protege.registry import build_manifest

# A plugin whose tools come from a catalogue file its settings name: sync lists the file,
# every manifest offers what the last sync recorded. A file that is missing is a catalogue
# that did not answer; one saying {"raise": ...} makes the hook itself fail.
CATALOGUE_PLUGIN = """
import json
from pathlib import Path

from protege import Tool, hookimpl

@hookimpl
def plugin_settings():
    return {"type": "object", "properties": {"catalogue": {"type": "string"}},
            "additionalProperties": False}

def _tool(name, spec):
    def use(self, context, **arguments):
        return self.success(tool=name, arguments=arguments)
    return type(name, (Tool,), {"description": spec["description"], "use": use,
                                "annotations": spec.get("annotations", {}),
                                "server": "catalogue"})

@hookimpl
def refresh_tools(app, record, recorded):
    path = Path(app.config.plugin_settings("catalogue-tools")["catalogue"])
    earlier = recorded("catalogue") or {}
    if not path.exists():
        record("catalogue", {**earlier, "error": "the catalogue is not there"})
        return ["the catalogue did not answer"]
    listed = json.loads(path.read_text())
    if "raise" in listed:
        raise RuntimeError(listed["raise"])
    if listed.get("forget"):
        record("catalogue", None)
        return None
    record("catalogue", {"tools": listed["tools"], "error": None})
    return None

@hookimpl
def register_tools(register, config, recorded):
    found = recorded("catalogue")
    if found is None:
        register.reject("nothing recorded yet: run protege sync")
        return
    for name, spec in sorted(found["tools"].items()):
        if found["error"]:
            register.withhold(name, "the catalogue was down at the last sync")
        else:
            register(_tool(name, spec))
"""


@pytest.fixture
def catalogue(site, tmp_path):
    """The catalogue file the plugin lists, and a way to open an installation on it."""
    site.add("catalogue-tools", CATALOGUE_PLUGIN)
    path = tmp_path / "catalogue.json"

    def write(**tools: dict) -> None:
        path.write_text(json.dumps({"tools": tools}))

    config = attrs.evolve(
        Config.defaults(tmp_path), plugins={"catalogue-tools": {"catalogue": str(path)}}
    )

    @contextlib.contextmanager
    def opened():
        # Activated: the records this test reads are this installation's, whatever
        # database an earlier test in this process bound.
        with open_installation(config, plugins=site.host()) as app, app.activated():
            yield app

    return attrs.make_class("Catalogue", ["path", "write", "opened", "host"])(
        path, write, opened, site.host
    )


def catalogue_host(catalogue):
    return catalogue.host()


def _catalogued(toolkit):
    """The catalogue's tools among a toolkit's members (other installed plugins' aside)."""
    return [i for i in toolkit.member_tool_ids if i in ("lookup_stock", "order_more")]


def _report(manifest, name="catalogue-tools"):
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == name]
    return report


def test_tools_are_offered_only_once_a_sync_has_recorded_them(catalogue):
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    with catalogue.opened() as app:
        assert "lookup_stock" not in app.manifest
        assert _report(app.manifest).rejected == ("nothing recorded yet: run protege sync",)
        report = app.sync()
        # The installation keeps what it opened with; the report carries what sync applied.
        assert "lookup_stock" not in app.manifest
        assert "lookup_stock" in report.manifest
        assert "lookup_stock" in report.added
        assert _catalogued(Toolkit.all_tools()) == ["lookup_stock"]
    with catalogue.opened() as app:
        assert app.manifest.get("lookup_stock").server == "catalogue"


def test_the_record_is_read_without_the_source_being_up(catalogue):
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    with catalogue.opened() as app:
        app.sync()
    catalogue.path.unlink()  # the source is gone; nothing lists it while serving
    with catalogue.opened() as app:
        assert "lookup_stock" in app.manifest


def test_a_source_down_at_sync_withholds_its_tools_and_toolkits_keep_them(catalogue):
    catalogue.write(
        lookup_stock={"description": "Looks up stock."},
        order_more={"description": "Orders more."},
    )
    with catalogue.opened() as app:
        app.sync()
        Toolkit.create(name="Stock", member_tool_ids=["lookup_stock"])
    catalogue.path.unlink()
    with catalogue.opened() as app:
        report = app.sync()
        assert report.listing_problems == ["catalogue-tools: the catalogue did not answer"]
        manifest = report.manifest
        assert "lookup_stock" not in manifest
        assert manifest.withheld_ids() == {"lookup_stock", "order_more"}
        # Nothing removed: All Tools and the operator's toolkit still list them.
        assert report.removed == []
        assert _catalogued(Toolkit.all_tools()) == ["lookup_stock", "order_more"]
        assert report.stale["Stock"] == ["lookup_stock"]
        assert (
            "tool lookup_stock from catalogue-tools is withheld: the catalogue was down at "
            "the last sync" in manifest.problems()
        )
        assert [w.tool_id for w in _report(manifest).withheld] == ["lookup_stock", "order_more"]
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    with catalogue.opened() as app:
        report = app.sync()
        # Back, and a tool the source no longer lists leaves All Tools.
        assert "lookup_stock" in report.manifest
        assert report.removed == ["order_more"]
        assert _catalogued(Toolkit.all_tools()) == ["lookup_stock"]


def test_a_refresh_that_raises_is_reported_and_keeps_the_earlier_record(catalogue):
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    with catalogue.opened() as app:
        app.sync()
    catalogue.path.write_text(json.dumps({"raise": "catalogue format 9 unknown"}))
    with catalogue.opened() as app:
        report = app.sync()
    assert report.listing_problems == [
        "plugin catalogue-tools could not list its tools (refresh_tools raised "
        "RuntimeError: catalogue format 9 unknown); what it recorded before is kept"
    ]
    assert "lookup_stock" in report.manifest
    assert report.removed == []


def test_a_record_can_be_forgotten(catalogue):
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    with catalogue.opened() as app:
        app.sync()
    catalogue.path.write_text(json.dumps({"forget": True}))
    with catalogue.opened() as app:
        report = app.sync()
    assert "lookup_stock" not in report.manifest
    assert report.removed == ["lookup_stock"]


def test_a_record_that_is_not_json_fails_that_plugin_only(site, tmp_path):
    site.add(
        "odd-tools",
        "from protege import hookimpl\n"
        "@hookimpl\n"
        "def refresh_tools(app, record):\n"
        "    record('listing', {1, 2})\n",
    )
    with open_installation(Config.defaults(tmp_path), plugins=site.host()) as app:
        report = app.sync()
    (line,) = report.listing_problems
    assert line.startswith("plugin odd-tools could not list its tools (refresh_tools raised ")
    assert "record 'listing' is not JSON data" in line


def test_without_a_database_nothing_is_recorded_and_nothing_is_offered(catalogue, tmp_path):
    catalogue.write(lookup_stock={"description": "Looks up stock."})
    config = attrs.evolve(
        Config.defaults(tmp_path),
        plugins={"catalogue-tools": {"catalogue": str(catalogue.path)}},
    )
    with catalogue.opened() as app:
        app.sync()
    # A manifest built with no record to read (no database given) offers none of them.
    manifest = build_manifest(config, catalogue_host(catalogue))
    assert "lookup_stock" not in manifest
    assert _report(manifest).rejected == ("nothing recorded yet: run protege sync",)


def test_register_and_its_calls_refuse_use_after_the_hook(site, tmp_path):
    site.add(
        "late-tools",
        "from protege import hookimpl\n"
        "kept = []\n"
        "@hookimpl\n"
        "def register_tools(register):\n"
        "    kept.append(register)\n",
        module="late_tools",
    )
    build_manifest(Config.defaults(tmp_path), site.host())
    import late_tools

    (register,) = late_tools.kept
    with pytest.raises(RuntimeError, match="withhold is for a register_tools hook"):
        register.withhold("x", "y")
    with pytest.raises(RuntimeError, match="reject is for a register_tools hook"):
        register.reject("y")


def test_close_installation_is_called_once_when_the_installation_closes(site, tmp_path):
    site.add(
        "closing-tools",
        "from protege import hookimpl\n"
        "closed = []\n"
        "@hookimpl\n"
        "def close_installation(app):\n"
        "    closed.append(app)\n",
        module="closing_tools",
    )
    app = open_installation(Config.defaults(tmp_path), plugins=site.host(), connect=False)
    import closing_tools

    app.close()
    app.close()
    assert closing_tools.closed == [app]
