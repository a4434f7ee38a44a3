"""The benches' setup paths, run for real (no GPU, no container started).

bench/nccl-allreduce.sh as docs/numbers.md shows it: the real script, the real bench/nccl.yml and
nccl role on this machine (connection local, no GPU: the role derives an empty env and skips
the sweep), into a scratch copy of the checkout's paths (the role's directories under tmp).
Before bench/group_vars linked the project's group_vars/, the role's settings check stopped
it ("nccl_env_overrides: not defined ..."), and an absolute OUT was written under the
checkout.

The container benches (bench/blank_to_serving.py, bench/rolling_update.py, bench/rebuild.py,
bench/noop_converge.py) check docker and its images before anything, and start containers
only with --start-containers: a `docker` on PATH that records its calls proves no `docker
run` happened.
"""

from __future__ import annotations

import grp
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTAINER_BENCHES = [
    "bench/blank_to_serving.py",
    "bench/rolling_update.py",
    "bench/rebuild.py",
    "bench/noop_converge.py",
]


def _shell_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "GPUHOST_SETUP_CHECK")}
    env.update(extra)
    return env


def test_nccl_bench_runs_with_the_project_group_vars(tmp_path):
    out = tmp_path / "out" / "nccl.json"
    group = grp.getgrgid(os.getgid()).gr_name
    dirs = {name: tmp_path / name for name in ("base", "config", "state")}
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "bench" / "nccl-allreduce.sh"),
            str(out),
            "-e",
            json.dumps(
                {
                    "gpuhost_base_dir": str(dirs["base"]),
                    "gpuhost_config_dir": str(dirs["config"]),
                    "gpuhost_state_dir": str(dirs["state"]),
                    "gpuhost_service_group": group,
                }
            ),
        ],
        cwd=tmp_path,  # OUT is absolute: it must land there, not under the checkout
        env=_shell_env(ANSIBLE_NOCOLOR="1"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert "not defined" not in log, log[-4000:]
    assert proc.returncode == 0, log[-4000:]
    recorded = json.loads(out.read_text())["gpuhost_nccl"]
    assert "error" not in recorded, recorded
    # The decision the role recorded, and the env file it wrote where the settings said.
    assert "env" in recorded, recorded
    assert (dirs["config"] / "nccl.env").is_file()
    assert "verify:" in proc.stdout


def test_nccl_bench_default_out_is_in_the_checkout_cache():
    text = (ROOT / "bench" / "nccl-allreduce.sh").read_text()
    assert 'out="${1:-$PWD/.cache/nccl-bench.json}"' in text
    link = ROOT / "bench" / "group_vars"
    assert link.is_symlink() and os.readlink(link) == "../group_vars"


def _fake_docker(tmp_path: Path, answers: dict[str, int]) -> tuple[Path, Path]:
    """A `docker` that records each call and answers `info` / `image inspect` as told."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "docker-calls"
    script = bindir / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$1" in\n'
        f"  info) exit {answers.get('info', 0)} ;;\n"
        f"  image) exit {answers.get('image', 0)} ;;\n"
        "esac\n"
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir, calls


def _run(script: str, bindir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = _shell_env(**extra)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _started(calls: Path) -> list[str]:
    """docker calls other than the setup check's read-only ones."""
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [c for c in lines if not c.startswith(("info", "image inspect"))]


@pytest.mark.parametrize("script", CONTAINER_BENCHES)
def test_container_bench_without_a_daemon_says_make_docker(tmp_path, script):
    bindir, calls = _fake_docker(tmp_path, {"info": 1})
    proc = _run(script, bindir)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "needs docker-daemon" in lines[0], proc.stderr
    assert "run `make docker`" in lines[0], lines[0]
    assert _started(calls) == []


@pytest.mark.parametrize("script", CONTAINER_BENCHES)
def test_container_bench_without_its_image_says_make_images(tmp_path, script):
    bindir, calls = _fake_docker(tmp_path, {"image": 1})
    proc = _run(script, bindir)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "image:gpuhost/debian:12" in lines[0], proc.stderr
    assert "`make images`" in lines[0], lines[0]
    assert _started(calls) == []


@pytest.mark.parametrize("script", CONTAINER_BENCHES)
def test_container_bench_starts_nothing_unasked(tmp_path, script):
    bindir, calls = _fake_docker(tmp_path, {})
    proc = _run(script, bindir)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{script}: starts docker containers"), lines[0]
    assert "--start-containers" in lines[0], lines[0]
    assert _started(calls) == []
    # The setup check alone passes on the same machine.
    ok = _run(script, bindir, GPUHOST_SETUP_CHECK="1")
    assert ok.returncode == 0 and ": setup ok" in ok.stdout, ok.stdout + ok.stderr


def test_consent_asks_on_a_terminal_and_stops_on_no(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("pt", ROOT / "scripts/project_tools.py")
    pt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pt)
    asked = []
    pt.confirm_containers(
        "bench/x.py", False, "two sandboxes", ask=lambda q: asked.append(q) or "y"
    )
    assert asked and "two sandboxes" in asked[0]
    pt.confirm_containers("bench/x.py", True, "two sandboxes", ask=lambda q: pytest.fail(q))
    with pytest.raises(SystemExit) as stop:
        pt.confirm_containers("bench/x.py", False, "two sandboxes", ask=lambda q: "")
    assert stop.value.code == 2
    assert "--start-containers" in capsys.readouterr().err
