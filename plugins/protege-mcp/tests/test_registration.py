"""The manifest's half: what the last sync recorded becomes tools, withheld tools or
reported refusals, failing closed whatever the record holds."""

from __future__ import annotations

import sys

import pytest

from protege.errors import InvalidTool
from protege.tool import check_tool_class
from protege_mcp.record import failed, key_for, listed
from protege_mcp.registration import register_recorded
from protege_mcp.settings import McpSettings, ServerSettings


class Registration:
    """What a register_tools hook's ``register`` was told."""

    def __init__(self) -> None:
        self.tools: dict[str, type] = {}
        self.withheld: dict[str, str] = {}
        self.rejected: list[str] = []

    def __call__(self, tool_class: type) -> None:
        try:  # as the manifest's register does
            check_tool_class(tool_class)
        except InvalidTool as error:
            self.rejected.append(str(error))
            return
        self.tools[tool_class.id] = tool_class

    def withhold(self, tool_id: str, reason: str) -> None:
        self.withheld[tool_id] = reason

    def reject(self, reason: str) -> None:
        self.rejected.append(reason)


def server(**settings) -> ServerSettings:
    return ServerSettings(command=sys.executable, **settings)


def tool(name: str, **spec) -> dict:
    return {"name": name, "description": f"{name}.", "input_schema": {"type": "object"}, **spec}


def register(servers: dict[str, ServerSettings], records: dict) -> Registration:
    made = Registration()
    register_recorded(made, McpSettings(servers=servers), records.get)
    return made


def test_a_servers_tool_cannot_take_the_id_of_a_withheld_one():
    # aa's ping was granted by a toolkit; while aa is down, bb's ping must not become it.
    aa, bb = server(args=["aa"]), server(args=["bb"])
    records = {
        key_for("aa"): failed(aa, "it exited at start-up", listed(aa, [tool("ping")])),
        key_for("bb"): listed(bb, [tool("ping")]),
    }
    made = register({"aa": aa, "bb": bb}, records)
    assert made.tools == {}
    assert made.withheld == {}
    assert made.rejected == [
        "the MCP tools aa/ping, bb/ping would all be ping: none of them is offered "
        "(give their servers different prefixes)"
    ]


def test_a_down_servers_tools_are_withheld_with_why():
    aa = server(args=["aa"])
    records = {key_for("aa"): failed(aa, "it exited at start-up", listed(aa, [tool("ping")]))}
    made = register({"aa": aa}, records)
    assert made.tools == {}
    assert made.withheld["ping"].startswith("MCP server aa did not answer the last sync (")
    assert made.withheld["ping"].endswith("): it exited at start-up")


def test_a_record_of_other_settings_is_withheld_not_offered():
    records = {key_for("aa"): listed(server(args=["old"]), [tool("ping")])}
    made = register({"aa": server(args=["new"])}, records)
    assert made.tools == {}
    assert "changed since the last sync" in made.withheld["ping"]


@pytest.mark.parametrize(
    ("tools", "why"),
    [
        (5, "its record cannot be read (TypeError)"),
        ([{"description": "no name"}], "a recorded tool has no name"),
        ([7], "a recorded tool is not a table"),
        ([tool("ping", annotations="abc")], "has hints that are not a table"),
        ([tool("ping", description=["x"])], "has a description that is not text"),
    ],
)
def test_a_tampered_record_refuses_what_it_spoils_and_no_more(tools, why):
    aa, bb = server(args=["aa"]), server(args=["bb"])
    spoiled = {**listed(aa, []), "tools": tools}
    made = register(
        {"aa": aa, "bb": bb}, {key_for("aa"): spoiled, key_for("bb"): listed(bb, [tool("pong")])}
    )
    assert list(made.tools) == ["pong"]
    assert any(why in line for line in made.rejected), made.rejected


def test_the_allow_list_and_prefix_apply_to_the_record_as_the_settings_now_say():
    aa = server(args=["aa"], tools=("ping",), prefix="box_")
    records = {key_for("aa"): listed(aa, [tool("ping"), tool("pong")])}
    made = register({"aa": aa}, records)
    assert list(made.tools) == ["box_ping"]
    assert made.tools["box_ping"].server == "aa"
    assert made.tools["box_ping"].mcp_name == "ping"


def test_a_record_whose_schema_breaks_the_checker_refuses_that_tool_only():
    aa = server(args=["aa"])
    broken = tool("sneaky", input_schema={"type": "object", "$schema": 5})
    made = register({"aa": aa}, {key_for("aa"): listed(aa, [broken, tool("ping")])})
    assert list(made.tools) == ["ping"]
    assert any("$schema must be the URI" in line for line in made.rejected), made.rejected
