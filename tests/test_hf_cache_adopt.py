"""gpuhost.gpu.hf_cache_adopt (issue 31 item 2): a user's Hugging Face hub cache is adopted into
the managed cache with 0 bytes downloaded, every blob verified, and root never follows,
chowns or copies anything the user could have pointed elsewhere.

The user cache is written by the hub stand-in (tests/standin/hf_standin.py, a test double that
writes the hub cache layout with blobs named by their etag) and then given to uid 65534
(nobody), the user the old server runs as; the managed cache is owned by `daemon` (uid 1),
standing in for the service account. Root is needed to chown to other uids.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_model_cache import (
    model_cache_disk_finding,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_hf_cache_adopt as hc
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_path_size as path_size
from gpuhost_fakes import ROOT, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to other uids needs root")

REPO = "acme/tiny"
FOLDER = "models--acme--tiny"
USER = 65534  # nobody: the account of the hand-started server
SVC = 1  # daemon: the service account
GIB = 1 << 30


def _give(path: Path, uid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)


@pytest.fixture
def caches(tmp_path):
    """(user hub dir, managed hub dir, the commit refs/main names): the stand-in's download
    of acme/tiny@main (config.json and three 1 MiB weights), owned by nobody."""
    home = tmp_path / "alice" / "huggingface"
    env = {**os.environ, "HF_HOME": str(home), "HF_STANDIN_FILE_MIB": "1"}
    env["HF_STANDIN_CHUNK_DELAY"] = "0"
    subprocess.run(
        [sys.executable, str(ROOT / "tests/standin/hf_standin.py"), "download", REPO],
        env=env,
        check=True,
        capture_output=True,
    )
    _give(tmp_path / "alice", USER)
    commit = (home / "hub" / FOLDER / "refs" / "main").read_text()
    return home / "hub", tmp_path / "managed" / "hub", commit


def _params(src, dst, **extra):
    params = {
        "source": str(src),
        "dest": str(dst),
        "repo_id": REPO,
        "revision": "main",
        "owner": "daemon",
        "group": "daemon",
        "dir_mode": "0750",
        "file_mode": "0444",
        "source_owner": "nobody",
        "copy": "auto",
        "expected_files": {},
    }
    return {**params, **extra}


def _blobs(hub: Path) -> dict[str, os.stat_result]:
    folder = hub / FOLDER / "blobs"
    return {p.name: p.lstat() for p in folder.iterdir()} if folder.exists() else {}


def _snapshot(hub: Path, commit: str) -> dict[str, str]:
    snap = hub / FOLDER / "snapshots" / commit
    return {p.name: os.readlink(p) for p in snap.iterdir()} if snap.exists() else {}


def test_hard_links_each_blob_read_only_the_service_accounts_and_the_hub_finds_it(caches):
    src, dst, commit = caches
    before = _blobs(src)
    got = hc.adopt(_params(src, dst))
    assert got["errors"] == [] and got["commit"] == commit and got["changed"]
    assert sorted(got["linked"]) == sorted(before) and got["copied"] == []
    assert got["bytes_linked"] == sum(st.st_size for st in before.values()) > 3 << 20
    after = _blobs(dst)
    for name, st in after.items():
        assert st.st_ino == before[name].st_ino, f"{name} is not a hard link of the user's blob"
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (SVC, SVC, 0o444)
    assert {b["blob"] for b in got["source_changed"]} == set(before)
    # The snapshot and the ref as the hub library writes them; the old path still reads.
    assert _snapshot(dst, commit) == _snapshot(src, commit)
    assert (dst / FOLDER / "refs" / "main").read_text() == commit
    assert (src / FOLDER / "snapshots" / commit / "config.json").read_bytes().startswith(b"{")
    # What role model_cache measures for the revision (path_size, download_wait): all there.
    mine, other, resolved = path_size.revision_bytes(str(dst / FOLDER), "main")
    assert (mine, other, resolved) == (got["bytes_linked"], 0, commit)


def test_copy_always_copies_and_leaves_the_source_as_it_was(caches):
    src, dst, commit = caches
    before = _blobs(src)
    got = hc.adopt(_params(src, dst, copy="always"))
    assert got["errors"] == [] and sorted(got["copied"]) == sorted(before)
    assert got["linked"] == [] and got["source_changed"] == []
    for name, st in _blobs(dst).items():
        assert st.st_ino != before[name].st_ino and stat.S_IMODE(st.st_mode) == 0o444
        assert (dst / FOLDER / "blobs" / name).read_bytes() == (
            src / FOLDER / "blobs" / name
        ).read_bytes()
    assert {n: (s.st_uid, s.st_mode) for n, s in _blobs(src).items()} == {
        n: (s.st_uid, s.st_mode) for n, s in before.items()
    }
    assert _snapshot(dst, commit) == _snapshot(src, commit)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no second filesystem (/dev/shm)")
def test_another_filesystem_is_copied(caches):
    src, _dst, commit = caches
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        dst = Path(other) / "hub"
        if os.stat(other).st_dev == os.stat(src).st_dev:
            pytest.skip("/dev/shm is on the same filesystem here")
        planned = hc.adopt(_params(src, dst), check=True)
        assert planned["linked"] == [] and len(planned["copied"]) == 4
        got = hc.adopt(_params(src, dst))
        assert got["errors"] == [] and got["linked"] == [] and len(got["copied"]) == 4
        assert _snapshot(dst, commit) == _snapshot(src, commit)


def test_a_second_run_reuses_every_blob_and_changes_nothing(caches):
    src, dst, _commit = caches
    first = hc.adopt(_params(src, dst))
    again = hc.adopt(_params(src, dst))
    assert again["errors"] == [] and not again["changed"]
    assert sorted(again["reused"]) == sorted(first["linked"]) and again["linked"] == []
    assert again["bytes_reused"] == first["bytes_linked"]


def test_check_mode_reports_what_it_would_link_and_writes_nothing(caches):
    src, dst, _commit = caches
    before = {n: (s.st_uid, s.st_mode) for n, s in _blobs(src).items()}
    got = hc.adopt(_params(src, dst), check=True)
    assert got["changed"] and sorted(got["linked"]) == sorted(before)
    assert got["bytes_linked"] > 3 << 20 and got["source_changed"] == []
    assert not dst.parent.exists(), "check mode made the managed cache"
    assert {n: (s.st_uid, s.st_mode) for n, s in _blobs(src).items()} == before


@pytest.mark.parametrize("copy", ["auto", "always"])
def test_a_corrupt_blob_is_refused_by_name_and_no_snapshot_is_written(caches, copy):
    src, dst, commit = caches
    weights = src / FOLDER / "snapshots" / commit / "model-00002-of-00003.safetensors"
    bad = os.readlink(weights).rsplit("/", 1)[1]
    blob = src / FOLDER / "blobs" / bad
    with open(blob, "r+b") as handle:  # one byte flipped, same size
        handle.write(b"\x01")
    got = hc.adopt(_params(src, dst, copy=copy))
    assert [e["blob"] for e in got["errors"]] == [bad]
    assert f"blobs/{bad}: the sha256" in got["errors"][0]["error"]
    assert "corrupt" in got["errors"][0]["error"]
    # Nothing of the revision is served: no snapshot link, no ref; no temporary file left;
    # the refused blob is the user's again, as it was.
    assert _snapshot(dst, commit) == {}
    assert not (dst / FOLDER / "refs" / "main").exists()
    assert bad not in _blobs(dst) and not [n for n in _blobs(dst) if n.startswith(".")]
    st = blob.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink) == (USER, 0o644, 1)


def test_a_snapshot_link_outside_blobs_is_refused_before_anything_changes(caches, tmp_path):
    src, dst, commit = caches
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    link = src / FOLDER / "snapshots" / commit / "config.json"
    link.unlink()
    os.symlink(str(secret), link)
    got = hc.adopt(_params(src, dst))
    assert got["errors"] and got["errors"][0]["path"] == "config.json"
    assert f"links to '{secret}'" in got["errors"][0]["error"]
    assert not dst.exists() and got["linked"] == []  # refused before any change
    assert _blobs(src)  # and the user's blobs are untouched:
    assert all(st.st_uid == USER for st in _blobs(src).values())


def test_a_symlinked_blob_is_refused_and_its_target_untouched(caches, tmp_path):
    src, dst, commit = caches
    target = tmp_path / "root-file"
    target.write_text("x")
    name = os.readlink(src / FOLDER / "snapshots" / commit / "config.json").rsplit("/", 1)[1]
    blob = src / FOLDER / "blobs" / name
    blob.unlink()
    os.symlink(str(target), blob)
    os.lchown(blob, USER, USER)
    got = hc.adopt(_params(src, dst))
    assert [e["blob"] for e in got["errors"]] == [name]
    assert "is a symbolic link, not a regular file" in got["errors"][0]["error"]
    assert target.stat().st_uid == 0 and target.stat().st_nlink == 1
    assert _blobs(dst) == {}


def test_a_symlinked_directory_on_the_way_is_refused(caches, tmp_path):
    src, dst, commit = caches
    snaps = src / FOLDER / "snapshots"
    elsewhere = tmp_path / "elsewhere"
    (snaps / commit).rename(elsewhere)
    os.symlink(str(elsewhere), snaps / commit)
    os.lchown(snaps / commit, USER, USER)
    with pytest.raises(hc.AdoptError, match=f"snapshots/{commit} is a symbolic link"):
        hc.adopt(_params(src, dst))
    # The source path itself: a link in the user's directory is not followed either.
    os.symlink(str(src), src.parent / "hub-link")
    os.lchown(src.parent / "hub-link", USER, USER)
    with pytest.raises(hc.AdoptError, match="readlink -f"):
        hc.adopt(_params(src.parent / "hub-link", dst))
    assert not dst.exists()


def test_a_blob_with_a_second_name_is_not_hard_linked(caches, tmp_path):
    src, dst, _commit = caches
    name = sorted(_blobs(src))[0]
    os.link(src / FOLDER / "blobs" / name, tmp_path / "alice" / "second-name")
    got = hc.adopt(_params(src, dst))
    assert [e["blob"] for e in got["errors"]] == [name]
    assert "has 2 names" in got["errors"][0]["error"]
    assert (src / FOLDER / "blobs" / name).lstat().st_uid == USER and _blobs(dst) == {}
    # Copied, it is safe: the copy is a new file, the user's stays as it is.
    copied = hc.adopt(_params(src, dst, copy="always"))
    assert copied["errors"] == [] and name in copied["copied"]


def test_a_blob_of_another_owner_is_refused_even_when_copying(caches):
    src, dst, _commit = caches
    name = sorted(_blobs(src))[-1]
    os.chown(src / FOLDER / "blobs" / name, 0, 0)
    for copy in ("auto", "always"):
        got = hc.adopt(_params(src, dst, copy=copy))
        assert [e["blob"] for e in got["errors"]] == [name]
        assert "is owned by root, not nobody" in got["errors"][0]["error"]
    assert (src / FOLDER / "blobs" / name).lstat().st_uid == 0 and _blobs(dst) == {}


def test_a_branch_is_resolved_through_refs_and_a_sha_taken_as_it_is(caches):
    src, dst, commit = caches
    by_sha = hc.adopt(_params(src, dst, revision=commit), check=True)
    assert by_sha["commit"] == commit and by_sha["errors"] == []
    (src / FOLDER / "refs" / "v1").write_text(commit)
    assert hc.adopt(_params(src, dst, revision="v1"), check=True)["commit"] == commit
    with pytest.raises(hc.AdoptError, match="does not know revision 'nope'"):
        hc.adopt(_params(src, dst, revision="nope"), check=True)
    with pytest.raises(hc.AdoptError, match="the source has snapshots: " + commit):
        hc.adopt(_params(src, dst, revision="1" * 40), check=True)


def test_the_revisions_file_list_is_checked_when_given(caches):
    src, dst, commit = caches
    snap = src / FOLDER / "snapshots" / commit
    files = {p.name: {"size": p.stat().st_size} for p in snap.iterdir()}
    weights = "model-00001-of-00003.safetensors"
    files[weights]["sha256"] = os.readlink(snap / weights).rsplit("/", 1)[1]
    assert hc.adopt(_params(src, dst, expected_files=files), check=True)["errors"] == []
    wrong = {**files, weights: {"size": 1, "sha256": "0" * 64}, "extra.bin": {"size": 3}}
    errors = hc.adopt(_params(src, dst, expected_files=wrong), check=True)["errors"]
    assert [e["path"] for e in errors] == ["extra.bin", weights]
    assert "has 1048576 bytes, the revision's file list says 1" in errors[1]["error"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"source": "relative/hub"}, "source: got 'relative/hub'"),
        ({"dest": "/var/../etc"}, "dest: got '/var/../etc'"),
        ({"repo_id": "a/b c"}, "repo_id: got 'a/b c'"),
        ({"revision": "../main"}, "revision: got '../main'"),
        ({"source_owner": "Alice;x"}, "source_owner: got 'Alice;x'"),
        ({"file_mode": "0644"}, "file_mode: got '0644'; allowed: a read-only mode"),
        ({"copy": "move"}, "copy: got 'move'"),
        ({"expected_files": {"/etc/passwd": {"size": 1}}}, "path '/etc/passwd': an absolute"),
        ({"expected_files": {"a/../b": {"size": 1}}}, "path 'a/../b': an empty, '.' or '..'"),
    ],
)
def test_bad_options_are_refused_naming_the_option_and_the_value(caches, change, named):
    src, dst, _commit = caches
    with pytest.raises(hc.AdoptError, match=None) as err:
        hc.adopt(_params(src, dst, **change))
    assert named in str(err.value)
    assert not dst.exists()


# --- role model_cache: the entry point `adopt`, then the download step's own check ----------

PLAY = """\
- hosts: gpu_hosts
  gather_facts: false
  vars:
    gpuhost_service_user: daemon
    gpuhost_service_group: daemon
  tasks:
    - name: Adopt
      ansible.builtin.include_role:
        name: gpuhost.gpu.model_cache
        tasks_from: adopt
    - name: What the download step decides (tasks/start.yml reads the marker, nothing else)
      ansible.builtin.stat:
        path: "{{ gpuhost_cache_dir }}/huggingface/gpuhost-complete/acme--tiny@main.json"
      register: marker
    - name: Record it
      ansible.builtin.copy:
        content: "{{ 'absent' | gpuhost.gpu.model_cache_start_action(marker.stat.exists) }}"
        dest: "{{ decision_file }}"
      check_mode: false
