"""gpuhost.gpu.service_path (issue 28 item 1): root never follows, chowns or writes what the
service account planted in a directory it can write.

Real links, hard links and FIFOs in a tmp directory owned by uid 65534 (nobody), standing in
for the service account and its gpuhost_cache_dir; the "target" stands in for
/etc/systemd/system (root's, 0755). Each refusal test checks the message names the path and
what is there, and that the target's owner, mode and content are as they were.
"""

from __future__ import annotations

import os
import pwd
import re
import stat

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_service_path as sp

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

SVC = pwd.getpwuid(65534).pw_name if os.geteuid() == 0 else "nobody"
GRP = "nogroup"


@pytest.fixture
def host(tmp_path):
    """tmp_path/svc: the service account's cache dir (65534, 0750); tmp_path/etc-systemd: a
    root 0755 directory with a root 0644 file in it, what a planted link points at."""
    svc = tmp_path / "svc"
    svc.mkdir()
    os.chown(svc, 65534, 65534)
    svc.chmod(0o750)
    target = tmp_path / "etc-systemd"
    target.mkdir()
    target.chmod(0o755)
    (target / "unit.service").write_text("[Unit]\n")
    (target / "unit.service").chmod(0o644)
    return svc, target


def _plant_link(link, to):
    os.symlink(to, link)
    os.lchown(link, 65534, 65534)


