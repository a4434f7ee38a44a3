"""Issue 28 item 6 in the rolling_update scenario: a worker an interrupted `gpuhost update` left
out of the router (its drained mark on the host, the worker removed from the real
router's /workers, smg's) goes back on the next `gpuhost update` with no config change, and
the mark is removed. The interruption is made by hand, as a killed run leaves it: the mark
written as root, the worker deleted through the router's admin API. The worker is the serving
group's rank 0 (w2, the router's one worker for the pair w2+w3): the update takes the whole
group (--limit w2,w3), neither node restarts, and rank 0 goes back.

First in file order (pytest sorts the files): right after converge and idempotence the
workers run exactly the inventory's config, so the update has nothing to change; the later
files roll the workers to other configs."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "rolling_bench", REPO / "bench" / "rolling_update.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules["rolling_bench"] = bench
_spec.loader.exec_module(bench)

WORKER = bench.PAIR[0]
URL = "http://172.30.38.12:38102"  # molecule/rolling_update/host_vars/gpuhost-rolling_update-w2.yml
MARK = "/var/lib/gpuhost/rolling_update/drained"

pytestmark = pytest.mark.skipif(
    not os.environ.get("MOLECULE_INVENTORY_FILE"), reason="runs under molecule verify"
)


def _router(method: str, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*bench.ROUTER, timeout=10)
    auth = {"Authorization": f"Bearer {bench.ROUTER_ADMIN_KEY}"}
    conn.request(method, path, headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, (json.loads(body) if body.strip().startswith(b"{") else {})


def _ids() -> list[str]:
    _, data = _router("GET", "/workers")
    return [str(w["id"]) for w in data["workers"] if w["url"].rstrip("/") == URL]


def _mark_exists() -> bool:
    return bench.sh("docker", "exec", WORKER, "test", "-e", MARK, check=False).returncode == 0


def test_an_unchanged_update_puts_back_a_worker_left_drained(tmp_path):
    pids = {name: bench.unit_state(name)["MainPID"] for name in bench.PAIR}
    # What a run killed between the gate and the re-add leaves: the mark, the worker gone.
    bench.sh("docker", "exec", WORKER, "sh", "-ec",
             f"install -d -o root -g root -m 0700 {MARK.rsplit('/', 1)[0]}; "
             f"printf '%s\\n' '{{\"worker\": \"{URL}\"}}' > {MARK}; chmod 0600 {MARK}")  # fmt: skip
    for worker_id in _ids():
        status, _ = _router("DELETE", f"/workers/{worker_id}")
        assert status in (200, 202, 204), status
    for _ in range(30):  # the router may remove it in the background (202)
        if not _ids():
            break
        time.sleep(1)
    assert not _ids(), bench.router_workers()
    assert _mark_exists()

    rc, _, report = bench.gpuhost(
        "update", _inventory(), tmp_path / "runs", "--limit", ",".join(bench.PAIR)
    )
    text = json.dumps(report)
    assert rc == 0, text
    assert {name: report["rollout"][name]["state"] for name in bench.PAIR} == dict.fromkeys(
        bench.PAIR, "unchanged"
    ), text
    healthy = [w for w in bench.router_workers() if w["url"].rstrip("/") == URL]
    assert healthy and all(w["healthy"] for w in healthy), bench.router_workers()
    assert not _mark_exists()
    # Put back, not restarted: the config did not change, on either node of the group.
    assert {name: bench.unit_state(name)["MainPID"] for name in bench.PAIR} == pids


def _inventory() -> Path:
    path = os.environ.get("MOLECULE_INVENTORY_FILE")
    return Path(path).parent if path else bench.molecule_inventory()
