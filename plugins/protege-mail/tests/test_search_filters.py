"""search_emails' filters (from, to, subject, direction, dates, attachments), and words that
are only ever words, however hostile."""

import datetime
import os

import peewee
import pytest

from protege import Trust, blobs, db
from protege.mail import MAX_SEARCH_RESULTS, record_inbound, search, search_date
from protege.models import Agent, Message, MessageAttachment
from protege.testing import make_context, run_tool
from protege.testing.database import TEST_DATABASE_VARIABLE
from protege_mail.search import MAX_RESULTS


@pytest.fixture
def sundae(protege_app):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.app = protege_app
    return agent


def _dated(message, day):
    message.created_at = datetime.datetime(2026, 3, day, 12, 0)
    message.save()
    return message


@pytest.fixture
def mailbox(sundae, tmp_path):
    """Four messages of Sundae's, one each of March 1 to 4, and one of another agent."""
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    _dated(
        record_inbound(
            sundae, sender="jane@acme.com", subject="Melted sorbet", body="mango arrived as soup"
        ),
        1,
    )
    _dated(
        record_inbound(
            sundae,
            sender="mara@thescoop.com",
            subject="Refund for Jane",
            body="approved, mango credit",
            cc=["ledger@thescoop.com"],
        ),
        2,
    )
    sent = Message.create(
        agent=sundae,
        direction="outbound",
        sender="sundae@thescoop.example",
        to_addresses=["jane@acme.com"],
        subject="Re: Melted sorbet",
        body_text="Sorry about the mango, refund coming",
        message_id="<out-1@thescoop.example>",
        thread_key="<out-1@thescoop.example>",
        status="sent",
    )
    _dated(sent, 3)
    with_photo = _dated(
        record_inbound(sundae, sender="sam@example.org", subject="Photo", body="mango stand"), 4
    )
    photo = blobs.store(b"jpeg", filename="stand.jpg", content_type="image/jpeg", data_dir=tmp_path)
    MessageAttachment.create(message=with_photo, blob=photo, position=0)
    record_inbound(scout, sender="jane@acme.com", subject="Secret mango", body="mango plans")


def tool(sundae, **arguments):
    return run_tool(
        "search_emails",
        # The search itself, over the whole archive (as through a grant that opens it).
        context=make_context(sundae, config=sundae.app.config, whole_archive=["search_emails"]),
        **arguments,
        manifest=sundae.app.manifest,
    )


def subjects(sundae, **arguments):
    result = tool(sundae, **arguments)
    assert result.ok, result.reason
    assert result.trust is Trust.UNTRUSTED
    return [m["subject"] for m in result.data["matches"]]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"from": "jane@acme.com"}, ["Melted sorbet"]),
        ({"from": "acme.com"}, ["Melted sorbet"]),
        ({"from": "jane"}, ["Melted sorbet"]),  # not Mara's mail that names Jane in the subject
        ({"from": "thescoop"}, ["Re: Melted sorbet", "Refund for Jane"]),
        ({"to": "jane@acme.com"}, ["Re: Melted sorbet"]),
        ({"to": "ledger"}, ["Refund for Jane"]),  # Cc counts as a recipient
        ({"subject": "melted"}, ["Re: Melted sorbet", "Melted sorbet"]),
        ({"subject": "mango"}, []),  # in every body, in no subject
        ({"direction": "outbound"}, ["Re: Melted sorbet"]),
        ({"direction": "inbound", "query": "mango"}, ["Photo", "Refund for Jane", "Melted sorbet"]),
        ({"has_attachment": True}, ["Photo"]),
        ({"has_attachment": False, "query": "mango", "limit": 1}, ["Re: Melted sorbet"]),
        ({"after": "2026-03-02", "before": "2026-03-04"}, ["Re: Melted sorbet", "Refund for Jane"]),
        ({"after": "2026-03-02T12:00:00Z"}, ["Photo", "Re: Melted sorbet", "Refund for Jane"]),
        ({"before": "2026-03-02T13:00:00+02:00"}, ["Melted sorbet"]),  # 11:00 UTC
        ({"query": "refund", "from": "thescoop"}, ["Re: Melted sorbet", "Refund for Jane"]),
        ({"query": "mango", "from": "jane", "direction": "outbound"}, []),
        ({}, ["Photo", "Re: Melted sorbet", "Refund for Jane", "Melted sorbet"]),
    ],
)
def test_filters_narrow_the_agents_own_mail_newest_first(sundae, mailbox, arguments, expected):
    assert subjects(sundae, **arguments) == expected


def test_filters_never_reach_another_agents_mail(sundae, mailbox):
    assert "Secret mango" not in subjects(sundae, **{"from": "jane@acme.com"})
    assert "Secret mango" not in subjects(sundae, subject="secret")
    assert subjects(sundae, subject="secret") == []


