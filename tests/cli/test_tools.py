import json


def test_tools_json_lists_the_installed_weather_tool_as_a_plugin_tool(run_protege):
    result = run_protege("tools", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (forecast,) = [t for t in data["tools"] if t["id"] == "get_forecast"]
    assert forecast == {
        "id": "get_forecast",
        "display_name": "Get Forecast",
        "summary": "Daily forecast (high, low, rain) for a latitude and longitude.",
        "origin": "plugin",
        "source": "protege-weather",
        "version": "0.1.0",
        "class": "protege_weather:GetForecastTool",
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
    (forecast,) = [t for t in data["tools"] if t["id"] == "get_forecast"]
    assert (forecast["origin"], forecast["source"]) == ("host", "shop_tools")
    (shadowed,) = data["shadowed"]
    assert (shadowed["origin"], shadowed["source"]) == ("plugin", "protege-weather")
    assert shadowed["shadowed_by"]["source"] == "shop_tools"


def test_tools_table_lists_origin_and_shadowed_entries(site, run_protege):
    site.add("alpha-tools", site.tool_plugin("GetForecastTool"), version="3.0")
    result = run_protege("tools", pythonpath=site.path)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "ORIGIN", "FROM", "SUMMARY"]
    row = next(line for line in lines if line.startswith("get_forecast "))
    assert "alpha-tools 3.0" in row
    assert "Shadowed (never offered):" in lines
    shadow_row = lines[-1]
    assert shadow_row.split()[:3] == ["get_forecast", "plugin", "protege-weather"]
    assert shadow_row.endswith("plugin alpha-tools 3.0")
    assert "1 problem(s) found" in result.stderr


def test_load_list_hides_third_party_tools(run_protege):
    data = json.loads(run_protege("tools", "--json", env={"PROTEGE_LOAD_PLUGINS": ""}).stdout)
    assert "get_forecast" not in [t["id"] for t in data["tools"]]
