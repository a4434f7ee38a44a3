"""The hub token of role model_cache (issue 28 item 2) and the download environment's hub
rules (item 8): the token is a root-owned file the download unit gets as its standard input
(PID 1 opens it), read by the root-owned wrapper roles/model_cache/files/gpuhost-hf-download
in a non-dumpable process; never argv, never the unit's environment, never a file the service
account can read. The wrapper and the hf stand-in run for real here (seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_model_cache import (
    hub_endpoint_error,
    python_of,
    systemd_run_argv,
    validate_download,
)
from gpuhost_fakes import ROOT

TOKEN = "hf_tokenUnitTest0123456789"
WRAPPER = ROOT / "roles/model_cache/files/gpuhost-hf-download"
STANDIN = ROOT / "tests/standin/hf_standin.py"
START = ROOT / "roles/model_cache/tasks/start.yml"
START_DOWNLOAD = ROOT / "roles/model_cache/tasks/start_download.yml"


def _argv(**over):
    spec = dict(
        unit="gpuhost-model-download",
        user="gpuhost",
        group="gpuhost",
        cli="/opt/gpuhost/hf-venv/bin/hf",
        model="acme/m",
        revision="main",
        max_workers=8,
        include=[],
        env={"HF_HOME": "/c/hf"},
        hf_home="/c/hf",
        timeout_s=3600,
        python=["/opt/gpuhost/hf-venv/bin/python"],
        wrapper="/opt/gpuhost/libexec/gpuhost-hf-download",
        token_file="/etc/gpuhost/hf-token",
    )
    spec.update(over)
    return systemd_run_argv(**spec)


def test_the_token_is_the_units_standard_input_never_argv_or_env():
    argv = _argv()
    assert "--property=StandardInput=file:/etc/gpuhost/hf-token" in argv
    # systemd-run returns once the process runs with its stdin open: then the file may go.
    assert "--property=Type=exec" in argv
    # stdout would otherwise inherit the (read-only) token file.
    assert "--property=StandardOutput=journal" in argv
    assert "--property=StandardError=journal" in argv
    assert not [a for a in argv if "TOKEN" in a.upper() and a.startswith("--setenv")]
    assert not [a for a in argv if a.startswith("--property=LoadCredential")]
    tail = argv[argv.index("--") + 1 :]
    assert tail[:4] == [
        "/opt/gpuhost/hf-venv/bin/python",
        "-I",
        "/opt/gpuhost/libexec/gpuhost-hf-download",
        "/opt/gpuhost/hf-venv/bin/hf",
    ]
    assert tail[4:7] == ["download", "acme/m", "--revision"]
    # No token: /dev/null, the wrapper runs the CLI anonymously.
    assert "--property=StandardInput=null" in _argv(token_file="")


def test_the_token_source_cannot_be_set_through_the_environment():
    for key in ("HF_TOKEN", "HF_TOKEN_PATH", "HUGGING_FACE_HUB_TOKEN"):
        with pytest.raises(ValueError, match=f"model_cache_download_environment: key '{key}'"):
            _argv(env={key: "/x"})
    with pytest.raises(ValueError, match="the token wrapper: got 'rel/w'"):
        _argv(wrapper="rel/w")
    with pytest.raises(ValueError, match="the CLI's interpreter"):
        _argv(python=["/bin/sh"])


def _tasks(node):
    for task in node or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def test_start_writes_the_token_file_root_owned_and_removes_it_on_every_path():
    # start.yml, with the block that starts a download (start_download.yml) where it is included.
    start = yaml.safe_load(START.read_text())
    at = next(
        i
        for i, t in enumerate(start)
        if t.get("ansible.builtin.include_tasks") == "start_download.yml"
    )
    assert start[at]["when"] == "_model_cache_action in ['start', 'restart']"
    tasks = start[:at] + yaml.safe_load(START_DOWNLOAD.read_text()) + start[at + 1 :]
    flat = list(_tasks(tasks))
    names = [t.get("name") for t in flat]
    write = next(t for t in flat if "ansible.builtin.copy" in t and "hf_token" in str(t))
    copy = write["ansible.builtin.copy"]
    assert (copy["owner"], copy["group"], copy["mode"]) == ("root", "root", "0600")
    assert copy["dest"] == "{{ _model_cache_token_file }}" and write["no_log"] is True

    role_vars = yaml.safe_load((ROOT / "roles/model_cache/vars/main.yml").read_text())

    def removes(task):
        f = task.get("ansible.builtin.file", {})
        entries = task.get("gpuhost.gpu.file_set", {}).get("files", [])
        if entries == "{{ _model_cache_entries }}":  # the list the read compares too
            entries = role_vars["_model_cache_entries"]
        return any(
            e.get("path") == "{{ _model_cache_token_file }}" and e.get("state") == "absent"
            for e in [f, *entries]
        )

    # A leftover of an interrupted run goes before anything else changes; the file written
    # for this start goes in an always: of the block that wrote it (success and failure).
    leftover = names.index(
        "Remove a hub token file an interrupted earlier run left, create HF_HOME and the marker"
        " directory"
    )
    assert removes(flat[leftover])
    assert leftover < names.index(write["name"])
    block = next(t for t in tasks if write in list(_tasks(t.get("block"))))
    assert any(removes(t) for t in block.get("always", [])), "no always: removal"
    start = next(t for t in block["block"] if "model_cache_systemd_run" in str(t))
    assert "token_file" in str(start) and "wrapper" in str(start)
    assert "when" not in block["always"][0]


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co",
        "https://mirror.example:8443/hf",
        "http://127.0.0.1:8080",
        "http://127.9.0.1/hf",
        "http://localhost:5000",
        "http://[::1]:8080/",
    ],
)
def test_hub_endpoints_allowed(url):
    assert hub_endpoint_error("HF_ENDPOINT", url) == ""
    env = {"HF_ENDPOINT": url}
    assert (
        validate_download(
            model="a/b", revision="main", include=[], env=env, cli="/x/hf", hf_home="/c"
        )
        == []
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://mirror.example",
        "http://10.0.0.5:8080",
        "http://localhost.evil.example",
        "ftp://mirror.example",
        "https://user:pw@mirror.example",
        "huggingface.co",
        "https://",
    ],
)
def test_hub_endpoints_refused_naming_variable_value_and_rule(url):
    errors = validate_download(
        model="a/b",
        revision="main",
        include=[],
        env={"HF_ENDPOINT": url},
        cli="/x/hf",
        hf_home="/c",
    )
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"model_cache_download_environment: HF_ENDPOINT: got {url!r}")
    assert "allowed: https://" in errors[0] and "loopback" in errors[0]


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("HF_HUB_OFFLINE", "1", "cannot run offline"),
        ("HF_HUB_OFFLINE", "true", "cannot run offline"),
        ("TRANSFORMERS_OFFLINE", "YES", "cannot run offline"),
        ("HF_HUB_OFFLINE", "0", "no effect"),
    ],
)
def test_offline_mode_in_the_download_environment_is_refused(key, value, said):
    (error,) = validate_download(
        model="a/b", revision="main", include=[], env={key: value}, cli="/x/hf", hf_home="/c"
    )
    assert error.startswith(f"model_cache_download_environment: {key}={value!r}: ")
    assert said in error and f"allowed: leave {key} unset" in error


def test_the_cli_interpreter_comes_from_its_shebang():
    assert python_of("#!/opt/gpuhost/hf-venv/bin/python\nimport x\n", "/x") == [
        "/opt/gpuhost/hf-venv/bin/python"
    ]
    assert python_of("#!/usr/bin/env python3\n", "/x") == ["/usr/bin/env", "python3"]
    assert python_of("#!/usr/bin/python3.11\n", "/x") == ["/usr/bin/python3.11"]
    for bad in ("#!/bin/sh\n", "\x7fELF\x02secret-ish bytes", "", "#!/usr/bin/python3 -x\n"):
        with pytest.raises(ValueError, match="model_cache_hf_cli: /x starts with") as err:
            python_of(bad, "/x")
        assert "secret-ish" not in str(err.value), "only a #! line is ever shown"


# --- the wrapper and the stand-in, for real -----------------------------------------------------


def _run_wrapped(tmp_path, cli, stdin_text, **env):
    """What the unit runs: python -I wrapper CLI download ..., stdin = the token file."""
    token_file = tmp_path / "hf-token"
    token_file.write_text(stdin_text)
    base = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf")}
    base.update({"HF_STANDIN_FILES": "1", "HF_STANDIN_FILE_MIB": "1"})
    base.update({"HF_STANDIN_CHUNK_DELAY": "0", "HF_STANDIN_LOG": str(tmp_path / "log")})
    base.update(env)
    with open(token_file) as stdin:
        return subprocess.run(
            [sys.executable, "-I", str(WRAPPER), str(cli), "download", "acme/gated"],
            stdin=stdin,
            capture_output=True,
            text=True,
            env=base,
            timeout=60,
            check=False,
        )


def test_the_wrapper_hands_the_token_over_in_a_non_dumpable_process(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text(
        "import ctypes, json, os, sys\n"
        "libc = ctypes.CDLL(None)\n"
        "print(json.dumps({'dumpable': libc.prctl(3, 0, 0, 0, 0), 'argv': sys.argv,"
        " 'token': os.environ.get('HF_TOKEN'), 'path': os.environ.get('HF_TOKEN_PATH'),"
        " 'stdin': sys.stdin.read(), 'pid': os.getpid(), 'ppid': os.getppid()}))\n"
    )
    proc = _run_wrapped(tmp_path, probe, TOKEN + "\n", HF_TOKEN_PATH="/planted/token")
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["dumpable"] == 0, "the process holding the token must be non-dumpable"
    assert seen["token"] == TOKEN and seen["stdin"] == "", "read once, stdin then closed"
    assert seen["path"] == os.devnull, "no token file the account could plant"
    assert seen["argv"] == [str(probe), "download", "acme/gated"]
    assert TOKEN not in proc.stderr


def test_a_gated_download_gets_the_token_through_the_wrapper_and_fails_without(tmp_path):
    ok = _run_wrapped(tmp_path, STANDIN, TOKEN, HF_STANDIN_GATED="1")
    assert ok.returncode == 0, ok.stderr
    log = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert log[-1]["done"] and log[-1]["token_seen"]
    assert TOKEN not in ok.stdout + ok.stderr
    (tmp_path / "log").unlink()
    anonymous = _run_wrapped(tmp_path, STANDIN, "", HF_STANDIN_GATED="1")
    assert anonymous.returncode == 1 and "401" in anonymous.stderr


def test_the_standin_reads_the_token_as_huggingface_hub_does(tmp_path):
    def standin(**env):
        base = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HF_STANDIN_GATED": "1"}
        base.update({"HF_STANDIN_FILES": "1", "HF_STANDIN_FILE_MIB": "1"})
        base.update({"HF_STANDIN_CHUNK_DELAY": "0", **env})
        cmd = [sys.executable, str(STANDIN), "download", "acme/gated"]
        return subprocess.run(cmd, capture_output=True, text=True, env=base, check=False)

    # The default token file is $HF_HOME/token (huggingface_hub constants.HF_TOKEN_PATH).
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text(TOKEN + "\n")
    assert standin().returncode == 0
    # A missing file is no token: the gated repository refuses.
    missing = standin(HF_TOKEN_PATH=str(tmp_path / "nope"))
    assert missing.returncode == 1 and "401" in missing.stderr
    # An unreadable one is the real client's error (it is not FileNotFoundError).
    unreadable = standin(HF_TOKEN_PATH=str(tmp_path))
    assert unreadable.returncode == 1 and "IsADirectoryError" in unreadable.stderr
    # HUGGING_FACE_HUB_TOKEN is read too; offline mode as huggingface_hub parses it.
    assert standin(HUGGING_FACE_HUB_TOKEN=TOKEN, HF_TOKEN_PATH="/nope").returncode == 0
    offline = standin(HF_TOKEN=TOKEN, HF_HUB_OFFLINE="true")
    assert offline.returncode == 1 and "offline" in offline.stderr