def test_the_result_says_what_was_asked(sundae, mailbox):
    result = tool(sundae, **{"from": "jane", "after": "2026-03-01", "limit": 2})
    assert {k: v for k, v in result.data.items() if k != "matches"} == {
        "from": "jane",
        "after": "2026-03-01",
    }


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "1/3/2026", "2026-03-01\x00", " "])
def test_a_date_that_is_not_one_is_refused_clearly(sundae, mailbox, bad):
    result = tool(sundae, after=bad)
    assert not result.ok
    assert result.reason.startswith("after: ")
    assert "is not a date (2026-03-01) or date and time" in result.reason


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"after": "0001-01-01"}, 4),
        ({"before": "9999-12-31T23:59:59"}, 4),
        ({"after": "0001-01-01T00:00:00", "before": "0001-01-02"}, 0),
        ({"after": "9999-12-31"}, 0),
    ],
)
@pytest.mark.parametrize("query", [None, "mango"])
def test_the_ends_of_the_calendar_are_dates_like_any(sundae, mailbox, arguments, expected, query):
    if query:
        arguments = {**arguments, "query": query}
    assert len(subjects(sundae, **arguments)) == expected


def test_a_date_past_the_calendars_end_in_utc_is_refused_clearly(sundae, mailbox):
    result = tool(sundae, before="9999-12-31T23:00:00-05:00")
    assert not result.ok
    assert result.reason == (
        "before: '9999-12-31T23:00:00-05:00' is outside the dates a search can use"
    )


def test_dates_with_an_offset_are_read_as_utc():
    assert search_date("2026-03-01") == datetime.datetime(2026, 3, 1)
    assert search_date("2026-03-01T09:30:00+02:00") == datetime.datetime(2026, 3, 1, 7, 30)
    assert search_date("2026-03-01T09:30Z") == datetime.datetime(2026, 3, 1, 9, 30)


def test_direction_outside_the_two_is_refused_by_the_schema(sundae, mailbox):
    result = tool(sundae, direction="sideways")
    assert not result.ok
    assert "sideways" in result.reason


def test_the_tools_limit_is_the_archives(sundae):
    assert MAX_RESULTS == MAX_SEARCH_RESULTS


# What a user (or a model quoting one) may type: full-text operators of FTS5 and of
# PostgreSQL's tsquery, quotes, brackets, column filters, LIKE and format markers, NUL.
HOSTILE = [
    '"',
    '""',
    "'",
    "mango OR durian",
    "NOT mango durian",
    "mango AND NOT soup durian",
    "NEAR(mango soup)",
    "NEAR(mango soup, 2) durian",
    "mango* durian",
    "(mango durian",
    "mango) OR (durian",
    "{subject body} : durian",
    "subject:durian",
    "body : durian",
    "^mango durian",
    "mango + durian",
    "mango & durian | !soup",
    "'mango':A durian",
    "mango <-> durian",
    "mango:* durian",
    "\\ durian \\\\",
    "%s %(x)s %% durian",
    "mango_% durian",
    "-",
    "...",
    "@.",
    "durian\x00",
    "\uff4d\uff41\uff4e\uff47\uff4f durian",  # fullwidth letters
    "x" * 500,
    # how SQLite's index names each agent's mail: a word, not a way to every message
    "agent1",
    "agent2",
    "agent : agent1",
]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("field", ["query", "from", "to", "subject"])
def test_hostile_words_are_words_never_syntax(sundae, mailbox, field, text):
    # Every hostile text holds a word no message has (or no word at all), so nothing is
    # found: an operator that worked as one (OR, NOT, a prefix, a column filter) would
    # find the mango mail.
    result = tool(sundae, **{field: text})
    assert result.ok, result.reason
    assert result.data["matches"] == []


@pytest.mark.parametrize("text", ["-mango", "mango*", '"mango"', "(mango)", "mango!"])
def test_punctuation_around_a_word_leaves_the_word(sundae, mailbox, text):
    # "-mango" is not NOT mango, nor "mango*" a prefix search: each finds the word mango.
    assert len(subjects(sundae, query=text)) == 4


def test_each_word_of_a_filter_must_be_in_that_field(sundae, mailbox):
    assert subjects(sundae, subject="melted re") == ["Re: Melted sorbet"]
    assert subjects(sundae, subject="melted jane") == []


