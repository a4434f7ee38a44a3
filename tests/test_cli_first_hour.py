"""The CLI's first hour (issue 34 item 5): what a new user is told when something is off.

One real run (the console script, ansible-runner, ansible-playbook, the real validate
plugin) shows the warnings once each on the terminal and in the report; the rest are pure
functions over what Ansible and the roles emit (the event shapes are those of the real run
and of recorded runs).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from gpuhost_fakes import cli_env
from rich.console import Console

from gpuhost import (
    environment,
    findings,
    inventory,
    record,
    report,
    rollout,
    runfacts,
    summary,
    timeline,
)
from gpuhost.events import EventCollector, condensed_warnings
from gpuhost.runner import RunOutcome

GPUHOST = Path(sys.executable).parent / "gpuhost"
FIXTURES = Path(__file__).parent / "fixtures" / "cli"
EXAMPLE_INVENTORY = Path(__file__).parents[1] / "inventory" / "gpu-host"


def printed(fn, *args) -> str:
    console = Console(file=io.StringIO(), width=200, highlight=False, color_system=None)
    fn(console, *args)
    return console.file.getvalue()


# ---- one real run: warnings reach the terminal and the report, once each --------------


@pytest.fixture(scope="module")
def warned_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("warned")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = tmp / "hosts.json"
    hosts.write_text(json.dumps({"all": {"hosts": {"a": local, "b": local}}}))
    env = cli_env(tmp / "runs")
    proc = subprocess.run(
        [
            *(str(GPUHOST), "check", "-i", str(hosts)),
            *("--playbook", str(FIXTURES / "warnings.yml"), "-e", "verify_server_prot=8000"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    run_dir = tmp / "runs" / "latest"
    return proc, json.loads((run_dir / "report.json").read_text()), run_dir


def test_a_misspelt_variable_is_shown_once_on_the_terminal(warned_run):
    proc, _, _ = warned_run
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a check where nothing failed
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.count("Warnings:") == 1
    # Both hosts validated; the warning is one line, with the near name.
    typo = [line for line in proc.stdout.splitlines() if "verify_server_prot" in line]
    assert len(typo) == 1 and "did you mean verify_server_port" in typo[0]
    assert "no host of the inventory (within --limit) is in: routers" in proc.stdout
    # The would-change list names every host, and the drift says OK for hosts checked whole.
    assert "  a: nothing" in proc.stdout and "  b: nothing" in proc.stdout
    assert "UNKNOWN" not in proc.stdout


def test_the_warnings_are_in_report_json_and_report_md(warned_run):
    _, rep, run_dir = warned_run
    assert sum("verify_server_prot" in w for w in rep["warnings"]) == 1
    assert not any(w.startswith("[WARNING]") for w in rep["warnings"])
    text = report.render(runfacts.load_run(run_dir.resolve()))
    assert "## Warnings" in text and text.count("did you mean verify_server_port") == 1
    assert "## Would change (check mode)" in text and "- a: nothing" in text


# ---- warnings and notices from events -------------------------------------------------


def test_warning_events_and_the_auto_profile_notice_are_collected_once():
    collector = EventCollector()
    warning = {"event": "warning", "stdout": "[WARNING]: gpuhost_validate: x_prot: typo"}
    notice = {
        "event": "verbose",
        "stdout": "sglang profile: sglang_server_profile: auto picked no profile: no GPU",
    }
    # A task's warning (from a worker) is a verbose event; the controller's a warning event.
    worker = {"event": "verbose", "stdout": "[WARNING]: gpuhost_validate: x_prot: typo"}
    plain = {"event": "verbose", "stdout": "x [WARNING]: not at the start"}
    for event in (warning, worker, notice, notice, plain):
        collector.handle(event)
    assert collector.warnings == [
        "gpuhost_validate: x_prot: typo",
        "sglang profile: sglang_server_profile: auto picked no profile: no GPU",
    ]
    deprecation = {"event": "deprecated", "stdout": "[DEPRECATION WARNING]: old thing"}
    collector.handle(deprecation)
    assert collector.warnings[-1] == "old thing"


def test_unmatched_host_patterns_condense_to_one_line():
    warnings = [
        "Could not match supplied host pattern, ignoring: routers",
        "something else",
        "Could not match supplied host pattern, ignoring: monitoring",
    ]
    assert condensed_warnings(warnings) == [
        "no host of the inventory (within --limit) is in: routers, monitoring "
        "(the plays for them did nothing)",
        "something else",
    ]


# ---- drift and would-change: unknown, and why -------------------------------------------


def _check_report(**extra) -> dict:
    counts = dict.fromkeys(("ok", "changed", "failed", "unreachable", "skipped"), 0)
    base = {
        "command": "check",
        "check": True,
        "status": "successful",
        "tags": None,
        "skip_tags": None,
        "hosts": {"h1": dict(counts), "h2": dict(counts)},
        "changed_tasks": [],
        "failed_tasks": [],
        "unreachable": [],
    }
    base.update(extra)
    return base


def test_unknown_hosts_name_the_reason():
    rep = _check_report()
    rep["hosts"]["h1"]["unreachable"] = 1
    rep["failed_tasks"] = [{"host": "h2", "task": "Validate every gpuhost setting"}]
    assert rollout.unknown_hosts(rep) == {
        "h1": "unreachable: nothing was compared",
        "h2": "task 'Validate every gpuhost setting' failed: the check stopped there on this host",
    }
    assert set(rollout.unknown_hosts(_check_report(status="canceled")).values()) == {
        "the run was cancelled before the check ended"
    }
    tagged = rollout.unknown_hosts(_check_report(tags="preflight"))
    assert tagged["h1"] == "only the tasks -t preflight selects were checked"
    assert rollout.unknown_hosts(_check_report()) == {}


def test_drift_of_an_unreachable_host_is_unknown_and_no_host_prints_no_section():
    rep = _check_report()
    rep["hosts"]["h1"]["unreachable"] = 1
    drift = rollout.drift_by_host(rep)
    text = printed(summary.print_drift, drift, rollout.unknown_hosts(rep))
    assert "UNKNOWN  h1  unreachable" in text
    assert "OK       h2  matches the inventory" in text
    assert "h1  matches" not in text
    changes = printed(lambda c: summary.print_changes(c, rep, with_diff=False))
    assert "Nothing would change" not in changes
    assert "h1: unknown: unreachable" in changes and "h2: nothing" in changes
    assert printed(summary.print_drift, {}, {}) == ""


# ---- a crashing ansible-playbook -----------------------------------------------------

CRASH = """\
ERROR: something before
Traceback (most recent call last):
  File "/venv/bin/ansible-playbook", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/ansible/cli/playbook.py", line 12, in main
    raise RuntimeError("boom")
