"""``[plugins.protege-web]`` in protege.toml: the defaults, the table taking effect in a run of
the tools, and clear errors for settings that cannot work."""

import attrs
import pytest

from protege.config import ConfigError, load_config
from protege.installation import open_installation
from protege.testing import make_context, run_tool, with_plugin_settings
from protege_web.settings import WebSettings


def from_file(protege_app, tmp_path, text):
    """The test's installation with ``text`` as the plugin tables of its protege.toml."""
    (tmp_path / "protege.toml").write_text(text)
    tables = load_config(tmp_path, environ={}).plugins
    return open_installation(attrs.evolve(protege_app.config, plugins=tables), connect=False)


def test_the_defaults_are_the_documented_limits(protege_app):
    web = protege_app.config.plugin_settings("protege-web")
    assert isinstance(web, WebSettings)
    assert (web.timeout_seconds, web.max_bytes, web.max_chars, web.max_redirects) == (
        15.0,
        2 * 1024 * 1024,
        20_000,
        5,
    )
    assert web.allow_networks == ()
    assert web.search_url == "https://html.duckduckgo.com/html/"


def test_the_table_in_protege_toml_is_what_the_tools_read(protege_app, tmp_path):
    app = from_file(
        protege_app,
        tmp_path,
        '[plugins.protege-web]\nallow_networks = ["10.20.0.0/16", "fd00::/8"]\nmax_chars = 500\n',
    )
    web = app.config.plugin_settings("protege-web")
    assert web.allow_networks == ("10.20.0.0/16", "fd00::/8")
    assert web.max_chars == 500


def test_a_fetch_is_let_through_to_loopback_only_by_the_plugins_own_table(
    serve, protege_app, tmp_path
):
    server = serve(lambda handler: handler.answer(b"<p>from the intranet</p>"))
    allowed = from_file(
        protege_app, tmp_path, '[plugins.protege-web]\nallow_networks = ["127.0.0.0/8"]\n'
    )

    for app, reaches in ((protege_app, False), (allowed, True)):
        result = run_tool(
            "web_fetch",
            context=make_context(config=app.config),
            manifest=app.manifest,
            url=f"{server.url}/",
        )
        assert result.ok is reaches, result.reason
    assert result.data["text"] == "from the intranet"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"allow_networks": ["10.20.0.1/16"]}, "'10.20.0.1/16' is not a network in CIDR form"),
        ({"allow_networks": ["intranet"]}, "'intranet' is not a network in CIDR form"),
        (
            {"allow_networks": "10.0.0.0/8"},
            "must be a list of strings @ plugins.protege-web.allow_networks",
        ),
        ({"timeout_seconds": 0}, "'timeout_seconds' must be > 0: 0.0 @ plugins.protege-web"),
        ({"timeout_seconds": 600}, "'timeout_seconds' must be <= 120: 600.0 @ plugins.protege-web"),
        (
            {"timeout_seconds": "15"},
            "expected a number, not the string '15' @ plugins.protege-web.timeout_seconds",
        ),
        (
            {"allow_networks": ["127.0.0.0/8"], "max_chars": False},
            "expected a whole number, not the boolean false @ plugins.protege-web.max_chars",
        ),
        ({"max_redirects": -1}, "'max_redirects' must be >= 0: -1 @ plugins.protege-web"),
        ({"search_url": "ftp://search.example/"}, "search_url must be an http or https URL"),
        ({"max_size": 1}, "unknown key max_size @ plugins.protege-web"),
        ({"search_api_key": "k"}, "plugins.protege-web.search_api_key: a secret is never"),
    ],
)
def test_settings_that_cannot_work_are_refused_saying_why(protege_app, table, problem):
    with pytest.raises(ConfigError) as refused:
        with_plugin_settings(protege_app, "protege-web", table)
    assert problem in str(refused.value)


def test_refused_settings_leave_the_web_tools_unregistered(protege_app, tmp_path):
    app = from_file(protege_app, tmp_path, "[plugins.protege-web]\nmax_redirects = 99\n")
    (report,) = [r for r in app.manifest.plugins if r.plugin.source.distribution == "protege-web"]
    assert report.error.endswith("'max_redirects' must be <= 20: 99 @ plugins.protege-web")
    assert app.manifest.get("web_fetch") is None
    assert app.manifest.get("web_search") is None
