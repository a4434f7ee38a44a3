#!/usr/bin/env python3
"""Install one lock two ways into fresh venvs, with warm download caches, side by side.

  uv    the role's path: `uv venv` + `uv pip sync --require-hashes --no-build` (uv links
        files from its cache when the cache is on the venv's filesystem)
  copy  the same with UV_LINK_MODE=copy: what a host (or the molecule container) gets when
        uv's cache sits on another filesystem
  pip   the reference: `python -m venv` + plain `pip install -r <lock>`
  no-op the role python_env itself (ansible-playbook, connection local) re-run on the venv
        it has just verified: the marker names the lock, so the role only probes
  switch the role switched to another lock (--other-lock, a small test lock) and back: the
        first lock's venv is kept beside, so going back only moves the link; timed against
        the role reinstalling that venv (deleted first) - the rollback a kept venv saves

Both caches are warmed before the timed runs (uv: a sync into a throw-away venv; pip:
`pip download` of the whole lock into its HTTP cache), so the numbers compare installing,
not the network. Prints each wall time, the pip/uv ratio and the no-op time.

    bench/python_env.py [--lock locks/sglang-0.5.10.post1-cu128.txt] [--workdir DIR] [--role-only]

Needs ~20 GB free in --workdir (pip's cache and the copied venvs; removed at the end), the
project's venv (make venv: uv, ansible-playbook; found by scripts/project_tools.py, no
activated venv needed) and the lock's Python (3.11) on the machine. Exit status 0 when the
targets hold (uv >= 3x faster than pip, no-op <= 2 s, switching back >= 5x faster than
reinstalling), 1 when not, 2 on a setup error
(one line saying what is missing). GPUHOST_SETUP_CHECK=1 stops after the setup check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The one helper that finds the project's tools, loaded by its path (no sys.path edits).
_spec = importlib.util.spec_from_file_location("project_tools", REPO / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

SCRIPT = "bench/python_env.py"
DEFAULT_LOCK = REPO / "locks" / "sglang-0.5.10.post1-cu128.txt"
# A second lock to switch to and back from (tests/standin/locks/README.md).
OTHER_LOCK = REPO / "tests" / "standin" / "locks" / "standin-a.txt"
SPEEDUP_TARGET = 3.0
SWITCH_TARGET = 5.0
NOOP_TARGET_S = 2.0

ROLE_PLAYBOOK = """\
- name: Role python_env, timed from inside the play
  hosts: localhost
  connection: local
  gather_facts: false
  pre_tasks:
    - name: Start the clock
      ansible.builtin.set_fact:
        _bench_t0: "{{ now().timestamp() }}"
  roles:
    - role: python_env
  post_tasks:
    - name: Report the role's time and whether it synced
      ansible.builtin.debug:
        msg: "BENCH_ROLE {{ {'seconds': now().timestamp() - _bench_t0 | float,
                             'synced': gpuhost_python_env.synced} | to_json }}"
"""


def run(cmd: list[str], env: dict | None = None, quiet: bool = True) -> float:
    start = time.monotonic()
    proc = subprocess.run(
        cmd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-3000:]
        raise SystemExit(f"bench: {' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{tail}")
    return time.monotonic() - start


def python_for(lock: Path) -> str:
    text = lock.read_text()
    version = text.split("--python-version", 1)[1].split()[0] if "--python-version" in text else ""
    for candidate in (f"/usr/bin/python{version}", shutil.which(f"python{version}")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    print(f"{SCRIPT}: needs python{version} for {lock.name}; install it first", file=sys.stderr)
    raise SystemExit(2)


def uv_install(uv: str, python: str, lock: Path, venv: Path, env: dict) -> float:
    """The role's two commands (tasks/install.yml), timed together."""
    t = run([uv, "venv", "--quiet", "--python", python, str(venv)], env)
    cmd = [uv, "pip", "sync", "--quiet", "--require-hashes", "--no-build"]
    return t + run([*cmd, "--python", str(venv / "bin/python"), str(lock)], env)


