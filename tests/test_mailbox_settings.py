"""[mail.imap.NAME] and [mail.submission] as protege.toml gives them."""

import pytest

from protege.config import load_config
from protege.errors import ConfigError

MAILBOX = """
[mail.imap.support]
agent = "support@example.com"
host = "imap.example.com"
username = "support@example.com"
password_env = "SUPPORT_IMAP_PASSWORD"
"""


def loaded(tmp_path, text, environ=None):
    (tmp_path / "protege.toml").write_text(text)
    return load_config(tmp_path, environ=environ or {})


def test_a_mailbox_reads_its_password_from_the_named_variable_and_never_shows_it(tmp_path):
    config = loaded(tmp_path, MAILBOX, {"SUPPORT_IMAP_PASSWORD": "pw-xyzzy"})
    mailbox = config.mail.imap["support"]
    assert mailbox.password == "pw-xyzzy"
    assert mailbox.address == ("imap.example.com", 993)
    assert mailbox.backfill_days is None
    assert "pw-xyzzy" not in repr(config)


def test_starttls_defaults_to_port_143_and_backfill_reads_days(tmp_path):
    config = loaded(tmp_path, MAILBOX + 'security = "starttls"\nbackfill = "7d"\n')
    mailbox = config.mail.imap["support"]
    assert mailbox.address == ("imap.example.com", 143)
    assert mailbox.backfill_days == 7
    assert loaded(tmp_path, MAILBOX + 'backfill = "all"\n').mail.imap["support"].backfill_days == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('password = "x"\n', "password may not be written in protege.toml"),
        ('backfill = "7x"\n', 'backfill: \'7x\' is not "none", "all"'),
        ('done = "move"\n', "move_to: required when done"),
        ('done = "move"\nmove_to = "INBOX"\n', "move_to: must be another folder"),
        ('security = "ssl"\n', "security"),
        ("port = 0\n", "port: 0 is not a TCP port"),
        ("batch = 0\n", "batch"),
        ('oauth2_command = "oama access x"\n', "set one, not both"),
        ('idle = "false"\n', "expected true or false"),
        ('folder = "a\\nb"\n', "is not a folder name"),
        ('sent_folder = "INBOX"\n', "sent_folder: must be another folder"),
        ('sent_folder = "inbox"\n', "sent_folder: must be another folder"),
        ('trusted_authserv_ids = ["mx.google.com; dmarc=pass"]\n', "is not an authserv-id"),
        ('trusted_authserv_ids = [""]\n', "is not an authserv-id"),
    ],
)
def test_a_mistaken_mailbox_setting_is_one_clear_error(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=None) as raised:
        loaded(tmp_path, MAILBOX + extra)
    assert message in str(raised.value)


def test_a_mailbox_needs_a_way_to_log_in_and_an_agent_address(tmp_path):
    text = MAILBOX.replace('password_env = "SUPPORT_IMAP_PASSWORD"\n', "")
    with pytest.raises(ConfigError, match="password_env or oauth2_command: one is required"):
        loaded(tmp_path, text)
    with pytest.raises(ConfigError, match="is not an email address"):
        loaded(tmp_path, MAILBOX.replace('agent = "support@example.com"', 'agent = "support"'))


def test_a_mailbox_name_must_be_a_plain_name(tmp_path):
    with pytest.raises(ConfigError, match="is not a mailbox name"):
        loaded(tmp_path, MAILBOX.replace("[mail.imap.support]", '[mail.imap."Support Desk"]'))


def test_submission_takes_implicit_tls_on_465_and_starttls_otherwise(tmp_path):
    text = '[mail]\ntransport = "submission"\n[mail.submission]\nhost = "smtp.example.com"\n'
    config = loaded(tmp_path, text + "port = 465\n", {"PROTEGE_SUBMISSION_PASSWORD": "pw"})
    assert config.mail.submission.tls == "tls"
    assert config.mail.submission.password == "pw"
    assert "'pw'" not in repr(config.mail.submission)
    assert loaded(tmp_path, text).mail.submission.address == ("smtp.example.com", 587)
    assert loaded(tmp_path, text).mail.submission.tls == "starttls"
    with pytest.raises(ConfigError, match="password may not be written"):
        loaded(tmp_path, text + 'password = "pw"\n')


def test_two_mailboxes_reading_one_folder_of_one_account_are_refused(tmp_path):
    second = MAILBOX.replace("[mail.imap.support]", "[mail.imap.helpdesk]")
    with pytest.raises(ConfigError, match="support and helpdesk read the same folder"):
        loaded(tmp_path, MAILBOX + second)
    other_folder = second + 'folder = "Helpdesk"\n'
    assert set(loaded(tmp_path, MAILBOX + other_folder).mail.imap) == {"support", "helpdesk"}
