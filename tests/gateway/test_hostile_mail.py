"""The hostile-mail corpus through both ways in: `protege receive` and the SMTP gateway."""

from __future__ import annotations

import pytest

from protege.models import Message, Run
from protege.models.resolution import resolve

from .hostile import assert_no_orphan_files, cases, through_receive, through_smtp

CASES = [(case, path) for case in cases() for path in case.paths]


@pytest.mark.parametrize(
    ("case", "path"), CASES, ids=[f"{path}-{case.name}" for case, path in CASES]
)
def test_hostile_mail_is_answered_flagged_or_refused_never_lost(
    case, path, gated_sundae, data_dir, scoop_manifest
):
    if path == "receive":
        code, said = through_receive(case.raw)
    else:
        code, said = through_smtp(case.raw, case, data_dir)
    assert code != 451, said
    stored = list(Message.select())
    if case.outcome == "refused":
        assert code == case.code if path == "smtp" else code == 1, said
        assert "limit" in said
        assert stored == []
    else:
        assert code is None, said
        (message,) = stored
        assert message.status == ("accepted" if case.outcome == "answered" else "ignored")
        assert Run.select().count() == (1 if case.outcome == "answered" else 0)
        if case.flag is not None:
            assert any(case.flag in flag for flag in message.flags), message.flags
        # Whatever the From header said, the operator's toolkit stays shut.
        finance = resolve(gated_sundae, scoop_manifest, sender=message.sender).grants[0]
        assert not finance.admitted
    assert_no_orphan_files(data_dir)
