"""The run lock is the hosts' (issue 28 item 8): two real processes hold locks through
gpuhost.locking on inventories spelled differently; runs that share a host exclude each
other, runs on disjoint hosts do not, and --runs-dir plays no part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOLD = """
import sys
from pathlib import Path
from gpuhost import locking
from gpuhost.errors import GpuhostError
try:
    with locking.inventory_lock([Path(p) for p in sys.argv[1:]], None, "the test holder"):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes stdin
except GpuhostError as exc:
    print("refused:", exc, flush=True)
"""


@pytest.fixture
def lock_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GPUHOST_LOCK_DIR": str(tmp_path / "locks")}


def inventory(path: Path, hosts: dict[str, dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "hosts.yml").write_text(json.dumps({"all": {"hosts": hosts}}), encoding="utf-8")
    return path


def hold(env: dict[str, str], *inventories: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, *map(str, inventories)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def release(proc: subprocess.Popen) -> None:
    proc.communicate(timeout=30)


def test_two_spellings_of_one_inventory_exclude_each_other(tmp_path, lock_env):
    inv = inventory(tmp_path / "inv" / "x", {"gpu1": {"ansible_host": "10.0.0.5"}})
    first, said = hold(lock_env, inv)
    try:
        assert said == "held"
        second, refused = hold(lock_env, inv / "hosts.yml")
        release(second)
    finally:
        release(first)
    assert refused.startswith("refused: another gpuhost run is using host 10.0.0.5:")
    assert f"pid {first.pid} on 10.0.0.5:: the test holder" in refused


def test_a_host_named_differently_is_the_same_host(tmp_path, lock_env):
    one = inventory(tmp_path / "one", {"gpu1": {"ansible_host": "10.0.0.5", "ansible_port": 22}})
    other = tmp_path / "other"
    inventory(other, {"box": {}})
    (other / "host_vars").mkdir()
    (other / "host_vars" / "box.yml").write_text("ansible_host: 10.0.0.5\nansible_port: 22\n")
    first, said = hold(lock_env, one)
    try:
        second, refused = hold(lock_env, other)
        release(second)
    finally:
        release(first)
    assert said == "held"
    assert refused.startswith("refused: another gpuhost run is using host 10.0.0.5:22"), refused


def test_disjoint_hosts_run_side_by_side(tmp_path, lock_env):
    one = inventory(tmp_path / "one", {"gpu1": {"ansible_host": "10.0.0.5"}})
    two = inventory(tmp_path / "two", {"gpu2": {"ansible_host": "10.0.0.6"}})
    first, said_first = hold(lock_env, one)
    try:
        second, said_second = hold(lock_env, two)
        release(second)
    finally:
        release(first)
    assert (said_first, said_second) == ("held", "held")


def test_the_lock_does_not_depend_on_the_runs_dir(tmp_path, lock_env):
    inv = inventory(tmp_path / "inv", {"gpu1": {}})
    first, _ = hold({**lock_env, "GPUHOST_RUNS_DIR": str(tmp_path / "a")}, inv)
    try:
        second, refused = hold({**lock_env, "GPUHOST_RUNS_DIR": str(tmp_path / "b")}, inv)
        release(second)
    finally:
        release(first)
    assert refused.startswith("refused: another gpuhost run is using host gpu1:"), refused
    # Released with the process: the host is free again.
    again, said = hold(lock_env, inv)
    release(again)
    assert said == "held"
    assert oct((tmp_path / "locks").stat().st_mode & 0o777) == "0o700"
