import subprocess
import sys
from pathlib import Path

import attr
import pytest

from protege.config import load_config, structure_settings
from protege.errors import ConfigError


def test_defaults_without_a_config_file_use_local_files_and_sqlite(tmp_path):
    config = load_config(tmp_path, environ={})
    assert config.path is None
    assert config.root == tmp_path.resolve()
    assert config.tool_modules == ()
    assert config.data_dir == tmp_path.resolve() / ".protege"
    assert config.database_url == f"sqlite:///{tmp_path.resolve() / '.protege' / 'protege.db'}"


def test_config_file_is_found_from_the_working_directory_upward(tmp_path):
    (tmp_path / "protege.toml").write_text('tool_modules = ["shop.tools"]\ndata_dir = "var"\n')
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    config = load_config(nested, environ={})
    assert config.path == (tmp_path / "protege.toml").resolve()
    assert config.root == tmp_path.resolve()
    assert config.tool_modules == ("shop.tools",)
    assert config.data_dir == tmp_path.resolve() / "var"


def test_protege_config_names_the_file_explicitly(tmp_path):
    elsewhere = tmp_path / "deploy" / "settings.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('tool_modules = ["app.tools"]\n')
    config = load_config(tmp_path, environ={"PROTEGE_CONFIG": str(elsewhere)})
    assert config.tool_modules == ("app.tools",)
    assert config.root == elsewhere.parent.resolve()


def test_environment_overrides_the_file(tmp_path):
    (tmp_path / "protege.toml").write_text('database_url = "sqlite:///file.db"\n')
    environ = {"PROTEGE_DATABASE_URL": "postgresql://db/protege", "PROTEGE_DATA_DIR": "/srv/p"}
    config = load_config(tmp_path, environ=environ)
    assert config.database_url == "postgresql://db/protege"
    assert config.data_dir == Path("/srv/p")


def test_environment_overrides_the_model_endpoint_key_and_mail_transport(tmp_path):
    (tmp_path / "protege.toml").write_text(
        '[model]\nmodel = "gpt"\nbase_url = "https://models.example/v1"\n'
        'api_key_env = "PROD_KEY"\n[mail]\ntransport = "smtp"\nsmtp_host = "relay.example"\n'
    )
    environ = {
        "PROTEGE_MODEL_BASE_URL": "http://127.0.0.1:9999/v1",
        "PROTEGE_MODEL_API_KEY_ENV": "TEST_KEY",
        "PROTEGE_MAIL_TRANSPORT": "outbox",
    }
    config = load_config(tmp_path, environ=environ)
    assert (config.model.model, config.model.base_url) == ("gpt", "http://127.0.0.1:9999/v1")
    assert config.model.api_key_env == "TEST_KEY"
    assert (config.mail.transport, config.mail.smtp_host) == ("outbox", "relay.example")
    unset = load_config(tmp_path, environ={"PROTEGE_MAIL_TRANSPORT": ""})
    assert unset.mail.transport == "smtp"


