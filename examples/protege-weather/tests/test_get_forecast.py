import json

import httpx
import pytest

from protege import Trust
from protege_weather import BASE_URL_VARIABLE, GetForecastTool

FORECAST = {
    "daily": {
        "time": ["2026-11-30", "2026-12-01"],
        "temperature_2m_max": [7.5, 6.1],
        "temperature_2m_min": [1.2, -0.4],
        "precipitation_sum": [0.0, 3.4],
    }
}


def tool_answering(handler):
    client = httpx.Client(base_url="https://forecast.test", transport=httpx.MockTransport(handler))
    return GetForecastTool(client=client)


def test_returns_each_day_of_the_forecast_as_untrusted_data():
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json=FORECAST)

    result = tool_answering(handler).use(context=None, latitude=52.52, longitude=13.41, days=2)

    assert result.ok
    assert result.trust is Trust.UNTRUSTED
    assert result.data["days"] == [
        {"date": "2026-11-30", "high_c": 7.5, "low_c": 1.2, "precipitation_mm": 0.0},
        {"date": "2026-12-01", "high_c": 6.1, "low_c": -0.4, "precipitation_mm": 3.4},
    ]
    (request,) = seen
    assert request.url.path == "/v1/forecast"
    assert request.url.params["forecast_days"] == "2"
    assert request.url.params["latitude"] == "52.52"


def test_a_server_error_becomes_a_failure_naming_the_status():
    result = tool_answering(lambda request: httpx.Response(503)).use(
        context=None, latitude=0, longitude=0
    )
    assert not result.ok
    assert "503" in result.reason


def test_an_unreachable_service_becomes_a_failure():
    def handler(request):
        raise httpx.ConnectError("connection refused", request=request)

    result = tool_answering(handler).use(context=None, latitude=0, longitude=0)
    assert not result.ok
    assert "could not be reached" in result.reason


@pytest.mark.parametrize("body", [b"not json", json.dumps({"daily": {"time": ["x"]}}).encode()])
def test_an_unexpected_answer_becomes_a_failure(body):
    result = tool_answering(lambda request: httpx.Response(200, content=body)).use(
        context=None, latitude=0, longitude=0
    )
    assert not result.ok
    assert "does not understand" in result.reason


def test_base_url_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(BASE_URL_VARIABLE, "http://127.0.0.1:9")
    tool = GetForecastTool()
    result = tool.use(context=None, latitude=0, longitude=0)
    assert tool.client.base_url == httpx.URL("http://127.0.0.1:9")
    assert not result.ok  # nothing listens on the discard port


def test_base_url_comes_from_protege_toml(protege_app):
    from protege import ProtegeError
    from protege.testing import make_context, with_plugin_settings

    app = with_plugin_settings(
        protege_app, "protege-weather", {"base_url": "http://127.0.0.1:9", "timeout_seconds": 2}
    )
    tool = GetForecastTool()
    result = tool.use(make_context(config=app.config), latitude=0, longitude=0)
    assert tool.client.base_url == httpx.URL("http://127.0.0.1:9")
    assert tool.client.timeout.read == 2
    assert not result.ok
    with pytest.raises(
        ProtegeError, match=r"'timeout_seconds' must be > 0: 0.0 @ plugins.protege-weather"
    ):
        with_plugin_settings(protege_app, "protege-weather", {"timeout_seconds": 0})
