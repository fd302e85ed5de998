"""web_fetch against an internet faked by an httpx transport: pinning, redirects, types."""

import asyncio
import gzip
import json

import httpx
import pytest

from protege_web.fetch import fetch
from protege_web.guard import BlockedURL
from protege_web.http import FetchFailed, Limits

PUBLIC = "93.184.215.14"
OTHER_PUBLIC = "151.101.1.1"
DNS = {
    "public.test": [PUBLIC],
    "other.test": [OTHER_PUBLIC],
    "internal.test": ["10.0.0.7"],
}
PAGE = b"<html><head><title>Hello</title></head><body><p>Hello, reader.</p></body></html>"


def resolver(host):
    return DNS.get(host, [])


class Internet:
    """An httpx transport that answers from ``pages`` (keyed by Host header and path) and
    records every request, with the address it was sent to."""

    def __init__(self, pages):
        self.pages = pages
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = f"{request.headers['host']}{request.url.raw_path.decode()}"
        answer = self.pages.get(key)
        if answer is None:
            return response(404, b"no such page", "text/plain")()
        return answer()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def addresses(self):
        return [request.url.host for request in self.requests]


class Body(httpx.AsyncByteStream):
    """A body that arrives in chunks, as from a socket (a ``content=`` body is pre-read)."""

    def __init__(self, data: bytes, chunk: int = 16 * 1024) -> None:
        self.data, self.chunk = data, chunk

    async def __aiter__(self):
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start : start + self.chunk]


def response(status=200, body=b"", content_type=None, **headers):
    headers = {name.replace("_", "-"): value for name, value in headers.items()}
    if content_type is not None:
        headers["content-type"] = content_type
    return lambda: httpx.Response(status, headers=headers, stream=Body(body))


def html(body=PAGE, **headers):
    return response(200, body, "text/html", **headers)


def redirect(location, status=302):
    return response(status, location=location)


def get(url, internet, limits=None, dns=resolver):
    return asyncio.run(
        fetch(url, limits or Limits(timeout=10), resolver=dns, transport=internet.transport())
    )


def test_connects_to_the_checked_address_with_the_name_in_host_and_tls():
    internet = Internet({"public.test/a/page?x=1": html()})
    page = get("https://public.test/a/page?x=1#part", internet)
    (request,) = internet.requests
    assert request.url.host == PUBLIC
    assert request.url.scheme == "https"
    assert request.headers["host"] == "public.test"
    assert request.extensions["sni_hostname"] == "public.test"
    assert (page.url, page.status, page.title) == ("https://public.test/a/page?x=1", 200, "Hello")
    assert page.text == "Hello, reader."
    assert not page.truncated


def test_a_second_dns_answer_cannot_move_the_connection():
    answers = iter([[PUBLIC], ["10.0.0.1"], ["127.0.0.1"]])
    asked = []

    def rebinding(host):
        asked.append(host)
        return next(answers)

    internet = Internet({"rebind.test/": html()})
    get("http://rebind.test/", internet, dns=rebinding)
    assert asked == ["rebind.test"]
    assert internet.addresses() == [PUBLIC]


def test_follows_redirects_to_public_addresses_checking_each_hop():
    internet = Internet(
        {
            "public.test/old": redirect("https://other.test/new", 301),
            "other.test/new": redirect("/newer?page=2", 307),
            "other.test/newer?page=2": html(),
        }
    )
    page = get("http://public.test/old", internet)
    assert internet.addresses() == [PUBLIC, OTHER_PUBLIC, OTHER_PUBLIC]
    hosts = [request.headers["host"] for request in internet.requests]
    assert hosts == ["public.test", "other.test", "other.test"]
    assert page.url == "https://other.test/newer?page=2"


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("http://10.0.0.1/admin", "private"),
        ("http://internal.test/", "private"),
        ("//169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::1]:8080/", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://[::ffff:192.168.0.1]/", "private"),
    ],
)
def test_a_redirect_to_a_private_address_is_refused(location, reason):
    internet = Internet({"public.test/": redirect(location)})
    with pytest.raises(BlockedURL) as refused:
        get("http://public.test/", internet)
    assert reason in refused.value.reason
    assert "redirected from http://public.test/" in refused.value.reason
    assert internet.addresses() == [PUBLIC]


@pytest.mark.parametrize(
    "location",
    ["file:///etc/passwd", "gopher://public.test:70/_x", "ftp://public.test/", "javascript:x()"],
)
def test_a_redirect_to_another_scheme_is_refused(location):
    internet = Internet({"public.test/": redirect(location)})
    with pytest.raises(BlockedURL, match="only http and https"):
        get("http://public.test/", internet)
    assert len(internet.requests) == 1


def chain(length):
    pages = {f"public.test/{n}": redirect(f"/{n + 1}") for n in range(length)}
    pages[f"public.test/{length}"] = html()
    return Internet(pages)


def test_five_redirects_are_followed_and_a_sixth_is_refused():
    assert get("http://public.test/0", chain(5)).url == "http://public.test/5"
    internet = chain(6)
    with pytest.raises(FetchFailed, match="more than 5 redirects"):
        get("http://public.test/0", internet)
    assert len(internet.requests) == 6


def test_the_redirect_limit_comes_from_the_settings():
    with pytest.raises(FetchFailed, match="more than 1 redirects"):
        get("http://public.test/0", chain(2), Limits(max_redirects=1))


