"""Provisioning never restarts a routed worker (issue 15 item 8): the serve stage run through
`gpuhost provision` with a changed flag on a worker the router fronts stops before writing
anything, says to use `gpuhost update`, and the server keeps its process, unit and env."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "rolling_bench", REPO / "bench" / "rolling_update.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules["rolling_bench"] = bench
_spec.loader.exec_module(bench)

WORKER = bench.WORKERS[0]
ENV_FILE = "/etc/gpuhost/sglang-server.env"
# role rolling_update's refusal (tasks/refuse.yml) with what sglang_server says would change
RESTART_REFUSED = (
    "would restart it (its unit, env, keys or launcher would change): "
    "provisioning never does that to a routed worker"
)


def _inventory() -> Path:
    path = os.environ.get("MOLECULE_INVENTORY_FILE")
    return Path(path).parent if path else bench.molecule_inventory()


def _env_sum() -> str:
    return bench.sh("docker", "exec", WORKER, "sha256sum", ENV_FILE).stdout.split()[0]


def _serve(tmp_path, flags: dict) -> tuple[int, dict]:
    rc, _, report = bench.gpuhost(
        "provision",
        _inventory(),
        tmp_path / "runs",
        "--playbook",
        str(REPO / "playbooks" / "serve.yml"),
        "--limit",
        WORKER,
        "-e",
        json.dumps({"sglang_server_flags": flags}),
    )
    return rc, report


def test_provision_refuses_to_restart_a_routed_worker(tmp_path):
    before, env_before = bench.unit_state(WORKER), _env_sum()
    rc, report = _serve(tmp_path, {"--max-running-requests": 7})
    text = json.dumps(report)
    assert rc == 1, text
    assert RESTART_REFUSED in text, text
    assert f"gpuhost update -i INVENTORY --limit {WORKER}" in text, text
    after = bench.unit_state(WORKER)
    assert after["MainPID"] == before["MainPID"], (before, after)
    assert after["unit_sha256"] == before["unit_sha256"], (before, after)
    assert _env_sum() == env_before
    # The router still has the worker, healthy: nothing drained it.
    assert all(w["healthy"] for w in bench.router_workers()), bench.router_workers()


def _provision(tmp_path, *args: str) -> tuple[int, dict]:
    rc, _, report = bench.gpuhost("provision", _inventory(), tmp_path / "runs", *args)
    return rc, report


def test_provision_builds_a_new_lock_beside_a_routed_worker_and_refuses_the_restart(tmp_path):
    """Issue 19 item 4: a lock change through `gpuhost provision` (site.yml, the python_env
    and server tags) builds the new lock's venv beside the serving one and moves the link,
    but never restarts the routed worker onto it: that is `gpuhost update`'s."""
    before, env_before = bench.unit_state(WORKER), _env_sum()
    serving = bench.server_python(WORKER)
    assert serving == f"{bench.venv_of(bench.LOCK_A)}/bin/python", serving
    lock_b = json.dumps({"python_env_lock_file": str(bench.LOCK_B)})
    try:
        rc, report = _provision(
            tmp_path, "--limit", WORKER, "--tags", "python_env,server", "-e", lock_b
        )
        text = json.dumps(report)
        assert rc == 1, text
        assert RESTART_REFUSED in text, text
        venvs = bench.venv_state(WORKER)
        # Built and verified beside the serving venv, which is untouched.
        assert venvs["link"] == bench.venv_of(bench.LOCK_B), venvs
        assert bench.venv_of(bench.LOCK_B) in venvs["markers"], venvs
        after = bench.unit_state(WORKER)
        assert after["MainPID"] == before["MainPID"], (before, after)
        assert after["unit_sha256"] == before["unit_sha256"], (before, after)
        assert _env_sum() == env_before
        assert bench.server_python(WORKER) == serving
        assert all(w["healthy"] for w in bench.router_workers()), bench.router_workers()
    finally:
        # Back to the scenario's lock (the link only: the venv is kept, nothing restarts).
        rc, report = _provision(tmp_path, "--limit", WORKER, "--tags", "python_env")
        assert rc == 0, json.dumps(report)
    assert bench.venv_state(WORKER)["link"] == bench.venv_of(bench.LOCK_A)


def test_provision_refuses_a_driver_change_under_a_routed_worker(tmp_path):
    """Issue 19 item 4: a driver branch change through `gpuhost provision` (the driver tag)
    would move the packages under the serving worker and need a reboot: the driver role stops
    for that host before changing anything and says to run `gpuhost update`."""
    before, release = bench.unit_state(WORKER), bench.driver_release(WORKER)
    assert release.startswith("570."), release
    branch = json.dumps({"nvidia_driver_branch": bench.DRIVER_BRANCH})
    rc, report = _provision(tmp_path, "--limit", WORKER, "--tags", "driver", "-e", branch)
    text = json.dumps(report)
    assert rc == 1, text
    assert "reboot: provisioning never does that to a routed worker" in text, text
    assert f"gpuhost update -i INVENTORY --limit {WORKER}" in text, text
    assert bench.driver_release(WORKER) == release
    after = bench.unit_state(WORKER)
    assert after["MainPID"] == before["MainPID"], (before, after)
    assert all(w["healthy"] for w in bench.router_workers()), bench.router_workers()