def _state(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_nlink


def _assert_untouched(target, before):
    assert _state(target) == before[0]
    assert _state(target / "unit.service") == before[1]
    assert (target / "unit.service").read_text() == "[Unit]\n"
    assert sorted(os.listdir(target)) == ["unit.service"]


def _before(target):
    return _state(target), _state(target / "unit.service")


def test_creates_the_directory_for_the_account_and_is_idempotent(host):
    svc, _ = host
    path = svc / "flashinfer"
    first = sp.ensure_directory(str(path), SVC, GRP, 0o750)
    assert first == {"changed": True, "path": str(path), "created": [str(path)], "fixed": []}
    assert _state(path)[:3] == (65534, 65534, 0o750)
    second = sp.ensure_directory(str(path), SVC, GRP, 0o750)
    assert second["changed"] is False
    path.chmod(0o777)
    third = sp.ensure_directory(str(path), SVC, GRP, 0o750)
    assert third["changed"] is True and third["fixed"] == ["mode"]
    assert _state(path)[2] == 0o750


def test_missing_parents_are_roots(host):
    svc, _ = host
    path = svc / "a" / "b"
    got = sp.ensure_directory(str(path), SVC, GRP, 0o750)
    assert got["created"] == [str(svc / "a"), str(path)]
    assert _state(svc / "a")[:3] == (0, 0, 0o755)
    assert _state(path)[:3] == (65534, 65534, 0o750)


def test_refuses_a_planted_link_to_a_root_directory(host):
    svc, target = host
    before = _before(target)
    _plant_link(svc / "flashinfer", str(target))
    with pytest.raises(sp.ServicePathError) as err:
        sp.ensure_directory(str(svc / "flashinfer"), SVC, GRP, 0o750)
    msg = str(err.value)
    assert f"{svc}/flashinfer is a symbolic link to {target} (owned by {SVC})" in msg
    assert f"whoever can write {svc} (owned by {SVC}, mode 0750)" in msg
    assert f"rm {svc}/flashinfer" in msg
    _assert_untouched(target, before)
    # Check mode refuses too: a plan that would act on it is wrong.
    with pytest.raises(sp.ServicePathError):
        sp.ensure_directory(str(svc / "flashinfer"), SVC, GRP, 0o750, check=True)


def test_refuses_a_planted_link_on_the_way(host):
    svc, target = host
    before = _before(target)
    _plant_link(svc / "huggingface", str(target))
    for call in (
        lambda: sp.ensure_directory(str(svc / "huggingface" / "gpuhost-complete"), SVC, GRP, 0o750),
        lambda: sp.write_file(str(svc / "huggingface" / "unit.service"), b"x", SVC, GRP, 0o640),
    ):
        with pytest.raises(sp.ServicePathError) as err:
            call()
        assert f"{svc}/huggingface is a symbolic link to {target}" in str(err.value)
        assert "not a directory" in str(err.value)
    _assert_untouched(target, before)


def test_refuses_a_link_root_owns_in_the_accounts_directory(host):
    """Only the directory decides: a root-owned link in a directory the account can write
    may have been renamed in by the account."""
    svc, target = host
    before = _before(target)
    os.symlink(str(target), svc / "triton")
    with pytest.raises(sp.ServicePathError, match="is a symbolic link to"):
        sp.ensure_directory(str(svc / "triton"), SVC, GRP, 0o750)
    _assert_untouched(target, before)


def test_refuses_a_fifo_without_blocking(host):
    svc, _ = host
    os.mkfifo(svc / "tvm-ffi")
    os.chown(svc / "tvm-ffi", 65534, 65534)
    with pytest.raises(
        sp.ServicePathError, match=re.escape(f"{svc}/tvm-ffi is a FIFO, not a directory")
    ):
        sp.ensure_directory(str(svc / "tvm-ffi"), SVC, GRP, 0o750)
    os.mkfifo(svc / "marker.json")
    with pytest.raises(sp.ServicePathError, match=r"marker\.json is a FIFO, not a regular file"):
        sp.write_file(str(svc / "marker.json"), b"{}\n", SVC, GRP, 0o640)
    assert stat.S_ISFIFO(os.lstat(svc / "marker.json").st_mode)


def test_refuses_a_hard_link_and_a_symlink_where_the_marker_goes(host):
    svc, target = host
    os.link(target / "unit.service", svc / "marker.json")
    with pytest.raises(sp.ServicePathError) as err:
        sp.write_file(str(svc / "marker.json"), b"{}\n", SVC, GRP, 0o640)
    assert f"{svc}/marker.json is a hard link (2 links to one file), not a regular file" in str(
        err.value
    )
    os.unlink(svc / "marker.json")
    before = _before(target)
    _plant_link(svc / "marker.json", str(target / "unit.service"))
    with pytest.raises(sp.ServicePathError, match=r"marker\.json is a symbolic link to"):
        sp.write_file(str(svc / "marker.json"), b"{}\n", SVC, GRP, 0o640)
    _assert_untouched(target, before)


def test_writes_the_file_and_is_idempotent(host):
    svc, _ = host
    sp.ensure_directory(str(svc / "done"), SVC, GRP, 0o750)
    path = svc / "done" / "m.json"
    first = sp.write_file(str(path), b'{"a": 1}\n', SVC, GRP, 0o640)
    assert first["changed"] is True and first["created"] == [str(path)]
    assert path.read_bytes() == b'{"a": 1}\n'
    assert _state(path) == (65534, 65534, 0o640, 1)
    assert sp.write_file(str(path), b'{"a": 1}\n', SVC, GRP, 0o640)["changed"] is False
    got = sp.write_file(str(path), b'{"a": 2}\n', SVC, GRP, 0o640)
    assert got["changed"] is True and got["fixed"] == ["content"]
    assert path.read_bytes() == b'{"a": 2}\n'
    assert [n for n in os.listdir(path.parent) if n.startswith(".")] == []


def test_check_mode_on_a_blank_host_reports_and_touches_nothing(tmp_path):
    path = tmp_path / "var" / "cache" / "gpuhost" / "flashinfer"
    got = sp.ensure_directory(str(path), "no-such-user-yet", "no-such-group-yet", 0o750, check=True)
    assert got["changed"] is True
    assert got["created"] == [
        str(tmp_path / "var"),
        str(tmp_path / "var" / "cache"),
        str(tmp_path / "var" / "cache" / "gpuhost"),
        str(path),
    ]
    marker = tmp_path / "var" / "m.json"
    got = sp.write_file(str(marker), b"{}", "no-such-user-yet", "x", 0o640, check=True)
    assert got["changed"] is True and got["created"] == [str(tmp_path / "var"), str(marker)]
    assert os.listdir(tmp_path) == []
    with pytest.raises(sp.ServicePathError, match="owner: no user 'no-such-user-yet'"):
        sp.ensure_directory(str(path), "no-such-user-yet", GRP, 0o750)


def test_check_mode_reports_a_wrong_mode_without_fixing_it(host):
    svc, _ = host
    sp.ensure_directory(str(svc / "x"), SVC, GRP, 0o750)
    (svc / "x").chmod(0o700)
    got = sp.ensure_directory(str(svc / "x"), SVC, GRP, 0o750, check=True)
    assert got["changed"] is True and got["fixed"] == ["mode"]
    assert _state(svc / "x")[2] == 0o700


def test_follows_a_link_only_root_could_make(tmp_path):
    """An admin's /var/cache/gpuhost -> /data/gpuhost: a root link in a root 0755 directory."""
    trusted = tmp_path / "var-cache"
    trusted.mkdir()
    trusted.chmod(0o755)
    real = tmp_path / "data"
    real.mkdir()
    real.chmod(0o755)
    os.symlink("../data", trusted / "gpuhost")
    got = sp.ensure_directory(str(trusted / "gpuhost" / "flashinfer"), SVC, GRP, 0o750)
    assert got["path"] == str(real / "flashinfer")
    assert _state(real / "flashinfer")[:3] == (65534, 65534, 0o750)
    # The same link, made by the account: refused.
    os.lchown(trusted / "gpuhost", 65534, 65534)
    with pytest.raises(sp.ServicePathError, match=r"is a symbolic link to \.\./data"):
        sp.ensure_directory(str(trusted / "gpuhost" / "flashinfer"), SVC, GRP, 0o750)


def test_a_relative_path_is_refused():
    with pytest.raises(sp.ServicePathError, match="path: 'var/cache' is not absolute"):
        sp.ensure_directory("var/cache", SVC, GRP, 0o750)


def test_the_probe_looks_at_the_link_not_its_target(host):
    """python_env_probe's dirs_wrong: a planted link whose target has the wanted owner and
    mode is still wrong, so the role runs its service_path task, which refuses it."""
    from ansible_collections.gpuhost.gpu.plugins.modules import python_env_probe

    svc, _ = host
    good = svc / "real"
    sp.ensure_directory(str(good), SVC, GRP, 0o750)
    assert python_env_probe._dir_ok(str(good), SVC, GRP, "0750") is True
    _plant_link(svc / "flashinfer", str(good))
    assert python_env_probe._dir_ok(str(svc / "flashinfer"), SVC, GRP, "0750") is False
