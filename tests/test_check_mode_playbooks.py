"""Every entry playbook in check mode on a blank host (issue 34, item 1; docs/check-mode.md).

One fresh systemd container of gpuhost/debian:12 (the molecule shape: SYS_ADMIN, the host's
cgroup tree, tmpfs /run /run/lock /tmp; `--privileged` is refused here), never provisioned,
with the sandbox's settings (inventory/sandbox/group_vars: no driver, no CUDA) and the
sandbox's test doubles where a GPU host has the real things (tests/blank/sandbox.py
standin_doubles: GPU device nodes, an nvidia-smi replaying a recorded host, the hf CLI
double, and the stand-in `sglang` package in a venv of its own that the server's entry point
names, so /opt/gpuhost stays blank). Each playbook that applies to a lone host runs with --check and
must exit 0 and leave the container as it was (`docker diff` against the state before the
run, plus no service account, no /etc/gpuhost, no /opt/gpuhost, no unit):

- site.yml through `gpuhost check`, python_env on (the SGLang venv steps were the ones that
  failed): the plan names the account and venv steps it would take, and check_mode.unseen
  names the service account's steps, which check mode cannot run;
- the entry playbooks a user runs on their own, through ansible-playbook --check;
- last, site.yml again after python3-apt is purged: check_mode.unseen then also says that
  apt's plan was not seen and how to see it.

Not run here, and why:

- the stages site.yml imports (preflight, host, runtime, serve, router, metrics (on, the
  host also in monitoring), verify, and
  validate, which every playbook imports) run inside the site.yml runs above; verify.yml
  also runs on its own (its default verify_when_no_server: fail differs from site.yml's);
- playbooks/vm.yml, vm_destroy.yml, rebuild.yml: they need a Proxmox API (group
  proxmox_vms, run on the controller) and, for rebuild, a Proxmox node over SSH;
  tests/test_proxmox_rebuild.py runs them against the Proxmox stand-in;
- playbooks/adopt_apply.yml: `gpuhost adopt --apply` runs it only on a host with one
  hand-started server (a blank host has none, and the CLI refuses it before any run);
  molecule/adopt runs its check mode (`--apply --check`) beside such a server;
- playbooks/rollback.yml runs and must fail: a blank host has no previous config to go
  back to, and check mode says so as a real run would;

Runs in the unit suite where docker answers and the image is built (`make images`);
skipped, saying why, elsewhere. About 3 to 4 minutes on a 2-core machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPUHOST = Path(sys.executable).parent / "gpuhost"
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
IMAGE = "gpuhost/debian:12"
NAME = f"gpuhost-cmtest-{os.getpid()}"
SERVICE_USER = "gpuhost"
# The stand-in sglang package's venv (a test double), outside what a check run must leave blank.
STANDIN_VENV = "/usr/lib/gpuhost-standin/venv"
# The router's own port: the stand-in server on the same host holds sglang_server_port.
ROUTER_PORT = "30100"
# What a check run may leave in the container: Ansible's remote temp directory, apt's
# package cache and logs of its simulation, systemd's and the journal's own files.
BENIGN = (
    "/root/.ansible",
    "/var/cache/apt",
    "/var/log",
    "/var/lib/systemd/timers",
    "/var/tmp/systemd-private-",
)


def _docker_reason() -> str | None:
    if not shutil.which("docker"):
        return "no docker CLI on this machine"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return f"the docker daemon does not answer: {info.stderr.strip()[:200]}"
    image = subprocess.run(
        ["docker", "image", "inspect", IMAGE], capture_output=True, text=True, check=False
    )
    if image.returncode != 0:
        return f"no image {IMAGE} (build it with `make images`)"
    return None


_REASON = _docker_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"needs docker: {_REASON}")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


def _exec(*cmd: str) -> subprocess.CompletedProcess:
    return _run(["docker", "exec", NAME, *cmd])


def _diff() -> set[str]:
    out = _run(["docker", "diff", NAME])
    assert out.returncode == 0, out.stderr
    return set(out.stdout.splitlines())


def _changes(before: set[str]) -> list[str]:
    """What a run changed in the container beyond BENIGN (directories only holding changes
    below them left out)."""
    after = _diff()
    paths = [line.split(" ", 1)[1] for line in after]
    new = []
    for line in sorted(after - before):
        kind, path = line.split(" ", 1)
        if path.startswith(BENIGN):
            continue
        if kind == "C" and any(p.startswith(path.rstrip("/") + "/") for p in paths):
            continue
        new.append(line)
    return new


def _assert_blank(before: set[str]) -> None:
    assert _changes(before) == [], "the check run changed the container"
    assert _exec("getent", "passwd", SERVICE_USER).returncode == 2, "service account created"
    for path in ("/etc/gpuhost", "/opt/gpuhost", "/var/lib/gpuhost"):
        assert _exec("test", "-e", path).returncode == 1, f"{path} created"
    units = _exec("sh", "-c", "ls /etc/systemd/system/ | grep -i -e sglang -e gpuhost")
    assert units.stdout == "", f"units written: {units.stdout}"


def _sandbox():
    """tests/blank/sandbox.py (the test doubles a container gets), by its path."""
    spec = importlib.util.spec_from_file_location("blank_sandbox", ROOT / "tests/blank/sandbox.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inventory(where: Path, groups: tuple[str, ...]) -> Path:
    """The sandbox's settings for this container, in the groups named."""
    (where / "group_vars").mkdir(parents=True)
    host = {NAME: {"ansible_connection": "community.docker.docker",
                   "ansible_python_interpreter": "/usr/bin/python3"}}  # fmt: skip
    children = {"gpu_hosts": {"hosts": host}}
    children.update({g: {"hosts": {NAME: None}} for g in groups})
    (where / "hosts.yml").write_text(json.dumps({"all": {"children": children}}))
    sandbox = (ROOT / "inventory/sandbox/group_vars/gpu_hosts.yml").read_text()
    # The server's venv is the doubles' own (blank() made it), outside /opt/gpuhost.
    sandbox += f"sglang_server_entrypoint: [{STANDIN_VENV}/bin/python, -m, sglang.launch_server]\n"
    (where / "group_vars" / "gpu_hosts.yml").write_text(sandbox)
    return where