def test_newest_first_costs_the_limit_not_the_matches(protege_db):
    """The query plan reads candidates already in newest-first order and stops at the limit:
    no sort of every match. On SQLite, FTS5 yields rowids in descending order; on
    PostgreSQL the (agent, date) index can be read backwards."""
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    record_inbound(agent, sender="jane@acme.com", subject="Sorbet", body="mango")
    database = db.database
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        database.execute_sql("SET enable_sort = off")
        database.execute_sql("SET enable_bitmapscan = off")
        try:
            plan = _plan("EXPLAIN", agent, "mango")
        finally:
            database.execute_sql("RESET enable_sort")
            database.execute_sql("RESET enable_bitmapscan")
        assert "Index Scan Backward using message_agent_created" in plan
        assert "Sort" not in plan
    else:
        for words in ("mango", ""):
            plan = _plan("EXPLAIN QUERY PLAN", agent, words)
            assert "TEMP B-TREE" not in plan, plan
            assert ("message_search" if words else "message_agent_created") in plan
    assert [m.subject for m in search(agent, "mango")] == ["Sorbet"]


def _plan(explain, agent, words):
    from protege.models.messages import SearchCriteria, _postgresql_search, _sqlite_search

    criteria = SearchCriteria(words=(words,) if words else ())
    builder = _postgresql_search if explain == "EXPLAIN" else _sqlite_search
    sql, params = builder(agent.id, criteria, 10)
    rows = db.database.execute_sql(f"{explain} {sql}", params).fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def test_a_clock_that_stepped_back_hides_nothing_from_a_date_range(sundae):
    # Stored in this order, dated out of it (the clock went back an hour in between).
    first = record_inbound(sundae, sender="jane@acme.com", subject="First", body="mango")
    second = record_inbound(sundae, sender="jane@acme.com", subject="Second", body="mango")
    first.created_at = datetime.datetime(2026, 3, 2, 12, 0)
    first.save()
    second.created_at = datetime.datetime(2026, 3, 2, 11, 0)
    second.save()
    assert subjects(sundae, query="mango", before="2026-03-02T11:30:00") == ["Second"]
    assert subjects(sundae, query="mango", after="2026-03-02T11:30:00") == ["First"]
    # Which is "newer" is moot here: by date on PostgreSQL, by storing order on SQLite.
    assert sorted(subjects(sundae, query="mango", after="2026-03-02T10:00:00")) == [
        "First",
        "Second",
    ]


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_VARIABLE),
    reason="PostgreSQL only; make test-postgres runs the database tests with it",
)
def test_a_word_common_only_in_other_agents_mail_is_found_and_leaves_settings_alone(
    sundae, mailbox
):
    # Enough of Scout's mail holds "gelato" for the planner to call it common, so the
    # search takes every step: Sundae's newest mail, then the full-text index alone, with
    # a setting of its own that a caller's transaction must not keep.
    scout = Agent.get(Agent.name == "Scout")
    db.database.execute_sql(
        "INSERT INTO message (agent_id, direction, sender, subject, body_text, message_id, "
        "thread_key, created_at) SELECT %s, 'inbound', 'x@example.org', 'Scoops', "
        "'gelato ' || n, '<g' || n || '>', '<g' || n || '>', now() "
        "FROM generate_series(1, 6000) AS n",
        (scout.id,),
    )
    db.database.execute_sql("ANALYZE message")
    record_inbound(sundae, sender="jane@acme.com", subject="Gelato", body="gelato please")
    with db.database.atomic():
        assert [m.subject for m in search(sundae, "gelato")] == ["Gelato"]
        (setting,) = db.database.execute_sql("SHOW enable_seqscan").fetchone()
        assert setting == "on"
    (setting,) = db.database.execute_sql("SHOW enable_seqscan").fetchone()
    assert setting == "on"


@pytest.mark.skipif(
    not os.environ.get(TEST_DATABASE_VARIABLE),
    reason="PostgreSQL only; make test-postgres runs the database tests with it",
)
@pytest.mark.parametrize(
    "criteria",
    [
        {"words": ("mango",)},
        {"words": ("mango",), "direction": "inbound"},
        {"sender_words": ("thescoop",)},
        {"words": ("refund",), "has_attachment": False},
        {"words": ("durian",)},
    ],
)
def test_each_postgresql_step_finds_what_the_planner_finds(sundae, mailbox, criteria):
    # Small tables never take the step through the agent's newest messages, so each
    # statement is run here on its own.
    from protege.models.messages import SearchCriteria, _postgresql_search

    def subjects_by(step):
        sql, params = _postgresql_search(sundae.id, SearchCriteria(**criteria), 10, step=step)
        return [m.subject for m in Message.raw(sql, *params)]

    expected = subjects_by(None)
    assert subjects_by("recent") == expected
    assert subjects_by("words") == expected
    assert expected == [m.subject for m in search(sundae, **_as_search(criteria))]


def _as_search(criteria):
    names = {"words": "query", "sender_words": "sender"}
    return {
        names.get(k, k): " ".join(v) if isinstance(v, tuple) else v for k, v in criteria.items()
    }
