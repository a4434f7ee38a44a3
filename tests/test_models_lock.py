"""Pinned weights: a profile's branch resolved once to a sha in inventory/<x>/models.lock.yml.

The hub is tests/standin/hf_standin.py's hub stand-in (a test double of the hub's
/api/models/<repo>/revision/<rev> answer, on a loopback port), because the real hub cannot be
reached here. Everything else is real: gpuhost_models_lock, the action plugin run by
ansible-playbook through role sglang_server's validate tasks, and the `gpuhost models` CLI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_models_lock as lock
from gpuhost_fakes import run_playbook

from gpuhost.cli import main as gpuhost_main

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("hf_standin", ROOT / "tests/standin/hf_standin.py")
hf_standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hf_standin)

MODEL = "Qwen/Qwen3-32B-FP8"  # the profile auto picks on the real 1x H200 capture
SHA = re.compile(r"[0-9a-f]{40}")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The hub stand-in on a free loopback port; hub.move(repo, branch, sha) moves a branch."""
    refs = tmp_path / "refs.json"
    refs.write_text("{}")
    monkeypatch.setenv("HF_STANDIN_REFS", str(refs))
    server = hf_standin.start_hub()
    moving = threading.Lock()

    class Hub:
        url = f"http://127.0.0.1:{server.server_port}"

        @staticmethod
        def move(repo, branch, sha):
            with moving:
                moved = json.loads(refs.read_text())
                moved[f"{repo}@{branch}"] = sha
                # Atomic: the stand-in reads the file on every request, from other threads.
                tmp = refs.with_suffix(".tmp")
                tmp.write_text(json.dumps(moved))
                os.replace(tmp, refs)

        @staticmethod
        def at(repo, branch):
            return hf_standin.commit_of(repo, branch)

    yield Hub
    server.shutdown()


def resolver(url):
    return lambda repo, rev: lock.hub_revision(url, repo, rev)


# --- the lock module against the hub stand-in --------------------------------------------


def test_the_hub_standin_answers_a_sha_and_the_file_sizes(hub):
    info = lock.hub_revision(hub.url, MODEL, "main")
    assert info["sha"] == hub.at(MODEL, "main") and SHA.fullmatch(info["sha"])
    assert lock.weights_bytes(info["files"]) == 3 * 4 * 2**20  # three 4 MiB safetensors
    with pytest.raises(lock.HubError, match="HTTP 404"):
        lock.hub_revision(hub.url + "/nothing-here", MODEL, "main")


def test_first_resolution_is_written_and_every_later_one_reads_it(hub, tmp_path):
    path = tmp_path / "inv" / "models.lock.yml"
    first = lock.pin(path, MODEL, "main", resolver(hub.url))
    assert first["pinned"] == "new" and first["sha"] == hub.at(MODEL, "main")
    written = yaml.safe_load(path.read_text())
    assert written["models"][MODEL]["main"]["sha"] == first["sha"]
    assert written["models"][MODEL]["main"]["weights_bytes"] == 3 * 4 * 2**20
    # The branch moves on the hub: a second host and a rebuild still get the pinned sha.
    hub.move(MODEL, "main", "1" * 40)
    for _host in ("second host", "rebuild"):
        again = lock.pin(path, MODEL, "main", resolver(hub.url))
        assert again == {**again, "sha": first["sha"], "pinned": "lock"}


def test_check_mode_never_writes_the_lock(hub, tmp_path):
    path = tmp_path / "models.lock.yml"
    got = lock.pin(path, MODEL, "main", resolver(hub.url), write=False)
    assert got["pinned"] == "would" and got["sha"] == hub.at(MODEL, "main")
    assert not path.exists()


def test_hosts_resolving_at_once_agree_on_one_sha(hub, tmp_path):
    path = tmp_path / "models.lock.yml"
    shas, calls, gate = [], [], threading.Barrier(6)
    resolve = resolver(hub.url)

    def moving(repo, rev):
        # Every host resolves at the same moment and each sees the branch somewhere else:
        # only the first sha written may be served, by all of them.
        gate.wait()
        calls.append(1)
        hub.move(repo, rev, f"{len(calls):040x}")
        return resolve(repo, rev)

    threads = [
        threading.Thread(target=lambda: shas.append(lock.pin(path, MODEL, "main", moving)["sha"]))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 6 and len(shas) == 6 and len(set(shas)) == 1
    assert lock.read_lock(path)[MODEL]["main"]["sha"] == shas[0]


def test_a_hub_that_does_not_answer_leaves_no_lock_file(tmp_path):
    path = tmp_path / "inv" / "models.lock.yml"
    with pytest.raises(lock.HubError):
        lock.pin(path, MODEL, "main", resolver("http://127.0.0.1:9"))
    assert not path.exists() and not path.parent.exists()


def test_a_broken_lock_is_refused_with_the_key(tmp_path):
    path = tmp_path / "models.lock.yml"
    path.write_text("models:\n  a/b:\n    main: {sha: abc}\n")
    with pytest.raises(ValueError, match=r"models\.a/b\.main\.sha: got 'abc'; allowed: a 40-char"):
        lock.read_lock(path)


def test_unreachable_hub_is_a_hub_error():
    with pytest.raises(lock.HubError):
        lock.hub_revision("http://127.0.0.1:9", MODEL, "main", timeout=2)


# --- end to end: ansible-playbook (role sglang_server's validate) and `gpuhost models` ----

PLAY = """\
- name: Resolve the serving profile on every host
  hosts: gpu_hosts
  gather_facts: false
  vars:
    gpuhost_gpu: "{{ lookup('ansible.builtin.file', gpu_facts) | from_json }}"
  tasks:
    - name: Validate
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: validate
    - name: Show the plan
      ansible.builtin.debug:
        msg: "PLAN {{ inventory_hostname }} {{ gpuhost_sglang.profile }}
          {{ gpuhost_sglang.revision }} {{ gpuhost_sglang.revision_pinned }}
          {{ '--revision ' ~ gpuhost_sglang.revision in gpuhost_sglang.exec_start }}"
"""


@pytest.fixture
def project(tmp_path):
    """A playbook beside a link to the real group_vars, an inventory of two local hosts."""
    (tmp_path / "group_vars").symlink_to(ROOT / "group_vars")
    (tmp_path / "play.yml").write_text(PLAY)
    facts = json.loads((ROOT / "tests/fixtures/gpu-hosts/h200x1-real/facts.json").read_text())
    (tmp_path / "gpu.json").write_text(json.dumps(facts["gpuhost_gpu"]))
    inv = tmp_path / "inv"
    inv.mkdir()
    # The profile ships a sha; these tests follow a branch, as an inventory that asks for one.
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "sglang_server_revision": "main",
        }
        for name in ("h1", "h2")
    }
    (inv / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": hosts}}}})
    )
    return tmp_path


