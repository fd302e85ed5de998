"""XOAUTH2 tokens come from the operator's command, and its secrets stay out of errors."""

import shlex
import sys

import pytest

from protege.gateway import oauth2


def command(source: str) -> str:
    return shlex.join([sys.executable, "-c", source])


def test_the_token_is_what_the_command_prints_and_is_reused_until_forgotten(tmp_path):
    counter = tmp_path / "count"
    printer = command(
        f"import pathlib; p = pathlib.Path({str(counter)!r}); "
        "n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n)); "
        "print(f'token-{n}')"
    )
    assert oauth2.access_token(printer) == "token-1"
    assert oauth2.access_token(printer) == "token-1"
    oauth2.forget(printer)
    assert oauth2.access_token(printer) == "token-2"
    assert oauth2.access_token(printer, fresh=True) == "token-3"


def test_a_failing_command_says_so_without_what_it_printed():
    failing = command("import sys; sys.stderr.write('refresh_token=SECRET'); sys.exit(3)")
    with pytest.raises(oauth2.TokenUnavailable) as raised:
        oauth2.access_token(failing)
    assert "exit status 3" in str(raised.value)
    assert "SECRET" not in str(raised.value)


@pytest.mark.parametrize("printed", ["", "two words", "x" * (oauth2.MAX_TOKEN_CHARS + 1)])
def test_anything_but_one_token_is_refused(printed):
    with pytest.raises(oauth2.TokenUnavailable, match="did not print one access token"):
        oauth2.access_token(command(f"print({printed!r})"))


def test_a_missing_program_is_named():
    with pytest.raises(oauth2.TokenUnavailable, match="no-such-token-program is not a program"):
        oauth2.access_token("no-such-token-program --account x")


def test_the_xoauth2_response_has_the_providers_shape():
    assert oauth2.xoauth2("a@example.com", "t0k") == "user=a@example.com\x01auth=Bearer t0k\x01\x01"
