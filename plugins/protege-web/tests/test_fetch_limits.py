"""web_fetch against real servers on loopback (reached through allow_networks): the pinned
connection, the size cap with memory bounded, the deadline, and no proxy from the
environment; and the tool itself, called through dispatch."""

import asyncio
import gzip
import ssl
import tracemalloc
import zlib
from pathlib import Path

import httpx
import pytest

from protege import Trust
from protege.testing import make_context, run_tool, with_plugin_settings
from protege_web.fetch import fetch
from protege_web.http import FetchFailed, Limits

LOOPBACK = ("127.0.0.1/32",)
CAP = 256 * 1024
MIB = 1024 * 1024


def run(url, limits, **injected):
    return asyncio.run(fetch(url, limits, **injected))


def test_a_rebinding_name_connects_only_to_the_address_that_was_checked(serve):
    # The same port on two loopback addresses: 127.0.0.1 is allowed, 127.0.0.2 stands for a
    # private address. The name's first answer is the allowed one, every later one the other.
    checked = serve(lambda handler: handler.answer(b"<p>the checked server</p>"))
    private = serve(lambda handler: handler.answer(b"<p>the private server</p>"), "127.0.0.2",
                    checked.port)  # fmt: skip
    answers = []

    def rebinding(host):
        answers.append(host)
        return ["127.0.0.1"] if len(answers) == 1 else ["127.0.0.2"]

    page = run(f"http://rebind.test:{checked.port}/", Limits(allow_networks=LOOPBACK),
               resolver=rebinding)  # fmt: skip

    assert page.text == "the checked server"
    assert checked.requests == [{"path": "/", "host": f"rebind.test:{checked.port}"}]
    assert private.requests == []
    assert answers == ["rebind.test"]


def endless(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Content-Length", str(256 * MIB))
    handler.end_headers()
    chunk = b"x" * (64 * 1024)
    while not handler.server.stop.is_set() and handler.server.sent < 256 * MIB:
        handler.send(chunk)


def peak_memory_of(call):
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_body_far_over_the_cap_is_cut_off_with_memory_bounded(serve):
    server = serve(endless)
    limits = Limits(allow_networks=LOOPBACK, max_bytes=CAP, max_chars=10 * CAP)
    page, peak = peak_memory_of(lambda: run(f"{server.url}/big", limits))
    assert page.truncated
    assert page.text == "x" * CAP
    assert peak < 8 * MIB  # 256 MiB offered
    assert server.sent < 64 * MIB  # the fetch hung up; what was sent is socket buffers


def compressed(coding, data):
    if coding == "gzip":
        return gzip.compress(data)
    # "deflate" is zlib-wrapped by the standard; some servers send it raw.
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS if coding == "deflate" else -15)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw deflate"])
def test_a_compression_bomb_expands_no_further_than_the_cap(serve, coding):
    bomb = compressed(coding, b"a" * (64 * MIB))
    assert len(bomb) < 256 * 1024
    header = coding.removeprefix("raw ")
    server = serve(lambda handler: handler.answer(bomb, "text/plain", content_encoding=header))
    limits = Limits(allow_networks=LOOPBACK, max_bytes=CAP, max_chars=10 * CAP)
    page, peak = peak_memory_of(lambda: run(f"{server.url}/bomb", limits))
    assert page.truncated
    assert page.text == "a" * CAP
    assert peak < 8 * MIB  # 64 MiB inside


