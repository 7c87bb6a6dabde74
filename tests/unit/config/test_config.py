"""The strict loader: every kind of problem is named with file, line and key."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from cosyvoiced.config import Config, ConfigError, changed_keys, dump_config, load_config
from cosyvoiced.config.checks import config_problems
from cosyvoiced.config.listeners import ApiConfig
from cosyvoiced.config.schema import VadConfig

BIN = Path(sys.executable).parent


def _problems(text: str, tmp_path: Path, overrides: tuple[str, ...] = ()) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return [str(p) for p in info.value.problems]


def test_defaults_load_and_round_trip(tmp_path):
    config = load_config(None)
    assert config == Config()
    text = dump_config(config)
    path = tmp_path / "dump.toml"
    path.write_text(text)
    assert load_config(path) == config


@pytest.mark.parametrize("name", ["dev.toml", "cosyvoiced.toml", "callcenter.toml"])
def test_shipped_configs_are_valid(repo_root, name):
    load_config(repo_root / "configs" / name)


def test_unknown_key_names_file_line_and_allowed_keys(tmp_path):
    (msg,) = _problems("[log]\nlevel = \"info\"\nlevle = \"debug\"\n", tmp_path)
    assert msg.startswith(f"{tmp_path / 'c.toml'}:3: log.levle: unknown key")
    assert "level" in msg and "sink" in msg


def test_unknown_section(tmp_path):
    (msg,) = _problems("[sevice]\nx = 1\n", tmp_path)
    assert ":1: sevice: unknown key" in msg and "service" in msg


def test_wrong_type(tmp_path):
    (msg,) = _problems("[workers]\ncount = \"two\"\n", tmp_path)
    assert ":2: workers.count: got string 'two'; expected an integer" in msg


def test_bool_is_not_an_integer(tmp_path):
    (msg,) = _problems("[workers]\ncount = true\n", tmp_path)
    assert "workers.count" in msg and "expected an integer" in msg


def test_out_of_range(tmp_path):
    (msg,) = _problems("[service]\n\ndrain_timeout_s = -3\n", tmp_path)
    assert ":3: service.drain_timeout_s: -3.0 is out of range; allowed 0.0 to 3600.0" in msg


def test_literal_lists_the_choices(tmp_path):
    (msg,) = _problems("[log]\nsink = \"syslog\"\n", tmp_path)
    assert "log.sink" in msg and "'auto', 'journald', 'json'" in msg


def test_missing_directory(tmp_path):
    (msg,) = _problems('[tts]\nvoices_dirs = ["/no/such/voices"]\n', tmp_path)
    assert "tts.voices_dirs: dir not found: '/no/such/voices'" in msg


def test_array_of_tables_names_the_element(tmp_path):
    text = '[[audio.devices]]\nname = "a"\n[[audio.devices]]\nname = "b"\nchannels = 0\n'
    (msg,) = _problems(text, tmp_path)
    assert ":5: audio.devices[1].channels: 0 is out of range" in msg


def test_every_problem_is_reported_at_once(tmp_path):
    msgs = _problems("[log]\nlevel = 3\n[workers]\ncount = 0\nbogus = 1\n", tmp_path)
    assert len(msgs) == 3


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[service\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(bad)


def test_overrides_layer_over_file_and_are_named(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[log]\nlevel = \"warning\"\n")
    config = load_config(path, ["log.level=debug", "workers.max_streams=7",
                                'api.listen=["tcp://127.0.0.1:9"]'])
    assert config.log.level == "debug"
    assert config.workers.max_streams == 7
    assert config.api.listen == ("tcp://127.0.0.1:9",)
    msgs = _problems("", tmp_path, ("workers.count=0", "nonsense"))
    assert any(m.startswith("--set: workers.count") for m in msgs)
    assert any("expected KEY=VALUE" in m for m in msgs)


def test_changed_keys_knows_live_from_restart():
    old = Config()
    new = load_config(None, ["log.level=debug", "workers.count=4"])
    assert sorted(changed_keys(old, new)) == [("log.level", True), ("workers.count", False)]


def test_check_config_cli(repo_root, tmp_path):
    ok = subprocess.run([str(BIN / "cosyvoiced"), "check-config",
                         str(repo_root / "configs" / "dev.toml")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    effective = tomllib.loads(ok.stdout)
    assert effective["api"]["listen"] == ["tcp://127.0.0.1:8080"]
    assert effective["workers"]["onnx_threads"] == 1  # defaults are filled in
    bad = tmp_path / "bad.toml"
    bad.write_text("[workers]\nonnx_threads = 0\n")
    res = subprocess.run([str(BIN / "cosyvoiced"), "check-config", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 78
    assert "workers.onnx_threads" in res.stderr and res.stdout == ""


@pytest.mark.parametrize(("section", "listen"), [("audiosocket", "0.0.0.0:9092"),
                                                ("wyoming", "tcp://0.0.0.0:10200")])
def test_servers_without_auth_need_allow_from_beyond_loopback(tmp_path, section, listen):
    (msg,) = _problems(f'[{section}]\nenabled = true\nlisten = "{listen}"\n', tmp_path)
    assert f"{section}.allow_from" in msg and "authentication" in msg
    (msg,) = _problems(f'[{section}]\nenabled = true\nlisten = "{listen}"\n'
                       f'allow_from = ["10.0.0.0/99"]\n', tmp_path)
    assert f"{section}.allow_from" in msg and "CIDR" in msg
    path = tmp_path / "ok.toml"
    path.write_text(f'[{section}]\nenabled = true\nlisten = "{listen}"\n'
                    f'allow_from = ["10.1.2.3", "10.9.0.0/16"]\n')
    assert getattr(load_config(path), section).allow_from == ("10.1.2.3", "10.9.0.0/16")


def test_listening_beyond_loopback_needs_a_token(tmp_path):
    msgs = _problems('[api]\nlisten = ["tcp://0.0.0.0:8080"]\n', tmp_path)
    assert len(msgs) == 1 and "api.token" in msgs[0] and "0.0.0.0" in msgs[0]
    path = tmp_path / "ok.toml"
    path.write_text('[api]\nlisten = ["tcp://0.0.0.0:8080", "tcp://[::1]:9"]\ntoken = "s3cret"\n')
    assert load_config(path).api.token == "s3cret"
    (msg,) = _problems('[api]\nlisten = ["http://x"]\n', tmp_path)
    assert "api.listen[0]" in msg and "tcp://HOST:PORT" in msg


def test_vad_silence_threshold_above_speech_threshold_is_refused(tmp_path):
    (msg,) = _problems("[vad]\nthreshold = 0.4\nneg_threshold = 0.6\n", tmp_path)
    assert "vad.neg_threshold" in msg and "0.6" in msg and "0.4" in msg
    path = tmp_path / "equal.toml"
    path.write_text("[vad]\nthreshold = 0.4\nneg_threshold = 0.4\n")
    assert load_config(path).vad.neg_threshold == 0.4


def test_workers_cpu_list_and_thread_budget(tmp_path):
    (msg,) = _problems('[workers]\ncpus = "3-1"\n', tmp_path)
    assert ":2: workers.cpus: bad CPU list '3-1'" in msg and "ascending" in msg
    (msg,) = _problems('[workers]\ncpus = "0-1"\ncount = 2\nonnx_threads = 2\n', tmp_path)
    assert "workers.onnx_threads" in msg and "2 x 2 = 4 ONNX threads" in msg and "2 CPU(s)" in msg
    path = tmp_path / "ok.toml"
    path.write_text('[workers]\ncpus = ""\ncount = 64\nonnx_threads = 4\n')  # checked at start
    assert load_config(path).workers.count == 64


def test_enabled_servers_listen_addresses_are_checked(tmp_path):
    (msg,) = _problems('[audiosocket]\nenabled = true\nlisten = "tcp://127.0.0.1:x"\n',
                       tmp_path)
    assert ":3: audiosocket.listen: 'tcp://127.0.0.1:x': expected HOST:PORT" in msg
    (msg,) = _problems('[wyoming]\nenabled = true\nlisten = "unix:"\n', tmp_path)
    assert "wyoming.listen: 'unix:': empty socket path" in msg
    path = tmp_path / "ok.toml"
    path.write_text('[audiosocket]\nenabled = true\nlisten = "[::1]:9092"\n'
                    '[wyoming]\nenabled = true\nlisten = "127.0.0.1:10200"\n')
    assert load_config(path).wyoming.listen == "127.0.0.1:10200"
    path.write_text('[audiosocket]\nlisten = "nonsense"\n[wyoming]\nlisten = "nonsense"\n')
    assert load_config(path).audiosocket.listen == "nonsense"  # disabled: never read


def test_checks_return_key_and_message():
    assert config_problems(Config()) == []
    config = replace(Config(), api=ApiConfig(listen=("tcp://0.0.0.0:1", "ftp://x")),
                     vad=VadConfig(threshold=0.3, neg_threshold=0.4))
    assert [key for key, _ in config_problems(config)] == ["api.token", "api.listen[1]",
                                                           "vad.neg_threshold"]


@pytest.mark.parametrize("raw", ["nan", "+nan", "-nan", "inf", "+inf", "-inf"])
def test_non_finite_numbers_are_refused(tmp_path, raw):
    # nan compares false with both bounds, so a range check alone lets it through
    (msg,) = _problems(f"[service]\n\nhealth_stall_s = {raw}\n", tmp_path)
    assert msg.startswith(f"{tmp_path / 'c.toml'}:3: service.health_stall_s: ")
    assert "not a finite number" in msg and "allowed 0.1 to 600.0" in msg
    (msg,) = _problems("", tmp_path, (f"vad.threshold={raw}",))
    assert msg.startswith("--set: vad.threshold: ") and "allowed 0.0 to 1.0" in msg


def test_check_config_redacts_the_token(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[api]\nlisten = ["tcp://0.0.0.0:8080"]\ntoken = "s3cret-t0ken"\n')
    res = subprocess.run([str(BIN / "cosyvoiced"), "check-config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "s3cret-t0ken" not in res.stdout + res.stderr
    assert tomllib.loads(res.stdout)["api"]["token"] == "<redacted>"
    res = subprocess.run([str(BIN / "cosyvoiced"), "check-config", str(path),
                          "--set", "api.token=0ther-t0ken"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "0ther-t0ken" not in res.stdout
    config = load_config(path)
    assert config.api.token == "s3cret-t0ken"  # the loaded config keeps it
    assert "s3cret-t0ken" not in dump_config(config)
    assert tomllib.loads(dump_config(Config()))["api"]["token"] == ""  # none set: shown empty


def test_agent_listen_is_checked_only_when_set_and_beyond_loopback_needs_allow_from(tmp_path):
    assert load_config(None).agent.listen == ""  # off by default
    (msg,) = _problems('[agent]\nlisten = "127.0.0.1:x"\n', tmp_path)
    assert "agent.listen" in msg and "HOST:PORT" in msg
    (msg,) = _problems('[agent]\nlisten = "0.0.0.0:9093"\n', tmp_path)
    assert "agent.allow_from" in msg
    path = tmp_path / "ok.toml"
    path.write_text('[agent]\nlisten = "0.0.0.0:9093"\nallow_from = ["10.1.2.0/24"]\n')
    assert load_config(path).agent.allow_from == ("10.1.2.0/24",)