def test_an_unusable_override_is_a_clear_error(tmp_path):
    # Whether a transport has the name is known once plugins are loaded (the installation
    # checks it); what can be no name at all is refused here.
    assert load_config(tmp_path, environ={"PROTEGE_MAIL_TRANSPORT": "pigeon"}).mail.transport
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ={"PROTEGE_MAIL_TRANSPORT": "Pigeon Post"})
    assert str(raised.value) == (
        "PROTEGE_MAIL_TRANSPORT: transport: 'Pigeon Post' is not a name (a lower-case letter, "
        "then lower-case letters, digits, - and _)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('tool_module = ["x"]\n', "unknown key tool_module (did you mean tool_modules?)"),
        ("tool_modules = 3\n", "tool_modules"),
        ('tool_modules = "shop.tools"\n', "must be a list of strings @ protege.toml.tool_modules"),
        ("tool_modules = [\n", "is not valid TOML"),
    ],
)
def test_a_bad_config_file_is_a_clear_error(tmp_path, content, message):
    (tmp_path / "protege.toml").write_text(content)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ={})
    assert message in str(raised.value)
    assert "protege.toml" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_whole_numbers_are_read_as_the_floats_their_settings_hold(tmp_path):
    (tmp_path / "protege.toml").write_text("[model]\ntimeout = 60\n[serve]\npoll_interval = 1\n")
    config = load_config(tmp_path, environ={})
    assert (config.model.timeout, config.serve.poll_interval) == (60.0, 1.0)
    assert type(config.model.timeout) is type(config.serve.poll_interval) is float


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ('[serve]\nprocesses = "3"', "expected a whole number, not the string '3'"),
        ("[runs]\nmax_model_turns = 2.7", "expected a whole number, not the number 2.7"),
        ('[mail]\nsmtp_starttls = "false"', "expected true or false, not the string 'false'"),
        ("[mail]\nsmtp_retries = true", "expected a whole number, not the boolean true"),
        ('[serve]\nshutdown_seconds = "15"', "expected a number, not the string '15'"),
        ("[model]\ntransport = 3", "unknown key transport"),
        ("[mail]\nsmtp_startls = false", "unknown key smtp_startls (did you mean smtp_starttls?)"),
        ("[mail]\nlisten_port = 99999", "listen_port: 99999 is not a TCP port (1 to 65535)"),
        ("[mail]\nsmtp_port = 0", "smtp_port: 0 is not a TCP port (1 to 65535)"),
        ('[model]\napi_key = "sk-1"', "api_key may not be written in protege.toml"),
        ('[mail]\nsmtp_password = "x"', "smtp_password may not be written in protege.toml"),
        ('[runs]\ntimezone = "Mars/Olympus"', "timezone: unknown time zone 'Mars/Olympus'"),
        ("[runs]\nmax_prompt_section_chars = 10", "'max_prompt_section_chars' must be >= 100"),
    ],
)
def test_a_value_of_another_type_is_refused_saying_what_was_expected(tmp_path, setting, said):
    # TOML has its own types: "false" is not false, 2.7 is not 2, a secret is not a setting.
    (tmp_path / "protege.toml").write_text(setting + "\n")
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path, environ={})
    assert said in str(refused.value)


def test_a_whole_number_is_a_fine_number(tmp_path):
    (tmp_path / "protege.toml").write_text("[serve]\nshutdown_seconds = 15\n")
    assert load_config(tmp_path, environ={}).serve.shutdown_seconds == 15.0


READ_PLAIN_FILE = """
import sys
from protege.config import load_config
config = load_config()
assert config.mail.transport == "smtp" and config.plugins["shop"] == {"n": [1, {"a": 2}]}
print("cattrs" in sys.modules)
"""


def test_a_file_of_plain_values_is_read_without_loading_cattrs(tmp_path):
    # Importing cattrs costs more than the rest of reading the configuration; it is only
    # needed to convert a value or to say what is wrong.
    (tmp_path / "protege.toml").write_text(
        'tool_modules = ["shop.tools"]\n[model]\ninput = ["text", "pdf"]\ntimeout = 10\n'
        '[mail]\ntransport = "smtp"\nsmtp_username = "bot"\n[plugins.shop]\nn = [1, {a = 2}]\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", READ_PLAIN_FILE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False"]


def test_protege_config_naming_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="which is not a file"):
        load_config(tmp_path, environ={"PROTEGE_CONFIG": str(tmp_path / "nope.toml")})


def test_model_and_run_sections(tmp_path):
    (tmp_path / "protege.toml").write_text(
        "[model]\n"
        'model = "gpt-5-mini"\n'
        'base_url = "http://127.0.0.1:8000/v1"\n'
        "max_output_tokens = 800\n"
        "[runs]\n"
        "max_model_turns = 4\n"
    )
    config = load_config(tmp_path, environ={})
    assert config.model.model == "gpt-5-mini"
    assert config.model.base_url == "http://127.0.0.1:8000/v1"
    assert config.model.token_parameter == "max_completion_tokens"
    assert (config.runs.max_model_turns, config.runs.max_tool_failures) == (4, 5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[runs]\nmax_model_turns = 0\n", "max_model_turns"),
        ('[model]\ntoken_parameter = "tokens"\n', "token_parameter"),
        ("[model]\nmodle = 'x'\n", "unknown key modle (did you mean model?)"),
        ('[model]\ninput = ["text", "video"]\n', "input"),
        ('[model]\ninput = "image"\n', "must be a list of strings"),
        ("[runs]\nmax_parts_per_run = -1\n", "max_parts_per_run"),
        ("[runs]\nmax_shown_attachment_bytes = 0\n", "max_shown_attachment_bytes"),
        ("[runs]\nmax_pictures = 3\n", "unknown key max_pictures"),
        ('[mail]\nehlo_name = "localhost"\n', "ehlo_name: 'localhost' is neither a host name"),
        ('[mail]\nehlo_name = "mail example.com"\n', "ehlo_name"),
        ('[mail]\nehlo_name = "[300.1.2.3]"\n', "ehlo_name"),
        ("[mail]\nsmtp_timeout = 0\n", "smtp_timeout"),
    ],
)
def test_bad_sections_are_clear_errors(tmp_path, content, message):
    (tmp_path / "protege.toml").write_text(content)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ={})
    assert message in str(raised.value)


