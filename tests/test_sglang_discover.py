"""The sglang_discover module's logic (plugins/module_utils/gpuhost_sglang_discover.py).

The first test starts a REAL process the way a user does on a hand-run host: a venv in a tmp
"home" (python3 -m venv --without-pip) holding the SGLang STAND-IN package (tests/standin,
a test double, not SGLang) and distribution metadata, a hub cache written by the hub
stand-in (tests/standin/hf_standin.py), NCCL_* variables and an HF_TOKEN in its environment,
and `<venv>/bin/python -m sglang.launch_server ... --api-key ...` on a free loopback port.
discover() must find it with what it runs, and no secret's value may appear in the result.
The rest check the argv rules on lists.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_sglang_discover as d
from gpuhost_fakes import free_port

STANDIN = Path(__file__).parent / "standin"
TOKEN = "hf_TestTokenValueThatMustNeverAppear0123"
API_KEY = "ClientKeyThatMustNeverAppear-0123456789"
MODEL = "org/Tiny-Standin"
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


GPUHOST = Path(sys.executable).parent / "gpuhost"


def test_gpuhost_adopt_says_so_and_exits_1_when_nothing_runs(tmp_path):
    from gpuhost_fakes import cli_env

    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"h": host}}}}}))
    # First in this file, before the module's stand-in starts; skipped where another
    # session's server runs on this machine.
    cmd = [str(GPUHOST), "adopt", "-i", str(inventory), "-e", "ansible_become=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(tmp_path / "runs"),
                          timeout=180, check=False)  # fmt: skip
    report = json.loads((tmp_path / "runs" / "latest" / "report.json").read_text())
    if report.get("adopt", {}).get("h"):
        pytest.skip("a server ran on this machine during the test: " + report["adopt"]["h"][0])
    assert report["adopt"] == {"h": []}
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "No hand-started SGLang server found on h" in proc.stdout + proc.stderr


def _metadata(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\nVersion: 9\n"
    )


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory):
    """The stand-in server started by hand from a venv in a home directory (a test double)."""
    home = tmp_path_factory.mktemp("home")
    venv = home / "ml-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", PURELIB],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    shutil.copytree(STANDIN / "sglang_pkg" / "sglang", site / "sglang")
    for name, version in (("sglang", "0.5.10.post1"), ("flashinfer-python", "0.6.7.post3"),
                          ("torch", "2.9.1"), ("sglang-kernel", "0.4.1")):  # fmt: skip
        _metadata(site, name, version)
    hf_home = home / ".cache" / "huggingface"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HF_HOME": str(hf_home)}
    fake_hub = {"HF_STANDIN_FILES": "2", "HF_STANDIN_FILE_MIB": "1", "HF_STANDIN_CHUNK_DELAY": "0"}
    subprocess.run(
        [sys.executable, str(STANDIN / "hf_standin.py"), "download", MODEL],
        env={**env, **fake_hub}, check=True, capture_output=True,
    )  # fmt: skip
    port = free_port(range(31700, 31800))
    server_env = {
        **env,
        "NCCL_P2P_LEVEL": "PHB",
        "NCCL_IB_DISABLE": "1",
        "OMP_NUM_THREADS": "8",
        "HF_TOKEN": TOKEN,
        "UNRELATED_SETTING": "stays-on-the-host",
    }
    argv = [str(venv / "bin" / "python"), "-m", "sglang.launch_server", "--model-path", MODEL,
            "--tp", "1", "--host", "127.0.0.1", "--port", str(port), "--api-key", API_KEY,
            "--trust-remote-code", "--standin-load-seconds", "0",
            "--standin-warmup-seconds", "0"]  # fmt: skip
    log = home / "sglang.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=home, env=server_env, stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the stand-in did not open its port: " + log.read_text())
            time.sleep(0.05)
    try:
        yield {"proc": proc, "home": home, "venv": venv, "port": port, "hf_home": hf_home}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _mine(found, pid):
    hits = [s for s in found["servers"] if s["pid"] == pid]
    assert len(hits) == 1, found
    return hits[0]


def test_a_hand_started_server_is_found_with_what_it_runs(hand_started):
    got = _mine(d.discover("sglang-server"), hand_started["proc"].pid)
    home, venv = hand_started["home"], hand_started["venv"]
    assert got["cwd"] == str(home)
    assert got["venv"] == str(venv)
    assert got["interpreter"] == str(venv / "bin" / "python")
    assert got["versions"] == {
        "flashinfer-python": "0.6.7.post3",
        "sglang": "0.5.10.post1",
        "sglang-kernel": "0.4.1",
        "torch": "2.9.1",
    }
    assert got["env"] == {
        "HF_HOME": str(hand_started["hf_home"]),
        "HF_TOKEN": "<redacted>",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_LEVEL": "PHB",
        "OMP_NUM_THREADS": "8",
    }
    flags = dict((name, value) for name, value in got["flags"])
    assert flags["--model-path"] == MODEL
    assert flags["--tp"] == "1"
    assert flags["--port"] == str(hand_started["port"])
    assert flags["--api-key"] == "<redacted>"
    assert flags["--trust-remote-code"] is True
    assert got["argv"][got["argv"].index("--api-key") + 1] == "<redacted>"
    model = got["model"]
    assert model["kind"] == "hub" and model["id"] == MODEL
    assert model["hub_cache"] == str(hand_started["hf_home"] / "hub")
    assert model["refs"]["main"] in model["revisions"] and len(model["revisions"]) == 1
    blobs = list((Path(model["repo_dir"]) / "blobs").iterdir())
    assert model["blob_count"] == len(blobs) >= 3  # two weight files and config.json
    assert model["blob_bytes"] == sum(b.stat().st_size for b in blobs) > 2 << 20
    assert model["problems"] == []


def test_no_secret_value_appears_in_the_result(hand_started):
    text = json.dumps(d.discover("sglang-server"))
    assert TOKEN not in text and API_KEY not in text
    assert "stays-on-the-host" not in text


def test_the_managed_unit_is_skipped(hand_started, monkeypatch):
    pid = hand_started["proc"].pid
    real = d._proc

    def in_unit(p, name, proc):  # the server's cgroup, as systemd would set it for the unit
        if p == pid and name == "cgroup":
            return b"0::/system.slice/sglang-server.service\n"
        return real(p, name, proc)

    monkeypatch.setattr(d, "_proc", in_unit)
    found = d.discover("sglang-server")
    assert pid in found["managed_pids"]
    assert all(s["pid"] != pid for s in found["servers"])


USER = 65534  # nobody: the owner of a user's files where this test runs as root


def _as_user(*paths):
    if os.geteuid() == 0:
        for path in paths:
            os.lchown(path, USER, USER)


def test_a_link_a_user_made_is_not_followed(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "elsewhere.cfg").write_text("home = /usr\n")
    (venv / "pyvenv.cfg").symlink_to(tmp_path / "elsewhere.cfg")
    _as_user(venv, venv / "pyvenv.cfg")
    assert d.find_venv(str(venv / "bin" / "python")) == ""
    (venv / "pyvenv.cfg").unlink()
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    assert d.find_venv(str(venv / "bin" / "python")) == str(venv)
    with pytest.raises(d.NotRead, match="more than"):
        d.read_file(str(venv / "pyvenv.cfg"), cap=4)
    # A directory link the user made (~/ml-env -> elsewhere) is not walked through.
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "ml-env").symlink_to(venv)
    _as_user(tmp_path / "home", tmp_path / "home" / "ml-env")
    with pytest.raises(d.NotRead, match="a symbolic link a user could have made"):
        d.read_file(str(tmp_path / "home" / "ml-env" / "pyvenv.cfg"))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes a link root's")
def test_a_link_root_made_in_a_root_only_directory_is_followed(tmp_path):
    """An admin's /home -> /data/home: root's link in a directory only root changes."""
    os.chmod(tmp_path, 0o755)
    (tmp_path / "data" / "ml" / "env").mkdir(parents=True)
    (tmp_path / "data" / "ml" / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "home").symlink_to(tmp_path / "data")
    assert d.read_file(str(tmp_path / "home" / "ml" / "env" / "pyvenv.cfg")) == b"home = /usr\n"
    os.chmod(tmp_path, 0o777)  # now anyone could have replaced the link
    with pytest.raises(d.NotRead, match="not followed"):
        d.read_file(str(tmp_path / "home" / "ml" / "env" / "pyvenv.cfg"))
    os.chmod(tmp_path, 0o755)


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["python3", "-m", "sglang.launch_server", "--port", "1"], 3),
        (["/v/bin/python", "-u", "-X", "dev", "-msglang.launch_server"], 5),
        (["python", "/opt/sglang/launch_server.py", "--tp-size", "8"], 2),
        (["python", "-m", "sglang.bench_serving"], None),
        (["python", "-c", "import sglang.launch_server"], None),
        (["bash", "-c", "python -m sglang.launch_server"], None),
        (["python", "serve.py", "-m", "sglang.launch_server"], None),
    ],
)
def test_which_argv_runs_the_server(argv, start):
    assert d.entry(argv) == start


def test_flags_and_secret_values_in_argv():
    args = ["--tp", "8", "--api-key=abc", "--admin-api-key", "def", "--trust-remote-code",
            "--lora-paths", "a", "b"]  # fmt: skip
    assert d.redact_flags(d.parse_flags(args)) == [
        ["--tp", "8"],
        ["--api-key", "<redacted>"],
        ["--admin-api-key", "<redacted>"],
        ["--trust-remote-code", True],
        ["--lora-paths", ["a", "b"]],
    ]
    assert d.redact_argv(["python", "-m", "x", *args], 3)[3:7] == [
        "--tp", "8", "--api-key=<redacted>", "--admin-api-key"]  # fmt: skip
    assert "def" not in d.redact_argv(["python", "-m", "x", *args], 3)


def test_hub_cache_follows_huggingface_hub_order():
    assert d.hub_cache({"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}, "/", "/home/u") == "/c"
    assert d.hub_cache({"HF_HOME": "rel"}, "/w", "/home/u") == "/w/rel/hub"
    assert d.hub_cache({}, "/", "/home/u") == "/home/u/.cache/huggingface/hub"
    assert d.hub_cache({"HOME": "/h2"}, "/", "/home/u") == "/h2/.cache/huggingface/hub"


def test_gpuhost_adopt_proposes_the_running_server_and_keeps_its_secrets(hand_started, tmp_path):
    """`gpuhost adopt` end to end: the console script, playbooks/adopt.yml over a local
    connection (no GPU here), the proposal file of the hand-started stand-in."""
    from gpuhost_fakes import cli_env

    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"h": host}}}}}))
    cmd = [str(GPUHOST), "adopt", "-i", str(inventory), "-e", "ansible_become=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(tmp_path / "runs"),
                          timeout=180, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["command"] == "adopt" and report["check"] is True
    mine = [
        Path(p) for p in report["adopt"]["h"]
        if f"pid {hand_started['proc'].pid} " in Path(p).read_text().splitlines()[0]
    ]  # fmt: skip
    assert len(mine) == 1, report["adopt"]
    text = mine[0].read_text()
    assert str(mine[0]) in out and "Hand-started SGLang servers" in out
    settings = yaml.safe_load(text.split("\n---\n", 1)[1])
    assert settings["sglang_server_model_id"] == MODEL
    assert settings["sglang_server_port"] == hand_started["port"]
    assert settings["sglang_server_tp_size"] == 1
    assert (
        settings["sglang_server_revision"] in text and len(settings["sglang_server_revision"]) == 40
    )
    # No GPU here: no rule of role nccl applies, so both are kept as overrides.
    assert settings["nccl_env_overrides"] == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "PHB"}
    assert "# kept    env NCCL_P2P_LEVEL=PHB -> nccl_env_overrides" in text
    assert "# changed flag --api-key=<redacted> -> sglang_server_api_key" in text
    for path in run_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert TOKEN.encode() not in content and API_KEY.encode() not in content, path


def test_a_forked_worker_is_its_parents_and_the_managed_unit_is_skipped(tmp_path):
    """A process table written under tmp_path in /proc's layout (a test double of /proc):
    a server, a worker forked from it with the same argv, gpuhost's own unit, a bystander."""
    argv = b"python3\0-m\0sglang.launch_server\0--model-path\0org/m\0"
    table = {
        100: (argv, 1, "0::/user.slice/user-1000.slice/session-3.scope"),
        101: (argv, 100, "0::/user.slice/user-1000.slice/session-3.scope"),
        102: (argv, 1, "0::/system.slice/sglang-server.service"),
        103: (b"bash\0", 1, "0::/user.slice"),
    }
    for pid, (cmdline, ppid, cgroup) in table.items():
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "cmdline").write_bytes(cmdline)
        (folder / "cgroup").write_text(cgroup + "\n")
        (folder / "stat").write_text(f"{pid} (py thon) S {ppid} 1 1 0\n")
        (folder / "environ").write_bytes(b"HF_HOME=/nonexistent\0")
    (tmp_path / "self").mkdir()
    found = d.discover("sglang-server", proc=str(tmp_path))
    assert [s["pid"] for s in found["servers"]] == [100]
    assert found["managed_pids"] == [102]
    assert found["servers"][0]["model"]["problems"]  # the cache is not there: said, not raised
