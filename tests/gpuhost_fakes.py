"""Test double for the machine: a Probe that answers from a recorded fixture directory.

This is a stand-in for a real GPU host (no GPU is reachable where the tests run). It is
used only by the tests; the product's Probe (plugins/module_utils/gpuhost_hostfacts.py)
reads the real /proc, /sys and runs the real tools.

Fixture layout (tests/fixtures/gpu-hosts/<name>/, each with a SOURCE.md):
  nvidia-smi-q.xml        `nvidia-smi -q -x`          (absent: nvidia-smi not found)
  query-gpu.csv           `nvidia-smi --query-gpu=index,pci.bus_id,compute_cap
                          --format=csv,noheader`
  topo-m.txt              `nvidia-smi topo -m`
  topo-p2p-r.txt / -w.txt `nvidia-smi topo -p2p r` / `w`
  lspci.txt               `lspci -D -nn -d 10de:`     (absent: lspci not found)
  detect-virt-vm.txt      `systemd-detect-virt --vm`  (absent: not found; "none" exits 1)
  detect-virt-container.txt
  mokutil.txt             `mokutil --sb-state`
  systemctl-version.txt   `systemctl --version`
  modinfo-license.txt     `modinfo -F license nvidia`
  sysfs-pci.txt           one line per NVIDIA function, the shape printed by the capture
                          loop in tests/fixtures/gpu-hosts/*/host-extra.txt
  files/...               other files at their absolute paths (files/proc/meminfo, ...)
  dirs.txt                extra directories that exist: "<path> <entry> <entry>..."
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gpu-hosts"

_COMMANDS = {
    ("nvidia-smi", "-q", "-x"): "nvidia-smi-q.xml",
    ("nvidia-smi", "--query-gpu=index,pci.bus_id,compute_cap", "--format=csv,noheader"): (
        "query-gpu.csv"
    ),
    ("nvidia-smi", "topo", "-m"): "topo-m.txt",
    ("nvidia-smi", "topo", "-p2p", "r"): "topo-p2p-r.txt",
    ("nvidia-smi", "topo", "-p2p", "w"): "topo-p2p-w.txt",
    ("lspci", "-D", "-nn", "-d", "10de:"): "lspci.txt",
    ("systemd-detect-virt", "--vm"): "detect-virt-vm.txt",
    ("systemd-detect-virt", "--container"): "detect-virt-container.txt",
    ("mokutil", "--sb-state"): "mokutil.txt",
    ("systemctl", "--version"): "systemctl-version.txt",
    ("modinfo", "-F", "license", "nvidia"): "modinfo-license.txt",
}


class StatResult:
    def __init__(self, free_gib, total_gib):
        self.f_frsize = 4096
        self.f_bavail = free_gib * 2**30 // 4096
        self.f_blocks = total_gib * 2**30 // 4096


class FakeProbe:
    """Same interface as gpuhost_hostfacts.Probe, answering from dicts."""

    def __init__(
        self, files=None, dirs=None, links=None, commands=None, disks=None, machine="x86_64"
    ):
        self.files = dict(files or {})
        self.dirs = {k: list(v) for k, v in (dirs or {}).items()}
        self.links = dict(links or {})
        self.commands = dict(commands or {})
        self.disks = dict(disks if disks is not None else {"/": (100, 200)})
        self.calls = []
        self._machine = machine

    def read(self, path):
        return self.files.get(path)

    def read_bytes(self, path):
        value = self.files.get(path)
        return value.encode() if isinstance(value, str) else value

    def listdir(self, path):
        if path in self.dirs:
            return sorted(self.dirs[path])
        return None

    def exists(self, path):
        if path in self.files or path in self.dirs or path in self.disks:
            return True
        prefix = path.rstrip("/") + "/"
        return any(f.startswith(prefix) for f in self.files)

    def readlink_name(self, path):
        return self.links.get(path)

    def run(self, argv):
        self.calls.append(tuple(argv))
        answer = self.commands.get(tuple(argv))
        if answer is None:
            return None, "", f"{argv[0]} not found"
        return answer

    def statvfs(self, path):
        if path not in self.disks:
            raise OSError(2, "No such file or directory")
        return StatResult(*self.disks[path])

    def machine(self):
        return self._machine


def _sysfs_pci(text, files, dirs, links):
    devices = dirs.setdefault("/sys/bus/pci/devices", [])
    for line in text.splitlines():
        match = re.match(r"/sys/bus/pci/devices/(\S+) (.*)", line)
        if not match:
            continue
        bus_id, rest = match.groups()
        fields = dict(part.partition("=")[::2] for part in re.split(r"\s(?=\w+=)", rest))
        fields = {key: value.strip() for key, value in fields.items()}
        base = f"/sys/bus/pci/devices/{bus_id}"
        devices.append(bus_id)
        files[f"{base}/vendor"] = "0x10de\n"
        files[f"{base}/class"] = fields.get("class", "") + "\n"
        files[f"{base}/device"] = fields.get("device", "") + "\n"
        files[f"{base}/numa_node"] = fields.get("numa", "-1") + "\n"
        for key, prefix in (("cur", "current"), ("max", "max")):
            speed, _, width = fields.get(key, "/").rpartition("/")
            if speed:
                files[f"{base}/{prefix}_link_speed"] = speed + "\n"
            if width:
                files[f"{base}/{prefix}_link_width"] = width + "\n"
        if fields.get("driver"):
            links[f"{base}/driver"] = fields["driver"]
        if fields.get("iommu"):
            links[f"{base}/iommu_group"] = fields["iommu"]


def load_fixture(name, disks=None):
    """FakeProbe for tests/fixtures/gpu-hosts/<name>."""
    base = FIXTURES / name
    files, dirs, links, commands = {}, {}, {}, {}
    for argv, filename in _COMMANDS.items():
        path = base / filename
        if path.exists():
            text = path.read_text()
            rc = 1 if argv[0] == "systemd-detect-virt" and text.strip() == "none" else 0
            if filename.startswith("topo") and text.startswith("RC="):
                first, _, text = text.partition("\n")
                rc = int(first[3:])
            commands[argv] = (rc, text, "")
    tree = base / "files"
    if tree.is_dir():
        for dirpath, _dirnames, filenames in os.walk(tree):
            for filename in filenames:
                full = Path(dirpath) / filename
                files["/" + str(full.relative_to(tree))] = full.read_text()
    if (base / "sysfs-pci.txt").exists():
        _sysfs_pci((base / "sysfs-pci.txt").read_text(), files, dirs, links)
    else:
        dirs.setdefault("/sys/bus/pci/devices", [])
    if (base / "dirs.txt").exists():
        for line in (base / "dirs.txt").read_text().splitlines():
            if line.strip():
                path, *entries = line.split()
                dirs[path] = entries
    return FakeProbe(files, dirs, links, commands, disks)


def template_env():
    """A jinja2 environment that renders the roles' unit and rule templates as Ansible would,
    for the filters and tests they use: strict (an undefined variable fails), trim_blocks, the
    `do` extension, `comment`, `bool`, `search`/`match`, and gpuhost's exec_start/unit_text
    and listen filters (the plugins' own functions)."""
    import jinja2
    from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_listen import FilterModule
    from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_profile_render import (
        exec_start,
        unit_text,
    )

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, extensions=["jinja2.ext.do"]
    )
    env.filters["comment"] = lambda text: "# " + text
    env.filters["gpuhost.gpu.exec_start"] = lambda argv: exec_start([str(a) for a in argv])
    env.filters["gpuhost.gpu.unit_text"] = unit_text
    for name, function in FilterModule().filters().items():
        env.filters[f"gpuhost.gpu.{name}"] = function
    env.filters["bool"] = lambda v: (
        v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    )
    env.tests["search"] = lambda value, pattern: re.search(pattern, str(value)) is not None
    env.tests["match"] = lambda value, pattern: re.match(pattern, str(value)) is not None
    return env


