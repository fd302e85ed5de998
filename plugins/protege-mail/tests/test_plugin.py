from protege.installation import open_installation
from protege.plugins import PluginStatus, discover


def test_found_through_its_entry_point_as_a_builtin():
    (source,) = [s for s in discover() if s.distribution == "protege-mail"]
    assert source.entry_point == "protege_mail"
    assert source.builtin


def test_loads_cleanly_and_registers_only_what_it_ships():
    manifest = open_installation(connect=False).manifest
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == "protege-mail"]
    assert report.plugin.status is PluginStatus.OK
    assert report.plugin.hooks == ("register_tools",)
    assert report.tool_ids == ("search_emails", "send_email")
