"""The keys file's no-op path (issue 29 item 6): role sglang_server's one read (module
path_stats, `keys_file`) answers whether module sglang_keys would change the keys file, by that
module's own comparison (plugins/module_utils/gpuhost_sglang_keys.py `kept`), from the sha256
of the client key; tasks/keys.yml calls sglang_keys only when the answer is no. Both modules
run in-process here on real files: for every state of the file (missing, as written, a hand
edit of either key, a removed admin key, a wrong mode, a link) the read's answer is the
module's own, and neither result holds a key or its digest."""

from __future__ import annotations

import contextlib
import io
import json
import os
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_sglang_keys as keys
from ansible_collections.gpuhost.gpu.plugins.modules import path_stats, sglang_keys

CLIENT = "client-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdefghijklmnopqrstuvw"


def _run(module, args):
    """A module's main() in-process: (its JSON result, its output as text)."""
    out = io.StringIO()
    with (
        patch_module_args(args),
        mock.patch.object(basic.AnsibleModule, "log", lambda self, msg, **kw: None),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit),
    ):
        module.main()
    return json.loads(out.getvalue()), out.getvalue()


def _read(path, api_key):
    asked = {"path": str(path), "api_key_sha256": keys.api_key_digest(api_key)}
    result, text = _run(path_stats, {"paths": [], "keys_file": asked})
    return result["keys_file"]["kept"], text


def _module_changes(path, api_key, check=True):
    result, text = _run(
        sglang_keys, {"path": str(path), "api_key": api_key, "_ansible_check_mode": check}
    )
    assert not result.get("failed"), result
    return result["changed"], text


def _write(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)


def _edits():
    """(name, text, mode) of the file states a host can hold."""
    good = keys.render_keys(CLIENT, ADMIN)
    return [
        ("as written", good, 0o600),
        ("client key edited", good.replace(CLIENT, "hand-edited-client-key-0123"), 0o600),
        ("admin key edited", good.replace(ADMIN, "hand-edited-admin-key-0123456789"), 0o600),
        ("admin key removed", good.replace(f"admin_api_key={ADMIN}\n", ""), 0o600),
        ("admin key empty", good.replace(ADMIN, ""), 0o600),
        ("header edited", good.replace("# Managed by gpuhost", "# managed"), 0o600),
        ("a line added", good + "# note\n", 0o600),
        ("not name=value", good + "garbage\n", 0o600),
        ("readable by all", good, 0o644),
        ("group readable", good, 0o640),
        ("empty client key", keys.render_keys("", ADMIN), 0o600),
    ]


@pytest.mark.parametrize("api_key", [CLIENT, "another-client-key-0123", ""])
@pytest.mark.parametrize(("name", "text", "mode"), _edits(), ids=[e[0] for e in _edits()])
def test_the_read_answers_what_the_module_decides(tmp_path, api_key, name, text, mode):
    path = tmp_path / "sglang-server.keys"
    _write(path, text, mode)
    kept, _ = _read(path, api_key)
    changes, _ = _module_changes(path, api_key)
    assert kept == (not changes), name
    # Only the file as written, with the client key it holds, is left as it is; the admin
    # key is the host's own (generated there, kept whatever it is, as the module keeps it).
    left = {("as written", CLIENT), ("admin key edited", CLIENT), ("empty client key", "")}
    assert kept == ((name, api_key) in left)


def test_each_hand_edit_is_found_and_fixed_by_the_module(tmp_path):
    path = tmp_path / "sglang-server.keys"
    for name, text, mode in _edits()[1:]:
        if name in ("empty client key", "admin key edited"):
            continue
        _write(path, text, mode)
        assert not _read(path, CLIENT)[0], name
        assert _module_changes(path, CLIENT, check=False)[0], name
        assert _read(path, CLIENT)[0], name  # the module's file is what the read calls kept
        assert keys.read_keys_file(str(path))["api_key"] == CLIENT
        assert not _module_changes(path, CLIENT)[0], name


def test_no_file_and_a_link_are_not_kept(tmp_path):
    path = tmp_path / "sglang-server.keys"
    assert not _read(path, CLIENT)[0]
    assert _module_changes(path, CLIENT)[0]
    target = tmp_path / "elsewhere"
    _write(target, keys.render_keys(CLIENT, ADMIN))
    path.symlink_to(target)
    assert not _read(path, CLIENT)[0]
    # The module, called since the read did not find the file kept, refuses the link.
    result, _ = _run(sglang_keys, {"path": str(path), "api_key": CLIENT})
    assert result["failed"] and "not a regular file" in result["msg"]


def test_rotation_changes_a_kept_file(tmp_path):
    path = tmp_path / "sglang-server.keys"
    _write(path, keys.render_keys(CLIENT, ADMIN))
    assert _read(path, CLIENT)[0]
    args = {"path": str(path), "api_key": CLIENT, "rotate_admin_key": True}
    result, _ = _run(sglang_keys, {**args, "_ansible_check_mode": True})
    assert result["changed"] and result["admin_key_generated"]


def test_no_key_and_no_digest_in_either_result(tmp_path):
    path = tmp_path / "sglang-server.keys"
    _write(path, keys.render_keys(CLIENT, ADMIN))
    kept, read_text = _read(path, CLIENT)
    assert kept
    _, module_text = _module_changes(path, "another-client-key-0123")
    for text in (read_text, module_text):
        assert CLIENT not in text and ADMIN not in text
        assert keys.api_key_digest(CLIENT) not in text
        assert "another-client-key-0123" not in text


def test_path_stats_without_keys_file_returns_what_it_did(tmp_path):
    """metrics and rolling_update call path_stats without keys_file: same keys as before."""
    result, _ = _run(path_stats, {"paths": [str(tmp_path)]})
    assert set(result) - {"invocation"} == {"changed", "results", "texts", "units"}
    assert result["results"][0]["stat"]["isdir"]


def test_the_role_reads_then_calls_the_module_only_when_not_kept():
    import yaml
    from gpuhost_fakes import ROOT

    role = ROOT / "roles/sglang_server"
    (read,) = [
        t
        for t in yaml.safe_load((role / "tasks/preflight.yml").read_text())
        if "gpuhost.gpu.path_stats" in t
    ]
    assert read["gpuhost.gpu.path_stats"]["keys_file"] == {
        "path": "{{ _sglang_server_keys_path }}",
        "api_key_sha256": "{{ sglang_server_api_key | hash('sha256') }}",
    }
    (task,) = yaml.safe_load((role / "tasks/keys.yml").read_text())
    assert task["when"] == "not (_sglang_server_keys_kept | bool)"
    assert task["register"] == "_sglang_server_keys_file"
    kept = yaml.safe_load((role / "vars/main.yml").read_text())["_sglang_server_keys_kept"]
    assert "_sglang_server_read" in kept and "sglang_server_rotate_admin_key" in kept


def test_the_controller_digest_is_the_hosts(tmp_path):
    """`sglang_server_api_key | hash('sha256')` (Ansible's filter) is api_key_digest."""
    from ansible.plugins.filter.core import get_hash

    for key in (CLIENT, "", "with.dots~and+slashes/=-0123"):
        assert get_hash(key, "sha256") == keys.api_key_digest(key)


def test_kept_needs_root_ownership_when_run_as_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    path = tmp_path / "sglang-server.keys"
    _write(path, keys.render_keys(CLIENT, ADMIN))
    assert _read(path, CLIENT)[0]
    os.chown(path, 1000, 1000)
    assert not _read(path, CLIENT)[0]
    assert _module_changes(path, CLIENT)[0]
