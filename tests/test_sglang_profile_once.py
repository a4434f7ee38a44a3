"""The serving profile is resolved once per run for the same inputs (issue 29 item 6): role
sglang_server's tasks/preflight.yml includes tasks/validate.yml (the resolve) only when
`_sglang_server_profile_due` (roles/sglang_server/vars/main.yml), and playbooks/serve.yml asks
the same before including the role's validate entry. A later call reuses this run's resolve
only while what the profile depends on within a run is what that resolve had (the GPU facts,
role nccl's decision, the sglang installed, the venv the unit names, where pre-staged weights
are, check mode) and the fact it set stands; the registered result is this run's, never the
fact cache. Rendered by Ansible's own Templar from the role's vars file; the action's echo of
its `inputs` runs through ansible-playbook."""

from __future__ import annotations

import sys

import pytest
import yaml
from gpuhost_fakes import ROOT, run_playbook

ROLE = ROOT / "roles/sglang_server"
LINK = "/opt/gpuhost/venv"
VENV = "/opt/gpuhost/venvs/" + "a" * 16
GPU = {"present": True, "count": 8, "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771}]}
NCCL = {"disable_custom_all_reduce": True}
PLAN = {"profile": "glm-5", "argv": ["python", "--tp-size", "8"]}

BASE = {
    "gpuhost_base_dir": "/opt/gpuhost",
    "python_env_venv_dir": LINK,
    "sglang_server_entrypoint": [f"{LINK}/bin/python", "-m", "sglang.launch_server"],
    "model_cache_mode": "download",
    "model_cache_prestaged_path": "",
    "gpuhost_gpu": GPU,
    "gpuhost_nccl": NCCL,
    "gpuhost_python_env": {"venv_path": VENV, "versions": {"sglang": "0.5.10.post1"}},
    "gpuhost_model_cache": {"mode": "download"},
    "gpuhost_sglang": PLAN,
}


def _render(expr: str, **variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    # Trusted as the role's vars file is when Ansible loads it.
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    trusted = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in role_vars.items()}
    templar = Templar(loader=DataLoader(), variables={**trusted, **variables})
    return templar.template(trust_as_template(expr))


def _resolved(**context):
    """The registered result of a resolve made with `context`: what the action returns."""
    inputs = _render("{{ _sglang_server_profile_inputs }}", **{**BASE, **context})
    return {
        "changed": False,
        "failed": False,
        "inputs": inputs,
        "ansible_facts": {"gpuhost_sglang": PLAN, "gpuhost_findings": []},
    }


def _due(result, **context) -> bool:
    got = _render(
        "{{ _sglang_server_profile_due | bool }}",
        **{**BASE, **context},
        **({} if result is None else {"_sglang_server_profile_result": result}),
    )
    assert isinstance(got, bool), got
    return got


def test_a_later_call_with_the_same_inputs_reuses_the_resolve():
    assert not _due(_resolved())


def test_no_resolve_in_this_run_or_a_skipped_or_failed_one_resolves():
    assert _due(None)
    # The action's own skip (auto, no GPU) sets no fact: it is no resolve to reuse.
    skipped = {"changed": False, "skipped": True, "inputs": _resolved()["inputs"]}
    assert _due(skipped, gpuhost_sglang=None)
    assert _due({**_resolved(), "failed": True})


@pytest.mark.parametrize(
    "change",
    [
        {"gpuhost_gpu": {**GPU, "count": 4}},  # the GPU facts read again (a driver load)
        {"gpuhost_nccl": {"disable_custom_all_reduce": False}},  # role nccl decided otherwise
        {"gpuhost_python_env": {"venv_path": VENV, "versions": {"sglang": "0.5.23"}}},
        {"gpuhost_python_env": {"venv_path": "/opt/gpuhost/venvs/" + "b" * 16, "versions": {}}},
        {"ansible_check_mode": True},
    ],
    ids=["gpu", "nccl", "sglang", "venv", "check_mode"],
)
def test_a_changed_input_resolves_again(change):
    assert _due(_resolved(), **change)


def test_the_venv_link_the_read_found_is_an_input():
    # Before the read: python_env's fact names the venv; after it, the link's target.
    before = _resolved()
    read = {
        "_sglang_server_read": {
            "results": [{"item": LINK, "stat": {"exists": True, "islnk": True, "lnk_target": VENV}}]
        }
    }
    assert not _due(before, **read)  # the link leads to the venv the fact names
    moved_link = {"exists": True, "islnk": True, "lnk_target": "/x"}
    moved = {"results": [{"item": LINK, "stat": moved_link}]}
    assert _due(before, _sglang_server_read=moved)


def test_the_fact_it_set_must_stand():
    """rolling_update's rollback rewrites gpuhost_sglang: a resolve after it is no reuse."""
    assert _due(_resolved(), gpuhost_sglang={**PLAN, "served_model_name": "old"})


def test_pre_staged_weights_are_measured_and_resolved_on_every_call():
    prestaged = {
        "model_cache_mode": "prestaged",
        "model_cache_prestaged_path": "/srv/models/m",
        "gpuhost_model_cache": {"mode": "prestaged", "model_path": "/srv/models/m"},
    }
    assert _due(_resolved(**prestaged), **prestaged)


def test_the_tasks_use_the_decision():
    preflight = yaml.safe_load((ROLE / "tasks/preflight.yml").read_text())
    (include,) = [t for t in preflight if "validate.yml" in str(t)]
    assert include["ansible.builtin.include_tasks"]["file"] == "validate.yml"
    # The included tasks run whenever the include does, whatever --tags selected it.
    assert include["ansible.builtin.include_tasks"]["apply"] == {"tags": ["always"]}
    assert include["when"] == "_sglang_server_runnable | bool and _sglang_server_profile_due | bool"
    validate = yaml.safe_load((ROLE / "tasks/validate.yml").read_text())
    (action,) = [t for t in validate if "gpuhost.gpu.sglang_profile" in t]
    assert action["register"] == "_sglang_server_profile_result"
    assert action["gpuhost.gpu.sglang_profile"]["inputs"] == "{{ _sglang_server_profile_inputs }}"
    assert "when" not in action  # a skip would register over this run's result
    serve = yaml.safe_load((ROOT / "playbooks/serve.yml").read_text())
    (play,) = [p for p in serve if p.get("name") == "Serve"]
    (pre,) = [t for t in play["pre_tasks"] if "ansible.builtin.include_role" in t]
    assert pre["ansible.builtin.include_role"]["tasks_from"] == "validate"
    assert pre["when"] == "_sglang_server_profile_due | default(true) | bool"


def test_the_action_returns_its_inputs_as_given(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - gpuhost.gpu.sglang_profile:\n"
        "        profile: ''\n"
        "        overrides: {model: acme/m, revision: main, served_model_name: m, tp_size: 1,"
        " flags: {}, env: {}, start_seconds: 60}\n"
        "        sglang_version: 0.5.10.post1\n"
        "        entrypoint: [python, -m, sglang.launch_server]\n"
        "        inputs: [{count: 2}, x, true]\n"
        "      register: r\n"
        "    - ansible.builtin.assert:\n"
        "        that: \"r.inputs == [{'count': 2}, 'x', true]\"\n"
    )
    python = f"ansible_python_interpreter={sys.executable}"
    proc = run_playbook([play, "-c", "local", "-i", "localhost,", "-e", python], tmp_path / "facts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