RuntimeError: the strategy plugin could not start its workers
"""


def test_a_crash_without_events_shows_the_exception_line():
    now = datetime.now(UTC)
    outcome = RunOutcome(250, "failed", now, now, EventCollector())
    rep = {"failed_tasks": [], "unreachable": [], "findings": {}, "hosts": {}}
    status, error = record.run_status(rep, outcome, CRASH)
    assert status == "error"
    assert "ansible-playbook ended (rc=250) without running a task" in error
    assert error.rstrip().endswith("RuntimeError: the strategy plugin could not start its workers")
    assert "Traceback (most recent call last):" in error
    assert "no host ran a task" not in error
    # Without any output the old hint stays.
    assert "check the inventory" in record.run_status(rep, outcome, "")[1]


# ---- stages that did not run --------------------------------------------------------


def _event(tmp: Path, n: int, event: str, **data) -> None:
    folder = tmp / "runner" / "artifacts" / "ansible" / "job_events"
    folder.mkdir(parents=True, exist_ok=True)
    data = {"host": "h1", "res": {}, **data}
    (folder / f"{n}-x.json").write_text(json.dumps({"event": event, "event_data": data}))


T0 = "2026-12-03T10:00:00+00:00"


def _at(s: float) -> str:
    return f"2026-12-03T10:00:{s:06.3f}+00:00"


def test_check_t_preflight_lists_no_server_start_or_verify(tmp_path):
    rp = "/p/roles"
    _event(
        tmp_path,
        1,
        "runner_on_ok",
        play="Preflight",
        role="preflight",
        task="Read GPU facts",
        start=_at(0),
        end=_at(4),
        task_action="gpuhost.gpu.gpu_facts",
    )
    # The Serve play's always-tagged settings resolution, and a skipped verify include.
    _event(
        tmp_path,
        2,
        "runner_on_ok",
        play="Serve",
        role="sglang_server",
        task="Resolve",
        start=_at(5),
        end=_at(6),
        task_path=f"{rp}/sglang_server/tasks/validate.yml:3",
    )
    _event(
        tmp_path,
        3,
        "runner_on_skipped",
        play="Verify the SGLang server",
        role="",
        task="Resolve the serving profile",
        start=_at(7),
        end=_at(7),
    )
    _event(
        tmp_path,
        4,
        "runner_on_ok",
        play="Serve",
        role="sglang_server",
        task="Note",
        start=_at(8),
        end=_at(8),
        task_action="ansible.builtin.set_fact",
    )
    names = [s["name"] for s in timeline.stages(tmp_path, T0, {})]
    assert names == ["preflight"]


def test_a_run_with_nothing_to_draw_has_no_timeline(tmp_path):
    # The unreachable example host: only the argument-spec check ran, in no time.
    _event(
        tmp_path,
        1,
        "runner_on_ok",
        play="Preflight",
        role="preflight",
        task="arg spec",
        start=_at(0),
        end=_at(0.01),
        task_action="ansible.builtin.validate_argument_spec",
    )
    _event(
        tmp_path,
        2,
        "runner_on_ok",
        play="Verify the SGLang server",
        role="verify",
        task="Look for the server unit",
        start=_at(1),
        end=_at(1.2),
    )
    rep = {"command": "check", "started_at": T0}
    timeline.attach(rep, tmp_path)
    assert "stages" not in rep and not (tmp_path / timeline.PLOT_NAME).exists()
    assert printed(timeline.print_summary, rep) == ""
    assert timeline.seconds(0.2) == "<1s" and timeline.seconds(3.4) == "3s"


# ---- update -C on a host with no server ---------------------------------------------


def test_a_host_without_a_server_is_not_rolled_back():
    facts = {
        "a": {"state": "rolled_back", "config": "", "previous": "", "message": "task X failed"},
        "b": {"state": "would_update", "config": "", "previous": ""},
        "c": {"state": "rolled_back", "config": "aaa", "previous": "aaa", "message": "gate"},
    }
    section = rollout.rollout_section(facts, ["a", "b", "c"])
    assert section["a"]["state"] == "no_server" and section["a"]["runs"] == "none"
    assert section["a"]["message"] == (
        "no server is installed on this host; the update stopped: task X failed"
    )
    assert section["b"]["state"] == "would_install"
    assert section["c"]["state"] == "rolled_back"  # a real rollback stays one
    md = report._section_run({"rollout": section})
    text = "\n".join(md)
    assert "## Rollout" in text and "\n| a | no_server | none |" in text


# ---- verify with no server --------------------------------------------------------------


def test_verify_says_no_server_is_installed(tmp_path):
    _event(
        tmp_path,
        1,
        "runner_on_ok",
        task="Decide",
        start=_at(0),
        end=_at(0),
        res={"ansible_facts": {"verify_server_installed": False}},
    )
    _event(
        tmp_path,
        2,
        "runner_on_ok",
        host="h2",
        task="Decide",
        start=_at(0),
        end=_at(0),
        res={"ansible_facts": {"verify_server_installed": True}},
    )
    assert runfacts.hosts_without_server(tmp_path) == ["h1"]
    # An earlier run's verification (with_history) must not speak for this run.
    old = {"gpuhost_verify": {"findings": [{"check": "health", "status": "pass", "message": "ok"}]}}
    run = runfacts.Run(path=tmp_path, report={"hosts": {"h1": {}}, "no_server": ["h1"]})
    run.facts = {"h1": old}
    text = printed(summary.print_verify, run)
    assert "no server is installed on h1" in text and "health" not in text


def test_the_cli_reads_the_fact_role_verify_publishes():
    # One name on both sides: the role's public output, not one of its private facts.
    import yaml

    root = Path(__file__).resolve().parents[1]
    tasks = yaml.safe_load((root / "roles/verify/tasks/main.yml").read_text())
    set_here = {k for t in tasks for k in (t.get("ansible.builtin.set_fact") or {})}
    assert runfacts.SERVER_INSTALLED_FACT == "verify_server_installed"
    assert runfacts.SERVER_INSTALLED_FACT in set_here


# ---- inventory errors: file and line; a limit that matches nothing ----------------------


def test_a_yaml_error_in_an_inventory_or_group_vars_names_file_and_line(tmp_path):
    bad = tmp_path / "inv1"
    bad.mkdir()
    (bad / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n    bad: [unclosed\n")
    with pytest.raises(inventory.InventoryParseError, match=r"hosts\.yml:5:1"):
        inventory.connection_targets([bad], None)
    gv = tmp_path / "inv2"
    (gv / "group_vars").mkdir(parents=True)
    (gv / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n")
    (gv / "group_vars" / "all.yml").write_text("foo: bar\n  baz: : [\n")
    with pytest.raises(Exception) as caught:
        inventory.connection_targets([gv], None)
    assert "group_vars/all.yml:2:8" in inventory.explain(caught.value)


def test_a_limit_that_matches_nothing_lists_the_hosts(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n    h2:\n")
    with pytest.raises(inventory.NoHostsMatched, match=r"'nosuchhost' matches no host.*h1, h2"):
        inventory.connection_targets([inv], "nosuchhost")


def test_the_example_inventory_says_ansible_host_is_commented_out():
    hints = inventory.address_hints([EXAMPLE_INVENTORY], ["gpu-host-1"])
    hosts_file = EXAMPLE_INVENTORY / "hosts.yml"
    line = inventory.commented_address_line(hosts_file, "gpu-host-1")
    assert hosts_file.read_text().splitlines()[line - 1].strip().startswith("# ansible_host:")
    assert hints["gpu-host-1"].startswith("gpu-host-1 has no ansible_host in the inventory")
    assert f"{hosts_file}" in hints["gpu-host-1"] and f"line {line} " in hints["gpu-host-1"]


# ---- findings without a fix; the environment ------------------------------------------


@pytest.mark.parametrize("fix", [None, "None", "", "null"])
def test_a_finding_without_a_fix_prints_no_fix(fix):
    found = findings.normalize([{"check": "bar1", "status": "warn", "message": "m", "fix": fix}])
    assert found[0]["fix"] == ""
    assert "fix" not in printed(findings.print_findings, {"h": found})


def test_tls_trust_mirror_and_proxy_variables_pass_and_secrets_are_not_kept_plainly():
    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE"):
        assert environment.kept(name)
    for name in ("HF_ENDPOINT", "http_proxy", "HTTPS_PROXY", "no_proxy", "ALL_PROXY"):
        assert environment.kept(name)
    for name in ("AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "HF_HUB_TOKEN_X"):
        assert not environment.kept(name)
