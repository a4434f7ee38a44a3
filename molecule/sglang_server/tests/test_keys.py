"""The server's keys (issue 15, items 11 and 18), on real systemd with the stand-in.

- The client key never opens an admin route: the host keeps a generated admin key, and with
  it set the admin routes take that key only (SGLang's decide_request_auth; the stand-in
  decides the same way). /server_info answers clients without either key.
- No process in the container has a key in /proc/PID/environ or /proc/PID/cmdline: the unit
  hands the root-only keys file to the launcher as stdin (StandardInput=file:).
- The keys file is root's, 0600; the admin key survives a re-run, rotates on request, and
  never shows in a run's output (-vvv included) or the journal.

Every request and /proc scan runs as a Python script inside the container that reads the
keys file itself, so no key is ever on a command line, here or there.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_sglang_server import converge

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parents[1]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
SERVICE = "sglang-server"
KEYS = f"/etc/gpuhost/{SERVICE}.keys"
API_KEY = "gpuhost-test-apikey-5f0c1d2e3b4a"  # host_vars of this scenario
BASE = "http://127.0.0.1:30000"
ADMIN_ROUTES = ("/flush_cache", "/update_weights_from_disk", "/load_lora_adapter")

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")

# Runs in the container: the keys from the root-only file, then the asked requests.
PROBE = r"""
import json, sys, urllib.error, urllib.request
lines = open(KEYS).read().splitlines()
keys = dict(l.split("=", 1) for l in lines if "=" in l and not l.startswith("#"))
out = []
for method, path, who in json.loads(sys.argv[1]):
    headers = {"Authorization": "Bearer " + keys[who]} if who else {}
    req = urllib.request.Request(BASE + path, data=b"{}" if method == "POST" else None,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            code, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read().decode()
    out.append({"code": code, "body": body,
                "leaks": sorted(n for n, v in keys.items() if v and v in body)})
print(json.dumps(out))
"""

# Runs in the container: every process's environ and cmdline, skipping those that exit
# between the listing and the read; the server's main pid must be among those read.
SCAN = r"""
import json, os, subprocess
keys = [v for l in open(KEYS).read().splitlines() if "=" in l and not l.startswith("#")
        for v in [l.split("=", 1)[1]] if v]
main = int(subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", SERVICE],
                          capture_output=True, text=True, check=True).stdout)
read, leaks = [], []
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        with open(f"/proc/{name}/environ", "rb") as f:
            environ = f.read()
        with open(f"/proc/{name}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError):
        continue  # exited meanwhile
    read.append(int(name))
    for what, data in (("environ", environ), ("cmdline", cmdline)):
        if any(k.encode() in data for k in keys):
            leaks.append({"pid": int(name), "in": what, "cmd": cmdline.split(b"\0")[0].decode()})
print(json.dumps({"main": main, "read": read, "leaks": leaks, "keys": len(keys)}))
"""


def in_container(host, script: str, *args: str) -> dict | list:
    prelude = f"KEYS = {KEYS!r}\nBASE = {BASE!r}\nSERVICE = {SERVICE!r}\n"
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    out = host.check_output(f"python3 - {quoted} <<'EOF'\n{prelude}{script}\nEOF")
    return json.loads(out)


def requests(host, *calls):
    return in_container(host, PROBE, json.dumps(calls))


def admin_key(host) -> str:
    # Read here only to compare runs and scan outputs; never put on a command line.
    text = host.file(KEYS).content_string
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("admin_"))


def test_keys_file_is_root_only_and_holds_both_keys(host):
    keys = host.file(KEYS)
    assert (keys.user, keys.group, keys.mode) == ("root", "root", 0o600)
    lines = dict(
        line.split("=", 1) for line in keys.content_string.splitlines() if line[:1].isalpha()
    )
    assert lines["api_key"] == API_KEY
    assert len(lines["admin_api_key"]) >= 40 and lines["admin_api_key"] != API_KEY
    unit = host.file(f"/etc/systemd/system/{SERVICE}.service").content_string
    assert f"StandardInput=file:{KEYS}" in unit
    env = host.file(f"/etc/gpuhost/{SERVICE}.env").content_string
    assert API_KEY not in env and "GPUHOST_SGLANG_API_KEY" not in env


@pytest.mark.parametrize("path", ADMIN_ROUTES)
def test_the_client_key_never_opens_an_admin_route(host, path):
    client, none, admin = requests(
        host, ["POST", path, "api_key"], ["POST", path, None], ["POST", path, "admin_api_key"]
    )
    assert client["code"] == 401, client
    assert none["code"] == 401, none
    assert admin["code"] == 200, admin


def test_the_admin_key_is_not_a_client_key(host):
    (answer,) = requests(host, ["GET", "/v1/models", "admin_api_key"])
    assert answer["code"] == 401


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_server_info_answers_clients_without_the_keys(host, path):
    (answer,) = requests(host, ["GET", path, "api_key"])
    assert answer["code"] == 200
    assert answer["leaks"] == [], answer["leaks"]
    info = json.loads(answer["body"])
    assert info["api_key"] == info["admin_api_key"] == "<redacted>"


def test_no_process_has_a_key_in_environ_or_cmdline(host):
    scan = in_container(host, SCAN)
    assert scan["keys"] == 2
    assert scan["main"] in scan["read"], scan  # the server itself was read, not skipped
    assert scan["leaks"] == [], scan["leaks"]


def test_the_admin_key_survives_a_rerun_and_rotates_on_request(host):
    before = admin_key(host)
    run = converge()
    rc, rerun = run.rc, run.out
    assert rc == 0, rerun[-3000:]
    assert admin_key(host) == before

    run = converge({"sglang_server_rotate_admin_key": True}, "converge.yml", "-vvv")
    rc, rotated = run.rc, run.out
    assert rc == 0, rotated[-3000:]
    after = admin_key(host)
    assert after != before
    (new,) = requests(host, ["POST", "/flush_cache", "admin_api_key"])
    assert new["code"] == 200
    for output in (rerun, rotated):
        for secret in (before, after, API_KEY):
            assert secret not in output
    journal = host.check_output(f"journalctl --no-pager -u {SERVICE}")
    for secret in (before, after):
        assert secret not in journal
    assert "admin_api_key='***'" in journal

    # Back to the converged settings: the key stays, nothing restarts.
    run = converge()
    rc, back = run.rc, run.out
    assert rc == 0, back[-3000:]
    assert admin_key(host) == after
    changed = re.findall(r"changed=(\d+)\s+unreachable=", back)
    assert changed and set(changed) == {"0"}, back[-2000:]