def trickle(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    # A byte every 50 ms: each read succeeds, so only a deadline for the whole fetch ends it.
    while not handler.server.stop.wait(0.05):
        handler.send(b".")
        handler.wfile.flush()


def silent(handler):
    handler.server.stop.wait()


@pytest.mark.parametrize("respond", [trickle, silent])
def test_a_slow_server_hits_the_deadline(serve, respond):
    server = serve(respond)
    with pytest.raises(FetchFailed) as failed:
        run(f"{server.url}/slow", Limits(allow_networks=LOOPBACK, timeout=0.5))
    assert str(failed.value) == "no complete answer within 0.5 s"


def test_no_proxy_from_the_environment_is_used(serve, monkeypatch):
    proxy = serve(lambda handler: handler.answer(b"<p>from the proxy</p>"))
    target = serve(lambda handler: handler.answer(b"<p>from the server</p>"))
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    page = run(f"{target.url}/", Limits(allow_networks=LOOPBACK))
    assert page.text == "from the server"
    assert proxy.requests == []


def tool_context(protege_app, **web):
    table = {key: list(v) if isinstance(v, tuple) else v for key, v in web.items()}  # TOML lists
    return make_context(config=with_plugin_settings(protege_app, "protege-web", table).config)


def test_the_tool_returns_the_page_as_untrusted_text(serve, protege_app):
    server = serve(
        lambda handler: handler.answer(
            b"<title>Menu</title><main><h1>Flavours</h1><ul><li>Mango</li></ul></main>"
        )
    )
    result = run_tool(
        "web_fetch",
        context=tool_context(protege_app, allow_networks=LOOPBACK),
        manifest=protege_app.manifest,
        url=f"{server.url}/menu",
    )
    assert result.ok, result.reason
    assert result.trust is Trust.UNTRUSTED
    assert result.data == {
        "url": f"{server.url}/menu",
        "status": 200,
        "content_type": "text/html",
        "title": "Menu",
        "text": "# Flavours\n\n- Mango",
        "truncated": False,
    }


def test_the_tool_refuses_loopback_unless_the_operator_allows_it(serve, protege_app):
    server = serve(lambda handler: handler.answer(b"<p>internal</p>"))
    result = run_tool(
        "web_fetch",
        context=make_context(config=protege_app.config),
        manifest=protege_app.manifest,
        url=f"{server.url}/",
    )
    assert not result.ok
    assert result.trust is Trust.UNTRUSTED
    assert result.reason == (f"refused '{server.url}/': 127.0.0.1 is loopback (127.0.0.0/8)")
    assert server.requests == []


def test_the_tool_reads_its_limits_from_the_config(serve, protege_app):
    server = serve(lambda handler: handler.answer(b"y" * 5000, "text/plain"))
    result = run_tool(
        "web_fetch",
        context=tool_context(protege_app, allow_networks=LOOPBACK, max_bytes=2048, max_chars=1000),
        manifest=protege_app.manifest,
        url=f"{server.url}/",
    )
    assert (result.data["text"], result.data["truncated"]) == ("y" * 1000, True)


TLS = Path(__file__).parent / "fixtures" / "tls"  # a self-signed certificate for tls.test


@pytest.fixture
def tls_server(serve):
    server = serve(lambda handler: handler.answer(b"<p>over TLS</p>"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS / "tls.test.pem", TLS / "tls.test.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def trusting_the_test_certificate():
    return httpx.AsyncHTTPTransport(verify=ssl.create_default_context(cafile=TLS / "tls.test.pem"))


def test_https_goes_to_the_checked_address_and_checks_the_certificate_against_the_name(
    tls_server,
):
    page = run(
        f"https://tls.test:{tls_server.port}/",
        Limits(allow_networks=LOOPBACK),
        resolver=lambda host: ["127.0.0.1"],
        transport=trusting_the_test_certificate(),
    )
    assert page.text == "over TLS"
    assert tls_server.requests == [{"path": "/", "host": f"tls.test:{tls_server.port}"}]


def test_https_to_a_name_the_certificate_does_not_name_fails(tls_server):
    with pytest.raises(FetchFailed, match="certificate"):
        run(
            f"https://impostor.test:{tls_server.port}/",
            Limits(allow_networks=LOOPBACK),
            resolver=lambda host: ["127.0.0.1"],
            transport=trusting_the_test_certificate(),
        )
    assert tls_server.requests == []
