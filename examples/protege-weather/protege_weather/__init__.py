"""protege-weather: a sample plugin that gives agents a daily weather forecast.

It shows a plugin's whole shape: one ``Tool`` subclass, one ``register_tools`` hookimpl,
and an entry point in the ``protege`` group named after the module.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from protege import Tool, Trust, hookimpl

if TYPE_CHECKING:
    import httpx

BASE_URL_VARIABLE = "PROTEGE_WEATHER_BASE_URL"
DEFAULT_BASE_URL = "https://api.open-meteo.com"
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
            response = self._client().get("/v1/forecast", params=params)
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

    def _client(self) -> httpx.Client:
        import httpx

        if self.client is None:
            base_url = os.environ.get(BASE_URL_VARIABLE, DEFAULT_BASE_URL)
            self.client = httpx.Client(base_url=base_url, timeout=10.0)
        return self.client


@hookimpl
def register_tools(register):
    """Offer the forecast tool to protege."""
    register(GetForecastTool)
