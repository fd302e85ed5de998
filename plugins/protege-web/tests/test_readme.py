"""The README's web section: its configuration loads, and its keyed search tool is valid."""

import re
from pathlib import Path

from protege.config import load_config
from protege.testing import with_plugin_settings
from protege.tool import check_tool_class
from protege_web.settings import WebSettings

README = Path(__file__).parents[3] / "README.md"


def test_the_web_settings_example_is_what_protege_accepts(tmp_path, protege_app):
    (block,) = re.findall(
        r"```toml\n(\[plugins\.protege-web\]\n.*?)```", README.read_text(), re.DOTALL
    )
    (tmp_path / "protege.toml").write_text(block)
    table = load_config(tmp_path, environ={}).plugins["protege-web"]
    web = with_plugin_settings(protege_app, "protege-web", table).config.plugin_settings(
        "protege-web"
    )
    assert web == WebSettings()  # the README gives the defaults


def test_the_keyed_search_example_is_a_tool_that_reads_its_key_from_the_environment(
    monkeypatch,
):
    block = re.search(
        r"<!-- readme-test: keyed-search -->\n```python\n(.*?)```", README.read_text(), re.DOTALL
    )
    assert block
    namespace: dict = {}
    exec(block.group(1), namespace)
    tool_class = namespace["BraveSearchTool"]
    check_tool_class(tool_class)
    assert tool_class.id == "brave_search"
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    result = tool_class().use(context=None, query="sorbet")
    assert (result.ok, result.reason) == (False, "BRAVE_SEARCH_API_KEY is not set")
