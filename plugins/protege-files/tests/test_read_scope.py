"""read_attachment reaches only the files of mail the run's sender took part in, and files
are named by tokens nobody can guess: a stranger cannot read another sender's attachment."""

import pytest

from protege.authentication import unverified
from protege.blobs import store
from protege.mail import record_inbound
from protege.models import Blob
from protege.testing import attach_files, make_context, run_tool

CSV = b"order,flavour\nSCP-1042,mango\n"


@pytest.fixture
def janes_file(sundae, protege_app):
    message = record_inbound(sundae, sender="jane@acme.com", subject="Files", body="Here.")
    (blob,) = attach_files(message, [("orders.csv", "text/csv", CSV)], protege_app.config)
    return blob


def read(protege_app, agent, blob_id, **context):
    context.setdefault("sender", "jane@acme.com")
    run = make_context(agent, config=protege_app.config, **context)
    return run_tool("read_attachment", context=run, manifest=protege_app.manifest, blob_id=blob_id)


def refused(result, blob_id):
    return not result.ok and result.reason == f"no such attachment: {blob_id}"


def test_a_stranger_cannot_read_another_senders_attachment(sundae, protege_app, janes_file):
    eve = {"sender": "eve@evil.example"}
    assert refused(read(protege_app, sundae, janes_file.token, **eve), janes_file.token)
    assert read(protege_app, sundae, janes_file.token).data["text"] == CSV.decode()


def test_a_files_counted_id_names_nothing(sundae, protege_app, janes_file):
    # Sequential ids were guessable: a file stored since tokens answers to its token alone,
    # for its own sender too.
    for guess in (janes_file.id, str(janes_file.id)):
        assert refused(read(protege_app, sundae, guess), guess)
        assert refused(read(protege_app, sundae, guess, sender="eve@evil.example"), guess)


def test_tokens_are_random_and_not_numbers(sundae, protege_app):
    made = [store(b"x", filename=f"{n}.txt", config=protege_app.config) for n in range(20)]
    tokens = {blob.token for blob in made}
    assert len(tokens) == 20
    assert all(len(token) >= 24 and not token.isdigit() for token in tokens)


def test_a_file_stored_before_tokens_answers_to_its_number_within_the_senders_mail(
    sundae, protege_app, janes_file
):
    Blob.update(numbered=True).where(Blob.id == janes_file.id).execute()
    assert read(protege_app, sundae, janes_file.id).ok
    assert read(protege_app, sundae, str(janes_file.id)).ok
    eve = read(protege_app, sundae, janes_file.id, sender="eve@evil.example")
    assert refused(eve, janes_file.id)


def test_a_created_file_is_read_by_its_token_only(sundae, protege_app):
    made = store(b"# notes\n", filename="notes.md", agent=sundae, config=protege_app.config)
    assert read(protege_app, sundae, made.token, sender="anyone@example.org").ok
    Blob.update(numbered=True).where(Blob.id == made.id).execute()
    assert refused(read(protege_app, sundae, made.id, sender="eve@evil.example"), made.id)
    wide = read(protege_app, sundae, made.id, whole_archive=["read_attachment"])
    assert wide.ok


def test_a_sender_whose_mail_proves_nothing_reads_only_its_own_messages_files(
    sundae, protege_app, janes_file
):
    forged = record_inbound(
        sundae,
        sender="jane@acme.com",
        body="Send me my files.",
        verdict=unverified("no signature", "acme.com"),
    )
    (own,) = attach_files(forged, [("mine.txt", "text/plain", b"mine")], protege_app.config)
    assert refused(read(protege_app, sundae, janes_file.token, message=forged), janes_file.token)
    assert read(protege_app, sundae, own.token, message=forged).data["text"] == "mine"


def test_a_grant_that_opens_the_archive_reads_any_of_the_agents_files(
    sundae, protege_app, janes_file
):
    result = read(
        protege_app,
        sundae,
        janes_file.token,
        sender="mara@thescoop.com",
        whole_archive=["read_attachment"],
    )
    assert result.ok
    assert result.data["blob_id"] == janes_file.token
