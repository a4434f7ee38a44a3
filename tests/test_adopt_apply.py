"""gpuhost adopt --apply (issue 31 item 3): the pure decisions of the cutover and the way back
(plugins/plugin_utils/gpuhost_adopt_apply.py, plugins/module_utils/gpuhost_adopt_cutover.py),
and playbooks/adopt_apply.yml following their order. The real cutover on systemd is
molecule/adopt."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_adopt_cutover as cut
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt_apply as ap
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_adopt_clients as cl

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "adopt_apply.yml"
KEY = "sk-old-secret-1234"


def _record(**over):
    rec = {
        "pid": 4242,
        "start_time": 777,
        "argv": ["/home/ml/ml-env/bin/python3", "-m", "sglang.launch_server", "--api-key", KEY],
        "environ": [(b"HF_TOKEN", b"hf_secret"), (b"NCCL_IB_DISABLE", b"1")],
        "env_left_out": [],
        "cwd": "/home/ml",
        "uid": 1001,
        "gid": 1001,
        "output": "/home/ml/sglang.log",
    }
    rec.update(over)
    return rec


# --- which hosts go on ------------------------------------------------------------------------


def test_a_host_with_none_or_several_servers_is_refused_naming_them():
    ok, refused = ap.targets({"a": [{"pid": 1}], "b": [], "c": [{"pid": 7}, {"pid": 9}]})
    assert ok == {"a": {"pid": 1}}
    assert refused["b"] == "no hand-started SGLang server found"
    assert "2 hand-started SGLang servers (pids 7, 9)" in refused["c"]
    said = ap.refusal(refused)
    assert "nothing was changed" in said and "b: " in said and "c: " in said


def test_the_server_is_found_again_by_its_pid_or_the_run_stops():
    servers = [{"pid": 5}, {"pid": 4242, "user": "ml"}]
    assert ap.server(servers, "4242")["user"] == "ml"
    with pytest.raises(
        ap.ApplyError, match=r"pid 4243: .*servers now: 5, 4242.*nothing was stopped"
    ):
        ap.server(servers, 4243)


# --- the listener and what clients must change ---------------------------------------------


def test_the_old_listener_with_sglangs_defaults_and_where_the_host_reaches_it():
    assert cl.old_listen({"flags": []}) == {
        "host": "127.0.0.1",
        "port": 30000,
        "api_key_set": False,
        "health_url": "http://127.0.0.1:30000/health",
    }
    open_ = cl.old_listen({"flags": [["--host", "0.0.0.0"], ["--port", "8000"]]})
    assert open_["health_url"] == "http://127.0.0.1:8000/health" and open_["port"] == 8000
    six = cl.old_listen({"flags": [["--host", "fd00::5"], ["--api-key", "<redacted>"]]})
    assert six["health_url"] == "http://[fd00::5]:30000/health" and six["api_key_set"]


def test_a_keyless_open_listener_tells_clients_to_send_the_key_and_keeps_the_port():
    old = {"host": "0.0.0.0", "port": 8000, "api_key_set": False}
    said = cl.clients(old, {"host": "0.0.0.0", "port": "8000", "api_key_set": True})
    assert said[0] == "nothing about the port: 8000 is kept"
    assert any("Authorization: Bearer" in line and "took none" in line for line in said)
    behind = cl.clients(old, {"host": "127.0.0.1", "port": 8000, "api_key_set": False})
    assert any("router" in line for line in behind)
    moved = cl.clients(old, {"host": "0.0.0.0", "port": 9000, "api_key_set": True})
    assert moved[0] == "the port: 8000 -> 9000"
    keyed = cl.clients({**old, "api_key_set": True}, {**old, "api_key_set": True})
    assert not any("Authorization" in line for line in keyed)


# --- the record, and the command that brings the old server back ------------------------------


def test_proc_fields():
    stat = "4242 (python3 -m x) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 777 0"
    assert cut.start_time(stat) == 777
    assert cut.ids(
        "Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\nGid:\t1002\t1002\t1002\t1002\n"
    ) == (
        1001,
        1002,
    )
    assert cut.output_target("/home/ml/sglang.log") == "/home/ml/sglang.log"
    for gone in ("/home/ml/x.log (deleted)", "pipe:[123]", "/dev/null", "/dev/pts/0", "socket:[9]"):
        assert cut.output_target(gone) == ""


def test_the_environment_file_carries_each_value_exactly_and_says_what_it_cannot():
    pairs = cut.split_environ(
        b'A=plain\0Q=it\'s\0D=$HOME "x" \\n\0NL=one\ntwo\0bad-name=1\0C=\x01\0U=\xff\0E=\0'
    )
    text, left_out = cut.env_file(pairs)
    # Checked against systemd 252's parser in molecule/adopt (byte-exact environ).
    assert text.splitlines()[:3] == ['A="plain"', 'Q="it\'s"', 'D="\\$HOME \\"x\\" \\\\n"']
    assert 'NL="one\ntwo"\n' in text and 'E=""\n' in text
    assert left_out == ["bad-name", "C", "U"]


def test_the_restore_runs_as_the_user_in_its_cwd_with_its_env_file_and_log():
    argv = cut.restore_argv(
        _record(), "gpuhost-adopt-restore-4242", "/var/lib/gpuhost/adopt/pid4242.env"
    )
    head = argv[: argv.index("--")]
    assert "--uid=1001" in head and "--gid=1001" in head
    assert "--working-directory=/home/ml" in head
    assert "--property=EnvironmentFile=/var/lib/gpuhost/adopt/pid4242.env" in head
    assert "--unit=gpuhost-adopt-restore-4242" in head
    tail = argv[argv.index("--") + 1 :]
    # A shell as the user appends the output ($0 the log): root opens nothing of the user's.
    assert tail[:4] == ["/bin/sh", "-c", cut.APPEND, "/home/ml/sglang.log"]
    assert tail[4:] == _record()["argv"]
    assert not any("hf_secret" in word for word in argv)
    journal = cut.restore_argv(_record(output=""), "u", "/e")
    assert journal[journal.index("--") + 1 :] == _record()["argv"]


def test_no_root_command_and_no_relative_cwd_is_started_again():
    with pytest.raises(cut.CutoverError, match="ran as root"):
        cut.restore_argv(_record(uid=0), "u", "/e")
    with pytest.raises(cut.CutoverError, match="absolute working directory"):
        cut.restore_argv(_record(cwd="home/ml"), "u", "/e")


def test_what_the_run_may_show_of_a_record_has_no_secret():
    shown = cut.summary(_record())
    assert KEY not in str(shown) and "hf_secret" not in str(shown)
    assert shown["env_names"] == ["HF_TOKEN", "NCCL_IB_DISABLE"]
    assert shown["argv"][-1] == "<redacted>"


def test_the_record_file_round_trips_byte_for_byte():
    rec = _record(environ=[(b"U", b"\xff\xfe"), (b"A", b"b=c")])
    assert cut.load(cut.dump(rec)) == rec


def test_the_process_tree_and_the_gpu_processes():
    assert sorted(cut.descendants({10: 1, 11: 10, 12: 11, 13: 1, 14: 12}, 10)) == [10, 11, 12, 14]
    assert cut.gpu_pids("4242\n 11 \n\n") == {4242, 11}
    assert cut.gpu_pids("") == set()
    assert cut.gpu_pids("NVIDIA-SMI has failed") is None


def _st(mode, uid):
    return os.stat_result((mode, 1, 1, 2, uid, 0, 4096, 0, 0, 0))


def test_the_record_directory_must_be_roots_alone():
    cut.check_dir(_st(stat.S_IFDIR | 0o700, 0), "/var/lib/gpuhost/adopt")
    for mode, uid in (
        (stat.S_IFDIR | 0o750, 0),
        (stat.S_IFDIR | 0o700, 1001),
        (stat.S_IFLNK | 0o700, 0),
    ):
        with pytest.raises(cut.CutoverError, match="owned by root with mode 0700"):
            cut.check_dir(_st(mode, uid), "/var/lib/gpuhost/adopt")


# --- the playbook follows the order -----------------------------------------------------------


def _tasks(play):
    out = []
    for task in play.get("tasks") or []:
        out.append(("task", task))
        for part in ("block", "rescue"):
            out += [(part, t) for t in task.get(part) or []]
    return out


def _step(task):
    if "gpuhost.gpu.sglang_adopt" in task:
        return task["gpuhost.gpu.sglang_adopt"]["state"]
    role = task.get("ansible.builtin.include_role") or {}
    return f"{role.get('name')}:{role.get('tasks_from', 'main')}" if role else ""


def test_the_playbook_converges_records_stops_starts_and_restores_in_the_steps_order():
    plays = yaml.safe_load(PLAYBOOK.read_text())
    assert plays[1]["ansible.builtin.import_playbook"] == "validate.yml"
    assert "include_vars" in str(plays[0]["tasks"][0])  # the proposal before validation
    where = {_step(t): (part, i) for i, (part, t) in enumerate(_tasks(plays[2])) if _step(t)}
    converge = [
        "base:main",
        "python_env:main",
        "nccl:main",
        "model_cache:adopt",
        "model_cache:main",
        "sglang_server:preflight",
        "sglang_server:{{ item }}",
    ]
    order = [where[s][1] for s in converge]
    assert order == sorted(order)
    assert where["model_cache:adopt"][1] < where["model_cache:main"][1]  # nothing downloads
    assert max(order) < where["recorded"][1] < where["stopped"][1] < where["sglang_server:run"][1]
    assert where["stopped"][0] == where["sglang_server:run"][0] == "block"
    assert where["restored"][0] == "rescue"
    nccl = next(t for _, t in _tasks(plays[2]) if _step(t) == "nccl:main")
    assert nccl["vars"] == {"nccl_verify": False, "nccl_autotune": False}
    assert ap.STEPS.index("record") < ap.STEPS.index("stop") < ap.STEPS.index("gate")


# --- the CLI ----------------------------------------------------------------------------------


def _gpuhost(tmp_path, *args):
    from gpuhost_fakes import cli_env

    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"h": host}}}}}))
    cmd = [str(Path(sys.executable).parent / "gpuhost"), "adopt", "-i", str(inventory), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=cli_env(tmp_path / "runs"), timeout=180,
        check=False,
    )  # fmt: skip


def test_check_without_apply_is_refused_before_any_run(tmp_path):
    proc = _gpuhost(tmp_path, "--check")
    assert proc.returncode == 2
    assert "--check goes with --apply" in proc.stdout + proc.stderr
    assert not (tmp_path / "runs").exists()


def test_apply_refuses_a_host_without_a_server_and_runs_no_cutover(tmp_path):
    # --check: where a server does run on this machine (another session's, a container's),
    # the cutover that follows is a dry run, and the test skips.
    proc = _gpuhost(tmp_path, "--apply", "--check", "-e", "ansible_become=false")
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.is_symlink())
    report = json.loads((runs[0] / "report.json").read_text())
    if report.get("adopt", {}).get("h"):
        pytest.skip("a server ran on this machine during the test: " + report["adopt"]["h"][0])
    assert proc.returncode == 1, proc.stdout[-2000:]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "nothing was changed; refused on h: no hand-started SGLang server found" in said
    assert len(runs) == 1  # the read-only look only: adopt_apply.yml never ran
