import pytest

from protege import Trust, blobs
from protege.mail import record_inbound
from protege.models import Agent, MessageAttachment
from protege.testing import make_context, run_tool


@pytest.fixture
def sundae(protege_app):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.app = protege_app  # what the helpers below run the tool with
    return agent


@pytest.fixture
def archive(sundae, tmp_path):
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    first = record_inbound(
        sundae,
        sender="jane@acme.com",
        subject="Melted sorbet",
        body="My mango order arrived as soup.",
    )
    record_inbound(
        sundae, sender="mara@thescoop.com", subject="Refunds", body="Approved the refund for Jane."
    )
    record_inbound(
        sundae, sender="sam@example.org", subject="Flavours", body="Do you make pistachio?"
    )
    record_inbound(scout, sender="jane@acme.com", subject="Secret", body="mango plans")
    photo = blobs.store(b"jpeg", filename="soup.jpg", content_type="image/jpeg", data_dir=tmp_path)
    MessageAttachment.create(message=first, blob=photo, position=0)
    return photo


def search(sundae, **arguments):
    result = run_tool(
        "search_emails",
        # The search itself, over the whole archive (as through a grant that opens it).
        context=make_context(sundae, config=sundae.app.config, whole_archive=["search_emails"]),
        **arguments,
        manifest=sundae.app.manifest,
    )
    assert result.ok, result.reason
    assert result.trust is Trust.UNTRUSTED
    return result.data["matches"]


@pytest.mark.parametrize(
    ("query", "subjects"),
    [
        ("jane@acme.com", ["Melted sorbet"]),
        ("mara", ["Refunds"]),
        ("melted", ["Melted sorbet"]),
        ("pistachio", ["Flavours"]),
        ("jane", ["Refunds", "Melted sorbet"]),
        ("refund Jane", ["Refunds"]),
        ("refunds", ["Refunds"]),
        ("durian", []),
    ],
)
def test_finds_by_participant_subject_and_body_newest_first(sundae, archive, query, subjects):
    assert [m["subject"] for m in search(sundae, query=query)] == subjects


def test_never_finds_another_agents_mail(sundae, archive):
    assert search(sundae, query="secret") == []
    assert all(m["subject"] != "Secret" for m in search(sundae, query="mango"))


def test_matches_carry_body_and_attachments(sundae, archive):
    (match,) = search(sundae, query="soup")
    assert match["from"] == "jane@acme.com"
    assert match["body"] == "My mango order arrived as soup."
    assert match["attachments"] == [
        {"id": archive.token, "filename": "soup.jpg", "content_type": "image/jpeg", "size": 4}
    ]


def test_limit(sundae, archive):
    assert len(search(sundae, query="jane", limit=1)) == 1
    result = run_tool(
        "search_emails",
        context=make_context(sundae, config=sundae.app.config),
        query="x",
        limit=51,
        manifest=sundae.app.manifest,
    )
    assert "51 is greater than the maximum of 50" in result.reason


def test_refused_mail_is_not_searchable(sundae, archive):
    hidden = record_inbound(sundae, sender="eve@evil.com", subject="Zebra", body="zebra")
    hidden.status = "refused"
    hidden.save()
    assert search(sundae, query="zebra") == []


def test_punctuation_in_queries_is_harmless(sundae, archive):
    assert search(sundae, query='"mango" OR (*) NEAR') == []
    assert [m["subject"] for m in search(sundae, query="mango!")] == ["Melted sorbet"]


def test_default_limit_is_ten_newest(sundae):
    for n in range(12):
        record_inbound(sundae, sender="jane@acme.com", subject=f"Order {n}", body="gelato")
    subjects = [m["subject"] for m in search(sundae, query="gelato")]
    assert subjects == [f"Order {n}" for n in range(11, 1, -1)]


def test_attachments_of_many_matches_cost_one_query(sundae, tmp_path):
    from protege.mail import attachments_of
    from protege.mail import search as search_archive

    for n in range(5):
        message = record_inbound(sundae, sender="jane@acme.com", subject=f"S{n}", body="sorbet")
        blob = blobs.store(b"x%d" % n, filename=f"{n}.txt", data_dir=tmp_path)
        MessageAttachment.create(message=message, blob=blob, position=0)
    matches = search_archive(sundae, "sorbet")
    queries = []

    import logging

    class Count(logging.Handler):
        def emit(self, record):
            queries.append(record)

    handler, logger = Count(), logging.getLogger("peewee")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        found = attachments_of(matches)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.WARNING)
    assert len(queries) == 1
    assert [[b.filename for b in found[m.id]] for m in matches] == [
        ["4.txt"],
        ["3.txt"],
        ["2.txt"],
        ["1.txt"],
        ["0.txt"],
    ]
