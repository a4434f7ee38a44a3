#!/usr/bin/env python3
"""Find the project's tools for the scripts under bench/ and scripts/ (the one helper).

The venv's bin/ (ansible-playbook, ansible-config, molecule, gpuhost, uv) is on PATH only in
an activated shell; `.venv/bin/python bench/x.py` and `bench/x.sh` run without it. This
module puts the project's venv first on PATH (for the script and everything it starts) and
checks what the script needs, so that a missing piece ends in one line saying what to run
first (exit 2), never in a traceback from deep inside a subprocess call.

Python scripts:

    helper = REPO / "scripts" / "project_tools.py"
    spec = importlib.util.spec_from_file_location("project_tools", helper)
    project_tools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(project_tools)
    project_tools.setup("bench/x.py", ["molecule", "gpuhost", "docker-daemon"])
    project_tools.setup_check_done("bench/x.py")

Shell scripts (stdlib only, so the system python3 runs it):

    eval "$(python3 scripts/project_tools.py bench/x.sh ansible-playbook || echo exit 2)"

With GPUHOST_SETUP_CHECK=1 in the environment a script stops after its setup check: it
prints "<script>: setup ok ..." and exits 0 (tests/test_readme_commands.py runs every
documented command that way).

A script that starts docker containers asks first, after its setup check:

    add_start_flag(parser, "two blank sandboxes")   # --start-containers
    ...
    confirm_containers("bench/x.py", args.start_containers, "two blank sandboxes")

Without the flag it asks on a terminal and otherwise stops with one line naming the flag
(exit 2); nothing is started unasked (tests/test_bench_setup.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_CHECK_ENV = "GPUHOST_SETUP_CHECK"
# What to run first when a requirement is missing; anything else is "install it".
VENV_HINT = "make venv"
HINTS = {
    "docker": "make docker",
    "dockerd": "make docker",
    "debootstrap": "make docker",
    "docker-daemon": "make docker",
    "image": "make images",
}
VENV_TOOLS = frozenset(
    {
        "ansible",
        "ansible-builder",
        "ansible-config",
        "ansible-galaxy",
        "ansible-lint",
        "ansible-playbook",
        "ansible-runner",
        "gpuhost",
        "molecule",
        "pytest",
        "ruff",
        "uv",
        "yamllint",
    }
)


class SetupError(Exception):
    """A requirement is missing; str() is the one line to print."""


def venv_bins(executable: str | None = None, repo: Path = REPO) -> list[Path]:
    """bin/ directories of the project's venv, best first: the running interpreter's when it
    is a venv (`.venv/bin/python bench/x.py`; sys.executable is not resolved, so this is the
    venv's bin/, not /usr/bin), then the repository's .venv/bin."""
    found: list[Path] = []
    exe = Path(executable or sys.executable)
    if (exe.parent.parent / "pyvenv.cfg").is_file():
        found.append(exe.parent)
    own = repo / ".venv" / "bin"
    if own.is_dir() and own not in found:
        found.append(own)
    return found


def tool_path(path: str | None = None, bins: Iterable[Path] | None = None) -> str:
    """PATH with the venv's bin/ first (each directory once)."""
    first = [str(b) for b in (venv_bins() if bins is None else bins)]
    rest = [p for p in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys([*first, *(p for p in rest if p)]))


def hint(requirement: str) -> str:
    if requirement in VENV_TOOLS:
        return VENV_HINT
    return HINTS.get(requirement.split(":", 1)[0], f"install {requirement}")


def _docker_ok(*argv: str, path: str) -> bool:
    docker = shutil.which("docker", path=path)
    if not docker:
        return False
    try:
        proc = subprocess.run(
            [docker, *argv], capture_output=True, timeout=30, check=False, env={"PATH": path}
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def missing(requirements: Iterable[str], path: str) -> list[str]:
    """The requirements not met on `path`: tool names, `docker-daemon` (a daemon answers)
    and `image:NAME` (a local docker image)."""
    absent = []
    for req in requirements:
        if req == "docker-daemon":
            ok = _docker_ok("info", path=path)
        elif req.startswith("image:"):
            ok = _docker_ok("image", "inspect", req.split(":", 1)[1], path=path)
        else:
            ok = shutil.which(req, path=path) is not None
        if not ok:
            absent.append(req)
    return absent


def message(script: str, absent: list[str]) -> str:
    """The one line for what is missing and what to run first."""
    steps = list(dict.fromkeys(hint(r) for r in absent))
    run = " then ".join(f"`{s}`" if s.startswith("make ") else s for s in steps)
    return f"{script}: needs {', '.join(absent)}; run {run} first"


def check(script: str, requirements: Iterable[str], path: str) -> None:
    absent = missing(requirements, path)
    if absent:
        raise SetupError(message(script, absent))


def setup(script: str, requirements: Iterable[str] = ()) -> str:
    """Put the venv first on this process's PATH (inherited by every subprocess), check the
    requirements, and return the PATH. Missing ones: one line on stderr, exit 2."""
    path = tool_path(os.environ.get("PATH", ""))
    os.environ["PATH"] = path
    try:
        check(script, requirements, path)
    except SetupError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    return path


def ok_line(script: str, path: str) -> str:
    return f"{script}: setup ok (tools from {path.split(os.pathsep)[0]})"


def setup_check_done(script: str) -> None:
    """In setup-check mode (GPUHOST_SETUP_CHECK=1) stop here: setup is fine, exit 0."""
    if os.environ.get(SETUP_CHECK_ENV) == "1":
        print(ok_line(script, os.environ.get("PATH", "")))
        raise SystemExit(0)


def shell(script: str, requirements: list[str], environ: Mapping[str, str]) -> tuple[str, int]:
    """Shell code for a shell script to eval: export PATH, or print the message and exit 2;
    in setup-check mode the tool check is the script's setup check, so it ends there."""
    path = tool_path(environ.get("PATH", ""))
    try:
        check(script, requirements, path)
    except SetupError as exc:
        return f"echo {shlex.quote(str(exc))} >&2; exit 2", 2
    code = f"export PATH={shlex.quote(path)}"
    if environ.get(SETUP_CHECK_ENV) == "1":
        code += f"; echo {shlex.quote(ok_line(script, path))}; exit 0"
    return code, 0


START_FLAG = "--start-containers"


def add_start_flag(parser, what: str) -> None:
    """The flag that lets a script start its containers (argparse; dest start_containers)."""
    parser.add_argument(
        START_FLAG,
        action="store_true",
        help=f"start the docker containers this needs ({what}); without it: ask on a "
        "terminal, else stop",
    )


def confirm_containers(script: str, given: bool, what: str, ask=None) -> None:
    """Go on only when starting containers was asked for: the flag, or "y" at the prompt
    (asked only on a terminal, or through `ask`). Otherwise one line on stderr, exit 2."""
    if given:
        return
    if ask is None and sys.stdin is not None and sys.stdin.isatty():
        ask = input
    if ask is not None:
        answer = ask(f"{script} starts docker containers ({what}). Start them? [y/N] ")
        if answer.strip().lower() in ("y", "yes"):
            return
    print(
        f"{script}: starts docker containers ({what}); run it again with {START_FLAG} "
        "to start them",
        file=sys.stderr,
    )
    raise SystemExit(2)


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0].startswith("-"):
        print(
            "usage: project_tools.py SCRIPT [REQUIREMENT ...]  (prints shell code)", file=sys.stderr
        )
        return 2
    code, rc = shell(argv[0], argv[1:], os.environ)
    print(code)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
