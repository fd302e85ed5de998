"""``[plugins.protege-files]`` in protege.toml: the defaults, the table taking effect in a run
of the tools, and clear errors for settings that cannot work."""

import attrs
import pytest

from protege.config import ConfigError, load_config
from protege.installation import open_installation
from protege.testing import run_tool, with_plugin_settings
from protege_files.settings import FilesSettings


def from_file(protege_app, tmp_path, text):
    """The test's installation with ``text`` as the plugin tables of its protege.toml."""
    (tmp_path / "protege.toml").write_text(text)
    tables = load_config(tmp_path, environ={}).plugins
    return open_installation(attrs.evolve(protege_app.config, plugins=tables), connect=False)


def test_the_defaults_are_the_documented_limits(protege_app):
    files = protege_app.config.plugin_settings("protege-files")
    assert files == FilesSettings()
    assert (files.max_read_bytes, files.max_text_chars, files.max_created_bytes) == (
        10 * 1024 * 1024,
        20_000,
        1024 * 1024,
    )


def test_the_tools_read_the_plugins_own_table(
    protege_app, tmp_path, sundae, mail_with, context_for
):
    app = from_file(
        protege_app,
        tmp_path,
        "[plugins.protege-files]\nmax_text_chars = 100\nmax_created_bytes = 10\n",
    )
    _, (blob,) = mail_with(sundae, ("notes.txt", "text/plain", b"x" * 300))
    context = context_for(sundae, config=app.config)

    read = run_tool("read_attachment", context=context, manifest=app.manifest, blob_id=blob.token)
    created = run_tool(
        "create_file",
        context=context,
        manifest=app.manifest,
        format="txt",
        filename="note",
        content="more than ten bytes",
    )

    assert (read.data["text"], read.data["max_text_chars"]) == ("x" * 100, 100)
    assert created.reason == (
        "the content is 19 bytes; a created file holds at most 10 "
        "(max_created_bytes in [plugins.protege-files])"
    )


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"max_text_chars": 10}, "'max_text_chars' must be >= 100: 10 @ plugins.protege-files"),
        (
            {"max_filename_chars": 5000},
            "'max_filename_chars' must be <= 200: 5000 @ plugins.protege-files",
        ),
        (
            {"max_read_bytes": "10MB"},
            "expected a whole number, not the string '10MB' @ plugins.protege-files.max_read_bytes",
        ),
        (
            {"max_pdf_seconds": False},
            "expected a number, not the boolean false @ plugins.protege-files.max_pdf_seconds",
        ),
        ({"max_pictures": 3}, "unknown key max_pictures @ plugins.protege-files"),
        ({"max_parts_per_run": 2}, "unknown key max_parts_per_run"),  # protege's own, in [runs]
        ({"storage_token": "t"}, "plugins.protege-files.storage_token: a secret is never"),
    ],
)
def test_settings_that_cannot_work_are_refused_saying_why(protege_app, table, problem):
    with pytest.raises(ConfigError) as refused:
        with_plugin_settings(protege_app, "protege-files", table)
    assert problem in str(refused.value)


def test_refused_settings_leave_the_file_tools_unregistered(protege_app, tmp_path):
    app = from_file(protege_app, tmp_path, '[plugins.protege-files]\nmax_text_chars = "lots"\n')
    (report,) = [r for r in app.manifest.plugins if r.plugin.source.distribution == "protege-files"]
    assert report.error.endswith(
        "expected a whole number, not the string 'lots' @ plugins.protege-files.max_text_chars"
    )
    assert app.manifest.get("read_attachment") is None
    assert app.manifest.get("create_file") is None
