import attrs
import peewee
import pytest

from protege import blobs
from protege.gateway.inbound import MailRejected, StorageUnavailable, agent_for, ingest
from protege.mail import routing_key, search
from protege.models import Agent, Blob, Message, Run

from . import hostile

# Each test runs with the local blob store and with S3 (see the root conftest.py).
pytestmark = pytest.mark.usefixtures("blob_store")


def test_mail_is_stored_with_its_source_and_a_run_is_queued(sundae, config, mail):
    (delivered,) = ingest(mail(), config=config, recipients=["sundae@thescoop.example"])
    assert delivered.status == "accepted"
    message = delivered.message
    assert (message.sender, message.subject) == ("Jane <jane@acme.com>", "Melted")
    assert message.body_text.strip() == "SCP-1042 arrived melted."
    assert message.message_id == "<Jane.1@Acme.COM>"  # case kept
    assert message.thread_key == "<Jane.1@Acme.COM>"
    assert blobs.read(message.raw_blob, config) == mail()
    assert delivered.run.status == "queued"
    assert delivered.run.message_id == message.id


def test_recipient_is_matched_by_routing_key(sundae):
    assert agent_for("Sundae+Orders@TheScoop.Example") == sundae
    assert agent_for("sundae@elsewhere.example") is None
    assert agent_for("not an address") is None


def test_an_archived_agent_is_no_recipient_until_restored(sundae, config, mail):
    sundae.archive()
    assert agent_for("sundae@thescoop.example") is None  # what SMTP's RCPT asks
    with pytest.raises(MailRejected, match="no agent") as raised:
        ingest(mail(), config=config, recipients=["sundae@thescoop.example"])
    assert raised.value.code == 550
    assert Message.select().count() == 0
    sundae.restore()
    assert agent_for("Sundae+Orders@TheScoop.example") == sundae


def test_like_wildcards_in_a_recipient_match_only_themselves(protege_db):
    underscore = Agent.create(name="U", address="a_b@the_scoop.example")
    percent = Agent.create(name="P", address="100%!@thescoop.example")
    assert agent_for("A_B@The_Scoop.example") == underscore
    assert agent_for("axb@the_scoop.example") is None  # _ is no wildcard here
    assert agent_for("a_b@thexscoop.example") is None
    assert agent_for("100%!@thescoop.example") == percent
    assert agent_for("100x!@thescoop.example") is None
    assert agent_for("%@thescoop.example") is None


def test_no_known_recipient_stores_nothing(sundae, config, mail):
    with pytest.raises(MailRejected, match="no agent") as raised:
        ingest(mail(), config=config, recipients=["nobody@thescoop.example"])
    assert raised.value.code == 550
    assert Message.select().count() == 0


def test_without_an_envelope_the_headers_say_who_it_is_for(sundae, config, mail):
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    raw = mail(headers={"Cc": "Scout <scout@thescoop.example>"})
    delivered = ingest(raw, config=config)
    assert {d.agent.name for d in delivered} == {"Sundae", "Scout"}
    assert Run.select().count() == 2
    assert scout.messages.count() == 1


def test_a_refused_sender_is_stored_as_refused_with_no_run(sundae, config, mail):
    sundae.add_access_rule("deny", "*@acme.com")
    (delivered,) = ingest(mail(), config=config, recipients=[sundae.address])
    assert delivered.status == "refused"
    assert delivered.run is None
    assert delivered.message.status == "refused"
    assert "deny rule *@acme.com matches" in delivered.reason


def test_threading_uses_references_then_in_reply_to(sundae, config, mail):
    raw = mail(headers={"In-Reply-To": "<b@x>", "References": "<Root@X> <b@x>"})
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.message.thread_key == "<Root@X>"
    assert delivered.message.reference_ids == ["<Root@X>", "<b@x>"]
    raw = mail(headers={"In-Reply-To": "<Parent@X>"})
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.message.thread_key == "<Parent@X>"


def test_a_missing_message_id_gets_a_synthetic_one(sundae, config, mail):
    (delivered,) = ingest(
        mail(headers={"Message-ID": None}), config=config, recipients=[sundae.address]
    )
    assert delivered.message.message_id.startswith("<")
    assert delivered.message.message_id.endswith("@thescoop.example>")  # made up here
    assert "synthetic Message-ID" in delivered.message.flags