def test_the_model_reads_text_only_unless_its_input_says_more(tmp_path):
    assert load_config(tmp_path, environ={}).model.input == ("text",)
    (tmp_path / "protege.toml").write_text('[model]\ninput = ["text", "image", "pdf"]\n')
    model = load_config(tmp_path, environ={}).model
    assert model.input == ("text", "image", "pdf")
    assert model.accepts("pdf")


def test_the_files_a_run_shows_the_model_have_limits_with_defaults_that_can_be_set(tmp_path):
    runs = load_config(tmp_path, environ={}).runs
    limits = (runs.max_parts_per_run, runs.max_part_bytes_per_run, runs.max_shown_attachment_bytes)
    assert limits == (8, 20 * 1024 * 1024, 10 * 1024 * 1024)
    (tmp_path / "protege.toml").write_text("[runs]\nmax_parts_per_run = 2\n")
    runs = load_config(tmp_path, environ={}).runs
    assert (runs.max_parts_per_run, runs.max_part_bytes_per_run) == (2, 20 * 1024 * 1024)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "[web]\nmax_chars = 500\n",
            "[web] is now [plugins.protege-web]: rename the table",
        ),
        (
            "[web]\nmax_chars = 500\n[plugins.protege-web]\nmax_bytes = 4096\n",
            "[web] is now [plugins.protege-web]: rename the table",
        ),
        (
            "[files]\nmax_text_chars = 500\n",
            "[files] is now [plugins.protege-files]: rename the table",
        ),
        (
            "[files]\nmax_parts_per_run = 2\nmax_text_chars = 500\n",
            "[files] is now [plugins.protege-files]: rename the table; "
            "move max_parts_per_run to [runs]",
        ),
        (
            "[files]\nmax_read_bytes = 4096\n",
            "[files] is now [plugins.protege-files]: rename the table; max_read_bytes now "
            "bounds only read_attachment; the attachments shown to the model are bounded by "
            "max_shown_attachment_bytes under [runs]",
        ),
    ],
)
def test_a_table_protege_no_longer_reads_is_refused_saying_what_to_rename(
    tmp_path, content, message
):
    # Read under its old name as well, one setting would have two places deciding it.
    (tmp_path / "protege.toml").write_text(content)
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path, environ={})
    assert str(refused.value) == (
        f"{tmp_path / 'protege.toml'} has settings protege no longer reads there: {message}"
    )
    assert "\n" not in str(refused.value)


def test_an_old_table_is_refused_whatever_it_holds(tmp_path):
    # Even an empty or malformed one: the rename is what the operator needs to hear first.
    for content in ("[web]\n", "web = 3\n", '[files]\nmax_read_bytes = "lots"\n'):
        (tmp_path / "protege.toml").write_text(content)
        with pytest.raises(ConfigError, match="no longer reads there"):
            load_config(tmp_path, environ={})


def test_secrets_are_read_from_the_environment_when_loaded_and_never_shown(tmp_path):
    (tmp_path / "protege.toml").write_text(
        '[model]\napi_key_env = "SCOOP_KEY"\n[mail]\nsmtp_password_env = "SCOOP_SMTP"\n'
    )
    environ = {
        "SCOOP_KEY": "sk-xyzzy",
        "SCOOP_SMTP": "pw-xyzzy",
        "OPENAI_BASE_URL": "http://m/v1",
    }
    config = load_config(tmp_path, environ=environ)
    assert config.model.api_key == "sk-xyzzy"
    assert config.model.base_url == "http://m/v1"
    assert config.mail.smtp_password == "pw-xyzzy"
    assert "xyzzy" not in repr(config)


def test_responsibilities_default_to_no_retry_and_no_notify(tmp_path):
    settings = load_config(tmp_path, environ={}).responsibilities
    assert (settings.retries, settings.notify, settings.poll_seconds) == (0, None, 15.0)


