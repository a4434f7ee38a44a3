"""Check mode on a blank host: no unit is started, enabled or restarted that may not exist yet.

In check mode nothing is installed or written, so a unit that this run's package install or
template would create is not known to systemd, and `ansible.builtin.systemd_service` fails
("Could not find the requested service"). Every task and handler that starts, enables,
restarts or reloads a unit must say what it does in check mode: a `when` that reads
`ansible_check_mode` (skip where the step that creates the unit would change or could not
plan) or `check_mode: false` (a read). The molecule `check` step (every scenario, on its
fresh containers) proves the guards on real systemd; this scan makes a new unguarded step
fail here, before molecule runs (docs/check-mode.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SYSTEMD = ("ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service")
ACTIVE_STATES = {"started", "restarted", "reloaded"}

# Steps whose `when` proves the unit is loaded by another means, with the reason.
EXEMPT = {
    # _sglang_server_loaded is true only after the start task (itself check-mode aware)
    # found the unit loaded: nothing is enabled that systemd does not know.
    ("roles/sglang_server/tasks/run.yml", "Enable the server at boot"),
}


def _walk(tasks, where: str, whens: list, out: list) -> None:
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        scope = whens + ([task["when"]] if task.get("when") is not None else [])
        for key in ("block", "rescue", "always"):
            _walk(task.get(key), where, scope, out)
        for module in SYSTEMD:
            args = task.get(module)
            if not isinstance(args, dict):
                continue
            if args.get("state") in ACTIVE_STATES or args.get("enabled"):
                out.append((where, task.get("name", "?"), scope, task.get("check_mode")))


def unit_steps() -> list[tuple]:
    out: list[tuple] = []
    files = sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("roles/*/handlers/*.yml"))
    for path in files:
        _walk(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)), [], out)
    for path in [ROOT / "site.yml", *sorted(ROOT.glob("playbooks/*.yml"))]:
        for play in yaml.safe_load(path.read_text()) or []:
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                _walk(play.get(key), str(path.relative_to(ROOT)), [], out)
    return out


def guarded(scope: list, check_mode) -> bool:
    return check_mode is False or "ansible_check_mode" in " ".join(map(str, scope))


def test_the_scan_finds_the_known_unit_steps():
    names = {(w, n) for w, n, _, _ in unit_steps()}
    # Package units, unit files the roles write, and handlers: each kind is seen.
    assert ("roles/metrics/tasks/node_exporter.yml", "Enable and start the node exporter") in names
    assert ("roles/sglang_router/tasks/run.yml", "Enable and start sglang-router") in names
    assert ("roles/metrics/handlers/main.yml", "Restart Prometheus") in names
    assert len(names) >= 15


@pytest.mark.parametrize("where,name,scope,check_mode", unit_steps(), ids=lambda v: str(v)[:60])
def test_a_unit_step_says_what_it_does_in_check_mode(where, name, scope, check_mode):
    if (where, name) in EXEMPT:
        return
    assert guarded(scope, check_mode), (
        f"{where}: {name!r} starts/enables/restarts a unit with no check-mode guard: on a blank "
        "host in check mode the unit may not exist yet (skip it where the step that creates "
        "the unit would change: `when: not (ansible_check_mode and _its_install is changed)`)"
    )


def test_the_guard_rule_can_fail():
    assert not guarded(["metrics_node_exporter_enabled | bool"], None)
    assert guarded(["not (ansible_check_mode and _x is changed)"], None)
    assert guarded([], False)


def test_every_exemption_still_exists():
    names = {(w, n) for w, n, _, _ in unit_steps()}
    assert names >= EXEMPT
