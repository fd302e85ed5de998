"""A plugin's blob store, registered through ``register_blob_stores`` and chosen by
``[blobs] store``: the installation hands it down in its config, so the gateway, the tools
(protege-files) and the delivery loop all keep and read their files there."""

from email.message import EmailMessage

import attrs
import pytest

from protege import blobs
from protege.config import load_config
from protege.delivery import send_pending
from protege.gateway.inbound import ingest
from protege.gateway.outbound import queue_mail
from protege.installation import open_installation
from protege.models import Agent, Message
from protege.plugins import PluginHost, Selection, discover
from protege.testing import make_context, run_tool

# A real plugin: a store keeping each blob as a file named by its digest in the folder its
# settings name.
VAULT = """
import pathlib

from protege import hookimpl
from protege.blobs import BlobMissingError


class VaultStore:
    def __init__(self, folder):
        self.folder = pathlib.Path(folder)

    def put(self, digest, data):
        path = self.folder / digest
        if path.exists():
            return None
        path.write_bytes(data)
        return "written"

    def get(self, digest):
        try:
            return (self.folder / digest).read_bytes()
        except FileNotFoundError:
            raise BlobMissingError(f"blob {digest} is not in the vault") from None

    def exists(self, digest):
        return (self.folder / digest).exists()

    def delete(self, digest):
        (self.folder / digest).unlink(missing_ok=True)

    def mark(self, digest):
        return "written" if self.exists(digest) else None

    def check(self):
        if not self.folder.is_dir():
            raise OSError(f"the vault {self.folder} is gone")


@hookimpl
def plugin_settings():
    return {"type": "object", "required": ["folder"], "properties": {"folder": {"type": "string"}}}


@hookimpl
def register_blob_stores(register):
    register("vault", lambda config: VaultStore(config.plugin_settings("protege-vault")["folder"]))
"""


@pytest.fixture
def vault(tmp_path):
    folder = tmp_path / "vault"
    folder.mkdir()
    return folder


@pytest.fixture
def app(protege_db, site, tmp_path, vault):
    site.add("protege-vault", VAULT)
    (files,) = [s for s in discover() if s.distribution == "protege-files"]
    config = load_config(tmp_path)
    config = attrs.evolve(
        config,
        blobs=attrs.evolve(config.blobs, store="vault"),
        plugins={"protege-vault": {"folder": str(vault)}},
    )
    plugins = PluginHost((*site.sources(), files), Selection())
    return open_installation(config, plugins=plugins, connect=False)


def kept_in(folder):
    return {path.name for path in folder.rglob("*") if path.is_file()}


def test_an_attachment_is_kept_in_the_plugins_store_and_read_from_it_by_a_tool(app, vault):
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "jane@acme.com", sundae.address, "Orders"
    mail["Message-ID"] = "<orders@acme.com>"
    mail.set_content("The list is attached.")
    mail.add_attachment(
        b"order,flavor\n1042,mint\n", maintype="text", subtype="csv", filename="orders.csv"
    )
    ingest(mail.as_bytes(), config=app.config, recipients=[sundae.address])
    message = Message.get(Message.message_id == "<orders@acme.com>")
    (attachment,) = message.attachments
    assert attachment.sha256 in kept_in(vault)
    assert not (app.data_dir / "blobs").exists()  # nothing in the local store
    context = make_context(sundae, message=message, config=app.config)
    result = run_tool(
        "read_attachment", context=context, manifest=app.manifest, blob_id=attachment.token
    )
    assert result.ok, result.for_model()
    assert result.data["text"] == "order,flavor\n1042,mint\n"


def test_queued_mail_is_kept_in_the_plugins_store_and_sent_from_it(app, vault):
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    outcome = queue_mail(
        agent=sundae, run=None, config=app.config, mail={"to": ["jane@acme.com"], "body": "Hi"}
    )
    queued = Message.get(Message.message_id == outcome["message_id"])
    assert kept_in(vault) == {queued.raw_blob.sha256}
    (sent,) = send_pending(app.config, transport=app.transport)
    (written,) = (app.data_dir / "outbox").glob("*.eml")
    assert sent.status == "sent"
    assert written.read_bytes() == (vault / queued.raw_blob.sha256).read_bytes()
    assert blobs.blob_store_for(app.config).check() is None
