"""web_search on saved DuckDuckGo pages, served by an httpx transport (and, for the tool,
by a server on loopback): results parsed, wrappers and ads removed, and every way the
engine can refuse reported as what it is."""

import asyncio
from pathlib import Path

import httpx
import pytest

from protege import Trust
from protege.testing import make_context, run_tool, with_plugin_settings
from protege_web.http import Limits
from protege_web.search import SearchFailed, search, unwrapped

SAVED = Path(__file__).parent / "fixtures" / "duckduckgo"
ENDPOINT = "https://html.duckduckgo.com/html/"


class Engine:
    """DuckDuckGo as a transport: answers every search with one saved page and status."""

    def __init__(self, page, status=200, **headers):
        self.body = (SAVED / page).read_bytes() if page else b""
        self.status = status
        self.headers = {"content-type": "text/html; charset=UTF-8", **headers}
        self.requests: list[httpx.Request] = []

    def handle(self, request):
        self.requests.append(request)
        return httpx.Response(self.status, headers=self.headers, stream=_Stream(self.body))

    def search(self, query="mango sorbet", limit=5, **limits):
        transport = httpx.MockTransport(self.handle)
        return asyncio.run(search(query, limit, Limits(**limits), transport=transport))


class _Stream(httpx.AsyncByteStream):
    def __init__(self, body):
        self.body = body

    async def __aiter__(self):
        yield self.body


def test_parses_titles_unwrapped_urls_and_snippets_skipping_the_ad():
    engine = Engine("results.html")
    results = engine.search()
    assert results[:2] == [
        {
            "title": "Sorbet - Wikipedia",
            "url": "https://en.wikipedia.org/wiki/Sorbet",
            "snippet": "Sorbet is a frozen dessert made from sweetened water with flavouring, "
            "typically fruit juice.",
        },
        {
            "title": "The Best Mango Sorbet Recipe",
            "url": "https://www.seriouseats.example/mango-sorbet-recipe?ref=ddg&x=1",
            "snippet": "Ripe mangoes, a little lime & sugar: that is all a great mango sorbet "
            "needs.",
        },
    ]
    assert results[3]["url"] == "https://food52.example/recipes/12345-mango-sorbet"  # direct
    assert len(results) == 5
    assert not any("freezers" in r["url"] or "duckduckgo.com" in r["url"] for r in results)


def test_asks_the_configured_endpoint_with_the_query_and_nothing_from_the_environment():
    engine = Engine("results.html")
    engine.search("mango & lime sorbet", search_url="https://search.example/html/")
    (request,) = engine.requests
    assert request.url.copy_with(query=None) == "https://search.example/html/"
    assert request.url.params["q"] == "mango & lime sorbet"
    assert request.headers["accept-encoding"] == "gzip, deflate"
    assert "cookie" not in request.headers


@pytest.mark.parametrize(("limit", "count"), [(1, 1), (5, 5), (10, 10), (50, 10)])
def test_returns_at_most_limit_results_and_never_more_than_ten(limit, count):
    assert len(Engine("results.html").search(limit=limit)) == count


def test_no_results_is_an_empty_list():
    assert Engine("no_results.html").search("xqzvbnmlkj sorbet") == []


@pytest.mark.parametrize(
    ("page", "status", "reason"),
    [
        ("challenge.html", 202, "DuckDuckGo blocked the search with a bot check (HTTP 202)"),
        ("challenge.html", 200, "DuckDuckGo blocked the search with a bot check"),
        ("challenge.html", 403, "DuckDuckGo blocked the search with a bot check (HTTP 403)"),
        (None, 429, "DuckDuckGo is rate limiting these searches (HTTP 429); try later"),
        (None, 503, "DuckDuckGo answered HTTP 503 Service Unavailable"),
    ],
)
def test_a_block_or_rate_limit_is_a_failure_that_says_which(page, status, reason):
    with pytest.raises(SearchFailed) as failed:
        Engine(page, status).search()
    assert str(failed.value) == reason


def test_a_redirect_is_reported_not_followed():
    engine = Engine(None, 302, location="https://duckduckgo.com/moved")
    with pytest.raises(SearchFailed, match="redirected the search"):
        engine.search()
    assert len(engine.requests) == 1


def test_a_changed_layout_is_a_clear_failure():
    with pytest.raises(SearchFailed, match="layout has changed"):
        Engine("changed_layout.html").search()


def test_result_blocks_without_the_title_links_are_a_changed_layout():
    page = (SAVED / "results.html").read_text().replace("result__a", "result__link")
    engine = Engine(None)
    engine.body = page.encode()
    with pytest.raises(SearchFailed, match="layout has changed"):
        engine.search()


def test_the_bot_checks_wording_in_a_query_does_not_read_as_a_block():
    engine = Engine(None)
    engine.body = (
        (SAVED / "results.html")
        .read_text()
        .replace("mango sorbet", "bots use DuckDuckGo too anomaly-modal")
        .encode()
    )
    assert len(engine.search("bots use DuckDuckGo too anomaly-modal")) == 5


@pytest.mark.parametrize(
    ("href", "url"),
    [
        ("//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2Fp%3Fq%3D1&rut=x", "https://a.example/p?q=1"),
        ("https://b.example/direct", "https://b.example/direct"),
        ("https://duckduckgo.com/y.js?ad_domain=ads.example", None),
        ("//duckduckgo.com/l/?uddg=javascript%3Aalert(1)", None),
        ("//duckduckgo.com/l/?rut=x", None),
        ("javascript:alert(1)", None),
        ("/html/?q=more", None),
    ],
)  # fmt: skip
def test_unwrapping_result_links(href, url):
    assert unwrapped(href) == url


def test_the_tool_returns_untrusted_results_from_the_configured_endpoint(serve, protege_app):
    page = (SAVED / "results.html").read_bytes()
    server = serve(lambda handler: handler.answer(page))
    app = with_plugin_settings(protege_app, "protege-web", {"search_url": f"{server.url}/html/"})
    context = make_context(config=app.config)

    result = run_tool(
        "web_search", context=context, manifest=protege_app.manifest, query="mango sorbet", limit=3
    )

    assert result.ok, result.reason
    assert result.trust is Trust.UNTRUSTED
    assert [r["title"] for r in result.data["results"]] == [
        "Sorbet - Wikipedia",
        "The Best Mango Sorbet Recipe",
        "Mango sorbet recipe | Good Food",
    ]
    assert server.requests[0]["path"] == "/html/?q=mango+sorbet"


def test_the_tool_reports_a_block_as_a_failure(serve, protege_app):
    challenge = (SAVED / "challenge.html").read_bytes()

    def blocked(handler):
        handler.send_response(202)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(len(challenge)))
        handler.end_headers()
        handler.send(challenge)

    server = serve(blocked)
    app = with_plugin_settings(protege_app, "protege-web", {"search_url": f"{server.url}/html/"})
    result = run_tool(
        "web_search",
        context=make_context(config=app.config),
        manifest=protege_app.manifest,
        query="mango",
    )
    assert not result.ok
    assert result.reason == "DuckDuckGo blocked the search with a bot check (HTTP 202)"


def test_the_tool_refuses_a_limit_over_ten(protege_app):
    result = run_tool(
        "web_search",
        context=make_context(config=protege_app.config),
        manifest=protege_app.manifest,
        query="mango",
        limit=11,
    )
    assert not result.ok
    assert "limit" in result.reason
