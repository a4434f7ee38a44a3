"""Role base's one read (module base_state, issue 29 item 6): the account comparison
(plugins/module_utils/gpuhost_accounts.py), file_set's check mode as a read
(plugins/module_utils/gpuhost_file_check.py), and the role's tasks calling apt, group, user and
file_set only for what that read names, with the same values the read compared.

The account cases are NSS entries as getent returns them (fixtures); the file cases are real
directories in tmp_path (root: chown to another uid)."""

from __future__ import annotations

import os
import stat

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_accounts as acc
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_file_check import files_changes
from gpuhost_fakes import ROOT

WANTED = {
    "group": "gpuhost",
    "user": "gpuhost",
    "groups": ["video"],
    "home": "/var/lib/gpuhost/service",
    "shell": "/usr/sbin/nologin",
}


def _found(**change):
    found = {
        "group": {"gid": 997, "members": []},
        "user": {"uid": 997, "gid": 997, "home": WANTED["home"], "shell": WANTED["shell"]},
        "groups": {"video": {"gid": 44, "members": ["gpuhost"]}},
    }
    for key, value in change.items():
        if key in ("home", "shell", "gid"):
            found["user"][key] = value
        else:
            found[key] = value
    return found


def test_a_converged_account_needs_no_module_call():
    assert acc.changes(_found(), WANTED) == {"group": [], "user": []}


@pytest.mark.parametrize(
    ("change", "group", "user"),
    [
        ({"group": None}, ["group gpuhost does not exist"], ["primary group is gid 997"]),
        ({"user": None}, [], ["user gpuhost does not exist"]),
        ({"gid": 100}, [], ["primary group is gid 100, not gpuhost"]),
        ({"groups": {"video": {"gid": 44, "members": []}}}, [], ["not a member of group video"]),
        ({"groups": {"video": None}}, [], ["group video does not exist"]),
        ({"shell": "/bin/bash"}, [], ["shell is /bin/bash, not /usr/sbin/nologin"]),
        ({"home": "/home/gpuhost"}, [], ["home is /home/gpuhost, not /var/lib/gpuhost/service"]),
    ],
)
def test_each_difference_the_modules_would_fix_is_named(change, group, user):
    found = acc.changes(_found(**change), WANTED)
    assert found["group"] == group
    assert len(found["user"]) == len(user)
    for got, part in zip(found["user"], user, strict=True):
        assert part in got


def test_read_answers_as_nss_does():
    found = acc.read("root", "root", ["root", "gpuhost-no-such-group"])
    assert found["group"]["gid"] == 0 and found["user"]["uid"] == 0
    assert found["user"]["gid"] == 0 and found["user"]["home"] == "/root"
    assert found["groups"]["gpuhost-no-such-group"] is None
    assert acc.read("gpuhost-no-such-group", "gpuhost-no-such-user", [])["user"] is None


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _dir(path, mode):
    return {"name": "d", "path": str(path), "state": "directory", "mode": mode}


@root_only
def test_files_changes_is_file_sets_own_comparison(tmp_path):
    tmp_path.chmod(0o755)
    there = tmp_path / "d"
    there.mkdir(mode=0o750)
    there.chmod(0o750)
    assert files_changes([_dir(there, "0750")]) == []
    there.chmod(0o755)
    assert files_changes([_dir(there, "0750")]) == [f"d: {there} fixes mode"]
    assert stat.S_IMODE(there.stat().st_mode) == 0o755  # a read: nothing changed
    os.chown(there, 65534, 0)
    assert files_changes([_dir(there, "0755")]) == [f"d: {there} fixes owner"]
    missing = tmp_path / "none"
    assert files_changes([_dir(missing, "0750")]) == [f"d: {missing} created"]
    assert not missing.exists()
    token = tmp_path / "token"
    token.write_text("x")
    assert files_changes([{"name": "t", "path": str(token), "state": "absent"}]) == [
        f"t: {token} fixes removed"
    ]
    assert token.exists()


@root_only
def test_files_changes_reports_the_refusal_file_set_would_fail_with(tmp_path):
    tmp_path.chmod(0o755)
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    os.lchown(tmp_path / "link", 65534, 65534)
    lines = files_changes([_dir(tmp_path / "link", "0750")])
    assert len(lines) == 1 and lines[0].startswith("refused: ") and "link" in lines[0]


def _load(path):
    return yaml.safe_load((ROOT / path).read_text())


def test_base_writes_only_what_its_read_names_with_the_values_it_compared():
    main = _load("roles/base/tasks/main.yml")
    read = main[0]["gpuhost.gpu.base_state"]
    assert read["user"] == "{{ _base_account }}" and read["files"] == "{{ _base_dirs }}"
    assert read["packages"] == "{{ base_packages + base_extra_packages }}"
    assert main[0]["register"] == "_base_dpkg"
    converge = next(t for t in main if t.get("ansible.builtin.include_tasks") == "converge.yml")
    for key in ("missing", "group_changes", "user_changes", "files_changes"):
        assert f"_base_dpkg.{key}" in converge["when"], key
    tasks = {
        **{next(k for k in t if "." in k): t for t in _load("roles/base/tasks/configure.yml")},
        **{next(k for k in t if "." in k): t for t in _load("roles/base/tasks/install.yml")},
    }
    assert tasks["ansible.builtin.group"]["when"] == "_base_dpkg.group_changes | length > 0"
    user = tasks["ansible.builtin.user"]
    assert user["when"] == "_base_dpkg.user_changes | length > 0"
    for key in ("name", "groups", "shell", "home"):
        assert user["ansible.builtin.user"][key] == f"{{{{ _base_account.{key} }}}}"
    assert user["ansible.builtin.user"]["group"] == "{{ gpuhost_service_group }}"
    files = tasks["gpuhost.gpu.file_set"]
    assert files["gpuhost.gpu.file_set"]["files"] == "{{ _base_dirs }}"
    assert files["when"] == "_base_dpkg.files_changes | length > 0"
    assert "_base_dpkg.missing | length > 0" in tasks["ansible.builtin.apt"]["when"]
    account = _load("roles/base/vars/main.yml")["_base_account"]
    assert set(account) == {"name", "groups", "shell", "home"}
