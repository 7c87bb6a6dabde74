"""Listen addresses ("unix:PATH", "tcp://HOST:PORT", "HOST:PORT"): one parser for all servers.

It lives in config so the loader rejects a bad address before anything starts, and the
HTTP API, Wyoming and AudioSocket servers read their `listen` keys the same way; each
server names the forms it takes (`API_FORMS`, `WYOMING_FORMS`, `AUDIOSOCKET_FORMS`,
`AGENT_FORMS`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cosyvoiced.errors import CosyvoicedError

Form = Literal["unix", "tcp", "hostport"]
"""unix: "unix:PATH"; tcp: "tcp://HOST:PORT"; hostport: a bare "HOST:PORT"."""

_SHAPE: dict[Form, str] = {"unix": "unix:PATH", "tcp": "tcp://HOST:PORT", "hostport": "HOST:PORT"}

API_FORMS: tuple[Form, ...] = ("unix", "tcp")
"""`api.listen` entries."""
WYOMING_FORMS: tuple[Form, ...] = ("unix", "tcp", "hostport")
"""`wyoming.listen`: anything not "unix:" is TCP, with or without "tcp://"."""
AUDIOSOCKET_FORMS: tuple[Form, ...] = ("hostport",)
"""`audiosocket.listen`: TCP only, as a bare HOST:PORT."""
AGENT_FORMS: tuple[Form, ...] = ("hostport",)
"""`agent.listen`: TCP only, as a bare HOST:PORT (HAProxy's agent-port)."""


class AddressError(CosyvoicedError):
    """A listen address is malformed or cannot be bound."""

    code = "listen_failed"


@dataclass(frozen=True)
class ListenAddress:
    kind: Literal["unix", "tcp"]
    path: str = ""
    host: str = ""
    """Without the brackets of "[::1]"; "" binds every interface."""
    port: int = 0

    @classmethod
    def parse(cls, spec: str, forms: Sequence[Form] = API_FORMS) -> ListenAddress:
        """"unix:/run/x.sock", "tcp://127.0.0.1:8080" or "127.0.0.1:8080" (those of `forms`;
        "[::1]:8080" for IPv6). Raises `AddressError`."""
        if "unix" in forms and spec.startswith("unix:"):
            path = spec.removeprefix("unix:")
            if not path:
                raise AddressError(f"{spec!r}: empty socket path")
            return cls("unix", path=path)
        if "tcp" in forms and spec.startswith("tcp://"):
            return cls._tcp(spec, spec.removeprefix("tcp://"), _SHAPE["tcp"])
        if "hostport" in forms:
            return cls._tcp(spec, spec, _expected(forms))
        raise AddressError(f"{spec!r}: expected {_expected(forms)}")

    @classmethod
    def _tcp(cls, spec: str, rest: str, expected: str) -> ListenAddress:
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdecimal() or not 0 <= int(port) <= 65535:
            raise AddressError(f"{spec!r}: expected {expected}")
        return cls("tcp", host=host.strip("[]"), port=int(port))

    @property
    def bracketed_host(self) -> str:
        """The host as written in an address: "[::1]" for an IPv6 literal."""
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def loopback(self) -> bool:
        if self.kind == "unix":
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def _expected(forms: Sequence[Form]) -> str:
    shapes = [_SHAPE[f] for f in forms]
    return " or ".join(shapes) if len(shapes) <= 2 else f"{', '.join(shapes[:-1])} or {shapes[-1]}"


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allow_from(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """`allow_from` as networks ("10.1.0.0/16", "192.0.2.7"); AddressError on a bad one."""
    out = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise AddressError(f"{cidr!r}: expected an address or CIDR network, e.g. "
                               f"10.1.0.0/16") from None
    return tuple(out)


def peer_allowed(peername: object, allow: Sequence[Network]) -> bool:
    """May a peer at `peername` (an asyncio peername: a (host, port, ...) tuple, or
    anything else for a Unix socket) connect? With no `allow` list, loopback only."""
    if not isinstance(peername, tuple):
        return True  # a Unix socket: its file permissions decide
    try:
        ip = ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    if not allow:
        return ip.is_loopback
    return any(ip in net for net in allow if net.version == ip.version)