def test_responsibilities_settings_are_read_and_checked(tmp_path):
    (tmp_path / "protege.toml").write_text(
        '[responsibilities]\nretries = 2\nretry_delay_seconds = 60\nnotify = "ops@thescoop.com"\n'
    )
    settings = load_config(tmp_path, environ={}).responsibilities
    assert (settings.retries, settings.retry_delay_seconds, settings.notify) == (
        2,
        60.0,
        "ops@thescoop.com",
    )
    (tmp_path / "protege.toml").write_text('[responsibilities]\nnotify = "ops\\r\\nBcc: x@y.z"\n')
    with pytest.raises(ConfigError, match="is not an email address"):
        load_config(tmp_path, environ={})
    (tmp_path / "protege.toml").write_text("[responsibilities]\npoll_seconds = 0\n")
    with pytest.raises(ConfigError, match="poll_seconds"):
        load_config(tmp_path, environ={})


S3_SECTION = (
    '[blobs]\nstore = "s3"\nbucket = "scoop-files"\nprefix = "protege/"\n'
    'endpoint_url = "https://s3.example"\nregion = "eu-west-1"\n'
    'access_key_id_env = "SCOOP_S3_KEY"\nsecret_access_key_env = "SCOOP_S3_SECRET"\n'
)


def test_blobs_are_local_files_by_default(tmp_path):
    blobs = load_config(tmp_path, environ={}).blobs
    assert (blobs.store, blobs.bucket, blobs.access_key_id) == ("local", None, None)


def test_the_s3_blob_store_reads_its_credentials_from_the_variables_named(tmp_path):
    (tmp_path / "protege.toml").write_text(S3_SECTION)
    environ = {"SCOOP_S3_KEY": "AKIA-xyzzy", "SCOOP_S3_SECRET": "secret-xyzzy"}
    config = load_config(tmp_path, environ=environ)
    blobs = config.blobs
    assert (blobs.store, blobs.bucket, blobs.prefix) == ("s3", "scoop-files", "protege/")
    assert (blobs.endpoint_url, blobs.region) == ("https://s3.example", "eu-west-1")
    assert (blobs.access_key_id, blobs.secret_access_key) == ("AKIA-xyzzy", "secret-xyzzy")
    assert "xyzzy" not in repr(config)


def test_without_credential_variables_boto3_finds_its_own(tmp_path):
    (tmp_path / "protege.toml").write_text('[blobs]\nstore = "s3"\nbucket = "scoop-files"\n')
    blobs = load_config(tmp_path, environ={}).blobs
    assert (blobs.access_key_id, blobs.secret_access_key) == (None, None)


def test_protege_blob_store_overrides_the_file(tmp_path):
    project, bare = tmp_path / "project", tmp_path / "bare"
    project.mkdir()
    bare.mkdir()
    (project / "protege.toml").write_text(S3_SECTION)
    assert load_config(project, environ={"PROTEGE_BLOB_STORE": "local"}).blobs.store == "local"
    with pytest.raises(ConfigError) as raised:
        load_config(project, environ={"PROTEGE_BLOB_STORE": "ftp:"})
    assert str(raised.value) == (
        "PROTEGE_BLOB_STORE: store: 'ftp:' is not a name (a lower-case letter, then "
        "lower-case letters, digits, - and _)"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(bare, environ={"PROTEGE_BLOB_STORE": "s3"})
    assert str(raised.value) == 'PROTEGE_BLOB_STORE: bucket: required when store = "s3"'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[blobs]\nstore = "s3"\n', 'bucket: required when store = "s3" @ protege.toml.blobs'),
        ('[blobs]\nstore = "Dropbox"\n', "store: 'Dropbox' is not a name"),
        ('[blobs]\nstore = "s3"\nbucket = "Scoop_Files"\n', "is not an S3 bucket name"),
        ('[blobs]\nprefix = "/abs/"\n', "prefix: '/abs/' must not start with /"),
        ('[blobs]\nprefix = "a/../b/"\n', "must not start with / or hold .."),
        ('[blobs]\nendpoint_url = "s3.example"\n', "endpoint_url must be an http or https URL"),
        ('[blobs]\naddressing_style = "dns"\n', "'addressing_style' must be in"),
        ("[blobs]\ntimeout_seconds = 0\n", "timeout_seconds"),
        ("[blobs]\nbukket = 'x'\n", "unknown key bukket (did you mean bucket?)"),
        (
            '[blobs]\nstore = "s3"\nbucket = "scoop"\nsecret_access_key = "hunter2"\n',
            "secret_access_key may not be written in protege.toml: name the environment "
            "variable that holds it in secret_access_key_env",
        ),
    ],
)
def test_bad_blob_settings_are_clear_errors(tmp_path, content, message):
    (tmp_path / "protege.toml").write_text(content)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ={})
    assert message in str(raised.value)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"SCOOP_S3_KEY": "AKIA"},
            "[blobs] secret_access_key_env names SCOOP_S3_SECRET, which is not set",
        ),
        ({}, "[blobs] access_key_id_env names SCOOP_S3_KEY, which is not set"),
    ],
)
def test_a_credential_variable_named_but_unset_is_an_error(tmp_path, environ, message):
    (tmp_path / "protege.toml").write_text(S3_SECTION)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ=environ)
    assert str(raised.value) == message


