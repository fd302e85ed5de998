import json
import os
import subprocess
import sys


def test_tools_json_lists_the_installed_weather_tool_as_a_plugin_tool(run_protege):
    result = run_protege("tools", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (forecast,) = [t for t in data if t["id"] == "get_forecast"]
    assert forecast.pop("description").startswith("Gets the daily weather forecast")
    assert forecast.pop("input_schema")["required"] == ["latitude", "longitude"]
    assert forecast == {
        "id": "get_forecast",
        "display_name": "Get Forecast",
        "summary": "Daily forecast (high, low, rain) for a latitude and longitude.",
        "origin": "plugin",
        "source": "protege-weather",
        "version": "0.1.0",
        "server": None,
        "annotations": {},
        "class": "protege_weather:GetForecastTool",
        "status": "offered",
    }


def test_tools_json_shows_a_host_tool_shadowing_a_plugin_tool(run_protege):
    project = run_protege.project
    (project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (project / "shop_tools.py").write_text(
        "from protege import Tool\n\n"
        "class GetForecastTool(Tool):\n"
        '    description = "The shop\'s own forecast."\n\n'
        "    def use(self, context):\n"
        "        return self.success()\n"
    )
    data = json.loads(run_protege("tools", "--json").stdout)
    forecast, shadowed = [t for t in data if t["id"] == "get_forecast"]
    assert (forecast["origin"], forecast["source"], forecast["status"]) == (
        "host",
        "shop_tools",
        "offered",
    )
    assert (shadowed["origin"], shadowed["source"], shadowed["status"]) == (
        "plugin",
        "protege-weather",
        "shadowed",
    )
    assert shadowed["shadowed_by"]["source"] == "shop_tools"


def test_an_override_named_in_protege_toml_keeps_doctor_green(run_protege):
    project = run_protege.project
    (project / "protege.toml").write_text(
        'tool_modules = ["shop_tools"]\noverrides = ["get_forecast"]\n'
    )
    (project / "shop_tools.py").write_text(
        "from protege import Tool\n\n"
        "class GetForecastTool(Tool):\n"
        '    description = "The shop\'s own forecast."\n\n'
        "    def use(self, context):\n"
        "        return self.success()\n"
    )
    data = json.loads(run_protege("tools", "--json").stdout)
    assert [t["status"] for t in data if t["id"] == "get_forecast"] == ["offered", "overridden"]
    doctor = run_protege("doctor", env={"PROTEGE_MODEL": "test-model"})
    assert doctor.returncode == 0, doctor.stdout
    assert "shadowed" not in doctor.stderr


def test_an_override_that_overrides_nothing_is_reported(run_protege):
    (run_protege.project / "protege.toml").write_text('overrides = ["get_forcast"]\n')
    doctor = run_protege("doctor")
    assert doctor.returncode == 1
    assert (
        "problem: overrides in protege.toml names get_forcast, but no host tool takes that id "
        "from a plugin"
    ) in doctor.stdout.splitlines()


def test_tools_json_into_a_reader_that_stops_early_ends_quietly(site, run_protege):
    import os
    import subprocess
    import sys

    # Far more than a pipe holds, so protege is still writing when the reader goes away.
    site.add("many-tools", site.tool_plugin(*[f"Tool{i}Tool" for i in range(800)]))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
    result = subprocess.run(
        f"{sys.executable} -m protege tools --json | head -n 2; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        cwd=run_protege.project,
        env={**environ, "PYTHONPATH": str(site.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout == "[\n  {\n"
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "BrokenPipe" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_tools_table_lists_origin_and_shadowed_entries(site, run_protege):
    site.add("alpha-tools", site.tool_plugin("GetForecastTool"), version="3.0")
    result = run_protege("tools", pythonpath=site.path)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "ORIGIN", "FROM", "HINTS", "SUMMARY"]
    row = next(line for line in lines if line.startswith("get_forecast "))
    assert "alpha-tools 3.0" in row
    assert "Shadowed (never offered):" in lines
    shadow_row = lines[-1]
    assert shadow_row.split()[:3] == ["get_forecast", "plugin", "protege-weather"]
    assert shadow_row.endswith("plugin alpha-tools 3.0")
    assert "1 problem(s) found" in result.stderr


def test_load_list_hides_third_party_tools(run_protege):
    data = json.loads(run_protege("tools", "--json", env={"PROTEGE_LOAD_PLUGINS": ""}).stdout)
    assert "get_forecast" not in [t["id"] for t in data]


# What `protege tools` has no use for, and would pay for at every start: a JSON Schema
# validator (no installed plugin declares its settings as one), cattrs (every table is
# plain), the full email address parser and IDNA (no address is read).
START_UP = ("jsonschema", "cattrs", "email.headerregistry", "idna")
LIST_TOOLS = f"""
import sys
from protege.cli import cli
cli.main(["tools"], prog_name="protege", standalone_mode=False)
print(" ".join(name for name in {START_UP!r} if name in sys.modules), file=sys.stderr)
"""


def test_listing_the_tools_loads_no_library_it_has_no_use_for(run_protege):
    (run_protege.project / "protege.toml").write_text(
        '[responsibilities]\nnotify = "ops@thescoop.com"\n'
        "[plugins.protege-dashboard]\nport = 8030\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
    out = subprocess.run(
        [sys.executable, "-c", LIST_TOOLS],
        cwd=run_protege.project,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "get_forecast" in out.stdout
    assert out.stderr.split() == []
