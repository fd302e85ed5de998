from protege.installation import open_installation
from protege.plugins import PluginStatus, discover


def test_found_through_its_entry_point_as_a_builtin():
    (source,) = [s for s in discover() if s.distribution == "protege-files"]
    assert source.entry_point == "protege_files"
    assert source.builtin


def test_loads_cleanly_and_registers_its_two_tools():
    manifest = open_installation(connect=False).manifest
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == "protege-files"]
    assert report.plugin.status is PluginStatus.OK
    assert report.plugin.hooks == ("plugin_settings", "register_tools")
    assert report.tool_ids == ("create_file", "read_attachment")
