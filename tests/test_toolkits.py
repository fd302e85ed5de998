import pytest

from protege.errors import ProtegeError
from protege.models import Toolkit
from protege.registry import Manifest, Origin, ToolEntry
from protege.toolkits import sync


def test_first_sync_creates_both_system_toolkits(protege_db, scoop_manifest):
    report = sync(scoop_manifest)
    assert report.created == ["All Tools", "Default Tools"]
    assert report.added == ["check_flavor_stock", "lookup_order", "process_refund", "send_email"]
    assert Toolkit.all_tools().member_tool_ids == report.added
    assert Toolkit.default_tools().member_tool_ids == ["send_email"]  # built-ins only


def test_sync_is_idempotent(protege_db, scoop_manifest):
    sync(scoop_manifest)
    again = sync(scoop_manifest)
    assert not again.changed
    assert again.as_dict() == {
        "migrations_applied": [],
        "toolkits_created": [],
        "all_tools_added": [],
        "all_tools_removed": [],
        "default_tools_lacks_builtins": [],
        "stale_members": {},
        "listing_problems": [],
    }


def test_all_tools_follows_the_live_manifest(protege_db, scoop_manifest):
    sync(scoop_manifest)
    smaller = Manifest(tools=tuple(e for e in scoop_manifest if e.id != "process_refund"))
    report = sync(smaller)
    assert (report.added, report.removed) == ([], ["process_refund"])
    assert "process_refund" not in Toolkit.all_tools().member_tool_ids
    Toolkit.create(name="Finance", member_tool_ids=["process_refund", "lookup_order"])
    assert sync(smaller).stale == {"Finance": ["process_refund"]}
    report = sync(scoop_manifest)
    assert (report.added, report.removed) == (["process_refund"], [])


def test_sync_never_overwrites_default_tools(protege_db, scoop_manifest):
    sync(scoop_manifest)
    default = Toolkit.default_tools()
    default.remove_tools(["send_email"])
    default.add_tools(["lookup_order"])
    report = sync(scoop_manifest)
    assert Toolkit.default_tools().member_tool_ids == ["lookup_order"]
    assert report.default_tools_lacks == ["send_email"]


def test_sync_reports_a_new_builtin_that_default_tools_lacks_without_adding_it(
    protege_db, scoop_manifest
):
    sync(scoop_manifest)
    newer = Manifest(
        tools=tuple(
            sorted(
                [*scoop_manifest, ToolEntry(_builtin("ReadAttachmentTool"), Origin.BUILTIN, "f")],
                key=lambda entry: entry.id,
            )
        )
    )
    report = sync(newer)
    assert report.added == ["read_attachment"]
    assert report.default_tools_lacks == ["read_attachment"]
    assert report.as_dict()["default_tools_lacks_builtins"] == ["read_attachment"]
    assert Toolkit.default_tools().member_tool_ids == ["send_email"]  # reported, not added
    assert "read_attachment" in Toolkit.all_tools().member_tool_ids


def test_a_new_installation_default_tools_holds_every_builtin(protege_db, scoop_manifest):
    report = sync(scoop_manifest)
    assert Toolkit.default_tools().member_tool_ids == ["send_email"]
    assert report.default_tools_lacks == []


def _builtin(name):
    from protege import Tool

    def use(self, context):
        return self.success()

    return type(name, (Tool,), {"description": "A built-in.", "use": use, "__module__": "f"})


def test_all_tools_is_rewritten_even_after_hand_edits(protege_db, scoop_manifest):
    sync(scoop_manifest)
    Toolkit.all_tools().remove_tools(["lookup_order"])
    report = sync(scoop_manifest)
    assert report.added == ["lookup_order"]


@pytest.mark.parametrize("accessor", [Toolkit.all_tools, Toolkit.default_tools])
def test_system_toolkits_cannot_be_deleted(protege_db, scoop_manifest, accessor):
    sync(scoop_manifest)
    with pytest.raises(ProtegeError, match="system toolkit and cannot be deleted"):
        accessor().delete_instance()
    assert accessor() is not None


def test_a_user_toolkit_squatting_a_system_name_is_a_clear_error(protege_db, scoop_manifest):
    Toolkit.create(name="All Tools")
    with pytest.raises(ProtegeError, match="already exists but is not the system toolkit"):
        sync(scoop_manifest)


def test_system_toolkits_do_not_exist_before_the_first_sync(protege_db):
    assert Toolkit.all_tools() is None
    assert Toolkit.default_tools() is None