@pytest.mark.parametrize(
    ("headers", "flag"),
    [
        ({"Auto-Submitted": "auto-replied"}, "auto-submitted: auto-replied"),
        ({"Precedence": "bulk"}, "precedence: bulk"),
        ({"Precedence": "list"}, "precedence: list"),
        ({"X-Protege-Loop": "3"}, "loop: 3"),
    ],
)
def test_auto_replies_and_loops_are_stored_but_start_no_run(sundae, config, mail, headers, flag):
    (delivered,) = ingest(mail(headers=headers), config=config, recipients=[sundae.address])
    assert delivered.status == "ignored"
    assert delivered.run is None
    assert flag in delivered.message.flags


def test_auto_submitted_no_and_short_loops_do_run(sundae, config, mail):
    raw = mail(headers={"Auto-Submitted": "no", "X-Protege-Loop": "1"})
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.status == "accepted"
    assert "loop: 1" in delivered.message.flags


def test_malformed_mail_is_stored_and_flagged(sundae, config):
    raw = (
        b"From: jane@acme.com\r\nTo: sundae@thescoop.example\r\nSubject: broken\r\n"
        b'Content-Type: multipart/mixed; boundary="nope"\r\n\r\nno parts here at all\r\n'
    )
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    message = delivered.message
    assert any(flag.startswith("malformed: ") for flag in message.flags)
    assert blobs.read(message.raw_blob, config) == raw
    assert delivered.status == "accepted"


def test_garbage_is_still_kept(sundae, config):
    raw = b"\x00\xff this is not an email \xfe"
    (delivered,) = ingest(
        raw, config=config, recipients=[sundae.address], envelope_sender="x@y.example"
    )
    assert delivered.message.sender == ""  # no From header: nobody to gate or to answer
    assert delivered.status == "ignored"
    assert delivered.run is None
    assert any("'x@y.example'" in flag for flag in delivered.message.flags)
    assert blobs.read(delivered.message.raw_blob, config) == raw  # byte for byte
    assert "malformed: NUL characters replaced" in delivered.message.flags
    assert "\x00" not in delivered.message.body_text


def test_html_only_mail_becomes_text(sundae, config):
    raw = (
        b"From: jane@acme.com\r\nTo: sundae@thescoop.example\r\nSubject: hi\r\n"
        b"Content-Type: text/html\r\n\r\n<p>Hello <b>there</b></p><script>x()</script><p>Jane</p>"
    )
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.message.body_text == "Hello there\nJane"


def test_attachments_are_stored_with_safe_names(sundae, config, mail):
    raw = mail(attachments=[("../../etc/pass wd.csv", "text/csv", b"a,b\n1,2\n")])
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    (blob,) = delivered.message.attachments
    assert (blob.filename, blob.content_type, blob.size) == ("pass wd.csv", "text/csv", 8)
    assert blobs.read(blob, config) == b"a,b\n1,2\n"


@pytest.mark.parametrize(
    ("limits", "attachments", "message"),
    [
        (
            {"max_message_bytes": 500},
            [("a.bin", "application/octet-stream", b"x" * 600)],
            "limit is 500",
        ),
        (
            {"max_attachments": 1},
            [("a.txt", "text/plain", b"a"), ("b.txt", "text/plain", b"b")],
            "more than 1 attachments",
        ),
        (
            {"max_attachment_bytes": 10},
            [("a.bin", "application/octet-stream", b"x" * 11)],
            "attachment a.bin is 11 bytes; the limit is 10",
        ),
    ],
)
def test_mail_over_a_limit_is_refused_whole(
    sundae, config, mail, limits, attachments, message, behind_the_store
):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, **limits))
    with pytest.raises(MailRejected, match=message) as raised:
        ingest(mail(attachments=attachments), config=tight, recipients=[sundae.address])
    assert raised.value.code == 552
    assert Message.select().count() == 0
    assert behind_the_store.digests(config) == set()