def test_a_redirect_without_a_location_is_a_failure():
    internet = Internet({"public.test/": response(302)})
    with pytest.raises(FetchFailed, match="nowhere"):
        get("http://public.test/", internet)


@pytest.mark.parametrize(
    ("content_type", "body", "text"),
    [
        ("text/plain; charset=utf-8", "caf\u00e9 au lait".encode(), "caf\u00e9 au lait"),
        ("text/plain; charset=iso-8859-1", "caf\u00e9".encode("latin-1"), "caf\u00e9"),
        ("text/plain; charset=no-such-charset", b"plain", "plain"),
        ("text/csv", b"a,b\n1,2\n", "a,b\n1,2\n"),
        ("application/json", b'{"flavour": "mango"}', '{"flavour": "mango"}'),
        ("application/ld+json", b'{"@type": "Thing"}', '{"@type": "Thing"}'),
    ],
)
def test_text_and_json_are_passed_through(content_type, body, text):
    internet = Internet({"public.test/": response(200, body, content_type)})
    page = get("http://public.test/", internet)
    assert (page.text, page.title, page.content_type) == (text, "", content_type.split(";")[0])


@pytest.mark.parametrize(
    "content_type", ["application/pdf", "image/png", "application/octet-stream", "video/mp4"]
)
def test_other_types_are_refused_naming_the_type(content_type):
    internet = Internet({"public.test/f": response(200, b"%PDF", content_type)})
    with pytest.raises(FetchFailed) as refused:
        get("http://public.test/f", internet)
    assert str(refused.value) == (
        f"http://public.test/f is {content_type}; web_fetch reads only HTML, text and JSON"
    )


def test_an_unlabelled_body_is_read_as_html_or_text_and_refused_when_binary():
    pages = {
        "public.test/page": response(200, b"<!DOCTYPE html>" + PAGE),
        "public.test/text": response(200, b"just words"),
        "public.test/blob": response(200, b"\x89PNG\x00\x00"),
    }
    internet = Internet(pages)
    assert get("http://public.test/page", internet).title == "Hello"
    assert get("http://public.test/text", internet).text == "just words"
    with pytest.raises(FetchFailed, match="not text"):
        get("http://public.test/blob", internet)


def test_an_error_status_is_a_failure_naming_it():
    with pytest.raises(FetchFailed, match="answered HTTP 404 Not Found"):
        get("http://public.test/missing", Internet({}))


def test_a_gzip_body_is_decoded():
    body = gzip.compress(json.dumps({"ok": True}).encode())
    internet = Internet(
        {"public.test/": response(200, body, "application/json", content_encoding="gzip")}
    )
    assert get("http://public.test/", internet).text == '{"ok": true}'
    assert internet.requests[0].headers["accept-encoding"] == "gzip, deflate"


def gzip_page(body, chunk=16 * 1024):
    headers = {"content-type": "text/plain", "content-encoding": "gzip"}
    return Internet(
        {"public.test/": lambda: httpx.Response(200, headers=headers, stream=Body(body, chunk))}
    )


@pytest.mark.parametrize("chunk", [3, 16 * 1024])  # members and padding split, or not
def test_a_gzip_body_of_several_members_is_decoded_whole(chunk):
    # RFC 1952: a gzip file is members one after the other; zero padding may follow.
    body = gzip.compress(b"first, ") + gzip.compress(b"second, ") + gzip.compress(b"third")
    page = get("http://public.test/", gzip_page(body + b"\x00" * 8, chunk))
    assert (page.text, page.truncated) == ("first, second, third", False)


def test_gzip_members_past_the_cap_are_cut_and_say_so():
    body = gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600)
    page = get("http://public.test/", gzip_page(body), Limits(timeout=10, max_bytes=1000))
    assert page.truncated
    assert page.text == "a" * 600 + "b" * 400


def test_bytes_after_the_last_gzip_member_that_are_no_member_are_refused():
    with pytest.raises(FetchFailed, match="gzip body is corrupt"):
        get("http://public.test/", gzip_page(gzip.compress(b"first") + b"not gzip at all"))


def test_a_coding_the_tool_did_not_ask_for_is_refused():
    internet = Internet({"public.test/": html(b"\x1b\x00", content_encoding="br")})
    with pytest.raises(FetchFailed, match="unsupported coding"):
        get("http://public.test/", internet)


def test_the_text_is_cut_at_max_chars_and_says_so():
    internet = Internet({"public.test/": response(200, b"x" * 500, "text/plain")})
    page = get("http://public.test/", internet, Limits(max_chars=100))
    assert (len(page.text), page.truncated) == (100, True)


def test_a_refused_url_never_reaches_the_network():
    internet = Internet({})
    with pytest.raises(BlockedURL):
        get("http://internal.test/", internet)
    assert internet.requests == []


@pytest.mark.parametrize("charset", ["punycode", "rot13", "base64", "zlib", "idna", "no-such"])
def test_a_charset_that_is_not_one_is_read_as_utf8(charset):
    from protege_web.http import decode_text, text_charset

    assert text_charset(charset) is None
    assert decode_text("café".encode(), charset) == "café"


def test_real_charsets_are_used():
    from protege_web.http import decode_text, text_charset

    assert text_charset("ISO-8859-1") == "iso8859-1"
    assert decode_text("café".encode("latin-1"), "iso-8859-1") == "café"
