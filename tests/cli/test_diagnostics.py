"""What protege says when something is missing or misspelt: no send_email, no database
yet, unknown names, toolkit members nothing offers."""

import json

from protege.models import Agent, Toolkit

NO_REPLY = "no send_email tool is installed: agents cannot answer anyone"


def test_doctor_and_sync_say_plainly_that_no_send_email_is_installed(run_protege, protege_db):
    env = {"PROTEGE_DISABLE_PLUGINS": "protege-mail", "PROTEGE_DATABASE_URL": protege_db.url}
    doctor = run_protege("doctor", env=env)
    assert doctor.returncode == 1
    assert any(
        line.startswith(f"problem: {NO_REPLY}") and 'pip install "protege[builtins]"' in line
        for line in doctor.stdout.splitlines()
    )
    sync = run_protege("sync", env=env)
    assert sync.returncode == 0, sync.stderr
    assert sync.stderr.startswith(f"warning: {NO_REPLY}")
    report = json.loads(run_protege("sync", "--json", env=env).stdout)
    assert report["warnings"][0].startswith(NO_REPLY)
    assert NO_REPLY not in run_protege("sync").stderr  # protege-mail installed: all is well


def test_a_folder_with_no_database_is_told_to_run_sync(run_protege):
    result = run_protege("agents", "list")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "Error: there is no protege database here yet: run `protege sync` to create it"
    )
    assert "migration" not in result.stderr
    doctor = run_protege("doctor", env={"PROTEGE_MODEL": "test-model"})
    assert doctor.returncode == 0
    assert "none yet (run `protege sync`)" in doctor.stdout
    assert not (run_protege.project / ".protege" / "protege.db").exists()  # doctor made none


def test_doctor_json_is_one_object_with_every_finding(run_protege):
    result = run_protege(
        "doctor", "--json", env={"PROTEGE_LOAD_PLUGINS": "ghost", "PROTEGE_MODEL": "test-model"}
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert set(report) == {
        "config", "database", "blobs", "senders", "tools", "plugins", "mailboxes",
        "submission", "problems", "warnings"
    }  # fmt: skip
    assert report["senders"].endswith("(enforce)")  # the default
    assert (report["mailboxes"], report["submission"]) == ([], None)  # none configured
    assert report["warnings"] == []
    assert report["problems"] == [
        {"kind": "tools", "message": "PROTEGE_LOAD_PLUGINS names ghost, which is not installed"}
    ]
    assert result.stderr == ""


def test_unknown_names_get_a_did_you_mean(run_protege, protege_db):
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    Toolkit.create(name="Finance", member_tool_ids=[])
    assert "no agent named 'Sunday' (did you mean Sundae?)" in (
        run_protege("agents", "show", "Sunday", env=env).stderr
    )
    added = run_protege("toolkits", "add-tools", "Finance", "send_emial", env=env)
    assert "send_emial (did you mean send_email?)" in added.stderr
    assert "Did you mean 'doctor'?" in run_protege("docter").stderr


def test_members_no_tool_answers_to_are_reported_by_sync_doctor_and_toolkits_list(
    run_protege, protege_db
):
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    assert run_protege("sync", env=env).returncode == 0
    Toolkit.create(name="Weather", member_tool_ids=["get_forecast", "send_email"])
    gone = {**env, "PROTEGE_DISABLE_PLUGINS": "protege-weather"}
    line = (
        "toolkit Weather lists get_forecast, which no installed tool has (skipped; "
        '`protege toolkits remove-tools "Weather" get_forecast` drops them)'
    )
    sync = run_protege("sync", env=gone)
    assert f"warning: {line}" in sync.stderr.splitlines()
    doctor = run_protege("doctor", env=gone)
    assert f"problem: {line}" in doctor.stdout.splitlines()
    assert doctor.returncode == 1
    listed = run_protege("toolkits", "list", "--json", env=gone)
    (weather,) = [t for t in json.loads(listed.stdout) if t["name"] == "Weather"]
    assert weather["missing_tools"] == ["get_forecast"]
    table = run_protege("toolkits", "list", env=gone).stdout
    assert "get_forecast (missing)" in table


def test_every_listing_command_prints_one_json_array_even_when_empty(run_protege, protege_db):
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    Toolkit.create(name="Finance", member_tool_ids=[])
    run_protege("grants", "attach", "Sundae", "Finance", env=env)
    listings = [
        ("tools",),
        ("plugins",),
        ("agents", "list"),
        ("toolkits", "list"),
        ("runs", "list"),
        ("responsibilities", "list"),
        ("rules", "list", "Sundae", "Finance"),
        ("access-rules", "list", "Sundae"),
        ("usage",),
    ]
    for command in listings:
        result = run_protege(*command, "--json", env=env)
        assert result.returncode == 0, (command, result.stderr)
        rows = json.loads(result.stdout)
        assert isinstance(rows, list), command
        assert all(isinstance(row, dict) for row in rows), command


def test_plugin_settings_protege_cannot_use_are_reported_by_doctor(run_protege):
    (run_protege.project / "protege.toml").write_text(
        "[plugins.protege-weather]\ntimeout_seconds = 0\n\n[plugins.protege-wether]\n"
    )
    result = run_protege("doctor", env={"PROTEGE_MODEL": "test-model"})
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        "problem: plugin protege-weather 0.1.0: protege.toml has settings it cannot use: "
        "'timeout_seconds' must be > 0: 0.0 @ plugins.protege-weather",
        "problem: protege.toml has [plugins.protege-wether], but no installed plugin is named "
        "protege-wether (did you mean protege-weather?)",
    ]
    assert "get_forecast" not in run_protege("tools", "--json").stdout


def test_doctor_refuses_a_table_protege_no_longer_reads_saying_what_to_rename(run_protege):
    (run_protege.project / "protege.toml").write_text(
        '[web]\nallow_networks = ["10.20.0.0/16"]\n[files]\nmax_parts_per_run = 3\n'
    )
    result = run_protege("doctor", env={"PROTEGE_MODEL": "test-model"})
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"Error: {run_protege.project / 'protege.toml'} has settings protege no longer reads "
        "there: [web] is now [plugins.protege-web]: rename the table; [files] is now "
        "[plugins.protege-files]: rename the table; move max_parts_per_run to [runs]"
    ]


def test_doctor_reports_a_built_in_plugins_table_it_cannot_use_like_any_plugins(run_protege):
    (run_protege.project / "protege.toml").write_text(
        "[runs]\nmax_parts_per_run = 3\n[plugins.protege-web]\nmax_redirects = 99\n"
    )
    result = run_protege("doctor", env={"PROTEGE_MODEL": "test-model"})
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert [p for p in problems if "protege-web" in p] == [
        "problem: plugin protege-web 0.1.0: protege.toml has settings it cannot use: "
        "'max_redirects' must be <= 20: 99 @ plugins.protege-web"
    ]
    tools = run_protege("tools", "--json").stdout
    assert "web_fetch" not in tools
    assert "read_attachment" in tools
