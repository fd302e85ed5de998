import os

import peewee
import pytest

from protege import db
from protege.models import Agent
from protege.testing import fresh_database
from protege.testing.database import TEST_DATABASE_VARIABLE


def test_protege_db_is_migrated_and_bound(protege_db):
    assert db.database.obj is protege_db.database
    assert Agent.select().count() == 0
    expected = (
        peewee.PostgresqlDatabase
        if os.environ.get(TEST_DATABASE_VARIABLE)
        else (peewee.SqliteDatabase)
    )
    assert isinstance(protege_db.database, expected)


def test_protege_db_url_is_what_the_cli_will_use(protege_db):
    assert os.environ["PROTEGE_DATABASE_URL"] == protege_db.url


def test_each_fresh_database_starts_empty(tmp_path):
    server = os.environ.get(TEST_DATABASE_VARIABLE)
    with fresh_database(tmp_path / "one", server) as first:
        Agent.create(name="Sundae", address="sundae@thescoop.example")
    with fresh_database(tmp_path / "two", server) as second:
        assert second.url != first.url
        assert Agent.select().count() == 0


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_VARIABLE),
    reason="PostgreSQL only; .ci/run runs the suite again with PROTEGE_TEST_DATABASE_URL set",
)
def test_a_postgres_test_schema_is_dropped_afterwards(tmp_path):
    server = os.environ[TEST_DATABASE_VARIABLE]
    with fresh_database(tmp_path, server) as used:
        schema = used.url.rsplit("search_path%3D", 1)[1]
    admin = db.open_database(server)
    found = admin.execute_sql(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
    ).fetchone()[0]
    admin.close()
    assert found == 0
