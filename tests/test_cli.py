"""The gpuhost CLI end to end: the real console script, real ansible-runner, real Ansible.

Hosts are `ansible_connection: local` (fast) or an ssh host on a closed loopback port
(unreachable without any traffic leaving the machine). Run records go to tmp_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpuhost_fakes import cli_env

from gpuhost import listing
from gpuhost.findings import normalize
from gpuhost.record import REDACTED, redact_argv

GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAYBOOKS = Path(__file__).parent / "fixtures" / "playbooks"
HOST = "testhost"


def write_inventory(path: Path, hosts: dict[str, dict]) -> Path:
    path.write_text(json.dumps({"all": {"hosts": hosts}}), encoding="utf-8")
    return path


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return write_inventory(tmp_path / "hosts.yml", {HOST: host})


@pytest.fixture
def gpuhost(tmp_path: Path):
    runs = tmp_path / "runs"

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        full_env = cli_env(runs, **(env or {}))
        proc = subprocess.run(
            [str(GPUHOST), *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=120,
            check=False,
        )
        proc.output = proc.stdout + proc.stderr
        assert "Traceback" not in proc.output
        return proc

    run.runs = runs
    return run


def latest_report(runs: Path) -> dict:
    return json.loads((runs / "latest" / "report.json").read_text(encoding="utf-8"))


def test_version(gpuhost):
    proc = gpuhost("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("gpuhost ")


def test_bad_inventory_path_exits_2_naming_it(gpuhost, tmp_path):
    missing = tmp_path / "no-such-inventory"
    proc = gpuhost("provision", "-i", str(missing))
    assert proc.returncode == 2
    assert f"inventory not found: {missing}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not gpuhost.runs.exists(), "a usage error must not leave a run record"


def test_missing_playbook_exits_2(gpuhost, local_inventory):
    proc = gpuhost("provision", "-i", str(local_inventory), "--playbook", "nope.yml")
    assert proc.returncode == 2
    assert "playbook not found: nope.yml" in proc.stderr


def test_project_dir_without_site_exits_2(gpuhost, local_inventory, tmp_path):
    proc = gpuhost("check", "-i", str(local_inventory), env={"GPUHOST_PROJECT_DIR": str(tmp_path)})
    assert proc.returncode == 2
    assert str(tmp_path) in proc.stderr and "GPUHOST_PROJECT_DIR" in proc.stderr


def test_unreachable_host_exits_1(gpuhost, tmp_path):
    # Port 1 on loopback is closed: ssh is refused at once and nothing leaves the machine.
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {"sshhost": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}},
    )
    proc = gpuhost(
        "provision",
        *("-i", str(inventory), "--playbook", str(PLAYBOOKS / "changes.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}"),
    )
    assert proc.returncode == 1
    assert "sshhost: unreachable" in proc.stdout
    assert "port 1" in proc.stdout
    report = latest_report(gpuhost.runs)
    assert report["status"] == "unreachable"
    assert report["unreachable"][0]["host"] == "sshhost"
    assert report["hosts"]["sshhost"]["unreachable"] == 1


def test_failing_task_names_task_and_message(gpuhost, local_inventory):
    proc = gpuhost(
        "provision", "-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "failing.yml")
    )
    assert proc.returncode == 1
    assert f"{HOST}: task 'Refuse the bad value' failed:" in proc.stdout
    assert "gpuhost_test_value 'banana' is not one of: a, b" in proc.stdout
    report = latest_report(gpuhost.runs)
    assert report["status"] == "failed"
    assert report["failed_tasks"] == [
        {
            "host": HOST,
            "task": "Refuse the bad value",
            "play": "Fail on purpose",
            "message": "gpuhost_test_value 'banana' is not one of: a, b",
        }
    ]


def test_success_writes_report(gpuhost, local_inventory, tmp_path):
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "changes.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}"),
    )
    assert proc.returncode == 0, proc.output
    assert (tmp_path / f"{HOST}.marker").is_file()
    report = latest_report(gpuhost.runs)
    assert report["status"] == "successful"
    assert report["command"] == "provision" and report["check"] is False
    assert report["hosts"][HOST]["ok"] == 2
    assert report["hosts"][HOST]["changed"] == 1
    assert report["hosts"][HOST]["failed"] == 0
    assert report["duration_s"] > 0
    assert report["inventory"] == [str(local_inventory)]
    assert report["changed_tasks"][0]["task"] == "Write the marker file"
    assert report["reboot_required"] == [HOST]
    run_dir = Path(report["run_dir"])
    assert run_dir.parent == gpuhost.runs
    assert (run_dir / "runner" / "artifacts" / "ansible" / "job_events").is_dir()
    assert "Reboot required: testhost" in proc.stdout


def test_json_prints_the_report(gpuhost, local_inventory):
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "failing.yml"), "--json"),
    )
    assert proc.returncode == 1
    printed = json.loads(proc.stdout)
    assert printed == latest_report(gpuhost.runs)
    assert printed["failed_tasks"][0]["task"] == "Refuse the bad value"


def test_check_lists_would_change_tasks_and_changes_nothing(gpuhost, local_inventory, tmp_path):
    proc = gpuhost(
        "check",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "changes.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}"),
    )
    assert proc.returncode == 0, proc.output
    assert not (tmp_path / f"{HOST}.marker").exists()
    assert "Would change (check mode):" in proc.stdout
    assert "- Write the marker file" in proc.stdout
    assert "+gpuhost test marker" in proc.stdout  # the diff
    report = latest_report(gpuhost.runs)
    assert report["check"] is True
    assert "+gpuhost test marker" in report["changed_tasks"][0]["diff"]


def test_check_prints_findings_and_fails_on_a_fail(gpuhost, local_inventory):
    proc = gpuhost(
        "check", "-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "findings.yml")
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if line[:4] in ("PASS", "WARN", "FAIL")]
    assert len(lines) == 3
    assert lines[0].split()[:3] == ["PASS", HOST, "os:"]
    assert lines[1].startswith("WARN") and "fix: enable Above 4G decoding" in lines[1]
    assert lines[2].startswith("FAIL") and "disk: 20 GiB free" in lines[2]
    report = latest_report(gpuhost.runs)
    assert report["status"] == "failed"
    assert [f["status"] for f in report["findings"][HOST]] == ["pass", "warn", "fail"]


def test_no_matching_host_exits_2(gpuhost, local_inventory):
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--limit", "nosuchhost"),
        *("--playbook", str(PLAYBOOKS / "failing.yml")),
    )
    assert proc.returncode == 2
    # Refused before a run record, naming the inventory's hosts; no empty sections.
    assert f"--limit 'nosuchhost' matches no host of inventory {local_inventory}" in proc.stderr
    assert f"its hosts: {HOST}" in proc.stderr
    # Said once, in gpuhost's words: Ansible's own warning for the pattern is not shown too.
    assert "Could not match supplied host pattern" not in proc.stderr
    assert proc.stderr.count("nosuchhost") == 1
    assert proc.stdout == ""
    assert not gpuhost.runs.exists()


def test_secrets_stay_out_of_the_run_record(gpuhost, local_inventory, tmp_path):
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "changes.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}", "-e", "hf_token=cli-secret-value"),
        env={"HF_TOKEN": "env-secret-value"},
    )
    assert proc.returncode == 0, proc.output
    for path in gpuhost.runs.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert "secret-value" not in text, path


def test_redact_argv_hides_secret_extra_vars():
    argv = ["-e", "api_key=x", "--extra-vars=hf_token=y", "-eplain=z", "-e", '{"password": 1}']
    assert redact_argv(argv) == [
        "-e",
        f"api_key={REDACTED}",
        f"--extra-vars=hf_token={REDACTED}",
        "-eplain=z",
        "-e",
        json.dumps({"password": REDACTED}),
    ]


def test_malformed_finding_counts_as_fail():
    assert normalize([{"check": "x", "status": "bogus"}])[0]["status"] == "fail"
    assert normalize("not a list")[0]["message"].startswith("malformed finding")


# --- tags: a value no task carries is refused before anything runs ------------------------
def test_unknown_tag_is_refused_listing_the_known_ones(gpuhost, local_inventory, tmp_path):
    for option in ("--tags", "--skip-tags"):
        proc = gpuhost(
            "provision",
            *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "tagged.yml")),
            *("-e", f"gpuhost_test_dir={tmp_path}", option, "preflight,nccl"),
        )
        assert proc.returncode == 2, proc.output
        assert f"{option} nccl: no task in tagged.yml has this tag" in proc.stderr
        assert "known tags: driver, preflight; Ansible's own: all, always," in proc.stderr
    assert not list(tmp_path.glob("*.marker")), "nothing may run"
    assert not gpuhost.runs.exists(), "a refused tag must not leave a run record"


def test_known_tag_runs_only_its_tasks(gpuhost, local_inventory, tmp_path):
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "tagged.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}", "-t", "driver"),
    )
    assert proc.returncode == 0, proc.output
    assert [p.name for p in tmp_path.glob("*.marker")] == ["driver.marker"]
    assert latest_report(gpuhost.runs)["tags"] == "driver"


def test_unknown_tag_is_refused_for_site_yml(gpuhost, local_inventory):
    # The project's own playbook: its tags come from ansible-playbook --list-tags.
    proc = gpuhost("check", "-i", str(local_inventory), "-t", "no-such-stage")
    assert proc.returncode == 2, proc.output
    assert "--tags no-such-stage: no task in site.yml has this tag; known tags:" in proc.stderr


def test_parse_list_tags():
    output = (
        "playbook: site.yml\n\n  play #1 (all): Preflight\tTAGS: [preflight]\n"
        "      TASK TAGS: [always, preflight]\n  play #2 (all): Serve\tTAGS: []\n"
        "      TASK TAGS: [server, with space]\n"
    )
    assert listing.parse_list_tags(output) == {"always", "preflight", "server", "with space"}


def test_listing_counts_the_tasks_a_tag_selection_runs():
    output = (
        "playbook: site.yml\n\n  play #1 (all): Preflight\tTAGS: []\n    tasks:\n"
        "      Validate\tTAGS: [always]\n      Read facts\tTAGS: [preflight]\n"
        "      Debug only\tTAGS: [never, debug]\n      Untagged\tTAGS: []\n"
        "      TASK TAGS: [always, debug, never, preflight]\n"
        "  play #2 (gpu_hosts): Serve\tTAGS: [server]\n    tasks:\n"
        "      Start\tTAGS: [server]\n"
    )
    plan = listing.parse(output)
    assert plan.tags == {"always", "debug", "never", "preflight"}
    assert plan.task_counts(None, None) == [("Preflight", 3), ("Serve", 1)]
    assert plan.task_counts("preflight", None) == [("Preflight", 2), ("Serve", 0)]
    assert plan.task_counts("debug", None) == [("Preflight", 2), ("Serve", 0)]
    assert plan.task_counts(None, "server,always") == [("Preflight", 2), ("Serve", 0)]
    assert plan.task_counts("tagged", None) == [("Preflight", 2), ("Serve", 1)]
    assert plan.task_counts(None, "all") == [("Preflight", 1), ("Serve", 0)]


def test_a_secret_nested_in_an_extra_vars_json_stays_out_of_the_record(
    gpuhost, local_inventory, tmp_path
):
    nested = {"model_cache": {"hf_token": "nested-secret-value", "repo": "org/model"}}
    proc = gpuhost(
        "provision",
        *("-i", str(local_inventory), "--playbook", str(PLAYBOOKS / "changes.yml")),
        *("-e", f"gpuhost_test_dir={tmp_path}", "-e", json.dumps(nested)),
    )
    assert proc.returncode == 0, proc.output
    report = latest_report(gpuhost.runs)
    assert report["extra_vars"]["model_cache"] == {"hf_token": REDACTED, "repo": "org/model"}
    assert json.loads(report["argv"][-1]) == {"model_cache": report["extra_vars"]["model_cache"]}
    for path in gpuhost.runs.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert "nested-secret-value" not in text, path


def test_each_registered_command_is_one_module_and_a_subcommand(monkeypatch):
    from gpuhost import cli, commands

    loaded = commands.load()
    assert [commands.name_of(m) for m in loaded] == [
        "provision", "check", "verify", "bench", "report", "update", "rollback", "doctor",
        "adopt", "models", "rebuild", "vm",
    ]  # fmt: skip
    assert all(m.__name__.startswith("gpuhost.commands.") for m in loaded)
    assert all(callable(m.add_arguments) and callable(m.run) for m in loaded)
    # NAME and HELP default to the module's name and its docstring's first line.
    from gpuhost.commands import base

    monkeypatch.setattr(commands, "REGISTRY", (*commands.REGISTRY, base))
    monkeypatch.setattr("gpuhost.commands.base.add_arguments", lambda p: None, raising=False)
    monkeypatch.setattr("gpuhost.commands.base.run", lambda args, ctx: 0, raising=False)
    parser = cli.build_parser()
    assert parser.parse_args(["base"]).handler(None, None) == 0
