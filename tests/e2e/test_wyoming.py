"""Wyoming on the real daemon: zeroconf discovery (python-zeroconf's browser, as Home
Assistant finds servers), server-side speed, and the idle deadline, with the `wyoming`
package's own client.

The loopback tests share one daemon; the last of them reloads and stops it."""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import ifaddr
import pytest
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize
from zeroconf import ServiceBrowser, ServiceListener, Zeroconf

from cosyvoiced import __version__
from tests.fixtures.daemon import SharedDaemon

DUMMY = ("cvdzc0", "10.231.77.1")
"""An interface made for the test (dummy, else a veth pair) when the box has no
non-loopback IPv4 address; removed after."""


@pytest.fixture
def lan_address() -> Iterator[str]:
    """A non-loopback IPv4 address of this box (a dummy interface, made here as root, if
    there is none)."""
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                addr = ipaddress.ip_address(ip.ip)
                if not (addr.is_loopback or addr.is_link_local):
                    yield ip.ip
                    return
    name, address = DUMMY
    made = subprocess.run(["ip", "link", "add", name, "type", "dummy"], capture_output=True)
    if made.returncode:  # no dummy module (containers): a veth pair, its peer up too
        subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name",
                        f"{name}p"], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", f"{name}p", "up"], check=True,
                       capture_output=True)
    for cmd in (["ip", "addr", "add", f"{address}/24", "dev", name],
                ["ip", "link", "set", name, "multicast", "on"],
                ["ip", "link", "set", name, "up"]):
        subprocess.run(cmd, check=True, capture_output=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def live_config(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    """The shared daemon's config: dev.toml, in a file a test rewrites and reloads."""
    cfg = tmp_path_factory.mktemp("wyoming-config") / "w.toml"
    cfg.write_text((repo_root / "configs" / "dev.toml").read_text())
    return cfg


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, live_config: Path) -> Iterator[SharedDaemon]:
    s = SharedDaemon(tmp_path_factory, "wyoming", config=live_config,
                     overrides=("wyoming.idle_timeout_s=1.5",))
    yield s
    s.close()


class _Found(ServiceListener):
    def __init__(self) -> None:
        self.added: dict[str, tuple[list[str], int]] = {}
        self.removed: set[str] = set()
        self.changed = threading.Event()

    def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        info = zc.get_service_info(type_, name, timeout=3000)
        if info is not None:
            self.added[name] = (info.parsed_addresses(), int(info.port or 0))
        self.changed.set()

    def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.removed.add(name)
        self.changed.set()

    def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        pass


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.1)


def _wyoming_port(d) -> int:
    for x in d.listeners():
        if x.startswith("wyoming+tcp://"):
            return int(x.rsplit(":", 1)[1])
    raise AssertionError("no Wyoming listener")


def test_a_lan_bound_daemon_is_found_by_a_zeroconf_browser(daemon_factory, lan_address):
    name = f"cosyvoiced test {time.monotonic_ns() % 100000}"
    d = daemon_factory(overrides=(
        f'wyoming.listen="tcp://{lan_address}:0"',
        f'wyoming.allow_from=["{lan_address}/32", "127.0.0.1"]',
        f'wyoming.zeroconf_name="{name}"')).start()
    d.wait_ready()
    port = _wyoming_port(d)
    zc = Zeroconf(interfaces=[lan_address])
    found = _Found()
    browser = ServiceBrowser(zc, "_wyoming._tcp.local.", listener=found)
    try:
        full = f"{name}._wyoming._tcp.local."
        _wait(lambda: full in found.added, 20, "_wyoming._tcp advertisement")
        addresses, advertised_port = found.added[full]
        assert lan_address in addresses and advertised_port == port

        async def describe() -> Info:  # connect where the advertisement points
            async with AsyncTcpClient(addresses[0], advertised_port) as client:
                await client.write_event(Describe().event())
                while True:
                    ev = await asyncio.wait_for(client.read_event(), 10)
                    assert ev is not None
                    if Info.is_type(ev.type):
                        return Info.from_event(ev)
        info = asyncio.run(describe())
        assert info.tts[0].version == __version__
        assert info.tts[0].supports_synthesize_streaming

        d.signal(signal.SIGTERM)  # a stopping daemon withdraws it (goodbye packets)
        assert d.wait() == 0
        _wait(lambda: full in found.removed, 20, "goodbye for the advertisement")
    finally:
        browser.cancel()
        zc.close()


def test_loopback_daemon_advertises_nothing(shared):
    d = shared.get()
    assert not [e for e in d.log_events() if e.get("event") == "zeroconf_advertised"]


def _synthesize_s(port: int, text: str) -> float:
    async def go() -> float:
        samples, rate = 0, 0
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text=text).event())
            while True:
                ev = await asyncio.wait_for(client.read_event(), 60)
                assert ev is not None and ev.type != "error", ev
                if AudioChunk.is_type(ev.type):
                    chunk = AudioChunk.from_event(ev)
                    samples, rate = samples + len(chunk.audio) // 2, chunk.rate
                if ev.type == "audio-stop":
                    return samples / rate
    return asyncio.run(go())


def test_server_speed_reloads_and_idle_clients_are_closed(shared, live_config, repo_root):
    d = shared.get()  # reloaded and stopped here: the shared daemon's last test
    cfg = live_config
    base = (repo_root / "configs" / "dev.toml").read_text()
    cfg.write_text(base)
    port = _wyoming_port(d)
    text = "Your appointment is confirmed for Thursday at ten in the morning."
    normal_s = _synthesize_s(port, text)
    cfg.write_text(base.replace("[wyoming]", "[wyoming]\nspeed = 2.0", 1))
    hup = time.monotonic()
    d.signal(signal.SIGHUP)
    d.notify.wait_for("READY", "1", after=hup, timeout_s=10)
    fast_s = _synthesize_s(port, text)
    assert fast_s < 0.7 * normal_s, (fast_s, normal_s)

    async def idle() -> tuple[str, float]:
        t0 = time.monotonic()
        async with AsyncTcpClient("127.0.0.1", port) as client:
            ev = await asyncio.wait_for(client.read_event(), 20)
            assert ev is not None and Error.is_type(ev.type)
            assert await asyncio.wait_for(client.read_event(), 5) is None  # closed
            return Error.from_event(ev).code or "", time.monotonic() - t0
    code, took = asyncio.run(idle())
    assert code == "idle_timeout" and 1.4 <= took < 10, took
    assert [e for e in d.log_events() if e.get("event") == "wyoming_idle_timeout"]
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
