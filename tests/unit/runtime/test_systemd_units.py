"""The shipped unit files pass systemd's own checks, with no complaint at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_unit_verifies_without_any_output(repo_root, tmp_path):
    # `systemd-analyze verify` exits 0 even when it prints "Failed to parse ..., ignoring",
    # so any output at all is a failure. ExecStart must exist: point it at this venv.
    unit = (repo_root / "systemd" / "cosyvoiced.service").read_text()
    assert "ExecStart=/opt/cosyvoiced/bin/cosyvoiced run" in unit
    local = tmp_path / "cosyvoiced.service"
    local.write_text(unit.replace("/opt/cosyvoiced/bin/cosyvoiced", str(BIN / "cosyvoiced")))
    res = subprocess.run(["systemd-analyze", "verify", str(local)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "", res.stdout + res.stderr


def test_unit_keeps_the_promised_settings(repo_root):
    unit = (repo_root / "systemd" / "cosyvoiced.service").read_text()
    settings = {line.split("=", 1)[0] for line in unit.splitlines()
                if "=" in line and not line.startswith("#")}
    for key in ("Type", "ExecReload", "WatchdogSec", "TimeoutStartSec", "Restart",
                "StateDirectory", "CacheDirectory", "RuntimeDirectory",
                "ConfigurationDirectory", "DeviceAllow", "LimitRTPRIO", "SupplementaryGroups"):
        assert key in settings, key
    assert "PrivateDevices" not in settings and "RestrictRealtime" not in settings
    assert "DeviceAllow=char-alsa rw" in unit and "RestartPreventExitStatus=78" in unit


def test_sysusers_and_tmpfiles_parse(repo_root):
    sysusers = subprocess.run(["systemd-sysusers", "--dry-run",
                               str(repo_root / "systemd" / "cosyvoiced.sysusers")],
                              capture_output=True, text=True, timeout=60)
    assert sysusers.returncode == 0, sysusers.stderr
    assert "Failed" not in sysusers.stderr and "ignoring" not in sysusers.stderr


def test_tmpfiles_creates_the_directories(repo_root, tmp_path):
    # systemd-tmpfiles resolves users inside --root, so give the root its own passwd.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("cosyvoiced:x:995:995::/:/usr/sbin/nologin\n")
    (tmp_path / "etc" / "group").write_text("cosyvoiced:x:995:\n")
    res = subprocess.run(["systemd-tmpfiles", f"--root={tmp_path}", "--create",
                          str(repo_root / "systemd" / "cosyvoiced.tmpfiles")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    for d in ("run/cosyvoiced", "var/lib/cosyvoiced", "var/cache/cosyvoiced"):
        st = (tmp_path / d).stat()
        assert st.st_uid == 995 and oct(st.st_mode & 0o777) == "0o750", d