@pytest.fixture(scope="module")
def blank(tmp_path_factory):
    """A fresh, never provisioned systemd container, and an environment that keeps this
    test's facts and run records out of the checkout's."""
    _run(["docker", "rm", "-f", NAME])
    started = _run([
        "docker", "run", "-d", "--name", NAME, "--hostname", NAME,
        "--cap-add", "SYS_ADMIN", "--cgroupns", "host",
        "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        "--label", "owner=tests/test_check_mode_playbooks.py",
        IMAGE, "/lib/systemd/systemd",
    ])  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        state = ""
        for _ in range(60):
            state = _exec("systemctl", "is-system-running", "--wait").stdout.strip()
            if state:
                break
            time.sleep(1)
        assert state in ("running", "degraded"), f"systemd in {NAME}: {state or 'silent'}"
        _sandbox().standin_doubles(
            f"{NAME},",
            *("-e", "ansible_connection=community.docker.docker"),
            *("-e", "ansible_python_interpreter=/usr/bin/python3"),
            *("-e", "standin_hosts=all", "-e", f"standin_sglang_venv={STANDIN_VENV}"),
        )
        base = tmp_path_factory.mktemp("check-mode")
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(base / "facts"),
                "ANSIBLE_NOCOLOR": "1",
                "GPUHOST_RUNS_DIR": str(base / "runs"),
            }
        )
        yield {
            "env": env,
            "inv": _inventory(base / "inv", ()),
            "router_inv": _inventory(base / "router-inv", ("routers", "monitoring")),
            "runs": base / "runs",
        }
    finally:
        _run(["docker", "rm", "-f", NAME])


def _check_site(blank, *extra: str) -> dict:
    """`gpuhost check` (site.yml) on the blank host; its report.json."""
    before = _diff()
    proc = _run([str(GPUHOST), "check", *extra], cwd=ROOT, env=blank["env"])
    assert proc.returncode == 0, f"gpuhost check rc={proc.returncode}:\n{proc.stdout[-6000:]}"
    report = json.loads((blank["runs"] / "latest" / "report.json").read_text())
    assert report["check"] is True and report["status"] == "successful"
    _assert_blank(before)
    return report


