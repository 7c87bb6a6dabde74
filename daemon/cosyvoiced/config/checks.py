"""Cross-field checks of a loaded config: rules that no single field's type or range says.

Each returns (dotted key, message) pairs; the loader adds file and line. Only what the
config itself says is checked (a config written for a 16-core box stays valid on a
laptop): whether CPUs exist or an address can be bound is found when the parts start.
They live in config, not in the stages that read the sections, so config imports nothing
above it.
"""

from __future__ import annotations

from cosyvoiced.config.addr import (
    AGENT_FORMS,
    API_FORMS,
    AUDIOSOCKET_FORMS,
    WYOMING_FORMS,
    AddressError,
    Form,
    ListenAddress,
    parse_allow_from,
)
from cosyvoiced.config.cpus import CpuListError, parse_cpu_list
from cosyvoiced.config.listeners import ApiConfig
from cosyvoiced.config.schema import Config, VadConfig, WorkersConfig


def config_problems(config: Config) -> list[tuple[str, str]]:
    """Every cross-field problem of `config`: (dotted key, message)."""
    out = [*_workers(config.workers), *_api(config.api), *_vad(config.vad)]
    if config.audiosocket.enabled:
        out += _listen("audiosocket", config.audiosocket.listen, AUDIOSOCKET_FORMS,
                       config.audiosocket.allow_from)
    if config.wyoming.enabled:
        out += _listen("wyoming", config.wyoming.listen, WYOMING_FORMS,
                       config.wyoming.allow_from)
    if config.agent.listen:
        out += _listen("agent", config.agent.listen, AGENT_FORMS, config.agent.allow_from)
    return out


def _workers(w: WorkersConfig) -> list[tuple[str, str]]:
    # Whether the CPUs exist on this machine, and the thread budget when `cpus` is empty
    # (all allowed CPUs), are checked when the pool starts.
    try:
        cpus = parse_cpu_list(w.cpus)
    except CpuListError as exc:
        return [("workers.cpus", str(exc))]
    if cpus and w.count * w.onnx_threads > len(cpus):
        return [("workers.onnx_threads",
                 f"workers.count x workers.onnx_threads = {w.count} x {w.onnx_threads} = "
                 f"{w.count * w.onnx_threads} ONNX threads is more than the "
                 f"{len(cpus)} CPU(s) of workers.cpus ({w.cpus!r}); lower one of them "
                 f"or give more CPUs")]
    return []


def _api(api: ApiConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for i, spec in enumerate(api.listen):
        try:
            lis = ListenAddress.parse(spec, API_FORMS)
        except AddressError as exc:
            out.append((f"api.listen[{i}]", str(exc)))
            continue
        if not lis.loopback and not api.token:
            out.append(("api.token", f"api.listen {spec!r} is beyond loopback: set api.token "
                                     f"(clients then send Authorization: Bearer TOKEN)"))
    return out


def _vad(vad: VadConfig) -> list[tuple[str, str]]:
    if vad.neg_threshold > vad.threshold:
        return [("vad.neg_threshold", f"{vad.neg_threshold} is above vad.threshold "
                                      f"({vad.threshold}): the silence threshold must not "
                                      "exceed the speech threshold")]
    return []


def _listen(section: str, spec: str, forms: tuple[Form, ...],
            allow_from: tuple[str, ...]) -> list[tuple[str, str]]:
    """An enabled server's address and who may connect (a disabled one's are never read,
    so never refused). Its protocol has no authentication: beyond loopback, `allow_from`
    must say which peers."""
    try:
        lis = ListenAddress.parse(spec, forms)
    except AddressError as exc:
        return [(f"{section}.listen", str(exc))]
    try:
        allow = parse_allow_from(allow_from)
    except AddressError as exc:
        return [(f"{section}.allow_from", str(exc))]
    if not lis.loopback and not allow:
        return [(f"{section}.allow_from",
                 f"{section}.listen {spec!r} is beyond loopback and the protocol has no "
                 f"authentication: list the peers allowed in {section}.allow_from (e.g. "
                 f'["10.1.2.3"] for the Asterisk box), and firewall the port')]
    return []
