"""The one listen-address parser: the forms each server takes, and what it refuses."""

from __future__ import annotations

import pytest

from cosyvoiced.config.addr import (
    API_FORMS,
    AUDIOSOCKET_FORMS,
    WYOMING_FORMS,
    AddressError,
    ListenAddress,
)


def test_unix():
    assert ListenAddress.parse("unix:/run/x.sock") == ListenAddress("unix", path="/run/x.sock")
    with pytest.raises(AddressError, match=r"^'unix:': empty socket path$"):
        ListenAddress.parse("unix:")


def test_tcp_v4():
    addr = ListenAddress.parse("tcp://127.0.0.1:8080")
    assert addr == ListenAddress("tcp", host="127.0.0.1", port=8080)
    assert ListenAddress.parse("tcp://:0") == ListenAddress("tcp", host="", port=0)


def test_tcp_v6_in_brackets():
    addr = ListenAddress.parse("tcp://[::1]:8080")
    assert (addr.kind, addr.host, addr.port) == ("tcp", "::1", 8080)
    assert addr.bracketed_host == "[::1]"
    assert ListenAddress.parse("tcp://127.0.0.1:1").bracketed_host == "127.0.0.1"


@pytest.mark.parametrize("spec", ["tcp://h:65536", "tcp://h:-1", "tcp://h:", "tcp://h",
                                  "tcp://h:x", "tcp://h: 80", "tcp://h:²"])
def test_bad_port(spec):
    with pytest.raises(AddressError, match=r"expected tcp://HOST:PORT$"):
        ListenAddress.parse(spec)


def test_unknown_scheme_names_the_forms():
    with pytest.raises(AddressError, match=r"^'http://x': expected unix:PATH or tcp://HOST:PORT$"):
        ListenAddress.parse("http://x", API_FORMS)
    with pytest.raises(AddressError, match=r"expected unix:PATH, tcp://HOST:PORT or HOST:PORT$"):
        ListenAddress.parse("localhost", WYOMING_FORMS)
    with pytest.raises(AddressError, match=r"^'unix:/x': expected HOST:PORT$"):
        ListenAddress.parse("unix:/x", AUDIOSOCKET_FORMS)


def test_each_server_keeps_its_forms():
    assert ListenAddress.parse("127.0.0.1:10200", WYOMING_FORMS).port == 10200
    assert ListenAddress.parse("tcp://[::1]:10200", WYOMING_FORMS).host == "::1"
    assert ListenAddress.parse("unix:/w.sock", WYOMING_FORMS).path == "/w.sock"
    assert ListenAddress.parse("[::1]:9092", AUDIOSOCKET_FORMS).host == "::1"
    with pytest.raises(AddressError):
        ListenAddress.parse("127.0.0.1:8080", API_FORMS)  # the API wants tcp://


@pytest.mark.parametrize(("spec", "loopback"), [
    ("unix:/run/x.sock", True), ("tcp://localhost:1", True), ("tcp://127.0.0.2:1", True),
    ("tcp://[::1]:1", True), ("tcp://0.0.0.0:1", False), ("tcp://:1", False),
    ("tcp://[::]:1", False), ("tcp://example.com:1", False),
])
def test_loopback(spec, loopback):
    assert ListenAddress.parse(spec).loopback is loopback


def test_error_code_is_stable():
    assert AddressError.code == "listen_failed"


def test_allow_from_parses_networks_and_peers_are_checked_against_them():
    from cosyvoiced.config.addr import AddressError, parse_allow_from, peer_allowed

    allow = parse_allow_from(["10.1.2.0/24", "192.0.2.7", "2001:db8::/32"])
    assert peer_allowed(("10.1.2.99", 5000), allow)
    assert peer_allowed(("::ffff:10.1.2.5", 5000, 0, 0), allow)  # v4-mapped on a v6 socket
    assert peer_allowed(("2001:db8::1", 1, 0, 0), allow)
    assert not peer_allowed(("10.1.3.1", 5000), allow)
    assert not peer_allowed(("127.0.0.1", 5000), allow)  # listed networks only
    assert peer_allowed(("127.0.0.1", 5000), ()) and peer_allowed(("::1", 1, 0, 0), ())
    assert not peer_allowed(("10.1.2.99", 5000), ())  # empty: loopback only
    assert peer_allowed(None, ()) and peer_allowed("", ())  # a Unix socket
    with pytest.raises(AddressError, match="CIDR"):
        parse_allow_from(["10.1.2.0/33"])