def _unseen(report: dict) -> dict:
    found = [f for f in report["findings"][NAME] if f["check"] == "check_mode.unseen"]
    assert len(found) == 1, f"one check_mode.unseen expected: {report['findings'][NAME]}"
    return found[0]


def test_site_check_on_a_blank_host_with_python_env(blank):
    # The host is also a router and the monitoring host here, with metrics on: the router
    # stage (base and sglang_router) and both metrics plays run too, whose units a package
    # this run would install provides (their start steps and handlers must not fail).
    report = _check_site(
        blank,
        *("-i", str(blank["router_inv"]), "-e", "python_env_enabled=true"),
        *("-e", f"sglang_router_port={ROUTER_PORT}", "-e", "gpuhost_metrics_enabled=true"),
    )
    planned = {t["task"] for t in report["changed_tasks"]}
    # What it would do, not a failure: the account, and the venv steps as root.
    assert "base : Create the service account" in planned
    assert "python_env : Create the tool venv for uv" in planned
    assert (
        "sglang_server : Write the launcher, the device script, the server environment file"
        " (0600), the units and the port rule" in planned
    )
    assert "sglang_router : Render the systemd unit" in planned
    assert "metrics : Install the node exporter" in planned
    assert "metrics : Install Prometheus" in planned
    unseen = _unseen(report)
    assert f"service account '{SERVICE_USER}'" in unseen["message"]
    # python3-apt is there: apt planned (base's packages are in the plan), nothing to say.
    assert "base : Install base packages" in planned
    assert "python3-apt" not in unseen["message"]


# (playbook, expected rc, what the output must say, marks)
STANDALONE = [
    # `gpuhost verify`: a blank host has no server; in check mode that is a finding.
    ("verify.yml", 0, "verify.health  server not reachable", ()),
    # `gpuhost doctor` (always check mode).
    ("doctor.yml", 0, "doctor.server  sglang-server.service is not installed", ()),
    # `gpuhost adopt` (always check mode): no hand-started server on a blank host.
    ("adopt.yml", 0, f"adopt: 0 hand-started SGLang server(s) on {NAME}", ()),
    # `gpuhost bench`: the sweep runs as the service account, which does not exist yet.
    ("bench.yml", 0, f"skipping: [{NAME}] => (item=concurrency 1)", ()),
    # `gpuhost rollback`: nothing to go back to on a blank host, said as a real run says it.
    ("rollback.yml", 2, "no previous config is kept", ()),
    # `gpuhost update`: the rollout plans the first install.
    ("update.yml", 0, "check mode: sglang-server would be started and health-gated", ()),
]


@pytest.mark.parametrize(
    ("playbook", "rc", "says"),
    [pytest.param(p, rc, says, marks=marks, id=p) for p, rc, says, marks in STANDALONE],
)
def test_an_entry_playbook_in_check_mode_on_a_blank_host(blank, playbook, rc, says):
    before = _diff()
    cmd = [str(PLAYBOOK), "--check", "--diff", "-i", str(blank["inv"])]
    proc = _run([*cmd, str(ROOT / "playbooks" / playbook)], cwd=ROOT, env=blank["env"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, f"{playbook} rc={proc.returncode}:\n{out[-6000:]}"
    assert says in out
    _assert_blank(before)


def test_site_check_without_python3_apt_says_what_it_could_not_see(blank):
    # Last: the container keeps no python3-apt afterwards.
    purge = _exec("apt-get", "purge", "-y", "-q", "python3-apt")
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert _exec("python3", "-c", "import apt_pkg").returncode != 0
    report = _check_site(blank, "-i", str(blank["inv"]))
    unseen = _unseen(report)
    assert "python3-apt is not installed" in unseen["message"]
    assert f"service account '{SERVICE_USER}'" in unseen["message"]
    assert "apt-get install python3-apt" in unseen["fix"]
    # apt's steps skipped; the rest of the plan is still there.
    planned = {t["task"] for t in report["changed_tasks"]}
    assert "base : Install base packages" not in planned
    assert "base : Create the service account" in planned
