"""Role nccl's one read of the server's Python (plugins/module_utils/gpuhost_nccl_torch.py):
whether it exists and which NCCL its torch ships, in one call (issue 29 item 6)."""

from __future__ import annotations

import os

from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_nccl_torch as nt


class FakeRunner:
    """Test double of module.run_command: records the argv, answers a canned result."""

    def __init__(self, rc=0, out="", err=""):
        self.calls = []
        self.answer = (rc, out, err)

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answer


def _python(tmp_path):
    path = tmp_path / "venv" / "bin" / "python"
    path.parent.mkdir(parents=True)
    path.write_text("")
    return str(path)


def test_a_missing_python_is_not_run(tmp_path):
    run = FakeRunner(out="2.21.5\n")
    got = nt.look(str(tmp_path / "none" / "python"), True, run)
    assert got == {"exists": False, "version": "", "exit_status": None, "stderr": ""}
    assert run.calls == []


def test_the_version_torch_prints_is_read_once(tmp_path):
    python = _python(tmp_path)
    run = FakeRunner(out="some warning\n2.27.3\n")
    got = nt.look(python, True, run)
    assert got["exists"] and got["version"] == "2.27.3" and got["exit_status"] == 0
    assert run.calls == [[python, "-c", nt.NCCL_VERSION_SCRIPT]]


def test_a_torch_that_cannot_say_gives_no_version(tmp_path):
    python = _python(tmp_path)
    run = FakeRunner(rc=1, out="", err="ModuleNotFoundError: No module named 'torch'\n")
    got = nt.look(python, True, run)
    assert got["exists"] and got["version"] == "" and got["exit_status"] == 1
    assert "No module named 'torch'" in got["stderr"]
    # rc 0 but no version printed (a CPU build printing something else) is no version either.
    assert nt.look(python, True, FakeRunner(out="n/a\n"))["version"] == ""


def test_a_pinned_version_skips_the_run_but_not_the_look(tmp_path):
    python = _python(tmp_path)
    run = FakeRunner(out="2.27.3\n")
    got = nt.look(python, False, run)
    assert got["exists"] and got["version"] == "" and run.calls == []


def test_a_link_counts_as_there_as_the_stat_it_replaces_said(tmp_path):
    link = tmp_path / "python"
    os.symlink(tmp_path / "gone", link)
    assert nt.look(str(link), False, FakeRunner())["exists"] is True
