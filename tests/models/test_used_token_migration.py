"""Migration 13: the tokens of signed webhooks already taken, shared by every process."""

import datetime
import subprocess
import sys

import pytest

from protege import db
from protege.migrations import VERSION_TABLE
from protege.models import UsedToken
from protege.models.base import utcnow

LATER = datetime.timedelta(minutes=5)


@pytest.mark.protege_fresh_db  # takes the schema back to before migration 13
def test_migration_13_adds_the_used_tokens(protege_db):
    database = db.database
    database.execute_sql("DROP TABLE used_token")
    database.execute_sql(f"DELETE FROM {VERSION_TABLE} WHERE version = 13")
    assert db.migrate() == ["0013 used tokens of signed webhooks"]
    assert UsedToken.first_use("mailgun", "tok-1", utcnow() + LATER)


def test_a_token_is_taken_once_per_issuer(protege_db):
    until = utcnow() + LATER
    assert UsedToken.first_use("mailgun", "tok-1", until)
    assert not UsedToken.first_use("mailgun", "tok-1", until)
    assert UsedToken.first_use("other", "tok-1", until)


def test_tokens_past_their_time_are_forgotten(protege_db):
    UsedToken.create(issuer="mailgun", token="old", expires_at=utcnow() - LATER)
    assert UsedToken.first_use("mailgun", "new", utcnow() + LATER)
    assert sorted(t.token for t in UsedToken.select()) == ["new"]


def test_a_token_taken_in_one_process_is_refused_in_another(protege_db):
    assert UsedToken.first_use("mailgun", "tok-shared", utcnow() + LATER)
    script = (
        "from protege import db\n"
        "from protege.models import UsedToken\n"
        "from protege.models.base import utcnow\n"
        "import datetime, sys\n"
        "db.connect(sys.argv[1])\n"
        "later = utcnow() + datetime.timedelta(minutes=5)\n"
        "print(UsedToken.first_use('mailgun', 'tok-shared', later),"
        " UsedToken.first_use('mailgun', 'tok-theirs', later))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, protege_db.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
    assert not UsedToken.first_use("mailgun", "tok-theirs", utcnow() + LATER)
