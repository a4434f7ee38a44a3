"""Role model_cache reads the host once per run (issue 29 item 6): module model_cache_state in
preflight (the disk measure, the completion marker, the download unit, file_set's check of
HF_HOME, the marker directory and a leftover token), and the host and serve stages skip the
download step only where that read proves there is nothing to do (_model_cache_done).

_model_cache_done is rendered from roles/model_cache/vars/main.yml with the role's own filters
(plain Jinja; `skipped` and `bool` stand in for Ansible's test and filter of those names)."""

from __future__ import annotations

import jinja2
import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_model_cache import (
    model_cache_start_action,
    model_cache_unit_state,
)
from gpuhost_fakes import ROOT

ROLE = ROOT / "roles/model_cache"
VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
MARKER = "/c/huggingface/gpuhost-complete/acme--m@main.json"
ABSENT = "LoadState=not-found\nActiveState=inactive\nSubState=dead\n"
RUNNING = "LoadState=loaded\nActiveState=active\nSubState=running\n"
EXITED = "LoadState=loaded\nActiveState=active\nSubState=exited\nResult=success\nExecMainStatus=0\n"
FAILED = "LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\n"


def _done(**context) -> bool:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["gpuhost.gpu.model_cache_unit_state"] = model_cache_unit_state
    env.filters["gpuhost.gpu.model_cache_start_action"] = model_cache_start_action
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() == "true"
    env.tests["skipped"] = lambda r: bool(r.get("skipped"))
    base = {"_model_cache_model": "acme/m", "_model_cache_revision": "main"}
    base["_model_cache_marker"] = MARKER
    text = env.from_string(VARS["_model_cache_done"]).render(**{**base, **context}).strip()
    assert text in ("True", "False"), text
    return text == "True"


def _read(**change):
    read = {"marker": MARKER, "marker_exists": True, "files_changes": [], "unit_error": ""}
    return {**read, "unit_show": ABSENT, **change}


def test_a_complete_model_read_in_preflight_is_done():
    assert _done(_model_cache_state=_read())
    # A failed unit beside a complete marker: done too (start_action's rule).
    assert _done(_model_cache_state=_read(unit_show=FAILED))


@pytest.mark.parametrize(
    "change",
    [
        {"marker_exists": False},  # not downloaded yet, or the marker was removed by hand
        {"files_changes": ["hf_home: /c/huggingface fixes mode"]},  # drift: file_set runs
        {"files_changes": ["token: /etc/gpuhost/hf-token fixes removed"]},  # a leftover token
        {"unit_show": RUNNING},  # a download under way: the stages follow it
        {"unit_show": EXITED},  # finished, not recorded yet
        {"unit_error": "systemctl show: Failed to connect to bus"},  # the unit was not read
        {"marker": "/c/huggingface/gpuhost-complete/acme--m@other.json"},  # another revision
    ],
)
def test_anything_left_to_do_means_the_download_step_runs(change):
    assert not _done(_model_cache_state=_read(**change))


def test_no_read_of_this_run_means_the_download_step_runs():
    assert not _done(_model_cache_state={"skipped": True, "changed": False})
    assert not _done()  # serve.yml alone: nothing read yet in this run
    assert not _done(_model_cache_model="", _model_cache_state=_read())


def test_the_start_steps_decision_for_this_model_counts_too():
    decided = {"_model_cache_action": "done", "_model_cache_decided_for": "acme/m@main"}
    assert _done(_model_cache_state={"skipped": True}, **decided)
    decided["_model_cache_decided_for"] = "acme/m@other"
    assert not _done(_model_cache_state={"skipped": True}, **decided)


def _tasks(name):
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_the_read_compares_the_entries_file_set_writes():
    for name in ("preflight.yml", "start.yml"):
        read = next(t for t in _tasks(name) if "gpuhost.gpu.model_cache_state" in t)
        args = read["gpuhost.gpu.model_cache_state"]
        assert args["files"] == "{{ _model_cache_entries }}"
        assert read["register"] == "_model_cache_state"
        assert args["marker"] == "{{ _model_cache_marker }}"
        assert args["unit"] == "{{ _model_cache_unit }}"
    start = _tasks("start.yml")
    write = next(t for t in start if "gpuhost.gpu.file_set" in t)
    assert write["gpuhost.gpu.file_set"]["files"] == "{{ _model_cache_entries }}"
    assert write["when"] == "_model_cache_state.files_changes | length > 0"
    names = [t["name"] for t in start]
    # The fresh read, then the write, before any other change.
    assert names.index(write["name"]) == 1


def test_the_host_and_serve_stages_skip_only_a_model_found_done():
    overlap = next(t for t in _tasks("overlap.yml") if t.get("ansible.builtin.include_tasks"))
    assert "not _model_cache_done | bool" in overlap["when"]
    main = next(t for t in _tasks("main.yml") if t.get("ansible.builtin.include_tasks"))
    assert main["ansible.builtin.include_tasks"] == "fetch.yml"
    assert "not _model_cache_done | bool" in main["when"]
    fetch = _tasks("fetch.yml")
    assert "ansible.builtin.assert" in fetch[0]  # the model check first, before any change
    download = next(t for t in fetch if t.get("ansible.builtin.include_tasks") == "download.yml")
    assert "not _model_cache_done | bool" in download["when"]