def pip_install(python: str, lock: Path, venv: Path, pip_cache: Path) -> float:
    t = run([python, "-m", "venv", str(venv)])
    cmd = [str(venv / "bin/pip"), "install", "--quiet", "--cache-dir", str(pip_cache)]
    return t + run([*cmd, "-r", str(lock)], {"PIP_DISABLE_PIP_VERSION_CHECK": "1"})


def role_run(work: Path, lock: Path, python: str, **extra_vars) -> tuple[float, float, bool]:
    """Run role python_env once for `lock` (venvs under work/venvs, the link work/venv);
    returns the wall time, the time inside the play and whether it synced."""
    playbook = work / "role.yml"
    playbook.write_text("---\n" + ROLE_PLAYBOOK)
    # The shared settings (group_vars/all, docs/ARCHITECTURE.md "Settings") load beside it.
    if not (work / "group_vars").exists():
        (work / "group_vars").symlink_to(REPO / "group_vars")
    extra = {
        "python_env_venv_dir": str(work / "venv"),
        "python_env_venvs_dir": str(work / "venvs"),
        "python_env_lock_file": str(lock),
        "python_env_python": python,
        "python_env_uv_dir": str(work / "uv-tool"),
        "python_env_uv_cache_dir": os.environ.get("UV_CACHE_DIR")
        or str(Path.home() / ".cache" / "uv"),
        "python_env_compile_cache_dir": str(work / "cache"),
        "gpuhost_service_user": os.environ.get("USER", "root"),
        "gpuhost_service_group": subprocess.check_output(["id", "-gn"], text=True).strip(),
        "gpuhost_base_dir": str(work),
        "gpuhost_cache_dir": str(work / "cache"),
        "gpuhost_state_dir": str(work / "state"),
        # The role becomes the service account; here that is the user running the bench.
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        **extra_vars,
    }
    env = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    }
    cmd = ["ansible-playbook", "-i", "localhost,", "-e", json.dumps(extra), str(playbook)]
    start = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench: role python_env failed for {lock.name}:\n{proc.stdout[-4000:]}")
    found = re.search(r"BENCH_ROLE (\{.*?\})", proc.stdout.replace('\\"', '"'))
    if not found:
        raise SystemExit(f"bench: no BENCH_ROLE line in:\n{proc.stdout[-2000:]}")
    inside = json.loads(found.group(1))
    return wall, float(inside["seconds"]), bool(inside["synced"])


def role_noop(work: Path, lock: Path, python: str) -> tuple[float, float, bool]:
    """Run the role twice for `lock`; time the second run (wall, and inside the play)."""
    role_run(work, lock, python)
    return role_run(work, lock, python)


def role_switch(work: Path, lock: Path, other: Path, python: str) -> dict:
    """After role_noop: switch to `other` (a venv of its own), then back to `lock` (its venv
    is kept: the role only moves the link), then reinstall `lock` (its venv deleted first).
    Returns each run's time inside the play and whether it synced."""
    # The test lock holds no SGLang: its verification is the stand-in smoke test.
    smoke = {"python_env_standin_smoke": str(REPO / "tests" / "standin" / "python_env_smoke.py")}
    out = {"other": role_run(work, other, python, **smoke)}
    out["back"] = role_run(work, lock, python)
    venv = Path(os.readlink(work / "venv"))
    role_run(work, other, python, **smoke)
    shutil.rmtree(venv)
    out["reinstall"] = role_run(work, lock, python)
    return out


