"""``[plugins.protege-mcp]``: tables protege accepts, and the clear error for each that
cannot work, checked as protege checks every plugin's table."""

import pytest

from protege.errors import ConfigError
from protege.registry.settings import checked
from protege_mcp.settings import McpSettings, ServerSettings, shown_url

WHERE = "plugins.protege-mcp"


def read(table):
    return checked(McpSettings, table, WHERE)


def test_the_documented_table_is_read_as_written():
    settings = read(
        {
            "list_timeout_seconds": 10,
            "servers": {
                "files": {
                    "command": "python3",
                    "args": ["-m", "files_server"],
                    "cwd": "/srv/files",
                    "env": ["FILES_ROOT", "PATH"],
                    "tools": ["read_file", "list_dir"],
                    "prefix": "files_",
                    "timeout_seconds": 30,
                    "max_result_chars": 20000,
                    "max_result_bytes": 2097152,
                },
                "crm": {
                    "url": "https://crm.example.com/mcp",
                    "header_env": {"Authorization": "CRM_MCP_AUTHORIZATION"},
                    "ca_file": "/etc/ssl/private-ca.pem",
                },
            },
        }
    )
    files, crm = settings.servers["files"], settings.servers["crm"]
    assert settings.list_timeout_seconds == 10.0
    assert (files.kind, files.command, files.args, files.env) == (
        "stdio",
        "python3",
        ("-m", "files_server"),
        ("FILES_ROOT", "PATH"),
    )
    assert files.allows("read_file")
    assert not files.allows("delete_file")
    assert (crm.kind, dict(crm.header_env), crm.ca_file) == (
        "http",
        {"Authorization": "CRM_MCP_AUTHORIZATION"},
        "/etc/ssl/private-ca.pem",
    )
    assert crm.allows("anything")
    assert (crm.timeout_seconds, crm.max_result_chars, crm.max_result_bytes, crm.prefix) == (
        30.0,
        20_000,
        2 * 1024 * 1024,
        "",
    )


def test_no_servers_is_the_default():
    assert read({}) == McpSettings()
    assert dict(McpSettings().servers) == {}


def test_tables_of_the_settings_are_read_only():
    settings = read({"servers": {"crm": {"url": "https://a.example/mcp", "header_env": {}}}})
    with pytest.raises(TypeError):
        settings.servers["other"] = settings.servers["crm"]  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.servers["crm"].header_env["X-Key"] = "KEY"  # type: ignore[index]


def test_plain_http_reaches_this_machine_only():
    for url in ("http://127.0.0.1:8123/mcp", "http://localhost/mcp", "http://[::1]:9/mcp"):
        assert read({"servers": {"local": {"url": url}}}).servers["local"].url == url


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({}, "give either command (a stdio server) or url (a streamable HTTP server)"),
        ({"command": "x", "url": "https://a.example/"}, "not both"),
        ({"url": "http://crm.example.com/mcp"}, "plain http is allowed only to this machine"),
        ({"url": "ftp://a.example/"}, "must be an http or https URL"),
        ({"url": "https://user:pw@a.example/"}, "may not carry a user or password"),
        ({"command": "x", "env": ["NOT A NAME"]}, "'NOT A NAME' is not the name of a variable"),
        ({"command": "x", "header_env": {"X-Key": "KEY"}}, "header_env: only for a server"),
        ({"url": "https://a.example/", "env": ["PATH"]}, "env: only for a server run by command"),
        ({"url": "http://127.0.0.1/", "ca_file": "/ca.pem"}, "ca_file: only for an https url"),
        (
            {"url": "https://a.example/", "header_env": {"Authorization": "Bearer abc"}},
            "must name the environment variable holding the header's value",
        ),
        (
            {"url": "https://a.example/", "header_env": {"Host": "HOST"}},
            "Host is set by the transport itself",
        ),
        ({"command": "x", "timeout_seconds": 0}, "must be more than 0 and at most 600"),
        ({"command": "x", "timeout_seconds": 601}, "must be more than 0 and at most 600"),
        ({"command": "x", "prefix": "Files-"}, "must be empty or start with a lowercase"),
        ({"command": "x", "tools": "read_file"}, "must be a list of strings"),
        ({"command": "x", "max_result_bytes": 10}, "'max_result_bytes' must be >= 1024"),
        ({"command": "x", "token": "abc"}, "unknown key token"),
    ],
)
def test_a_server_that_cannot_work_is_refused_naming_the_problem(server, problem):
    with pytest.raises(ConfigError) as refused:
        read({"servers": {"files": server}})
    assert problem in str(refused.value)
    assert "servers['files']" in str(refused.value) or "servers.files" in str(refused.value)


def test_a_server_name_must_be_a_plain_name():
    with pytest.raises(ConfigError, match=r"servers\.Files: a server's name is a lowercase"):
        read({"servers": {"Files": {"command": "x"}}})


def test_a_secret_in_the_table_is_refused():
    with pytest.raises(ConfigError, match=r"a secret is never written in protege\.toml"):
        read({"api_token": "abc"})


def test_an_error_never_shows_a_urls_user_or_query():
    with pytest.raises(ConfigError) as refused:
        read({"servers": {"crm": {"url": "http://me:hunter2@crm.example/mcp?key=s3cret"}}})
    assert "hunter2" not in str(refused.value)
    assert "s3cret" not in str(refused.value)
    assert shown_url("https://me:pw@crm.example:8443/mcp?key=s3cret#x") == (
        "https://crm.example:8443/mcp"
    )


def test_a_value_written_into_env_is_refused_without_being_shown():
    with pytest.raises(ConfigError) as refused:
        read({"servers": {"db": {"command": "x", "env": ["DATABASE_URL=postgres://u:pw@h/db"]}}})
    assert "a variable's name, not NAME=value (the entry for 'DATABASE_URL')" in str(refused.value)
    assert "pw@h" not in str(refused.value)


def test_settings_made_in_python_are_checked_too():
    with pytest.raises(ValueError, match="give either command"):
        ServerSettings()
