"""What `gpuhost update` / `gpuhost rollback` did to each host, and the drift behind
`gpuhost check --fail-on-drift` (data only; summary.py prints them).

Which host carries which config is the fact `gpuhost_rollout` that role rolling_update sets
on each host it reached: {state, config, previous, known_good, changed}. It is read from the run's
job events (plain JSON, like the findings) into report.json's "rollout"; a host the rollout
never reached keeps the config it had and is listed as `not_reached`.
"""

from __future__ import annotations

from pathlib import Path

from gpuhost import record, rundir, runfacts
from gpuhost.errors import GpuhostError

ROLLOUT_FACT = "gpuhost_rollout"
# What each state means for "which config does this host run now".
STATE_CONFIG = {
    "updated": "new",
    "unchanged": "new",
    "would_update": "old",
    "rolled_back": "old",
    "failed": "unknown",
    "restored": "previous",
    "not_reached": "old",
    "unknown": "unknown",
    "no_server": "none",
    "would_install": "none",
}
UNREACHABLE_MESSAGE = (
    "unreachable during the rollout: whether it was drained, restarted or rolled back is "
    "not known; look at it (gpuhost check --limit HOST) before the next update"
)


def read_rollout_facts(run_dir: Path) -> dict[str, dict]:
    """The last gpuhost_rollout fact each host reported (runfacts walks the events)."""
    facts = runfacts.facts_from_events(run_dir)
    return {
        host: found[ROLLOUT_FACT]
        for host, found in sorted(facts.items())
        if isinstance(found.get(ROLLOUT_FACT), dict)
    }


def _unit_order(hosts: set[str], groups: dict[str, str]) -> list[str]:
    """The hosts sorted by name, a serving group's hosts together where its first one is."""
    first: dict[str, str] = {}
    for host in sorted(hosts):
        first.setdefault(groups.get(host) or f"\0{host}", host)
    return sorted(hosts, key=lambda h: (first[groups.get(h) or f"\0{h}"], h))


def rollout_section(
    facts: dict[str, dict],
    targets: list[str],
    unreachable: list[str] = (),
    groups: dict[str, str] | None = None,
) -> dict[str, dict]:
    """Per host: state, which config it runs (new/old), and the config hashes. `targets`
    are the workers the rollout was for (group gpu_hosts within --limit): a target with no
    fact was never reached. A target the run lost (`unreachable`, from the recap) is
    `unknown`, whatever it reported before. Other hosts the run touched (validation runs on
    routers too) are not part of the rollout. `groups` ({host: serving group}): a group is one
    unit of the rollout, so its hosts are listed together, each with `group`."""
    groups = groups or {}
    section: dict[str, dict] = {}
    for host in _unit_order(set(targets) | set(facts), groups):
        section[host] = _row(facts.get(host), host in unreachable)
        if groups.get(host):
            section[host]["group"] = groups[host]
    return section


def _row(fact: dict | None, lost: bool) -> dict:
    """One host's row: `unknown` when the run lost it, `not_reached` without a fact."""
    if lost:
        return {
            "state": "unknown",
            "runs": STATE_CONFIG["unknown"],
            "config": None,
            "previous": (fact or {}).get("previous") or None,
            "known_good": None,
            "message": UNREACHABLE_MESSAGE,
        }
    if fact is None:
        return {"state": "not_reached", "runs": STATE_CONFIG["not_reached"]}
    state, message = _true_state(fact)
    return {
        "state": state,
        "runs": STATE_CONFIG.get(state, "unknown"),
        "config": fact.get("config") or None,
        "previous": fact.get("previous") or None,
        "known_good": fact.get("known_good") or None,
        "message": message,
        # What the update changed: flags, model, venv, nccl, env, unit (names only).
        "changed": [str(p) for p in fact.get("changed") or []],
    }


def _true_state(fact: dict) -> tuple[str, str | None]:
    """The state a host's fact means. role rolling_update compares the config before and
    after; on a host that had no server both are empty, and "the same as before" is then no
    server at all, not a rollback: `no_server` (the update failed there; nothing was
    installed) or `would_install` (check mode: the first config would be installed)."""
    state = str(fact.get("state") or "failed")
    message = fact.get("message") or None
    if fact.get("previous"):
        return state, message
    if state == "rolled_back" or (state == "failed" and not fact.get("config")):
        why = f"; the update stopped: {message}" if message else ""
        return "no_server", f"no server is installed on this host{why}"
    if state == "would_update":
        return "would_install", message or "no server is installed yet: provision installs one"
    return state, message


# ---- drift (gpuhost check --fail-on-drift) -------------------------------------------


def unknown_hosts(report: dict) -> dict[str, str]:
    """Hosts whose check-mode result does not say what differs from the inventory, and why:
    the run was cancelled or never ran a task, the host was unreachable, a task failed on it
    (the check stopped there: a failed validation), or a tag selection checked only part.
    A host not listed here ran the whole check to its end."""
    hosts = sorted(report.get("hosts") or {})
    if report.get("status") == "canceled":
        return dict.fromkeys(hosts, "the run was cancelled before the check ended")
    if report.get("status") == "error":
        return dict.fromkeys(hosts, "the run stopped before it checked anything (see Error)")
    selection = []
    if report.get("tags"):
        selection.append(f"-t {report['tags']}")
    if report.get("skip_tags"):
        selection.append(f"--skip-tags {report['skip_tags']}")
    out: dict[str, str] = {}
    failed = {t["host"]: t["task"] for t in reversed(report.get("failed_tasks") or [])}
    for host in hosts:
        counts = report["hosts"][host]
        if counts.get("unreachable"):
            out[host] = "unreachable: nothing was compared"
        elif host in failed:
            out[host] = f"task '{failed[host]}' failed: the check stopped there on this host"
        elif selection:
            out[host] = f"only the tasks {' '.join(selection)} selects were checked"
    return out


def drift_by_host(report: dict) -> dict[str, list[dict]]:
    """What differs from the inventory, per host: the tasks check mode would change."""
    if not report.get("check"):
        raise GpuhostError("drift is only defined for a check-mode run")
    drift: dict[str, list[dict]] = {host: [] for host in sorted(report["hosts"])}
    for change in report["changed_tasks"]:
        drift.setdefault(change["host"], []).append(
            {"task": change["task"], "diff": change.get("diff")}
        )
    return drift


def apply_drift(report: dict, *, fail_on_drift: bool) -> bool:
    """Add report["drift"] and rewrite report.json; with fail_on_drift any drift fails the
    run (exit 1). Returns whether any host drifted."""
    report["drift"] = drift_by_host(report)
    report["drift_unknown"] = unknown_hosts(report)
    drifted = any(report["drift"].values())
    if fail_on_drift and drifted and report["status"] == "successful":
        report["status"] = "failed"
        report["error"] = "drift from the inventory on: " + ", ".join(
            host for host, items in report["drift"].items() if items
        )
    record.write_report(rundir.RunDir(Path(report["run_dir"])), report)
    return drifted