def play(project, hub, *extra, limit="all", rc=0):
    proc = run_playbook(
        [
            project / "play.yml",
            "-i",
            project / "inv",
            "-l",
            limit,
            "-e",
            f"gpu_facts={project / 'gpu.json'}",
            "-e",
            f"sglang_server_hub_endpoint={hub.url}",
            *extra,
        ],
        project / "facts",
        env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, out
    plans = re.findall(r"PLAN (\w+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
    return {host: rest for host, *rest in plans}, out


def test_hosts_rebuilds_and_updates_serve_the_pinned_sha(project, hub, capsys):
    lock_file = project / "inv" / "models.lock.yml"
    main_then = hub.at(MODEL, "main")

    # Check mode first: it says where main is and writes nothing.
    plans, _ = play(project, hub, "--check")
    assert plans["h1"] == ["qwen3-32b-fp8-1x-80gb", main_then, "would", "True"]
    assert not lock_file.exists()

    # The first real run pins main for both hosts; the unit's command line carries the sha.
    plans, _ = play(project, hub)
    assert {tuple(p[1:3]) for p in plans.values()} <= {(main_then, "new"), (main_then, "lock")}
    assert lock.read_lock(lock_file)[MODEL]["main"]["sha"] == main_then

    # The branch moves on the hub. A rebuild of h2 alone, and both hosts again: the old sha.
    moved = "2" * 40
    hub.move(MODEL, "main", moved)
    for limit in ("h2", "all"):
        plans, _ = play(project, hub, limit=limit)
        assert all(p[1:] == [main_then, "lock", "True"] for p in plans.values()), plans

    # `gpuhost models show` lists the pin; `gpuhost models update` moves it.
    assert gpuhost_main(["models", "show", "-i", str(project / "inv")]) == 0
    assert f"{MODEL}@main  {main_then}" in capsys.readouterr().out
    assert (
        gpuhost_main(["models", "update", "-i", str(project / "inv"), "--hub-endpoint", hub.url])
        == 0
    )
    assert f"{MODEL}@main  {main_then} -> {moved}" in capsys.readouterr().out

    # Now every host serves the new sha: its unit's ExecStart differs from the one on a host
    # not yet converged, which is what `gpuhost check --fail-on-drift` reports as drift.
    plans, _ = play(project, hub)
    assert all(p[1:] == [moved, "lock", "True"] for p in plans.values()), plans


def test_models_update_with_an_unreachable_hub_moves_nothing(tmp_path, capsys):
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "models.lock.yml").write_text(
        yaml.safe_dump({"models": {MODEL: {"main": {"sha": "3" * 40}}}})
    )
    before = (inv / "models.lock.yml").read_text()
    rc = gpuhost_main(["models", "update", "-i", str(inv), "--hub-endpoint", "http://127.0.0.1:9"])
    assert rc != 0
    assert "no pin was moved" in capsys.readouterr().err
    assert (inv / "models.lock.yml").read_text() == before


def test_models_refuses_a_model_that_is_not_pinned(tmp_path, capsys):
    inv = tmp_path / "inv"
    inv.mkdir()
    assert gpuhost_main(["models", "update", "-i", str(inv), "--model", "a/b"]) == 2
    assert "--model: a/b not pinned" in capsys.readouterr().err


def test_preflight_stops_on_a_model_that_does_not_fit_naming_the_numbers(project, hub, monkeypatch):
    # The hub lists 3 x 12000 MiB of safetensors at main (~35.2 GiB); a pool of 0.2 x 140.4
    # GiB cannot hold them. The play fails in the profile step, before anything is installed,
    # the size read from the hub's file list before any download, the numbers in the message.
    monkeypatch.setenv("HF_STANDIN_FILE_MIB", "12000")
    _, out = play(
        project, hub, "-e", '{"sglang_server_flags": {"--mem-fraction-static": 0.2}}', rc=2
    )
    assert "model fit: Qwen/Qwen3-32B-FP8 on this host: weights do not fit: weights 35.2 GiB" in out
    assert "(the hub's file list at " in out
    assert "pool 140.4 GiB x --mem-fraction-static 0.2 = 28.1 GiB per GPU" in out
    assert "nothing was changed" in out
