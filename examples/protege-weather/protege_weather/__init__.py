"""protege-weather: a sample plugin that gives agents a daily weather forecast.

It shows a plugin's whole shape: one ``Tool`` subclass, one ``register_tools`` hookimpl,
settings declared with ``plugin_settings`` (``[plugins.protege-weather]`` in
``protege.toml``), and an entry point in the ``protege`` group named after the module.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from protege import Tool, Trust, hookimpl

if TYPE_CHECKING:
    import httpx

DISTRIBUTION = "protege-weather"
# Wins over the settings: for a test's stand-in service.
BASE_URL_VARIABLE = "PROTEGE_WEATHER_BASE_URL"
DEFAULT_BASE_URL = "https://api.open-meteo.com"


@attrs.frozen
class Settings:
    """``[plugins.protege-weather]``: where the forecast comes from, and how long to wait."""

    base_url: str = DEFAULT_BASE_URL
    timeout_seconds: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))


DAILY_FIELDS = ("temperature_2m_max", "temperature_2m_min", "precipitation_sum")


class GetForecastTool(Tool):
    """The daily forecast for a place, from the keyless Open-Meteo API."""

    description = (
        "Gets the daily weather forecast for a place given by latitude and longitude: for "
        "each day, the high and low temperature in degrees Celsius and the precipitation in "
        "millimetres. Use it when someone asks about the weather ahead; it cannot look up "
        "place names, so pass coordinates."
    )
    summary = "Daily forecast (high, low, rain) for a latitude and longitude."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["latitude", "longitude"],
        "properties": {
            "latitude": {"type": "number", "minimum": -90, "maximum": 90},
            "longitude": {"type": "number", "minimum": -180, "maximum": 180},
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 3},
        },
    }
    timeout = 15.0
    trust = Trust.UNTRUSTED  # the forecast comes from a third-party service

    def __init__(self, client: httpx.Client | None = None) -> None:
        self.client = client

    def use(self, context: Any, latitude: float, longitude: float, days: int = 3):
        # httpx is imported here, not at the top: listing the tools (every `protege` command
        # builds the manifest) should not pay for an HTTP client no one is calling.
        import httpx

        params = {
            "latitude": latitude,
            "longitude": longitude,
            "daily": ",".join(DAILY_FIELDS),
            "forecast_days": days,
            "timezone": "auto",
        }
        try:
            response = self._client(context).get("/v1/forecast", params=params)
            response.raise_for_status()
            daily = response.json()["daily"]
            forecast = [
                {
                    "date": date,
                    "high_c": daily["temperature_2m_max"][i],
                    "low_c": daily["temperature_2m_min"][i],
                    "precipitation_mm": daily["precipitation_sum"][i],
                }
                for i, date in enumerate(daily["time"])
            ]
        except httpx.HTTPStatusError as error:
            return self.failure(f"the forecast service answered {error.response.status_code}")
        except httpx.HTTPError as error:
            return self.failure(f"the forecast service could not be reached: {error}")
        except (ValueError, KeyError, IndexError, TypeError):
            return self.failure("the forecast service sent data this tool does not understand")
        return self.success(latitude=latitude, longitude=longitude, days=forecast)

    def _client(self, context: Any) -> httpx.Client:
        import httpx

        if self.client is None:
            settings = getattr(context, "config", None)
            settings = settings.plugin_settings(DISTRIBUTION) if settings else None
            settings = settings or Settings()
            base_url = os.environ.get(BASE_URL_VARIABLE) or settings.base_url
            self.client = httpx.Client(base_url=base_url, timeout=settings.timeout_seconds)
        return self.client


@hookimpl
def register_tools(register):
    """Offer the forecast tool to protege."""
    register(GetForecastTool)


@hookimpl
def plugin_settings():
    """Declare the settings read from ``[plugins.protege-weather]``."""
    return Settings
