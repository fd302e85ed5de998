"""The README's Files section: its settings example is what the plugin accepts."""

import re
from pathlib import Path

from protege.config import load_config
from protege.testing import with_plugin_settings
from protege_files.settings import FilesSettings

README = Path(__file__).parents[3] / "README.md"


def test_the_files_settings_example_is_what_protege_accepts(tmp_path, protege_app):
    (block,) = re.findall(
        r"```toml\n(\[plugins\.protege-files\]\n.*?)```", README.read_text(), re.DOTALL
    )
    (tmp_path / "protege.toml").write_text(block)
    table = load_config(tmp_path, environ={}).plugins["protege-files"]
    app = with_plugin_settings(protege_app, "protege-files", table)
    assert app.config.plugin_settings("protege-files") == FilesSettings()  # the defaults
