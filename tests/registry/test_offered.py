"""Transports and blob stores offered by name: protege's own always there and never taken,
a name two plugins offer never chosen silently, and a name nothing offers refused with the
names that exist."""

import pytest

from protege.config import Config
from protege.errors import ConfigError
from protege.registry.offered import offered

CARRIER = """
from protege import Outcome, Transport, hookimpl


class {name}(Transport):
    def send(self, message, envelope):
        return [Outcome.delivered(a) for a in envelope.recipients]


@hookimpl
def register_transports(register):
    register("carrier", {name})
    register("smtp", {name})
"""


def transports(host):
    return offered(host, "register_transports", kind="mail transport", setting="[mail] transport")


def test_protege_s_own_are_offered_with_no_plugin_installed(site):
    found = transports(site.host())
    assert found.names == ("outbox", "smtp", "submission")
    assert found.problems == ()
    stores = offered(site.host(), "register_blob_stores", kind="blob store", setting="[blobs]")
    assert stores.names == ("local", "s3")


def test_a_name_nothing_offers_is_refused_naming_the_known_ones(site):
    found = transports(site.host())
    assert found.refusal("smpt") == (
        "[mail] transport = 'smpt': no mail transport has that name (did you mean smtp?); "
        "the known ones: outbox, smtp, submission"
    )
    with pytest.raises(ConfigError, match="no mail transport has that name"):
        found.build("pigeon", Config.defaults(site.path))


def test_a_plugin_cannot_take_protege_s_own_name_and_two_plugins_cannot_share_one(site):
    site.add("alpha-carrier", CARRIER.format(name="AlphaTransport"))
    site.add("beta-carrier", CARRIER.format(name="BetaTransport"))
    found = transports(site.host())
    smtp = found.build("smtp", Config.defaults(site.path))
    assert type(smtp).__module__ == "protege.delivery.smtp"
    assert found.refusal("carrier") == (
        "[mail] transport = 'carrier' is ambiguous: alpha-carrier and beta-carrier each "
        "register a mail transport of that name; uninstall or disable one"
    )
    assert sorted(found.problems) == [
        "alpha-carrier and beta-carrier each register a mail transport named 'carrier'",
        "alpha-carrier registers a mail transport named 'smtp', which is protege's own: "
        "it is ignored",
        "beta-carrier registers a mail transport named 'smtp', which is protege's own: "
        "it is ignored",
    ]


def test_a_registration_that_is_no_name_or_no_class_is_reported_and_left_out(site):
    site.add(
        "odd-carrier",
        "from protege import hookimpl\n\n"
        "@hookimpl\ndef register_transports(register):\n"
        "    register('Pigeon Post', object)\n"
        "    register('pigeon', 'not a class')\n",
    )
    found = transports(site.host())
    assert found.names == ("outbox", "smtp", "submission")
    assert found.problems == (
        "odd-carrier registers a mail transport named 'Pigeon Post', which is not a name "
        "(a lower-case letter, then lower-case letters, digits, - and _)",
        "the mail transport 'pigeon' odd-carrier registers is 'not a class'",
    )


def test_what_a_plugin_registered_before_its_hook_raised_is_withdrawn(site):
    site.add(
        "flaky-carrier",
        CARRIER.format(name="FlakyTransport").replace(
            '    register("smtp", FlakyTransport)\n', "    raise RuntimeError('half done')\n"
        ),
    )
    found = transports(site.host())
    assert found.names == ("outbox", "smtp", "submission")


def test_a_transport_of_a_plugin_whose_settings_are_refused_is_not_made(site):
    site.add("alpha-carrier", CARRIER.format(name="AlphaTransport"))
    found = transports(site.host())
    with pytest.raises(ConfigError) as raised:
        found.build("carrier", Config.defaults(site.path), {"alpha-carrier": "bad timeout"})
    assert str(raised.value) == (
        "[mail] transport = 'carrier' is offered by alpha-carrier, which is not in use: bad timeout"
    )


def test_a_register_kept_and_called_after_the_hook_is_refused(site):
    site.add(
        "late-carrier",
        "from protege import hookimpl\n\nKEPT = []\n\n"
        "@hookimpl\ndef register_transports(register):\n    KEPT.append(register)\n",
    )
    transports(site.host())
    import late_carrier

    with pytest.raises(RuntimeError, match="while it runs"):
        late_carrier.KEPT[0]("late", object)


def test_a_factory_that_fails_is_a_one_line_error_naming_it(site):
    site.add(
        "shaky-store",
        "from protege import hookimpl\n\n"
        "def shaky(config):\n    raise RuntimeError('no vault\\nhere')\n\n"
        "@hookimpl\ndef register_blob_stores(register):\n    register('shaky', shaky)\n",
    )
    stores = offered(site.host(), "register_blob_stores", kind="blob store", setting="[blobs]")
    with pytest.raises(ConfigError) as raised:
        stores.build("shaky", Config.defaults(site.path))
    assert str(raised.value) == (
        "the blob store 'shaky' (shaky_store.shaky) could not be made: RuntimeError: no vault here"
    )