def _fail_message_inserts(database) -> None:
    """Make the database itself refuse every new message, as a full disk would."""
    if isinstance(database, peewee.PostgresqlDatabase):
        database.execute_sql(
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'no space left'; END $$ LANGUAGE plpgsql"
        )
        database.execute_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON message FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    else:
        database.execute_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON message "
            "BEGIN SELECT RAISE(ABORT, 'no space left'); END"
        )


@pytest.mark.protege_fresh_db  # adds a trigger to the schema
def test_a_storage_failure_leaves_no_file_behind(
    sundae, config, mail, protege_db, behind_the_store
):
    kept = ingest(mail(body="kept"), config=config, recipients=[sundae.address])
    _fail_message_inserts(protege_db.database)
    doomed = mail(
        body="lost",
        attachments=[(f"{n}.txt", "text/plain", f"file {n}".encode()) for n in range(7)],
    )
    with pytest.raises(StorageUnavailable):
        ingest(doomed, config=config, recipients=[sundae.address])
    files = behind_the_store.digests(config)
    assert files == {blob.sha256 for blob in Blob.select()}
    assert kept[0].message.raw_blob.sha256 in files


def test_line_endings_do_not_depend_on_the_way_in(sundae, config, mail):
    crlf = mail(body="one\ntwo\n")
    lf = crlf.replace(b"\r\n", b"\n").replace(b"Jane.1", b"Jane.2")
    by_smtp, by_file = (
        ingest(raw, config=config, recipients=[sundae.address])[0].message for raw in (crlf, lf)
    )
    assert by_smtp.body_text == by_file.body_text == "one\ntwo\n"


def test_non_ascii_display_names_are_stored_decoded_and_found(sundae, config, mail):
    raw = mail(sender="Jürgen Groß <juergen@acme.com>")
    assert b"=?utf-8?" in raw  # the mail client encoded the name
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.message.sender == "Jürgen Groß <juergen@acme.com>"
    assert search(sundae, "Jürgen") == [delivered.message]


def test_the_envelope_null_sender_marks_a_bounce(sundae, config, mail):
    (delivered,) = ingest(mail(), config=config, recipients=[sundae.address], envelope_sender="")
    assert delivered.status == "ignored"
    assert delivered.run is None
    assert "null return path" in delivered.message.flags


def test_a_stored_sender_names_the_same_address_when_read_again(sundae, config, mail):
    # The display name decodes to text that looks like an encoded-word itself.
    raw = hostile.mail(sender="=?utf-8?b?PT91dGYtOD9xPz89IiwuLA==?= <jane@acme.com>")
    (delivered,) = ingest(raw, config=config, recipients=[sundae.address])
    assert delivered.status == "accepted"
    assert routing_key(delivered.message.sender) == "jane@acme.com"


def test_a_file_the_parser_cannot_read_still_reaches_the_agent_it_names(config, sundae):
    from protege.gateway import inbound

    # What the parser's last resort gives: nothing read, every header unknown.
    unread = inbound.ParsedMail.unread([], "unread")
    raw = b"To: Sundae\r\n <sundae@thescoop.example>, x@acme.com\r\nFrom: ?\r\n\r\nbody\r\n"
    assert inbound._header_recipients(raw, unread) == ["sundae@thescoop.example", "x@acme.com"]


def test_the_same_mail_delivered_twice_is_taken_once(config, sundae, mail):
    first = ingest(mail(), config=config, recipients=["sundae@thescoop.example"])
    again = ingest(mail(), config=config, recipients=["sundae@thescoop.example"])
    assert [d.status for d in first] == ["accepted"]
    assert [(d.status, d.run, d.message.id) for d in again] == [
        ("ignored", None, first[0].message.id)
    ]
    assert "delivered again: taken once" in again[0].reason
    assert Message.select().count() == 1
    assert Run.select().count() == 1


def test_another_mail_with_the_same_message_id_is_its_own(config, sundae, mail):
    ingest(mail(), config=config, recipients=["sundae@thescoop.example"])
    other = ingest(
        mail(body="Something else."), config=config, recipients=["sundae@thescoop.example"]
    )
    assert [d.status for d in other] == ["accepted"]
    assert Message.select().count() == 2
