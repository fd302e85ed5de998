"""The installation resolves its mail transport and blob store by name when it opens, and
hands them down: a name nothing registers stops it from opening."""

import attrs
import pytest

from protege import blobs
from protege.blobs import LocalBlobStore
from protege.config import Config
from protege.delivery.outbox import OutboxTransport
from protege.delivery.smtp import SmtpTransport
from protege.errors import ConfigError
from protege.installation import open_installation


def test_protege_s_own_transport_and_store_are_chosen_by_default(site, tmp_path):
    app = open_installation(Config.defaults(tmp_path), plugins=site.host(), connect=False)
    assert isinstance(app.transport, OutboxTransport)
    assert app.transport.folder == app.data_dir / "outbox"
    store = blobs.blob_store_for(app.config)
    assert app.blob_store is store
    assert isinstance(store, LocalBlobStore)
    assert store.data_dir == app.data_dir


def test_smtp_is_chosen_by_name(site, tmp_path):
    config = Config.defaults(tmp_path)
    config = attrs.evolve(config, mail=attrs.evolve(config.mail, transport="smtp"))
    app = open_installation(config, plugins=site.host(), connect=False)
    assert isinstance(app.transport, SmtpTransport)
    assert app.transport.settings is app.config.mail


@pytest.mark.parametrize(
    ("section", "name", "message"),
    [
        (
            "mail",
            "smpt",
            "[mail] transport = 'smpt': no mail transport has that name (did you mean smtp?); "
            "the known ones: outbox, smtp, submission",
        ),
        (
            "blobs",
            "locl",
            "[blobs] store = 'locl': no blob store has that name (did you mean local?); "
            "the known ones: local, s3",
        ),
    ],
)
def test_a_name_nothing_registers_stops_the_installation(site, tmp_path, section, name, message):
    config = Config.defaults(tmp_path)
    key = "transport" if section == "mail" else "store"
    changed = attrs.evolve(getattr(config, section), **{key: name})
    with pytest.raises(ConfigError) as raised:
        open_installation(attrs.evolve(config, **{section: changed}), plugins=site.host())
    assert str(raised.value) == message


def test_a_config_changed_after_opening_does_not_keep_a_store_made_for_another_place(
    site, tmp_path
):
    app = open_installation(Config.defaults(tmp_path), plugins=site.host(), connect=False)
    moved = attrs.evolve(app.config, data_dir=tmp_path / "elsewhere")
    assert blobs.blob_store_for(moved).data_dir == tmp_path / "elsewhere"


GUARDED = """
import attrs

from protege import PromptSection, hookimpl


@attrs.frozen(kw_only=True)
class Settings:
    limit: int = attrs.field(default=3, validator=attrs.validators.ge(1))


@hookimpl
def plugin_settings():
    return Settings


@hookimpl
def prompt_sections(app, context):
    return PromptSection("limits", "at most three")
"""


def test_a_plugin_whose_settings_are_refused_runs_none_of_its_hooks(site, tmp_path):
    site.add("guarded-plugin", GUARDED)
    shared = site.host()
    config = attrs.evolve(Config.defaults(tmp_path), plugins={"guarded-plugin": {"limit": 0}})
    app = open_installation(config, plugins=shared, connect=False)

    def implemented_by(host):
        return {i.plugin_name for i in host.hook.prompt_sections.get_hookimpls()}

    assert "guarded-plugin:guarded_plugin" not in implemented_by(app.plugins)
    # The host others share is left as it was: another configuration may suit the plugin.
    assert "guarded-plugin:guarded_plugin" in implemented_by(shared)
    # Opened again from the opened installation's config, the table is refused again
    # rather than read as the plugin's defaults.
    again = open_installation(app.config, plugins=shared, connect=False)
    (report,) = [
        r for r in again.manifest.plugins if r.plugin.source.distribution == "guarded-plugin"
    ]
    assert report.settings_error is not None
    assert "guarded-plugin:guarded_plugin" not in implemented_by(again.plugins)


def test_a_transport_that_cannot_send_is_refused_when_the_installation_opens(site, tmp_path):
    site.add(
        "mute-carrier",
        "from protege import hookimpl\n\n"
        "class Mute:\n    def __init__(self, config):\n        pass\n\n"
        "@hookimpl\ndef register_transports(register):\n    register('mute', Mute)\n",
    )
    config = Config.defaults(tmp_path)
    config = attrs.evolve(config, mail=attrs.evolve(config.mail, transport="mute"))
    with pytest.raises(ConfigError) as raised:
        open_installation(config, plugins=site.host(), connect=False)
    assert str(raised.value) == "the mail transport 'mute' (mute_carrier.Mute) has no send()"
