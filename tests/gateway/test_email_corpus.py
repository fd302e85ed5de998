"""CPython's own email test corpus (real-world mail nobody here wrote) through both ways in."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from protege.models import Message, Run

from .hostile import Case, assert_no_orphan_files, through_receive, through_smtp


def corpus() -> list[Path]:
    """The ``msg_*.txt`` files of the running interpreter's ``test.test_email`` data."""
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_email" / "data"
    return sorted(folder.glob("msg_*.txt"))


FILES = corpus()


def test_the_interpreter_has_its_email_corpus():
    # Debian's own python3 ships it separately (libpython3.X-testsuite); every
    # interpreter this project is tested with has it.
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", ["receive", "smtp"])
@pytest.mark.parametrize("eml", FILES, ids=[f.name for f in FILES])
def test_real_world_mail_is_stored_never_crashes_never_451(eml, path, gated_sundae, data_dir):
    raw = eml.read_bytes()
    if path == "receive":
        code, said = through_receive(raw)
    else:  # a mail server in front sends CR LF line endings
        crlf = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        code, said = through_smtp(crlf, Case(eml.name, crlf, "answered"), data_dir)
    assert code is None, said
    (message,) = Message.select()
    assert "\r" not in message.body_text
    if message.status == "accepted":
        assert Run.select().count() == 1
    else:
        assert message.status == "ignored"
        assert message.flags
    if b"multipart/report" in raw.lower():
        assert message.status == "ignored"  # a delivery report starts no run
    assert_no_orphan_files(data_dir)
