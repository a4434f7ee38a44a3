"""The server's keys file (plugins/module_utils/gpuhost_sglang_keys.py, module sglang_keys):
the admin key is generated once and kept, rotated on request, the file is 0600; and the
stand-in decides auth as SGLang's decide_request_auth does (admin routes take only the admin
key once one is set), with /server_info redacted as the launcher makes SGLang's."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_sglang_keys as keys
from test_verify_checks import start_standin

CLIENT = "client-key-0123456789abcdef"


def test_a_first_run_generates_an_admin_key_and_a_rerun_keeps_it():
    first, fresh = keys.plan_keys(None, CLIENT, rotate_admin_key=False)
    parsed = keys.parse_keys(first)
    assert fresh and parsed["api_key"] == CLIENT
    assert len(parsed["admin_api_key"]) >= 40 and parsed["admin_api_key"] != CLIENT
    again, fresh_again = keys.plan_keys(first, CLIENT, rotate_admin_key=False)
    assert again == first and not fresh_again


def test_a_new_client_key_keeps_the_admin_key():
    first, _ = keys.plan_keys(None, CLIENT, rotate_admin_key=False)
    second, fresh = keys.plan_keys(first, "another-client-key-0123", rotate_admin_key=False)
    assert not fresh
    assert keys.parse_keys(second)["admin_api_key"] == keys.parse_keys(first)["admin_api_key"]


def test_rotation_and_an_unreadable_file_make_a_new_admin_key():
    first, _ = keys.plan_keys(None, CLIENT, rotate_admin_key=False)
    rotated, fresh = keys.plan_keys(first, CLIENT, rotate_admin_key=True)
    assert fresh
    assert keys.parse_keys(rotated)["admin_api_key"] != keys.parse_keys(first)["admin_api_key"]
    _, fresh = keys.plan_keys("garbage without equals\n", CLIENT, rotate_admin_key=False)
    assert fresh


def test_a_bad_line_names_the_line_not_the_value():
    with pytest.raises(keys.KeysFileError) as err:
        keys.parse_keys(f"api_key={CLIENT}\npassword={CLIENT}\n")
    assert "line 2" in str(err.value) and CLIENT not in str(err.value)


def test_the_file_is_written_0600(tmp_path):
    path = tmp_path / "sglang-server.keys"
    keys.write_private(str(path), keys.render_keys(CLIENT, "admin-0123456789abcdef"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert keys.read_keys_file(str(path)) == {
        "api_key": CLIENT,
        "admin_api_key": "admin-0123456789abcdef",
    }
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


# --- the stand-in's auth decision ----------------------------------------------------------


def status(port, method, path, key=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=b"{}" if method == "POST" else None,
        method=method,
        headers={"Authorization": f"Bearer {key}"} if key else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def keyed():
    admin = "admin-key-fedcba9876543210ABC"
    proc, port = start_standin("--api-key", CLIENT, "--admin-api-key", admin)
    yield port, admin
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.parametrize(
    "path", ["/flush_cache", "/update_weights_from_disk", "/load_lora_adapter"]
)
def test_admin_routes_take_the_admin_key_only(keyed, path):
    port, admin = keyed
    assert status(port, "POST", path, CLIENT)[0] == 401
    assert status(port, "POST", path)[0] == 401
    assert status(port, "POST", path, admin)[0] == 200


def test_client_routes_take_the_client_key_only(keyed):
    port, admin = keyed
    assert status(port, "GET", "/v1/models", CLIENT)[0] == 200
    assert status(port, "GET", "/v1/models", admin)[0] == 401
    assert status(port, "GET", "/health")[0] == 200


def test_without_an_admin_key_the_client_key_opens_admin_routes():
    # SGLang's legacy behaviour, the reason gpuhost always sets an admin key.
    proc, port = start_standin("--api-key", CLIENT)
    try:
        assert status(port, "POST", "/flush_cache", CLIENT)[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_info_answers_clients_without_the_keys(keyed):
    port, admin = keyed
    code, body = status(port, "GET", "/server_info", CLIENT)
    assert code == 200
    assert CLIENT.encode() not in body and admin.encode() not in body
    info = json.loads(body)
    assert info["api_key"] == info["admin_api_key"] == "<redacted>"
