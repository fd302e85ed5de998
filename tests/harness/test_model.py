"""The real openai client against the scripted endpoint: retries, and errors that say what
to fix."""

import attrs
import pytest

from protege.config import ModelSettings
from protege.harness.model import ModelClient, ModelError
from protege.models import Agent
from protege.testing import http_error, run_reply, say


@pytest.fixture
def agent(protege_db):
    return Agent.create(name="Tester", address="tester@thescoop.example")


def test_429_then_success(agent, config, scripted_model, scoop_tools):
    scripted_model.script(http_error(429), say("Hello."))
    run = run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools)
    assert run.status == "done"
    assert len(scripted_model.requests) == 2


def test_5xx_is_retried_too(agent, config, scripted_model, scoop_tools):
    scripted_model.script(http_error(503), http_error(500), say("Hello."))
    assert (
        run_reply(
            agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools
        ).status
        == "done"
    )


def test_rate_limit_that_outlasts_the_retries_fails_the_run(
    agent, config, scripted_model, scoop_tools
):
    scripted_model.script(*[http_error(429, "slow down")] * 4)
    run = run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools)
    assert run.status == "failed"
    assert run.error == "the model endpoint is still rate limiting after 3 retries: slow down"
    assert len(scripted_model.requests) == 4


def test_401_fails_the_run_saying_what_to_fix(agent, config, scripted_model, scoop_tools):
    scripted_model.script(http_error(401, "Incorrect API key provided"))
    run = run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools)
    assert run.status == "failed"
    assert run.error.startswith(
        f"the model endpoint refused the API key (401): set {config.model.api_key_env} "
    )
    assert len(scripted_model.requests) == 1  # not retried
    (error,) = [e.payload for e in run.timeline() if e.kind == "error"]
    assert error == {"error": run.error}


def test_unknown_model_fails_the_run_naming_the_model(agent, config, scripted_model, scoop_tools):
    scripted_model.script(http_error(404, "The model `scripted` does not exist"))
    run = run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools)
    assert run.error.startswith("the model endpoint has no model 'scripted' (404)")


def test_unreachable_endpoint(agent, config, scoop_tools):
    unreachable = attrs.evolve(
        config.model, base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=5
    )
    run = run_reply(
        agent,
        sender="j@acme.com",
        body="Hi",
        config=attrs.evolve(config, model=unreachable),
        manifest=scoop_tools,
    )
    assert run.status == "failed"
    assert run.error.startswith("cannot reach the model endpoint at http://127.0.0.1:9/v1")


def test_no_model_configured_is_a_clear_error():
    with pytest.raises(ModelError, match=r"no model is configured: set model = \"...\""):
        ModelClient(ModelSettings())


def test_token_limit_uses_the_configured_parameter(agent, config, scripted_model, scoop_tools):
    for parameter in ("max_completion_tokens", "max_tokens"):
        settings = attrs.evolve(config.model, max_output_tokens=300, token_parameter=parameter)
        scripted_model.script(say("ok"))
        run_reply(
            agent,
            sender="j@acme.com",
            body="Hi",
            config=attrs.evolve(config, model=settings),
            manifest=scoop_tools,
        )
        assert scripted_model.requests[-1][parameter] == 300
    assert "max_tokens" not in scripted_model.requests[0]


def test_request_is_the_conversation_as_plain_json_with_the_api_key(
    agent, config, scripted_model, scoop_tools
):
    settings = attrs.evolve(config.model, temperature=0.5, api_key="sk-test-123")
    scripted_model.script(say("ok"))
    run_reply(
        agent,
        sender="jane@acme.com",
        body="Hi",
        config=attrs.evolve(config, model=settings),
        manifest=scoop_tools,
    )
    (request,) = scripted_model.requests
    assert set(request) == {"model", "messages", "temperature"}  # no tools granted: none sent
    assert request["model"] == config.model.model
    assert request["temperature"] == 0.5
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert scripted_model.authorizations == ["Bearer sk-test-123"]


def test_usage_and_model_are_recorded(agent, config, scripted_model, scoop_tools):
    scripted_model.script(say("ok"))
    run = run_reply(agent, sender="j@acme.com", body="Hi", config=config, manifest=scoop_tools)
    (response,) = [e.payload for e in run.timeline() if e.kind == "model_response"]
    assert response["model"] == "scripted"
    assert response["usage"]["completion_tokens"] == 10
    (request,) = [e.payload for e in run.timeline() if e.kind == "model_request"]
    assert request["tools"] == []
