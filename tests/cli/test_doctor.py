def test_doctor_exits_0_when_all_is_well(run_protege):
    result = run_protege("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "No problems found."


def test_doctor_reports_every_problem_and_exits_1(site, run_protege):
    site.add("broken-tools", "raise ImportError('needs libfoo')\n", version="0.9")
    site.add("alpha-tools", site.tool_plugin("GetForecastTool"))
    project = run_protege.project
    (project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (project / "shop_tools.py").write_text(
        "from protege import Tool\n\nclass NoDescriptionTool(Tool):\n"
        "    def use(self, context):\n        return None\n"
    )
    result = run_protege(
        "doctor",
        pythonpath=site.path,
        env={"PROTEGE_LOAD_PLUGINS": "broken-tools,alpha-tools,protege-weather,ghost"},
    )
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        "problem: plugin broken-tools 0.9: ImportError: needs libfoo",
        "problem: PROTEGE_LOAD_PLUGINS names ghost, which is not installed",
        "problem: rejected (host shop_tools): "
        "NoDescriptionTool: description must be a non-empty string",
        "problem: tool get_forecast from plugin protege-weather 0.1.0 "
        "is shadowed by plugin alpha-tools 1.0",
    ]
    assert "Traceback" not in result.stderr
