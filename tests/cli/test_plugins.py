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
        "hooks": ["plugin_settings", "register_tools"],
        "tools": ["get_forecast"],
        "rejected": [],
        "withheld": [],
        "status": "ok",
        "error": None,
        "failures": [],
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
        "REJECTED",
        "STATUS",
    ]
    weather = next(line for line in lines if line.startswith("protege-weather"))
    assert weather.split() == [
        "protege-weather",
        "0.1.0",
        "protege_weather",
        "plugin_settings,",
        "register_tools",
        "get_forecast",
        "-",
        "ok",
    ]


def test_plugins_shows_the_classes_a_plugin_offered_that_were_rejected(site, run_protege):
    source = site.tool_plugin("GoodTool") + "\n\nclass BadTool(Tool):\n    pass\n"
    source = source.replace("register(GoodTool)", "register(GoodTool)\n    register(BadTool)")
    site.add("mixed-tools", source)
    result = run_protege("plugins", "--json", pythonpath=site.path)
    reports = {r["distribution"]: r for r in json.loads(result.stdout)}
    assert reports["mixed-tools"]["tools"] == ["good"]
    reason = "BadTool: description must be a non-empty string; it does not define use()"
    assert reports["mixed-tools"]["rejected"] == [reason]
    table = run_protege("plugins", pythonpath=site.path).stdout
    assert reason in table


def test_a_plugin_that_fails_to_import_is_reported_once(site, run_protege):
    site.add("broken-tools", "raise ImportError('needs libfoo')\n", version="0.9")
    result = run_protege("doctor", pythonpath=site.path)
    output = result.stdout + result.stderr
    assert output.count("needs libfoo") == 1
    assert "Traceback" not in output


def test_protege_debug_shows_the_traceback_of_a_plugin_that_failed_to_import(site, run_protege):
    site.add("broken-tools", "import json\n\njson.loads('{')\n", version="0.9")
    result = run_protege("plugins", pythonpath=site.path, env={"PROTEGE_DEBUG": "1"})
    assert "traceback of plugin broken-tools:" in result.stderr
    assert "Traceback (most recent call last):" in result.stderr
    assert 'broken_tools.py", line 3' in result.stderr
    quiet = run_protege("plugins", pythonpath=site.path)
    assert "Traceback" not in quiet.stderr


def test_names_in_the_plugin_variables_that_match_nothing_are_warned_about(run_protege):
    result = run_protege(
        "doctor",
        env={
            "PROTEGE_DISABLE_PLUGINS": "protege-wether",
            "PROTEGE_LOAD_PLUGINS": "ghost",
            "PROTEGE_MODEL": "test-model",
        },
    )
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert "problem: PROTEGE_LOAD_PLUGINS names ghost, which is not installed" in problems
    assert (
        "problem: PROTEGE_DISABLE_PLUGINS names protege-wether, which is not installed "
        "(did you mean protege-weather?)"
    ) in problems


def test_a_plugin_command_named_like_a_built_in_one_is_reported(site, run_protege):
    site.add(
        "clashing-commands",
        """
        import click
        from protege import hookimpl

        @click.command()
        def doctor():
            click.echo("not the real doctor")

        @hookimpl
        def register_commands(cli):
            cli.add_command(doctor)
        """,
    )
    result = run_protege("doctor", "--json", pythonpath=site.path)
    problems = json.loads(result.stdout)["problems"]
    assert {
        "kind": "commands",
        "message": "plugin clashing-commands adds the command `doctor`, which protege "
        "already has: the plugin's is never run",
    } in problems


def test_debug_hooks_traces_every_hook_call_with_the_plugins_it_calls(site, run_protege):
    site.add("acme-tools", site.tool_plugin("StampTool"))
    result = run_protege("plugins", env={"PROTEGE_DEBUG": "hooks"}, pythonpath=site.path)
    assert result.returncode == 0, result.stderr
    called = next(line for line in result.stderr.splitlines() if "hook register_tools(" in line)
    assert "acme-tools:acme_tools" in called
    assert "protege-weather:protege_weather" in called
    assert "hook register_tools returned" in result.stderr
    assert "hook plugin_settings(" in result.stderr


def test_a_squatter_on_protege_mails_entry_point_name_is_reported_and_send_email_stays(
    site, run_protege
):
    site.add(
        "aaa-evil",
        site.tool_plugin("SendEmailTool"),
        module="evil_mail",
        entry_point="protege_mail",
    )
    result = run_protege("plugins", "--json", pythonpath=site.path)
    reports = {r["distribution"]: r for r in json.loads(result.stdout)}
    assert reports["aaa-evil"]["status"] == "error"
    assert "belongs to the built-in plugin protege-mail" in reports["aaa-evil"]["error"]
    assert reports["protege-mail"]["status"] == "ok"
    assert "send_email" in reports["protege-mail"]["tools"]
