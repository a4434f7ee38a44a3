"""gpuhost.gpu.file_set (issue 29 item 6): one call compares and writes a role's files, by the
rules of gpuhost_service_path, with a result per file.

Real links and a directory owned by uid 65534 (nobody) stand in for what the service account
can plant; tmp_path/etc stands in for /etc/systemd/system (root's, 0755). Each refusal test
checks the message names the path and that nothing was written, the later entries included.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_file_set as fs
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_service_path import (
    ServicePathError,
)
from ansible_collections.gpuhost.gpu.plugins.modules import file_set as module

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

SECRET = "SGLANG_API_KEY=sk-not-for-logs-0123456789\n"


@pytest.fixture
def etc(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    etc.chmod(0o755)
    return etc


def _entries(etc):
    return [
        {"name": "unit", "path": str(etc / "x.service"), "mode": "0644", "content": "[Unit]\n"},
        {"name": "env", "path": str(etc / "x.env"), "mode": "0600", "secret": True},
    ]


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_writes_each_file_and_reports_each_change(etc):
    result = fs.apply(_entries(etc), {"env": SECRET})
    assert result["changed"]
    assert result["files"]["unit"]["changed"] and result["files"]["env"]["changed"]
    assert (etc / "x.service").read_text() == "[Unit]\n" and _mode(etc / "x.service") == 0o644
    assert (etc / "x.env").read_text() == SECRET and _mode(etc / "x.env") == 0o600
    again = fs.apply(_entries(etc), {"env": SECRET})
    assert not again["changed"]
    assert not again["files"]["unit"]["changed"] and not again["files"]["env"]["changed"]


def test_only_the_file_that_differs_is_changed(etc):
    fs.apply(_entries(etc), {"env": SECRET})
    (etc / "x.service").write_text("[Unit]\n# hand edit\n")
    result = fs.apply(_entries(etc), {"env": SECRET})
    assert result["files"]["unit"]["changed"] and result["files"]["unit"]["fixed"] == ["content"]
    assert not result["files"]["env"]["changed"]
    assert (etc / "x.service").read_text() == "[Unit]\n"


def test_mode_and_owner_alone_are_changes(etc):
    fs.apply(_entries(etc), {"env": SECRET})
    (etc / "x.env").chmod(0o644)
    os.chown(etc / "x.service", 65534, 0)
    result = fs.apply(_entries(etc), {"env": SECRET})
    assert result["files"]["env"]["fixed"] == ["mode"]
    assert result["files"]["unit"]["fixed"] == ["owner"]
    assert _mode(etc / "x.env") == 0o600 and os.lstat(etc / "x.service").st_uid == 0


def test_replaces_atomically_never_in_place(etc):
    fs.apply(_entries(etc), {"env": SECRET})
    os.link(etc / "x.service", etc.parent / "other-link")
    before = os.lstat(etc / "x.service").st_ino
    # A file with two links is refused; with the other link gone, the write is a new inode.
    with pytest.raises(ServicePathError, match="hard link"):
        fs.apply([dict(_entries(etc)[0], content="[Unit]\nA=1\n")])
    os.unlink(etc.parent / "other-link")
    fs.apply([dict(_entries(etc)[0], content="[Unit]\nA=1\n")])
    assert os.lstat(etc / "x.service").st_ino != before
    assert (etc / "x.service").read_text() == "[Unit]\nA=1\n"
    assert sorted(os.listdir(etc)) == ["x.env", "x.service"]


def test_refuses_a_link_another_account_planted(tmp_path):
    svc = tmp_path / "svc"
    svc.mkdir()
    os.chown(svc, 65534, 65534)
    target = tmp_path / "root-file"
    target.write_text("root's\n")
    os.symlink(target, svc / "x.conf")
    os.lchown(svc / "x.conf", 65534, 65534)
    entries = [
        {
            "name": "conf",
            "path": str(svc / "x.conf"),
            "mode": "0644",
            "content": "x\n",
            "owner": "nobody",
            "group": "nogroup",
        },
        {"name": "later", "path": str(tmp_path / "later"), "mode": "0644", "content": "y\n"},
    ]
    with pytest.raises(ServicePathError, match=r"x\.conf is a symbolic link"):
        fs.apply(entries)
    assert target.read_text() == "root's\n" and os.path.islink(svc / "x.conf")
    assert not (tmp_path / "later").exists()


def test_refuses_a_root_file_in_a_directory_another_account_owns(tmp_path):
    svc = tmp_path / "svc"
    svc.mkdir()
    svc.chmod(0o755)
    os.chown(svc, 65534, 65534)
    entries = [{"name": "unit", "path": str(svc / "x.service"), "mode": "0644", "content": "u\n"}]
    with pytest.raises(ServicePathError, match=r"svc is owned by nobody, mode 0755"):
        fs.apply(entries)
    assert os.listdir(svc) == []
    # A group-writable root directory is no better.
    os.chown(svc, 0, 0)
    svc.chmod(0o775)
    with pytest.raises(ServicePathError, match="mode 0775"):
        fs.apply(entries)
    assert os.listdir(svc) == []


def test_check_mode_reports_and_writes_nothing(etc):
    result = fs.apply(_entries(etc), {"env": SECRET}, check=True)
    assert result["changed"] and result["files"]["unit"]["changed"]
    assert os.listdir(etc) == []
    fs.apply(_entries(etc), {"env": SECRET})
    (etc / "x.service").write_text("drift\n")
    result = fs.apply(_entries(etc), {"env": SECRET}, check=True, diff=True)
    assert result["files"]["unit"]["changed"]
    assert (etc / "x.service").read_text() == "drift\n"
    assert result["diff"] == [
        {
            "before_header": str(etc / "x.service"),
            "after_header": str(etc / "x.service"),
            "before": "drift\n",
            "after": "[Unit]\n",
        }
    ]


def test_directories_are_made_root_only(etc):
    entries = [{"name": "kg", "path": str(etc / "a" / "b"), "state": "directory", "mode": "0700"}]
    assert fs.apply(entries)["files"]["kg"]["changed"]
    assert _mode(etc / "a" / "b") == 0o700
    assert not fs.apply(entries)["changed"]


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"name": "Unit", "path": "/x", "mode": "0644"}, "is not a result key"),
        ({"name": "u", "path": "/x", "mode": "644x"}, r"files\[u\]\.mode: '644x'"),
        ({"name": "u", "path": "/x", "mode": "0600", "secret": True}, "secret_contents has no"),
    ],
)
def test_bad_entries_are_refused_before_any_write(etc, entry, message):
    first = {"name": "first", "path": str(etc / "first"), "mode": "0644", "content": "1\n"}
    with pytest.raises(ServicePathError, match=message):
        fs.apply([first, entry])
    assert os.listdir(etc) == []


def _run_module(args):
    """Run the module in-process; returns (its JSON output as text, what it logged)."""
    logged = []
    out = io.StringIO()
    with (
        patch_module_args(args),
        mock.patch.object(basic.AnsibleModule, "log", lambda self, msg, **kw: logged.append(msg)),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit),
    ):
        module.main()
    return out.getvalue(), logged


def test_the_secret_is_in_no_result_diff_or_log_line(etc):
    fs.apply(_entries(etc), {"env": "OLD=1\n"})
    (etc / "x.service").write_text("drift\n")
    text, logged = _run_module(
        {"files": _entries(etc), "secret_contents": {"env": SECRET}, "_ansible_diff": True}
    )
    result = json.loads(text)
    assert result["changed"] and result["files"]["env"]["changed"]
    assert (etc / "x.env").read_text() == SECRET
    # The unit's diff is there, the env's is not; the key is nowhere.
    assert [d["before_header"] for d in result["diff"]] == [str(etc / "x.service")]
    assert "sk-not-for-logs" not in text and "OLD=1" not in text
    assert logged and not any("sk-not-for-logs" in line for line in logged)


def test_copies_from_a_host_file_and_refuses_a_planted_link_as_source(tmp_path, etc):
    (etc / "x.service").write_text("[Unit]\nlive\n")
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o700)
    entry = {"name": "unit", "src": str(etc / "x.service"), "path": str(kept / "unit"),
             "mode": "0600", "secret": True}  # fmt: skip
    result = fs.apply([entry], diff=True)
    assert result["files"]["unit"]["changed"] and result["diff"] == []
    assert (kept / "unit").read_text() == "[Unit]\nlive\n" and _mode(kept / "unit") == 0o600
    assert not fs.apply([entry])["changed"]
    svc = tmp_path / "svc"
    svc.mkdir()
    os.chown(svc, 65534, 65534)
    os.symlink("/etc/shadow", svc / "unit")
    os.lchown(svc / "unit", 65534, 65534)
    with pytest.raises(ServicePathError, match=r"svc/unit is a symbolic link"):
        fs.apply([dict(entry, src=str(svc / "unit"))])
    assert (kept / "unit").read_text() == "[Unit]\nlive\n"


def test_absent_removes_a_link_without_following_and_refuses_a_directory(tmp_path, etc):
    target = tmp_path / "target"
    target.write_text("keep\n")
    os.symlink(target, etc / "rule.nft")
    entries = [{"name": "nft", "state": "absent", "path": str(etc / "rule.nft")}]
    assert fs.apply(entries, check=True)["files"]["nft"]["changed"]
    assert os.path.islink(etc / "rule.nft")
    assert fs.apply(entries)["files"]["nft"]["changed"]
    assert not os.path.lexists(etc / "rule.nft") and target.read_text() == "keep\n"
    assert not fs.apply(entries)["changed"]
    (etc / "rule.nft").mkdir()
    with pytest.raises(ServicePathError, match="is a directory"):
        fs.apply(entries)


def test_look_reports_what_a_looped_stat_did(tmp_path, etc):
    os.symlink(etc, tmp_path / "link")
    (etc / "f").write_text("x")
    (etc / "f").chmod(0o664)
    found = fs.look([str(etc), str(tmp_path / "link"), str(etc / "f"), str(tmp_path / "none")])
    assert [r["item"] for r in found] == [str(etc), str(tmp_path / "link"), str(etc / "f"),
                                          str(tmp_path / "none")]  # fmt: skip
    d, link, f, none = (r["stat"] for r in found)
    assert d["isdir"] and not d["islnk"] and d["uid"] == 0 and d["pw_name"] == "root"
    assert d["mode"] == "0755" and not d["wgrp"] and not d["woth"]
    assert link["islnk"] and not link["isdir"]
    assert f["isreg"] and f["wgrp"] and not f["woth"] and f["mode"] == "0664"
    assert none == {"exists": False}


ROLES = os.path.join(os.path.dirname(__file__), "..", "roles")


def _task_text(path, name):
    import yaml

    with open(os.path.join(ROLES, path)) as handle:
        tasks = yaml.safe_load(handle)

    def walk(items):
        for task in items:
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key, []))

    return yaml.safe_dump(next(t for t in walk(tasks) if t.get("name") == name))


@pytest.mark.parametrize(
    "path, name, reads",
    [
        # Every file whose change restarts the server through the gate.
        (
            "sglang_server/tasks/configure.yml",
            "Decide whether the config on the host has passed the gate, and publish it",
            [
                "_sglang_server_files.files.unit.changed",
                "_sglang_server_files.files.env.changed",
                "_sglang_server_files.files.devices_unit.changed",
                "_sglang_server_files.files.launcher.changed",
                "_sglang_server_files.files.devices_script.changed",
                "gpuhost.gpu.kept_drift",
            ],
        ),
        # The port rule reloads on its own files' change; daemon-reload on its unit's.
        (
            "sglang_server/tasks/port_rule.yml",
            "Load the port rule",
            [
                "_sglang_server_files.files.nft.changed",
                "daemon_reload: '{{ _sglang_server_files.files.nft_unit.changed }}'",
            ],
        ),
    ],
)
def test_each_file_change_drives_what_its_template_task_did(path, name, reads):
    text = _task_text(path, name)
    for read in reads:
        assert read in text, f"{path}: {name} no longer reads {read}"


def _kept(etc, kept):
    """The live unit written, and its known-good copy compared only (check_only)."""
    return [
        {"name": "unit", "path": str(etc / "x.service"), "mode": "0644", "content": "[Unit]\n"},
        {"name": "kept", "path": str(kept), "mode": "0600", "src": str(etc / "x.service"),
         "check_only": True},
    ]  # fmt: skip


def test_a_check_only_entry_is_compared_in_the_same_call_and_never_written(tmp_path, etc):
    kept = tmp_path / "kept"
    # Missing: would be created; the live file is written first and the copy read after it.
    first = fs.apply(_kept(etc, kept))
    assert first["changed"] and first["files"]["unit"]["changed"]
    assert first["files"]["kept"]["changed"] and first["files"]["kept"]["created"] == [str(kept)]
    assert not kept.exists()
    kept.write_text("[Unit]\n")
    kept.chmod(0o600)
    same = fs.apply(_kept(etc, kept))
    assert not same["changed"] and not same["files"]["kept"]["changed"]
    # A hand-edited copy, and a changed mode, are found; the copy is left as it is.
    kept.write_text("[Unit]\n# edited\n")
    edited = fs.apply(_kept(etc, kept))
    assert edited["files"]["kept"]["fixed"] == ["content"] and not edited["changed"]
    assert kept.read_text() == "[Unit]\n# edited\n"
    kept.write_text("[Unit]\n")
    kept.chmod(0o644)
    moded = fs.apply(_kept(etc, kept))
    assert moded["files"]["kept"]["changed"] and moded["files"]["kept"]["fixed"] == ["mode"]
    assert _mode(kept) == 0o644


def test_a_check_only_refusal_is_reported_not_raised(tmp_path, etc):
    svc = tmp_path / "svc"
    svc.mkdir()
    os.chown(svc, 65534, 65534)
    result = fs.apply(_kept(etc, svc / "kept"))
    assert result["files"]["kept"]["changed"]
    assert "no other account can change" in result["files"]["kept"]["refused"]
    assert result["files"]["unit"]["changed"] and not (svc / "kept").exists()


def test_look_returns_a_links_target(tmp_path, etc):
    os.symlink("/opt/venv-1", tmp_path / "venv")
    link, real = (r["stat"] for r in fs.look([str(tmp_path / "venv"), str(etc)]))
    assert link["lnk_target"] == "/opt/venv-1" and "lnk_target" not in real


def test_read_texts_reads_small_files_and_refuses_what_root_must_not_follow(tmp_path, etc):
    (etc / "nccl.env").write_text("NCCL_P2P_LEVEL=NVL\n")
    texts = fs.read_texts([str(etc / "nccl.env"), str(etc / "none")])
    assert texts == {str(etc / "nccl.env"): "NCCL_P2P_LEVEL=NVL\n"}
    svc = tmp_path / "svc"
    svc.mkdir()
    os.chown(svc, 65534, 65534)
    os.symlink(etc / "nccl.env", svc / "nccl.env")
    os.lchown(svc / "nccl.env", 65534, 65534)
    with pytest.raises(ServicePathError, match="symbolic link"):
        fs.read_texts([str(svc / "nccl.env")])
    (etc / "big").write_bytes(b"x" * (fs.TEXT_MAX + 1))
    with pytest.raises(ServicePathError, match="more than"):
        fs.read_texts([str(etc / "big")])
