"""Detection of an interrupted dpkg (plugins/module_utils/gpuhost_dpkg.py, module dpkg_state).

The status lines are dpkg-query's own output; the last test builds a real dpkg database
(status file + journal) and reads it with the real dpkg-query, as the module does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_dpkg as dp

ROOT = Path(__file__).resolve().parents[1]

CLEAN = (
    "apt\t2.6.1\tinstall ok installed\n"
    "nvidia-open\t580.105.08-1\thold ok installed\n"
    "old-tool\t1.0\tdeinstall ok config-files\n"
)


def test_clean_database():
    found = dp.assess(CLEAN, [])
    assert found["interrupted"] is False
    assert found["action"] == "none"
    assert found["summary"] == "dpkg's database is consistent"


@pytest.mark.parametrize("state", dp.CONFIGURABLE)
def test_unconfigured_packages_are_configured(state):
    found = dp.assess(CLEAN + f"nvidia-persistenced\t580.105.08-1\thold ok {state}\n", [])
    assert found["action"] == "configure"
    assert [p["name"] for p in found["configurable"]] == ["nvidia-persistenced"]
    assert f"nvidia-persistenced ({state})" in found["summary"]


def test_pending_journal_alone_is_an_interruption():
    # dpkg killed after writing status changes: apt's "dpkg was interrupted".
    found = dp.assess(CLEAN, ["0000", "0001", "tmp.i"])
    assert found["interrupted"] is True
    assert found["action"] == "configure"
    assert found["journal"] == ["0000", "0001"]
    assert "2 status update(s) in its journal" in found["summary"]


def test_half_installed_needs_a_person():
    found = dp.assess(
        CLEAN
        + "nvidia-kernel-open-dkms\t580.105.08-1\tinstall reinstreq half-installed\n"
        + "nvidia-driver-cuda\t580.105.08-1\tinstall ok unpacked\n",
        ["0003"],
    )
    assert found["action"] == "manual"
    # What configure can finish is still listed, so the role runs it first.
    assert found["configure"] is True
    assert [p["name"] for p in found["manual"]] == ["nvidia-kernel-open-dkms"]
    fix = dp.manual_fix(found["manual"])
    assert "apt-get install --reinstall nvidia-kernel-open-dkms" in fix


def test_reinstreq_flag_alone_is_manual():
    found = dp.assess("foo\t1\tinstall reinstreq installed\n", [])
    assert found["action"] == "manual"


def test_malformed_lines_ignored():
    assert dp.parse_status("garbage\nx\t1\n\t\t\n") == []
    assert dp.journal_entries(None) == []


def test_missing_lists_what_apt_would_still_install():
    status = CLEAN + (
        "libgomp1:amd64\t12.2.0-14\tinstall ok installed\n"
        "zlib1g:i386\t1:1.2.13\tinstall ok installed\n"
        "half\t1\tinstall ok unpacked\n"
        "leaving\t1\tdeinstall ok installed\n"
    )
    wanted = ["apt", "nvidia-open", "old-tool", "libgomp1", "zlib1g", "half", "leaving", "curl=8.0"]
    # Installed (or held) as written, or as name:<native arch>; removed, other-arch, unfinished,
    # marked for removal and versioned ones are missing, in the order given (apt decides).
    expected = ["old-tool", "zlib1g", "half", "leaving", "curl=8.0"]
    assert dp.missing(status, wanted, "amd64") == expected
    # Without the native architecture a qualified entry does not count.
    assert dp.missing(status, ["libgomp1"], "") == ["libgomp1"]
    assert dp.missing(status, ["libgomp1:amd64"], "") == []
    assert dp.missing(status, [], "amd64") == []
    assert dp.missing(status, ["absent"], "amd64") == ["absent"]


def test_modules_read_through_the_one_reader():
    # dpkg_state and base_state both read dpkg through gpuhost_dpkg.read.
    for name in ("dpkg_state", "base_state"):
        text = (ROOT / f"plugins/modules/{name}.py").read_text()
        assert "gpuhost_dpkg import read" in text, name


def _runner(status_text, rc=0, arch="amd64"):
    """A test double of AnsibleModule.run_command: dpkg-query and dpkg's answers."""
    calls = []

    def run(argv, check_rc=False, environ_update=None):
        calls.append(argv)
        if argv[0] == "dpkg-query":
            assert argv[-1] == f"-f={dp.DPKG_QUERY_FORMAT}"
            return rc, status_text, "no such admindir" if rc else ""
        return 0, arch + "\n", ""

    return run, calls


def test_read_assesses_and_lists_missing(tmp_path):
    (tmp_path / "updates").mkdir()
    (tmp_path / "updates" / "0001").write_text("")
    run, calls = _runner(CLEAN + "curl:amd64\t8\tinstall ok installed\n")
    found = dp.read(run, str(tmp_path), ["curl", "acl"])
    assert found["journal"] == ["0001"] and found["action"] == "configure"
    assert found["missing"] == ["acl"] and found["fix"] == ""
    assert [c[0] for c in calls] == ["dpkg-query", "dpkg"]
    run, calls = _runner(CLEAN)
    assert dp.read(run, str(tmp_path / "none"), [])["interrupted"] is False
    assert [c[0] for c in calls] == ["dpkg-query"]  # no packages: no architecture asked


def test_read_fails_naming_the_admindir():
    run, _ = _runner("", rc=2)
    with pytest.raises(RuntimeError, match="could not read /nowhere: no such admindir"):
        dp.read(run, "/nowhere", [])


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (Debian)")
def test_real_dpkg_query_on_a_broken_database(tmp_path):
    admindir = tmp_path / "dpkg"
    (admindir / "updates").mkdir(parents=True)
    (admindir / "info").mkdir()
    entry = (
        "Package: gpuhost-probe\nStatus: install ok half-configured\nPriority: optional\n"
        "Maintainer: t <t@t.invalid>\nArchitecture: all\nVersion: 1.0-1\nDescription: t\n"
    )
    (admindir / "status").write_text(entry + "\n")
    (admindir / "updates" / "0000").write_text(entry)
    out = subprocess.run(
        ["dpkg-query", f"--admindir={admindir}", "-W", f"-f={dp.DPKG_QUERY_FORMAT}"],
        capture_output=True,
        text=True,
        check=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    ).stdout
    found = dp.assess(out, [p.name for p in (admindir / "updates").iterdir()])
    assert found["action"] == "configure"
    assert found["configurable"][0]["name"] == "gpuhost-probe"
    assert found["journal"] == ["0000"]