def run_playbook(args, facts_dir, env=None, timeout=300):
    """The real ansible-playbook of this venv with the project's ansible.cfg, run from the
    repository root: `args` after the command, the fact cache in `facts_dir` (kept out of
    the project's .cache/), `env` added to the environment. Returns the CompletedProcess;
    its output is stdout + stderr."""
    import subprocess
    import sys

    full_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts_dir),
        **(env or {}),
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), *map(str, args)],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_role_findings(tmp_path, role, *args):
    """Role `role` on this machine (local connection, this venv's Python), `args` after the
    command; a post task copies gpuhost_findings to a file (the run's one change). Returns
    (the CompletedProcess, the findings)."""
    import json
    import sys

    play = tmp_path / "play.yml"
    play.write_text(
        f"- hosts: localhost\n  gather_facts: false\n  roles: [{role}]\n"
        "  post_tasks:\n    - ansible.builtin.copy:\n"
        "        content: '{{ gpuhost_findings | to_json }}'\n"
        f"        dest: {tmp_path}/findings.json\n      check_mode: false\n"
    )
    proc = run_playbook(
        [play, "-c", "local", "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", *args],
        tmp_path / "facts",
    )  # fmt: skip
    out = tmp_path / "findings.json"
    return proc, json.loads(out.read_text()) if out.exists() else None


def run_debug_play(tmp_path, *messages, timeout=120):
    """The real ansible-playbook on localhost, one debug task per message (a Jinja string):
    how a test asks Ansible itself what a filter or test of the collection renders.
    Returns (rc, log)."""
    import json

    play = tmp_path / "play.yml"
    tasks = "".join(
        f"    - ansible.builtin.debug:\n        msg: {json.dumps(m)}\n" for m in messages
    )
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + tasks)
    out = run_playbook(["-i", "localhost,", play], tmp_path / "facts", timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def cli_env(runs: Path, **extra: str) -> dict[str, str]:
    """The environment a test runs the gpuhost console script with: this process's, without
    the caller's GPUHOST_* settings, its run records under `runs`. The one GPUHOST_ setting
    kept is the test session's lock directory (tests/conftest.py), so that the suite never
    waits on, or fails beside, a gpuhost run or a second test session on the same machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUHOST_")}
    if "GPUHOST_LOCK_DIR" in os.environ:
        env["GPUHOST_LOCK_DIR"] = os.environ["GPUHOST_LOCK_DIR"]
    env.update({"GPUHOST_RUNS_DIR": str(runs), "COLUMNS": "200", **extra})
    return env


STANDIN_SCRIPT = Path(__file__).parent / "standin" / "sglang_standin.py"


def free_port(ports: range) -> int:
    """A loopback port of `ports` nothing listens on now."""
    import socket

    import pytest

    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail(f"no free loopback port in {ports.start}-{ports.stop - 1}")


def serve_standin(log_path: Path, ports: range, *args: str, timeout: float = 30):
    """Generator for a fixture: the SGLang stand-in (tests/standin, a test double) on a free
    loopback port of `ports` with `args`, its output in log_path; yields (port, process) once
    the port is open, stops it after."""
    import socket
    import subprocess
    import sys
    import time

    import pytest

    port = free_port(ports)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(STANDIN_SCRIPT), "--port", str(port), "--host", "127.0.0.1",
             "--standin-load-seconds", "0", "--standin-warmup-seconds", "0", *args],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail("the stand-in did not open its port: " + log_path.read_text())
                time.sleep(0.05)
        try:
            yield port, proc
        finally:
            proc.terminate()
            proc.wait(timeout=10)