"""


def _role(tmp_path, src, cache, *extra):
    play = tmp_path / "adopt.yml"
    play.write_text(PLAY)
    (tmp_path / "group_vars").exists() or (tmp_path / "group_vars").symlink_to(ROOT / "group_vars")
    args = [play, "-i", ROOT / "inventory/local", "-e", f"gpuhost_cache_dir={cache}"]
    for var in (
        f"model_cache_adopt_from={src}",
        "model_cache_adopt_owner=nobody",
        f"model_cache_model_id={REPO}",
        "model_cache_revision=main",
        f"gpuhost_base_dir={tmp_path}/base",
        f"gpuhost_config_dir={tmp_path}/etc",
        f"decision_file={tmp_path}/decision",
    ):
        args += ["-e", var]
    proc = run_playbook([*args, *extra], tmp_path / "facts")
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+).*failed=(\d+)", proc.stdout)
    decision = tmp_path / "decision"
    return proc, recap, decision.read_text() if decision.exists() else proc.stdout + proc.stderr


def test_the_role_adopts_marks_it_complete_and_the_download_step_finds_nothing_to_do(
    caches, tmp_path
):
    src, _dst, commit = caches
    cache = tmp_path / "cache"
    checked, recap, decision = _role(tmp_path, src, cache, "--check")
    assert recap and recap.group(2) == "0", checked.stdout + checked.stderr
    assert decision == "start" and not (cache / "huggingface" / "hub").exists()
    proc, recap, decision = _role(tmp_path, src, cache)
    assert recap and recap.group(2) == "0", proc.stdout + proc.stderr
    assert "4 blob(s) linked" in proc.stdout and "0 bytes downloaded" in proc.stdout
    assert decision == "done"  # start.yml: marker present -> nothing downloaded
    hub = cache / "huggingface" / "hub"
    assert _snapshot(hub, commit) == _snapshot(src, commit)
    marker = json.loads((cache / "huggingface/gpuhost-complete/acme--tiny@main.json").read_text())
    assert marker["commit"] == commit and marker["bytes_downloaded"] == 0
    assert marker["bytes_linked"] > 3 << 20
    again, recap, decision = _role(tmp_path, src, cache)
    assert recap and recap.group(1) == "0", again.stdout  # idempotent: nothing changes
    assert "already complete" in again.stdout and decision == "done"


def test_the_role_refuses_a_missing_owner_first_and_a_bad_blob_by_name(caches, tmp_path):
    src, _dst, _commit = caches
    cache = tmp_path / "cache"
    proc, recap, _decision = _role(tmp_path, src, cache, "-e", "model_cache_adopt_owner=")
    out = proc.stdout + proc.stderr
    assert recap and recap.group(2) == "1", out
    assert "model_cache_adopt_owner" in out and not cache.exists()
    # A blob that does not verify fails the task, naming it; no marker, so nothing is skipped.
    name = sorted(_blobs(src))[0]
    (src / FOLDER / "blobs" / name).write_bytes(b"not what it was")
    proc, recap, _decision = _role(tmp_path, src, cache)
    out = proc.stdout + proc.stderr
    assert recap and recap.group(2) == "1", out
    assert f"acme/tiny@main from {src}: 1 file(s) not adopted" in out
    assert f"blobs/{name}: the sha256 of its 15 bytes is not its name" in out
    assert list((cache / "huggingface/gpuhost-complete").iterdir()) == []


def test_the_download_step_adopts_before_it_decides():
    """tasks/start.yml (the overlap and the serve stage both run it) adopts before it decides,
    and the decision counts the marker adopt.yml wrote (outside check mode), so nothing is
    downloaded."""
    tasks = yaml.safe_load((ROOT / "roles/model_cache/tasks/start.yml").read_text())
    names = [t.get("name", "") for t in tasks]
    adopt = next(
        i for i, t in enumerate(tasks) if t.get("ansible.builtin.include_tasks") == "adopt.yml"
    )
    assert tasks[adopt]["when"] == "model_cache_adopt_from | length > 0"
    decide = names.index("Decide whether to start, wait or finish")
    assert adopt < decide
    action = tasks[decide]["ansible.builtin.set_fact"]["_model_cache_action"]
    assert "_model_cache_state.marker_exists" in action and "_model_cache_adopt_marked" in action
    marked = tasks[decide]["vars"]["_model_cache_adopt_marked"]
    assert "model_cache_adopt_from | length > 0" in marked and "not ansible_check_mode" in marked


def test_the_disk_check_credits_what_adoption_links_not_what_it_copies():
    space = {"bytes": 0, "revision_bytes": 0, "free_bytes": 30 * GIB, "probe_path": "/var"}
    args = ("/var/cache/gpuhost/huggingface", REPO, 400, 0, 20)
    linked = model_cache_disk_finding(
        space, *args, {"bytes_linked": 390 * GIB, "bytes_reused": 10 * GIB}
    )
    assert linked["status"] == "pass", linked["message"]
    assert "400.0 GiB hard linked from model_cache_adopt_from (no new space)" in linked["message"]
    copied = model_cache_disk_finding(space, *args, {"bytes_copied": 400 * GIB})
    assert copied["status"] == "fail" and "420.0 GiB needed" in copied["message"]


def test_preflight_credits_what_adoption_would_link_and_changes_nothing(caches, tmp_path):
    """The real preflight playbook on this machine: the disk finding counts the blobs the
    adoption would hard link as already there; the run is read-only (changed=0)."""
    src, _dst, _commit = caches
    cache = tmp_path / "cache"
    extra = {
        "model_cache_expected_size_gib": 1,
        "model_cache_free_margin_gib": 0,
        "model_cache_hf_cli": "/bin/true",
        "gpuhost_cache_dir": str(cache),
        "model_cache_model_id": REPO,
        "model_cache_revision": "main",
        "model_cache_adopt_from": str(src),
        "model_cache_adopt_owner": "nobody",
    }
    proc = run_playbook(
        ["playbooks/preflight.yml", "-i", "inventory/local", "-e", json.dumps(extra)],
        tmp_path / "facts",
    )
    out = proc.stdout + proc.stderr
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", out)
    assert recap and recap.group(1) == "0", out
    words = " ".join(out.split())  # the callback wraps long messages
    assert "3.0 MiB hard linked from model_cache_adopt_from (no new space)" in words, out
    assert not cache.exists()
