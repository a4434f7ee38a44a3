"""The rolling_update role's kept-config scripts (roles/rolling_update/vars/main.yml), run with
sh on temporary directories as the role runs them on a host: a kept config moves with its port
rule (issue 15 item 10: the rule rolls back with the config), and a config without a rule never
inherits one."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from gpuhost_fakes import ROOT

VARS = yaml.safe_load((ROOT / "roles" / "rolling_update" / "vars" / "main.yml").read_text())
FILES = VARS["_rolling_update_kept_files"]


def _run(script, a, b):
    subprocess.run(["sh", "-ec", VARS[script], "test", str(a), str(b), *FILES], check=True)


def _config(path, tag, rule=True):
    path.mkdir(exist_ok=True)
    for name in FILES:
        if rule or not name.startswith("firewall."):
            (path / name).write_text(f"{tag}:{name}\n")
    return path


def _read(path):
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_the_port_rule_is_a_kept_file():
    assert FILES[:2] == ["unit", "env"]
    assert {"firewall.nft", "firewall.service"} <= set(FILES)
    # role nccl's file rolls back with the server env that copied it (issue 19 item 3)
    assert "nccl.env" in FILES


@pytest.mark.parametrize(("rule_a", "rule_b"), [(True, True), (True, False), (False, True)])
def test_swap_exchanges_whole_configs_rule_included(tmp_path, rule_a, rule_b):
    a = _config(tmp_path / "known-good", "new", rule_a)
    b = _config(tmp_path / "previous", "old", rule_b)
    before_a, before_b = _read(a), _read(b)
    _run("_rolling_update_swap_script", a, b)
    assert _read(a) == before_b and _read(b) == before_a
    _run("_rolling_update_swap_script", a, b)
    assert _read(a) == before_a and _read(b) == before_b


def test_copy_keeps_the_rule_and_drops_a_stale_one(tmp_path):
    src = _config(tmp_path / "known-good", "live", rule=True)
    dst = _config(tmp_path / "pending", "stale", rule=True)
    _run("_rolling_update_copy_script", src, dst)
    assert _read(dst) == _read(src)
    for name in ("firewall.nft", "firewall.service"):
        (src / name).unlink()
    _run("_rolling_update_copy_script", src, dst)
    assert _read(dst) == _read(src)
    assert not (dst / "firewall.nft").exists()


def test_copy_preserves_modes(tmp_path):
    src = _config(tmp_path / "known-good", "live")
    (src / "env").chmod(0o600)
    dst = tmp_path / "previous"
    dst.mkdir()
    _run("_rolling_update_copy_script", src, dst)
    assert (dst / "env").stat().st_mode & 0o777 == 0o600
