import os

import peewee
import pytest

from protege import db
from protege.config import Config
from protege.migrations import MIGRATIONS, VERSION_TABLE
from protege.models import Agent, Message, Toolkit
from protege.registry import Manifest
from protege.testing import fresh_database, run_reply
from protege.testing.database import TEST_DATABASE_VARIABLE, SessionDatabase


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


@pytest.mark.protege_db
def test_each_fresh_database_starts_empty(tmp_path):
    server = os.environ.get(TEST_DATABASE_VARIABLE)
    with fresh_database(tmp_path / "one", server) as first:
        Agent.create(name="Sundae", address="sundae@thescoop.example")
    with fresh_database(tmp_path / "two", server) as second:
        assert second.url != first.url
        assert Agent.select().count() == 0


@pytest.mark.protege_db
@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_VARIABLE),
    reason="PostgreSQL only; make test-postgres runs the database tests with it",
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


@pytest.mark.parametrize("turn", ["first", "second"])
def test_every_test_starts_with_no_rows_and_ids_from_one(protege_db, turn):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    assert agent.id == 1
    toolkit = Toolkit.create(name="Support", member_tool_ids=["lookup_order"])
    assert toolkit.id == 1
    agent.grant(toolkit).add_rule("allow", "*@thescoop.com")


NO_TOOLS = Manifest(tools=())


@pytest.mark.protege_db
def test_a_session_database_is_handed_out_as_a_fresh_one_would_be(tmp_path):
    server = os.environ.get(TEST_DATABASE_VARIABLE)
    with fresh_database(tmp_path / "fresh", server) as fresh:
        expected = _rows(fresh.database)
    assert expected[VERSION_TABLE] == len(MIGRATIONS)
    shared = SessionDatabase(tmp_path / "session", server)
    try:
        with shared.checkout(tmp_path / "one") as first:
            agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
            agent.grant(Toolkit.create(name="Support")).add_rule("deny", "*@spam.example")
            config = Config.defaults(tmp_path)
            run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=NO_TOOLS)
            assert Message.select().count() == 1
            assert _rows(first.database) != expected
        with shared.checkout(tmp_path / "two") as second:
            assert _rows(second.database) == expected
            assert Agent.create(name="Scout", address="scout@thescoop.example").id == 1
        assert (second.url == first.url) == bool(server)  # one PostgreSQL schema, emptied
    finally:
        shared.close()


def _rows(database):
    """How many rows each table holds."""
    return {
        table: database.execute_sql(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        for table in database.get_tables()
    }