def install_times(
    uv: str, python: str, lock: Path, work: Path, pip_cache: Path, uv_env: dict, skip_copy: bool
) -> dict[str, float]:
    """uv (links), uv (copy) and pip into fresh venvs, after warming both caches."""
    print("bench: warming the caches (not timed)")
    uv_install(uv, python, lock, work / "warm-uv", uv_env)
    shutil.rmtree(work / "warm-uv")
    run([python, "-m", "venv", str(work / "warm-pip")])
    pip = str(work / "warm-pip/bin/pip")
    dl = ["--no-deps", "-d", str(work / "dl"), "-r", str(lock)]
    run([pip, "download", "--quiet", "--cache-dir", str(pip_cache), *dl])
    shutil.rmtree(work / "dl")
    shutil.rmtree(work / "warm-pip")

    times = {"uv": uv_install(uv, python, lock, work / "venv-uv", uv_env)}
    if not skip_copy:
        copy_env = {**uv_env, "UV_LINK_MODE": "copy"}
        times["copy"] = uv_install(uv, python, lock, work / "venv-copy", copy_env)
        shutil.rmtree(work / "venv-copy")
    times["pip"] = pip_install(python, lock, work / "venv-pip", pip_cache)
    shutil.rmtree(work / "venv-pip")
    shutil.rmtree(work / "venv-uv")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--skip-copy", action="store_true", help="leave out the copy-mode run")
    parser.add_argument(
        "--role-only",
        action="store_true",
        help="only the role's runs (no-op, switch back, reinstall): no pip, no cache warming",
    )
    parser.add_argument(
        "--other-lock",
        type=Path,
        default=OTHER_LOCK,
        help="the lock switched to and back from (a small test lock)",
    )
    args = parser.parse_args(argv)
    project_tools.setup(SCRIPT, ["uv", "ansible-playbook"])
    uv = shutil.which("uv")
    if not args.lock.is_file():
        print(
            f"{SCRIPT}: --lock {args.lock} is not a file; make lock writes locks/", file=sys.stderr
        )
        return 2
    python = python_for(args.lock)
    project_tools.setup_check_done(SCRIPT)
    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuhost-bench-python-env-", dir=args.workdir))
    pip_cache = work / "pip-cache"
    # uv's own cache (UV_CACHE_DIR or the user's), as the role would on a host.
    uv_env = {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    print(f"bench: {args.lock.name} with {python}; load average {os.getloadavg()[0]:.1f}")
    times: dict[str, float] = {}
    try:
        if not args.role_only:
            times = install_times(uv, python, args.lock, work, pip_cache, uv_env, args.skip_copy)
        else:
            # The role's own first run fills uv's cache (not timed).
            print("bench: --role-only: the role's runs only")
        noop_wall, noop_role, synced = role_noop(work, args.lock, python)
        switch = role_switch(work, args.lock, args.other_lock, python)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ratio = times["pip"] / times["uv"] if times else None
    if times:
        print(f"uv pip sync (role path, links from cache) {times['uv']:8.1f} s")
        if "copy" in times:
            print(
                f"uv pip sync, UV_LINK_MODE=copy          {times['copy']:8.1f} s"
                f"   (pip/copy {times['pip'] / times['copy']:.1f}x)"
            )
        print(f"pip install -r (reference)                {times['pip']:8.1f} s")
        print(
            f"ratio pip/uv                              {ratio:8.1f} x   "
            f"(target >= {SPEEDUP_TARGET}x)"
        )
    print(
        f"no-op re-run of role python_env           {noop_role:8.2f} s   "
        f"(target <= {NOOP_TARGET_S} s; ansible-playbook wall {noop_wall:.1f} s incl. "
        f"start-up; synced={synced})"
    )
    back, reinstall = switch["back"], switch["reinstall"]
    switch_ratio = reinstall[1] / max(back[1], 1e-9)
    print(
        f"switch back to the kept venv (role)       {back[1]:8.2f} s   (synced={back[2]})\n"
        f"reinstall the same venv (role)            {reinstall[1]:8.2f} s   "
        f"(synced={reinstall[2]})\n"
        f"ratio reinstall/switch back               {switch_ratio:8.1f} x   "
        f"(target >= {SWITCH_TARGET}x)"
    )
    ok = (
        (ratio is None or ratio >= SPEEDUP_TARGET)
        and noop_role <= NOOP_TARGET_S
        and not synced
        and not back[2]
        and reinstall[2]
        and switch_ratio >= SWITCH_TARGET
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
