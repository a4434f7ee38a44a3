"""A new model revision downloads beside the one that serves (issue 19, item 2): the disk check
credits only the new revision's own files (path_size's revision option), names the other
revisions' bytes it keeps, and the stand-in server refuses a --revision the cache does not
hold, as SGLang does offline. The rolling path runs model_cache and nccl before the drain."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_model_cache import (
    model_cache_disk_finding,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_path_size import revision_bytes
from gpuhost_fakes import ROOT

MIB = 1 << 20
OLD, NEW = "a" * 40, "b" * 40


def _revision(repo, commit, files, ref=None):
    """A revision in huggingface_hub's cache layout: blobs/, snapshots/<commit>/ links."""
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, size in files.items():
        blob = repo / "blobs" / hashlib.sha256(f"{name}:{size}".encode()).hexdigest()
        if not blob.exists():
            blob.write_bytes(b"\0" * size)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)


def test_only_the_wanted_revision_counts_shared_blobs_once(tmp_path):
    repo = tmp_path / "models--acme--m"
    _revision(repo, OLD, {"config.json": 10, "a.safetensors": 4 * MIB}, ref="main")
    # The new revision shares one shard with the old one (same content, same blob).
    _revision(repo, NEW, {"config.json": 10, "a.safetensors": 4 * MIB, "b.safetensors": MIB})
    assert revision_bytes(str(repo), NEW) == (10 + 5 * MIB, 0, NEW)
    # The ref file and the snapshot links are no revision's bytes.
    assert revision_bytes(str(repo), "main") == (10 + 4 * MIB, MIB, OLD)


def test_a_revision_not_there_yet_has_only_its_unfinished_files(tmp_path):
    repo = tmp_path / "models--acme--m"
    _revision(repo, OLD, {"a.safetensors": 4 * MIB}, ref="main")
    (repo / "blobs" / "f00.incomplete").write_bytes(b"\0" * MIB)
    assert revision_bytes(str(repo), NEW) == (MIB, 4 * MIB, NEW)
    # A branch with no ref yet: nothing resolves, the unfinished file still counts.
    assert revision_bytes(str(repo), "dev") == (MIB, 4 * MIB, "")


def test_refs_that_are_not_plain_commit_files_resolve_to_nothing(tmp_path):
    repo = tmp_path / "models--acme--m"
    _revision(repo, OLD, {"a.safetensors": MIB})
    refs = repo / "refs"
    refs.mkdir()
    os.mkfifo(refs / "fifo")  # never opened for reading: it would block
    (refs / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text(OLD)
    (refs / "junk").write_text("../../etc\n")
    for ref in ("fifo", "link", "junk", "../../x", "/etc/passwd"):
        assert revision_bytes(str(repo), ref) == (0, MIB, ""), ref


def test_missing_repo_is_zero(tmp_path):
    assert revision_bytes(str(tmp_path / "nothing"), NEW) == (0, 0, NEW)


def test_disk_check_needs_the_whole_new_revision_and_names_the_old_one():
    gib = 1 << 30
    # 450 GiB serving, 60 GiB free: a new 450 GiB revision does not fit, and the old one's
    # bytes are not taken for "already downloaded".
    space = {
        "free_bytes": 60 * gib,
        "probe_path": "/var/cache",
        "bytes": 450 * gib,
        "revision_bytes": 0,
    }
    f = model_cache_disk_finding(space, "/var/cache/hf", "acme/m", 450, 0, 20)
    assert f["status"] == "fail"
    assert "470.0 GiB needed" in f["message"]
    assert "450.0 GiB of other revisions kept beside it" in f["message"]
    assert "already downloaded" not in f["message"]
    # Half of the new one already there (an interrupted download resumes).
    space.update(free_bytes=300 * gib, bytes=675 * gib, revision_bytes=225 * gib)
    assert (
        "450.0 GiB of other revisions"
        in model_cache_disk_finding(space, "/var/cache/hf", "acme/m", 450, 0, 20)["message"]
    )
    # A single revision, complete: the ref file is no other revision.
    alone = {
        "free_bytes": 60 * gib,
        "bytes": gib + 40,
        "revision_bytes": gib,
        "other_revision_bytes": 0,
    }
    assert (
        "other revisions" not in model_cache_disk_finding(alone, "/h", "acme/m", 1, 0, 1)["message"]
    )
    f = model_cache_disk_finding(space, "/var/cache/hf", "acme/m", 450, 0, 20)
    assert f["status"] == "pass", f
    assert "225.0 GiB already downloaded" in f["message"]
    # Without the revision option (an older caller): everything counts, as before.
    f = model_cache_disk_finding(
        {"free_bytes": 60 * gib, "bytes": 450 * gib}, "/var/cache/hf", "acme/m", 450, 0, 20
    )
    assert f["status"] == "pass"


def test_preflight_and_wait_measure_by_revision():
    preflight = yaml.safe_load((ROOT / "roles/model_cache/tasks/preflight.yml").read_text())
    measure = next(t for t in preflight if "gpuhost.gpu.model_cache_state" in t)
    assert measure["gpuhost.gpu.model_cache_state"]["revision"] == "{{ _model_cache_revision }}"
    wait = (ROOT / "roles/model_cache/tasks/finish.yml").read_text()
    assert 'revision: "{{ _model_cache_revision }}"' in wait


def _standin():
    spec = importlib.util.spec_from_file_location(
        "sglang_standin", ROOT / "tests/standin/sglang_standin.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("revision", "model", "refused"),
    [
        (None, "acme/m", False),  # nothing pinned: the stand-in loads no weights
        (OLD, "acme/m", False),
        ("main", "acme/m", False),
        (NEW, "acme/m", True),
        ("dev", "acme/m", True),
        (NEW, "/srv/models/m", False),  # a local path: no hub cache involved
    ],
)
def test_standin_refuses_a_revision_the_cache_lacks(
    tmp_path, monkeypatch, revision, model, refused
):
    repo = tmp_path / "hub" / "models--acme--m"
    _revision(repo, OLD, {"config.json": 10}, ref="main")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    args = argparse.Namespace(model_path=model, revision=revision)
    why = _standin().missing_revision(args)
    assert bool(why) == refused, why
    if refused:
        assert "LocalEntryNotFoundError" in why and f"{model}@{revision}" in why


def test_the_rolling_path_prepares_nccl_and_the_model_before_the_drain():
    tasks = yaml.safe_load((ROOT / "roles/rolling_update/tasks/main.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Update this host")["block"]
    names = [t["name"] for t in block]

    def at(fragment):
        return next(i for i, n in enumerate(names) if fragment in n)

    assert at("(python_env)") < at("(nccl)") < at("(model_cache)") < at("Drain this worker")
    assert at("(model_cache)") < at("Install and render the new config")
    nccl = block[at("(nccl)")]
    assert nccl["loop"] == ["preflight", "configure"]  # no sweep or autotune on a serving host
    update = yaml.safe_load((ROOT / "playbooks/update.yml").read_text())
    start = next(p for p in update if "download" in p.get("name", ""))
    assert "serial" not in start  # every host starts its download at once
    assert start["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] == "overlap"
