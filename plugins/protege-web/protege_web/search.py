"""``web_search``: keyless, best-effort search through DuckDuckGo's HTML endpoint.

Best effort means it can stop working at any time: DuckDuckGo may answer with a bot check,
rate-limit, or change its page. Each of those is a failure that says which, never an empty
list the agent would read as "nothing exists".
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
from bs4 import BeautifulSoup, Tag

from protege_web.http import FetchFailed, Limits, Web, decode_text, media_type, read_capped
from protege_web.tools import MAX_RESULTS

CHALLENGE_ELEMENTS = ".anomaly-modal, .anomaly-modal__title, #challenge-form, form.challenge-form"
_SPACES = re.compile(r"\s+")


class SearchFailed(FetchFailed):
    """The search engine did not give results; the message says why (blocked, rate limited,
    a page this tool no longer understands, or the network)."""


async def search(
    query: str, limit: int, limits: Limits, *, transport: httpx.AsyncBaseTransport | None = None
) -> list[dict[str, str]]:
    """Up to ``limit`` results for ``query``, each ``{title, url, snippet}``.

    ``transport`` is for tests: an httpx transport serving saved result pages.
    """
    try:
        async with asyncio.timeout(limits.timeout), Web(limits, transport) as web:
            response = await web.get(
                limits.search_url, {"Accept": "text/html"}, params={"q": query}
            )
            try:
                _check_status(response)
                charset = media_type(response)[1]
                body, _ = await read_capped(response, limits.max_bytes)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        raise SearchFailed(f"DuckDuckGo did not answer within {limits.timeout:g} s") from None
    except httpx.HTTPError as error:
        raise SearchFailed(f"could not reach DuckDuckGo: {type(error).__name__}: {error}") from None
    page = decode_text(body, charset)
    return await asyncio.to_thread(parse_results, page, min(limit, MAX_RESULTS))


def _check_status(response: httpx.Response) -> None:
    status = response.status_code
    if status == 429:
        raise SearchFailed("DuckDuckGo is rate limiting these searches (HTTP 429); try later")
    if status in (202, 403):  # DuckDuckGo serves its bot check with a success code, 202
        raise SearchFailed(f"DuckDuckGo blocked the search with a bot check (HTTP {status})")
    if 300 <= status < 400:
        where = response.headers.get("location", "")
        raise SearchFailed(f"DuckDuckGo redirected the search (HTTP {status} to {where!r})")
    if status != 200:
        raise SearchFailed(f"DuckDuckGo answered HTTP {status} {response.reason_phrase}")


def parse_results(page: str, limit: int) -> list[dict[str, str]]:
    """The results on one DuckDuckGo HTML result page, ads left out and each URL unwrapped
    from DuckDuckGo's redirect; ``SearchFailed`` when the page is a bot check or not laid
    out as this parser expects."""
    soup = BeautifulSoup(page, "html.parser")
    blocks = [
        block
        for block in soup.select("div.result")
        if not {"result--ad", "result--no-result"} & set(block.get("class") or ())
    ]
    # The bot check by its elements; by its wording only on a page without results, where
    # the words cannot be a result's (or the echoed query's).
    challenge = soup.select_one(CHALLENGE_ELEMENTS) is not None or (
        not blocks and "bots use duckduckgo too" in _text(soup).lower()
    )
    if challenge:
        raise SearchFailed("DuckDuckGo blocked the search with a bot check")
    if not blocks:
        if soup.select_one(".no-results, .result--no-result") is not None:
            return []
        raise SearchFailed(
            "DuckDuckGo's page has neither results nor a 'No results' notice: its layout "
            "has changed, and web_search needs updating"
        )
    results = []
    for block in blocks:
        found = _result(block)
        if found is not None:
            results.append(found)
        if len(results) >= limit:
            break
    if not results:
        raise SearchFailed(
            "DuckDuckGo's result blocks no longer hold the title links web_search reads: its "
            "layout has changed, and web_search needs updating"
        )
    return results


def _result(block: Tag) -> dict[str, str] | None:
    link = block.select_one("a.result__a")
    if link is None:
        return None
    url = unwrapped(str(link.get("href") or ""))
    if url is None:
        return None
    snippet = block.select_one(".result__snippet")
    return {
        "title": _text(link),
        "url": url,
        "snippet": _text(snippet) if snippet is not None else "",
    }


def unwrapped(href: str) -> str | None:
    """The destination of a result link: DuckDuckGo's ``/l/?uddg=`` redirect removed. None
    for an ad (``/y.js``) or anything that is not an http(s) URL."""
    url = urljoin("https://duckduckgo.com/", href.strip())
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "duckduckgo.com" or host.endswith(".duckduckgo.com"):
        if parts.path != "/l/":
            return None
        targets = parse_qs(parts.query).get("uddg")
        if not targets:
            return None
        url = targets[0]
    return url if url.startswith(("http://", "https://")) else None


def _text(tag: Tag | BeautifulSoup) -> str:
    return _SPACES.sub(" ", tag.get_text()).strip()
