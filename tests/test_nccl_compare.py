"""Role nccl's no-op in one call (issue 29 item 6): the read as the service account
(gpuhost.gpu.nccl_torch) also compares the role's files as file_set would
(gpuhost_file_check.changes_and_texts, on file_set's check mode), and tasks/configure.yml
writes only where that, or the text it renders, says something would change.

Real files under tmp_path; a directory owned by uid 65534 (nobody) stands in for one the
service account could change. Each test checks that the comparison wrote nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from unittest import mock

import jinja2
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_file_check as fc
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_file_set as fs
from ansible_collections.gpuhost.gpu.plugins.modules import nccl_torch as module

ROOT = Path(__file__).resolve().parents[1]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

SWEEP = "print('sweep')\n"
ENV = "# header\nNCCL_P2P_LEVEL=NVL\n"


def _entries(base):
    """The role's three entries (vars/main.yml): libexec, the sweep, nccl.env as `current`."""
    return [
        {"name": "libexec", "path": str(base / "libexec"), "state": "directory", "mode": "0755"},
        {"name": "sweep", "path": str(base / "libexec" / "sweep.py"), "mode": "0755",
         "content": SWEEP},
        {"name": "nccl_env", "path": str(base / "etc" / "nccl.env"), "mode": "0640",
         "current": True},
    ]  # fmt: skip


@pytest.fixture
def base(tmp_path):
    """What file_set wrote on an earlier run."""
    for entry in _entries(tmp_path)[:2]:
        fs.apply([entry])
    (tmp_path / "etc").mkdir(mode=0o755)
    fs.apply([{**_entries(tmp_path)[2], "current": False, "content": ENV}])
    return tmp_path


@root_only
def test_a_converged_set_is_unchanged_and_its_current_text_comes_back(base):
    got = fc.changes_and_texts(_entries(base))
    assert got == {"changes": [], "texts": {"nccl_env": ENV}}


@root_only
def test_a_hand_edited_sweep_is_a_change_and_nothing_is_written(base):
    (base / "libexec" / "sweep.py").write_text("print('edited')\n")
    got = fc.changes_and_texts(_entries(base))
    assert got["changes"] == [f"sweep: {base}/libexec/sweep.py fixes content"]
    assert (base / "libexec" / "sweep.py").read_text() == "print('edited')\n"


@root_only
def test_a_current_entry_is_judged_on_its_mode_not_its_text(base):
    env = base / "etc" / "nccl.env"
    env.write_text("NCCL_P2P_LEVEL=SYS\n")
    edited = fc.changes_and_texts(_entries(base))
    # Its text is the caller's to compare (it renders what the file should hold).
    assert edited == {"changes": [], "texts": {"nccl_env": "NCCL_P2P_LEVEL=SYS\n"}}
    env.chmod(0o644)
    moded = fc.changes_and_texts(_entries(base))
    assert moded["changes"] == [f"nccl_env: {env} fixes mode"]
    assert os.stat(env).st_mode & 0o777 == 0o644


@root_only
def test_what_stops_the_comparison_counts_as_a_change(base):
    env = base / "etc" / "nccl.env"
    env.unlink()
    missing = fc.changes_and_texts(_entries(base))
    assert "does not exist" in missing["changes"][0] and not env.exists()
    # A root file in a directory another account can change: file_set refuses to write it.
    os.chown(base / "libexec", 65534, 65534)
    assert fc.changes_and_texts(_entries(base)[:1])["changes"] == [
        f"libexec: {base}/libexec fixes owner, group"
    ]
    refused = fc.changes_and_texts(_entries(base)[1:2])
    assert refused["changes"][0].startswith("refused: ")
    assert "no other account can change" in refused["changes"][0]
    # A file the asking account cannot read.
    os.chown(base / "libexec", 0, 0)
    with mock.patch.object(fc, "read_file", side_effect=PermissionError(13, "denied")):
        unreadable = fc.changes_and_texts(_entries(base)[2:])
    assert unreadable == {"changes": ["unread: [Errno 13] denied"], "texts": {}}


@root_only
def test_the_module_compares_in_the_same_call_as_the_read(base):
    out = io.StringIO()
    args = {"python": str(base / "none" / "python"), "compare": _entries(base)}
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    got = json.loads(out.getvalue())
    assert not got["changed"] and got["exists"] is False
    assert got["compared"] == {"changes": [], "texts": {"nccl_env": ENV}}


def _configure():
    task = yaml.safe_load((ROOT / "roles/nccl/tasks/configure.yml").read_text())[0]
    return task, jinja2.Environment().compile_expression(task["when"])


@pytest.mark.parametrize(
    ("torch", "text", "writes"),
    [
        # No read made (under 2 GPUs, a check run without the account): file_set decides.
        ({"skipped": True}, ENV, True),
        ({"compared": {"changes": ["sweep: x fixes mode"], "texts": {"nccl_env": ENV}}}, ENV, True),
        # A hand edit, or another torch's NCCL version rendered into the header.
        ({"compared": {"changes": [], "texts": {"nccl_env": ENV}}}, ENV + "# x\n", True),
        ({"compared": {"changes": [], "texts": {}}}, ENV, True),
        ({"compared": {"changes": [], "texts": {"nccl_env": ENV}}}, ENV, False),
    ],
)
def test_configure_writes_unless_the_read_found_everything_right(torch, text, writes):
    task, when = _configure()
    assert when(_nccl_torch=torch, _nccl_env_text=text) is writes
    # What it writes is what was compared: the same entries, nccl.env with the rendered text.
    assert task["gpuhost.gpu.file_set"]["files"] == (
        "{{ _nccl_sweep_files + [_nccl_env_entry | combine({'content': _nccl_env_text})] }}"
    )
    tasks = yaml.safe_load((ROOT / "roles/nccl/tasks/preflight.yml").read_text())
    read = next(t for t in tasks if "gpuhost.gpu.nccl_torch" in t)
    assert read["gpuhost.gpu.nccl_torch"]["compare"] == (
        "{{ _nccl_sweep_files + [_nccl_env_entry | combine({'current': true})] }}"
    )


@pytest.mark.parametrize(
    ("torch", "installs"),
    [
        ({"skipped": True}, True),
        ({"compared": {"changes": ["sweep: x fixes content"], "texts": {}}}, True),
        ({"compared": {"changes": [], "texts": {"nccl_env": ENV}}}, False),
    ],
)
def test_the_sweep_is_installed_before_a_sweep_only_where_the_read_found_a_change(torch, installs):
    task = yaml.safe_load((ROOT / "roles/nccl/tasks/measure.yml").read_text())[0]
    assert task["gpuhost.gpu.file_set"]["files"] == "{{ _nccl_sweep_files }}"
    when = jinja2.Environment().compile_expression(task["when"])
    assert when(_nccl_torch=torch) is installs
