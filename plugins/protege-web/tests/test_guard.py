"""The SSRF guard, case by case: every range it refuses, spelled the ways attackers spell it."""

import ipaddress
import socket

import pytest

from protege import ProtegeError
from protege_web.guard import BlockedURL, check, check_url

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"

DNS = {
    "public.test": [PUBLIC_V4],
    "dual.test": [PUBLIC_V4, PUBLIC_V6],
    "internal.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "loopback.test": ["127.0.0.1"],
    "loopback6.test": ["::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "mixed.test": [PUBLIC_V4, "192.168.0.10"],
    "mixed6.test": [PUBLIC_V6, "fd00::1"],
    "cgnat.test": ["100.100.100.100"],
}


def resolver(host):
    return DNS.get(host.rstrip("."), [])


# (category, url): each must be refused; several spellings of each range.
REFUSED = [
    # loopback
    ("loopback", "http://127.0.0.1/"),
    ("loopback", "http://127.0.0.1./"),
    ("loopback", "http://2130706433/"),
    ("loopback", "http://0x7f000001/"),
    ("loopback", "http://017700000001/"),
    ("loopback", "http://0177.0.0.1/"),
    ("loopback", "http://0x7f.0.0.1/"),
    ("loopback", "http://127.1/"),
    ("loopback", "http://127.0.1/"),
    ("loopback", "http://127.255.255.254:8080/"),
    ("loopback", "HTTP://127.0.0.1/"),
    ("loopback", "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/"),
    ("loopback", "http://127\u30020\u30020\u30021/"),
    ("loopback", "http://[::1]/"),
    ("loopback", "http://[0:0:0:0:0:0:0:1]/"),
    ("loopback", "http://loopback.test/"),
    ("loopback", "http://loopback6.test/"),
    # private
    ("private", "http://10.0.0.1/"),
    ("private", "http://10.1/"),
    ("private", "http://167772161/"),
    ("private", "http://0xa.0.0.1/"),
    ("private", "http://012.0.0.1/"),
    ("private", "http://172.16.0.1/"),
    ("private", "http://172.31.255.255/"),
    ("private", "http://192.168.1.1/"),
    ("private", "http://0xc0a80101/"),
    ("private", "http://192.168.257/"),
    ("private", "http://internal.test/"),
    ("private", "https://internal.test:8443/admin"),
    # link-local, cloud metadata included
    ("link-local", "http://169.254.169.254/latest/meta-data/"),
    ("link-local", "http://2852039166/"),
    ("link-local", "http://0xa9fea9fe/"),
    ("link-local", "http://0251.0376.0251.0376/"),
    ("link-local", "http://169.254.43518/"),
    ("link-local", "http://metadata.test/"),
    ("link-local", "http://[fe80::1]/"),
    ("link-local", "http://[febf::1]/"),
    # carrier-grade NAT
    ("shared address space", "http://100.64.0.1/"),
    ("shared address space", "http://1681915905/"),
    ("shared address space", "http://100.127.255.254/"),
    ("shared address space", "http://cgnat.test/"),
    # multicast
    ("multicast", "http://224.0.0.1/"),
    ("multicast", "http://239.255.255.250/"),
    ("multicast", "http://0xe0000001/"),
    ("multicast", "http://[ff02::1]/"),
    ("multicast", "http://[ff05::1:3]/"),
    # reserved, documentation, benchmarking, broadcast
    ("reserved", "http://240.0.0.1/"),
    ("reserved", "http://255.255.255.255/"),
    ("reserved", "http://4294967295/"),
    ("documentation", "http://192.0.2.1/"),
    ("documentation", "http://203.0.113.9/"),
    ("benchmarking", "http://198.18.0.1/"),
    ("IETF", "http://192.0.0.8/"),
    ("documentation", "http://[2001:db8::1]/"),
    ("discard", "http://[100::1]/"),
    ("reserved", "http://[::1:0:0:1]/"),
    # unspecified
    ("unspecified", "http://0.0.0.0/"),
    ("unspecified", "http://0/"),
    ("unspecified", "http://0x0/"),
    ("unspecified", "http://0.1.2.3/"),
    ("unspecified", "http://[::]/"),
    # IPv6 unique-local and site-local
    ("unique-local", "http://[fc00::1]/"),
    ("unique-local", "http://[fd12:3456:789a::1]/"),
    ("unique-local", "http://[fd00:ec2::254]/"),
    ("site-local", "http://[fec0::1]/"),
    ("site-local", "http://[feff::1]/"),
    # IPv4 embedded in IPv6
    ("IPv4-mapped", "http://[::ffff:127.0.0.1]/"),
    ("IPv4-mapped", "http://[::ffff:7f00:1]/"),
    ("IPv4-mapped", "http://[0:0:0:0:0:ffff:169.254.169.254]/"),
    ("IPv4-mapped", "http://[::ffff:10.0.0.1]/"),
    ("IPv4-mapped", "http://mapped.test/"),
    ("IPv4-compatible", "http://[::127.0.0.1]/"),
    ("IPv4-compatible", "http://[::a9fe:a9fe]/"),
    ("NAT64", "http://[64:ff9b::127.0.0.1]/"),
    ("NAT64", "http://[64:ff9b::a9fe:a9fe]/"),
    ("NAT64", "http://[64:ff9b:1::1]/"),
    ("6to4", "http://[2002:7f00:1::]/"),
    ("6to4", "http://[2002:a9fe:a9fe::1]/"),
    ("6to4", "http://[2002:c0a8:101::1]/"),
    ("Teredo", "http://[2001::1]/"),
    ("Teredo", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/"),
    ("Teredo", "http://[2001:0000:53aa:064c:0000:0000:0808:0808]/"),
    # names with any private answer
    ("private", "http://mixed.test/"),
    ("unique-local", "http://mixed6.test/"),
]


@pytest.mark.parametrize(("category", "url"), REFUSED)
def test_refuses_every_address_that_is_not_the_public_internet(category, url):
    with pytest.raises(BlockedURL) as refused:
        check_url(url, resolver=resolver)
    assert category.lower() in refused.value.reason.lower()


@pytest.mark.parametrize(
    "address", ["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "fec0::1", "::127.0.0.1", "192.0.0.8"]
)
def test_refuses_addresses_the_standard_library_calls_global_on_python_3_11(address):
    # Python 3.11's ipaddress says is_global for each of these; the guard keeps its own tables.
    with pytest.raises(BlockedURL):
        check_url(f"http://[{address}]/" if ":" in address else f"http://{address}/")


# (what is wrong, url): refused before any name is looked up.
MALFORMED = [
    ("only http and https", "ftp://public.test/"),
    ("only http and https", "file:///etc/passwd"),
    ("only http and https", "gopher://public.test:70/_x"),
    ("only http and https", "javascript:alert(1)"),
    ("only http and https", "//public.test/"),
    ("only http and https", "public.test"),
    ("followed by a host", "http:/public.test/"),
    ("followed by a host", "http:public.test"),
    ("no host", "http://"),
    ("no host", "http:///etc/passwd"),
    ("user names", "http://user@public.test/"),
    ("user names", "http://user:secret@public.test/"),
    ("user names", "http://public.test@127.0.0.1/"),
    ("user names", "http://public.test:80@127.0.0.1/"),
    ("backslash", "http://public.test\\@127.0.0.1/"),
    ("backslash", "http:\\\\127.0.0.1\\"),
    ("whitespace", " http://public.test/"),
    ("whitespace", "http://public.test/a b"),
    ("whitespace", "http://public.test/\t"),
    ("whitespace", "http://pub\nlic.test/"),
    ("whitespace", "http://public.test\r\nHost: evil/"),
    ("control", "http://public.test\x00.evil/"),
    ("control", "http://public\u200b.test/"),
    ("control", "http://public.test\u202e/"),
    ("whitespace", "http://public.test\u3000/"),
    ("zone", "http://[fe80::1%25eth0]/"),
    ("zone", "http://[fe80::1%eth0]/"),
    ("bad port", "http://public.test:0/"),
    ("bad port", "http://public.test:65536/"),
    ("bad port", "http://public.test:123456/"),
    ("bad port", "http://public.test:-1/"),
    ("bad port", "http://public.test:80a/"),
    ("bad port", "http://public.test:/"),
    ("brackets", "http://public.test:80:80/"),
    ("bad port", "http://public.test:+80/"),
    ("bracket", "http://::1/"),
    ("unclosed", "http://[::1/"),
    ("not an ipv6", "http://[127.0.0.1]/"),
    ("not an ipv6", "http://[v1.fe80::a]/"),
    ("after the bracketed", "http://[::1]x/"),
    ("not a valid ipv4", "http://1.2.3.4.5/"),
    ("not a valid ipv4", "http://256.0.0.1/"),
    ("not a valid ipv4", "http://08.0.0.1/"),
    ("not a valid ipv4", "http://0x100.0.0.1/"),
    ("not a valid ipv4", "http://1_0.0.0.1/"),
    ("not a valid ipv4", "http://public.0x1/"),
    ("percent", "http://127%2E0%2E0%2E1/"),
    ("not a valid host", "http://-bad-.test/"),
    ("not a valid host", "http://a..b/"),
    ("not a valid host", "http://a" + "b" * 64 + ".test/"),
    ("longer than", "http://public.test/" + "a" * 9000),
]


@pytest.mark.parametrize(("problem", "url"), MALFORMED)
def test_refuses_urls_that_are_not_plain_http_urls(problem, url):
    looked_up = []
    with pytest.raises(BlockedURL) as refused:
        check_url(url, resolver=lambda host: looked_up.append(host) or [PUBLIC_V4])
    assert problem.lower() in refused.value.reason.lower()
    assert looked_up == []


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("http://public.test/", [PUBLIC_V4]),
        ("https://PUBLIC.test:8443/a/b?c=d#frag", [PUBLIC_V4]),
        ("http://public.test./", [PUBLIC_V4]),
        ("http://dual.test/", [PUBLIC_V4, PUBLIC_V6]),
        ("http://1.1.1.1/", ["1.1.1.1"]),
        ("http://16843009/", ["1.1.1.1"]),
        ("http://[2606:4700:4700::1111]:8080/", ["2606:4700:4700::1111"]),
        ("http://[::ffff:8.8.8.8]/", ["::ffff:808:808"]),
        ("http://[64:ff9b::8.8.8.8]/", ["64:ff9b::808:808"]),
        ("http://[2002:808:808::1]/", ["2002:808:808::1"]),
    ],
)
def test_lets_public_addresses_through(url, addresses):
    assert check_url(url, resolver=resolver) == [ipaddress.ip_address(a) for a in addresses]


def test_keeps_the_name_for_the_host_header_and_encodes_the_request_target():
    target = check("https://Public.Test:8443/caf\u00e9?q=\u00fc#top", resolver=resolver)
    assert (target.scheme, target.host, target.port) == ("https", "public.test", 8443)
    assert target.target == "/caf%C3%A9?q=%C3%BC"
    assert target.host_header == "public.test:8443"
    assert target.url == "https://public.test:8443/caf%C3%A9?q=%C3%BC"


def test_an_international_name_is_resolved_in_its_ascii_form():
    asked = []
    check_url("http://b\u00fccher.test/", resolver=lambda host: asked.append(host) or [PUBLIC_V4])
    assert asked == ["xn--bcher-kva.test"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ([], "does not resolve"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "does not resolve"),
        (["not-an-address"], "not an ip address"),
        (["fe80::1%eth0"], "not an ip address"),
    ],
)
def test_a_name_that_does_not_resolve_to_addresses_is_refused(answer, reason):
    def lookup(host):
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(BlockedURL) as refused:
        check_url("http://nowhere.test/", resolver=lookup)
    assert reason in refused.value.reason.lower()


def test_the_name_is_resolved_once_per_check():
    asked = []
    check_url("http://public.test/", resolver=lambda host: asked.append(host) or [PUBLIC_V4])
    assert asked == ["public.test"]


def test_allow_networks_is_the_operators_exception_and_only_that():
    allowed = ["10.0.0.0/8", "fd00::/8"]
    assert check_url("http://internal.test/", resolver=resolver, allow_networks=allowed) == [
        ipaddress.ip_address("10.0.0.5")
    ]
    assert check_url("http://[fd00::7]/", allow_networks=allowed)
    with pytest.raises(BlockedURL, match="loopback"):
        check_url("http://127.0.0.1/", allow_networks=allowed)
    with pytest.raises(BlockedURL, match=r"192\.168\.0\.10"):
        check_url("http://mixed.test/", resolver=resolver, allow_networks=allowed)


def test_blocked_url_is_a_protege_error_with_a_one_line_message():
    with pytest.raises(ProtegeError) as refused:
        check_url("http://169.254.169.254/latest")
    assert isinstance(refused.value, BlockedURL)
    assert str(refused.value) == (
        "refused 'http://169.254.169.254/latest': 169.254.169.254 is link-local "
        "(cloud metadata lives here) (169.254.0.0/16)"
    )
