import pytest


def test_doctor_exits_0_when_all_is_well(run_protege):
    result = run_protege("doctor", env={"PROTEGE_MODEL": "gpt-4.1-mini"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "No problems found."


def test_doctor_reports_a_missing_model(run_protege):
    result = run_protege("doctor")
    assert result.returncode == 1
    assert "problem: no model is set: runs cannot answer anyone" in result.stdout


def test_doctor_reports_every_problem_and_exits_1(site, run_protege):
    site.add("broken-tools", "raise ImportError('needs libfoo')\n", version="0.9")
    site.add("alpha-tools", site.tool_plugin("GetForecastTool"))
    project = run_protege.project
    (project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (project / "shop_tools.py").write_text(
        "from protege import Tool\n\nclass NoDescriptionTool(Tool):\n"
        "    def use(self, context):\n        return None\n"
    )
    result = run_protege(
        "doctor",
        pythonpath=site.path,
        env={
            "PROTEGE_LOAD_PLUGINS": "broken-tools,alpha-tools,protege-weather,ghost",
            "PROTEGE_MODEL": "test-model",
        },
    )
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        "problem: plugin broken-tools 0.9: ImportError: needs libfoo",
        "problem: PROTEGE_LOAD_PLUGINS names ghost, which is not installed",
        "problem: rejected (host shop_tools): "
        "NoDescriptionTool: description must be a non-empty string",
        "problem: tool get_forecast from plugin protege-weather 0.1.0 "
        "is shadowed by plugin alpha-tools 1.0",
    ]
    assert "Traceback" not in result.stderr


def test_doctor_says_where_files_are_kept(run_protege):
    result = run_protege("doctor")
    assert "blobs: local, in " in result.stdout
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("blobs: ")]
    assert line.endswith(".protege/blobs")


def test_doctor_asks_the_s3_service_for_the_bucket(run_protege, s3_server):
    bucket = s3_server.new_bucket()
    s3_server.write_config(run_protege.project, bucket)
    result = run_protege("doctor", env={**s3_server.credentials, "PROTEGE_MODEL": "test-model"})
    assert result.returncode == 0, result.stdout + result.stderr
    where = f"s3://{bucket}/blobs/ at {s3_server.endpoint_url}"
    assert f"blobs: {where}, reachable" in result.stdout.splitlines()


def test_doctor_reports_a_bucket_that_does_not_exist(run_protege, s3_server):
    s3_server.write_config(run_protege.project, "protege-not-made")
    result = run_protege("doctor", env=s3_server.credentials)
    assert result.returncode == 1
    assert (
        f"problem: blob store: the S3 bucket 'protege-not-made' at {s3_server.endpoint_url} "
        "does not exist ([blobs] bucket)"
    ) in result.stdout.splitlines()
    assert "Traceback" not in result.stderr


def test_doctor_reports_a_transport_and_a_blob_store_nothing_registers(run_protege):
    env = {
        "PROTEGE_MODEL": "test-model",
        "PROTEGE_MAIL_TRANSPORT": "smpt",
        "PROTEGE_BLOB_STORE": "locl",
        "PROTEGE_LOAD_PLUGINS": "",  # protege's own only: protege-staging adds a transport
    }
    result = run_protege("doctor", env=env)
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        "problem: [blobs] store = 'locl': no blob store has that name (did you mean local?); "
        "the known ones: local, s3",
        "problem: [mail] transport = 'smpt': no mail transport has that name "
        "(did you mean smtp?); the known ones: outbox, smtp, submission",
    ]
    assert "blobs: locl, unknown" in result.stdout.splitlines()
    assert "Traceback" not in result.stderr


def test_doctor_reports_limits_of_an_agent_that_does_not_exist(protege_in_process, protege_db):
    from protege.models import Agent

    Agent.create(name="Sundae", address="sundae@thescoop.example")
    project = protege_in_process.project
    (project / "protege.toml").write_text(
        "[limits.agents.Sundea]\nsender_runs_per_hour = 1\n"
        "[limits.agents.Sundae]\nsender_runs_per_hour = 2\n"
    )
    result = protege_in_process(
        "doctor", env={"PROTEGE_DATABASE_URL": protege_db.url, "PROTEGE_MODEL": "m"}
    )
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        "problem: [limits.agents.Sundea] names no agent, so its limits apply to nobody "
        "(did you mean Sundae?)"
    ]


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        (
            "[limits]\nagent_cost_per_day = 5\n",
            "problem: a money limit is set but no model has a price: set [model.prices] "
            "(per million tokens), or the limit counts nothing",
        ),
        (
            '[limits.agents.Sundae]\nagent_cost_per_month = 5\n[model.prices]\n"gpt-4o" = '
            "{ input = 2.5, output = 10 }\n",
            "problem: a money limit is set but the model 'm' has no price in [model.prices]: "
            "its answers are charged at the highest prices there",
        ),
    ],
    ids=["no price at all", "none for the configured model"],
)
def test_doctor_reports_a_money_limit_that_cannot_price_the_model(
    protege_in_process, protege_db, toml, problem
):
    (protege_in_process.project / "protege.toml").write_text(toml)
    result = protege_in_process(
        "doctor", env={"PROTEGE_DATABASE_URL": protege_db.url, "PROTEGE_MODEL": "m"}
    )
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert problems[0] == problem
    assert len(problems) == 1 + ("Sundae" in toml)  # the stray agent's own limits


def test_doctor_finds_no_price_problem_when_the_model_is_priced(protege_in_process, protege_db):
    (protege_in_process.project / "protege.toml").write_text(
        '[limits]\ninstallation_cost_per_day = 5\n[model.prices]\n"gpt-4o" = '
        "{ input = 2.5, output = 10 }\n"
    )
    result = protege_in_process(
        "doctor",
        env={"PROTEGE_DATABASE_URL": protege_db.url, "PROTEGE_MODEL": "openai/GPT-4o"},
    )
    assert result.stdout.splitlines()[-1] == "No problems found.", result.stdout
