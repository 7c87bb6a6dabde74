"""Zeroconf (mDNS) advertisement of the Wyoming listener as `_wyoming._tcp`.

Home Assistant's Wyoming integration browses `_wyoming._tcp.local.` and offers what it
finds, so nobody types a host and port (the `wyoming` package's own `zeroconf.py`
registers the same service type). Advertised only for a TCP listener beyond loopback:
mDNS is link-local, and a loopback-bound daemon cannot be reached from another host.
python-zeroconf answers the queries on its own sockets and threads; this module only
registers the service at start and withdraws it (goodbye packets) at stop.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import structlog

from cosyvoiced import __version__

if TYPE_CHECKING:
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

log = structlog.get_logger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."
WILDCARDS = ("", "0.0.0.0", "::")


def host_addresses() -> list[str]:
    """Every address of this host's interfaces that is not loopback or link-local."""
    import ifaddr  # zeroconf's own dependency

    out: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            raw = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            addr = ipaddress.ip_address(raw)
            if not (addr.is_loopback or addr.is_link_local) and raw not in out:
                out.append(raw)
    return out


def service_name(name: str) -> str:
    """The instance name: `name`, or "cosyvoiced on HOSTNAME"."""
    label = name or f"cosyvoiced on {socket.gethostname()}"
    return f"{label[:60]}.{SERVICE_TYPE}"


class Advertisement:
    """`_wyoming._tcp` for one bound TCP listener, registered until `close()`."""

    def __init__(self, host: str, port: int, name: str = "") -> None:
        self.host = host
        self.port = port
        self.name = service_name(name)
        self.addresses = host_addresses() if host in WILDCARDS else [host]
        self._zc: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None
        self._announcing: Awaitable[object] | None = None

    async def start(self) -> None:
        # imported here: ~0.13 s that a daemon not advertising should not pay at start
        from zeroconf import InterfaceChoice, IPVersion
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        if not self.addresses:
            log.warning("zeroconf_no_address", note="no non-loopback address to advertise")
            return
        v6 = [a for a in self.addresses if ":" in a]
        version = (IPVersion.All if v6 and len(v6) < len(self.addresses)
                   else IPVersion.V6Only if v6 else IPVersion.V4Only)
        interfaces = InterfaceChoice.All if self.host in WILDCARDS else [self.host]
        self._zc = AsyncZeroconf(interfaces=interfaces, ip_version=version)
        self._info = AsyncServiceInfo(
            SERVICE_TYPE, self.name, port=self.port, parsed_addresses=self.addresses,
            server=f"{socket.gethostname()}.local.",
            properties={"version": __version__, "program": "cosyvoiced"})
        # the call registers, the awaitable it returns is the announcements being sent
        # (zeroconf/asyncio.py): not waited for, so start-up does not wait ~1 s for them
        self._announcing = await self._zc.async_register_service(self._info,
                                                                  allow_name_change=True)
        log.info("zeroconf_advertised", service=self._info.name, port=self.port,
                 addresses=self.addresses)

    async def close(self) -> None:
        zc, self._zc = self._zc, None
        if zc is None:
            return
        if self._info is not None:  # wait for the goodbyes to be sent before closing
            if self._announcing is not None:
                await self._announcing
            await (await zc.async_unregister_service(self._info))
        await zc.async_close()
        log.info("zeroconf_withdrawn", service=self.name)
