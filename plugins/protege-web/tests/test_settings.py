"""``[web]`` in protege.toml: the defaults, and clear errors for settings that cannot work."""

import pytest

from protege.config import Config, ConfigError, load_config


def load(tmp_path, text):
    (tmp_path / "protege.toml").write_text(text)
    return load_config(tmp_path, environ={})


def test_the_defaults_are_the_documented_limits(tmp_path):
    web = Config.defaults(tmp_path).web
    assert (web.timeout_seconds, web.max_bytes, web.max_chars, web.max_redirects) == (
        15.0,
        2 * 1024 * 1024,
        20_000,
        5,
    )
    assert web.allow_networks == ()
    assert web.search_url == "https://html.duckduckgo.com/html/"


def test_allow_networks_are_read_as_cidr_ranges(tmp_path):
    web = load(tmp_path, '[web]\nallow_networks = ["10.20.0.0/16", "fd00::/8"]\n').web
    assert web.allow_networks == ("10.20.0.0/16", "fd00::/8")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('allow_networks = ["10.20.0.1/16"]', "'10.20.0.1/16' is not a network in CIDR form"),
        ('allow_networks = ["intranet"]', "'intranet' is not a network in CIDR form"),
        ('allow_networks = "10.0.0.0/8"', "must be a list of strings"),
        ("timeout_seconds = 0", "timeout_seconds"),
        ("timeout_seconds = 600", "timeout_seconds"),
        ("max_redirects = -1", "max_redirects"),
        ('search_url = "ftp://search.example/"', "search_url must be an http or https URL"),
        ("max_size = 1", "max_size"),
    ],
)
def test_settings_that_cannot_work_are_refused_saying_why(tmp_path, text, problem):
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, f"[web]\n{text}\n")
    assert problem in str(refused.value)
