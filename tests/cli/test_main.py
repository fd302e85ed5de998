import protege


def marker_plugin(site, marker):
    return site.add(
        "marker-tools",
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n",
    )


def test_help_never_imports_a_plugin(site, run_protege, tmp_path):
    marker = tmp_path / "imported"
    marker_plugin(site, marker)
    for args in (["--help"], ["tools", "--help"], ["plugins", "--help"], ["doctor", "--help"]):
        result = run_protege(*args, pythonpath=site.path)
        assert result.returncode == 0, result.stderr
        assert not marker.exists(), args
    assert run_protege("tools", pythonpath=site.path).returncode == 0
    assert marker.exists()  # the same plugin is imported once a command needs it


def test_help_lists_the_commands(run_protege):
    result = run_protege("--help")
    for command in ("doctor", "plugins", "tools"):
        assert command in result.stdout


def test_version(run_protege):
    result = run_protege("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"protege, version {protege.__version__}"


def test_unknown_command_is_a_usage_error(run_protege):
    result = run_protege("frobnicate")
    assert result.returncode == 2
    assert "No such command 'frobnicate'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_configuration_is_one_line_and_exit_1(run_protege):
    (run_protege.project / "protege.toml").write_text("tool_modules = [\n")
    result = run_protege("tools")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    assert "protege.toml is not valid TOML" in line


def test_plugin_commands_are_found_when_invoked(site, run_protege):
    site.add(
        "greeting-tools",
        """
        import click
        from protege import hookimpl

        @click.command()
        def greet():
            click.echo("hello from a plugin")

        @hookimpl
        def register_commands(cli):
            cli.add_command(greet)
        """,
    )
    result = run_protege("greet", pythonpath=site.path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from a plugin\n"


def test_a_plugin_command_cannot_replace_a_builtin_command(site, run_protege):
    site.add(
        "hijack-tools",
        """
        import click
        from protege import hookimpl

        @click.command()
        def tools():
            click.echo("hijacked")

        @hookimpl
        def register_commands(cli):
            cli.add_command(tools)
        """,
    )
    result = run_protege("tools", pythonpath=site.path)
    assert "hijacked" not in result.stdout


def test_help_imports_no_model_client_database_or_schema_library(run_protege):
    script = (
        "import runpy, sys\n"
        "sys.argv = ['protege', '--help']\n"
        "try:\n"
        "    runpy.run_module('protege', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('openai', 'peewee', 'jsonschema', 'httpx', 'pluggy')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=run_protege.project
    )
    assert "Commands:" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_public_api_loads_on_first_use():
    from protege import RunContext, Tool, hookimpl, success

    assert Tool.__module__ == "protege.tool"
    assert callable(success)
    assert RunContext.__name__ == "RunContext"
    assert hookimpl.project_name == "protege"
    assert set(protege.__all__) >= {"Tool", "Result", "success", "failure", "hookimpl"}
    from protege import MailScope

    assert MailScope.__module__ == "protege.context"
    assert "MailScope" in protege.__all__
    from protege import DashboardView, Ingress, IngressRefused, Intake

    assert Ingress.__module__ == IngressRefused.__module__ == "protege.ingresses"
    assert Intake.__module__ == "protege.ingresses"
    assert DashboardView.__module__ == "protege.dashboard"
    assert set(protege.__all__) >= {"DashboardView", "Ingress", "IngressRefused", "Intake"}


def test_an_unexpected_error_is_one_line_unless_debugging(site, run_protege):
    site.add(
        "buggy-tools",
        """
        import click
        from protege import hookimpl

        @click.command()
        def crash():
            raise RuntimeError("the flux capacitor is empty")

        @hookimpl
        def register_commands(cli):
            cli.add_command(crash)
        """,
    )
    result = run_protege("crash", pythonpath=site.path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: internal error (RuntimeError: the flux capacitor is empty); "
        "set PROTEGE_DEBUG=1 to see the traceback"
    )
    debug = run_protege("crash", pythonpath=site.path, env={"PROTEGE_DEBUG": "1"})
    assert "Traceback" in debug.stderr


def test_the_cycle_collector_is_off_for_start_up_only(monkeypatch):
    import gc

    from protege import cli

    was_enabled = gc.isenabled()
    try:
        monkeypatch.setattr(cli, "START_UP_SECONDS", 3600.0)
        timer = cli._collect_after_start_up()
        assert not gc.isenabled()  # while the plugins load and the manifest is built
        timer.cancel()
        monkeypatch.setattr(cli, "START_UP_SECONDS", 0.0)
        timer = cli._collect_after_start_up()
        timer.join(10)  # the timer's thread ends once it turned the collector back on
        assert not timer.is_alive()
        assert gc.isenabled()  # a long-running command (serve) collects as usual
    finally:
        if was_enabled:
            gc.enable()
