import json


def test_plugins_json_reports_every_plugin_with_its_status(site, run_protege):
    site.add("broken-tools", "raise ImportError('needs libfoo')\n", version="0.9")
    result = run_protege("plugins", "--json", pythonpath=site.path)
    assert result.returncode == 0, result.stderr
    reports = {r["distribution"]: r for r in json.loads(result.stdout)}
    assert reports["protege-weather"] == {
        "distribution": "protege-weather",
        "version": "0.1.0",
        "entry_point": "protege_weather",
        "origin": "plugin",
        "hooks": ["register_tools"],
        "tools": ["get_forecast"],
        "status": "ok",
        "error": None,
    }
    assert reports["broken-tools"]["status"] == "error"
    assert reports["broken-tools"]["error"] == "ImportError: needs libfoo"
    for builtin in ("protege-mail", "protege-files", "protege-web"):
        assert reports[builtin]["origin"] == "builtin"
        assert reports[builtin]["status"] == "ok"


def test_disabled_plugin_is_listed_as_disabled(run_protege):
    result = run_protege("plugins", "--json", env={"PROTEGE_DISABLE_PLUGINS": "protege-weather"})
    reports = {r["distribution"]: r for r in json.loads(result.stdout)}
    assert reports["protege-weather"]["status"] == "disabled"
    assert reports["protege-weather"]["tools"] == []


def test_plugins_table(run_protege):
    lines = run_protege("plugins").stdout.splitlines()
    assert lines[0].split() == [
        "DISTRIBUTION",
        "VERSION",
        "ENTRY",
        "POINT",
        "HOOKS",
        "TOOLS",
        "STATUS",
    ]
    weather = next(line for line in lines if line.startswith("protege-weather"))
    assert weather.split() == [
        "protege-weather",
        "0.1.0",
        "protege_weather",
        "register_tools",
        "get_forecast",
        "ok",
    ]