def test_half_of_the_default_credentials_is_an_error(tmp_path):
    (tmp_path / "protege.toml").write_text('[blobs]\nstore = "s3"\nbucket = "scoop-files"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ={"AWS_ACCESS_KEY_ID": "AKIA"})
    assert str(raised.value) == (
        "[blobs] needs both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set, or neither "
        "(to let boto3 find its own credentials)"
    )


@attr.s(frozen=True)
class _OldStyleSettings:
    """A plugin's settings declared the older attrs way: types given to attr.ib, or none."""

    retries = attr.ib(type=int, default=1)
    label = attr.ib(default="x")


def test_settings_declared_without_annotations_are_read_too():
    read = structure_settings({"retries": 2, "label": ["a"]}, _OldStyleSettings, "where")
    assert read == _OldStyleSettings(retries=2, label=["a"])
    with pytest.raises(ConfigError, match="expected a whole number, not the string '3'"):
        structure_settings({"retries": "3"}, _OldStyleSettings, "where")
    with pytest.raises(ConfigError, match="unknown key retrys"):
        structure_settings({"retrys": 2}, _OldStyleSettings, "where")


def test_an_integer_too_large_for_a_float_setting_is_a_config_error(tmp_path):
    (tmp_path / "protege.toml").write_text("[serve]\nshutdown_seconds = 1" + "0" * 400 + "\n")
    with pytest.raises(ConfigError, match="shutdown_seconds"):
        load_config(tmp_path, environ={})
    with pytest.raises(ConfigError, match="retries"):
        structure_settings({"retries": 10**400}, _FloatSettings, "plugins.x")


@attr.s(auto_attribs=True)
class _FloatSettings:
    retries: float = 1.0


@pytest.mark.parametrize("value", ["-1", "20"])
def test_worker_niceness_is_a_nice_step_from_0_to_19(tmp_path, value):
    (tmp_path / "protege.toml").write_text(f"[serve]\nworker_niceness = {value}\n")
    with pytest.raises(ConfigError, match="worker_niceness"):
        load_config(tmp_path, environ={})
    (tmp_path / "protege.toml").write_text("[serve]\nworker_niceness = 0\n")
    assert load_config(tmp_path, environ={}).serve.worker_niceness == 0


@pytest.mark.parametrize("name", [None, "mail.thescoop.com", "[192.0.2.7]", "[IPv6:2001:db8::7]"])
def test_the_ehlo_name_is_a_host_name_or_an_address_literal(tmp_path, name):
    content = "" if name is None else f'[mail]\nehlo_name = "{name}"\n'
    (tmp_path / "protege.toml").write_text(content)
    assert load_config(tmp_path, environ={}).mail.ehlo_name == name


@pytest.mark.parametrize(
    "answered",
    ["gpt-4o", "GPT-4o", "openai/gpt-4o", "gpt-4o:latest", "OpenAI/GPT-4o:latest", "gpt-4o-2024"],
)
def test_a_model_is_priced_whatever_prefix_tag_or_case_the_endpoint_names_it_with(answered):
    from protege.config import ModelSettings
    from protege.limit_settings import ModelPrice

    gpt_4o, mini = ModelPrice(input=2.5, output=10), ModelPrice(input=0.15, output=0.6)
    settings = ModelSettings(model="gpt-4o", prices={"gpt-4o": gpt_4o, "gpt-4o-mini": mini})
    assert settings.price_of(answered) == gpt_4o
    assert settings.price_of(answered.replace("4o", "4o-mini")) == mini
    assert settings.price_of("gpt-5") is None


def test_the_highest_price_is_each_highest_of_the_table_or_the_models_own():
    from protege.config import ModelSettings
    from protege.limit_settings import ModelPrice

    table = {"a": ModelPrice(input=3, output=1), "b": ModelPrice(input=1, output=8)}
    assert ModelSettings(prices=table).highest_price() == ModelPrice(input=3, output=8)
    own = ModelSettings(input_cost_per_million=2, output_cost_per_million=4)
    assert own.highest_price() == ModelPrice(input=2, output=4)
    assert ModelSettings().highest_price() is None
