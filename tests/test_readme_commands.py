"""Every bench/ and scripts/ command the READMEs document runs as written, from a shell
where the venv is NOT activated (its bin/ is not on PATH), at least through its setup check
(GPUHOST_SETUP_CHECK=1 stops each script right after it): no Python traceback, and either
"setup ok" or the one line saying what to run first - never a tool of the venv missing.
The commands are taken from the Markdown as spelled there, so a new documented command is
tested the day it is written down."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("project_tools", ROOT / "scripts/project_tools.py")
project_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(project_tools)

DOCS = [
    ROOT / "README.md",
    *sorted(ROOT.glob("roles/*/README.md")),
    *sorted(ROOT.glob("docs/*.md")),
]
# A command: optionally an interpreter, then a file under bench/ or scripts/ and its arguments.
COMMAND = re.compile(
    r"^(?:(?:\.venv/bin/python3?|python3|bash) )?(?:bench|scripts)/[\w.-]+\.(?:py|sh)(?: [^`]*)?$"
)
# The one line a script prints when something is missing (scripts/project_tools.py).
MESSAGE = re.compile(r"^(?:bench|scripts)/[\w.-]+: needs (?P<what>[^;]+); run (?P<run>.+) first$")


def documented_commands() -> list[tuple[str, str]]:
    """(command, where) from inline code spans and fenced code blocks (a leading `$ ` dropped)."""
    found: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        candidates = re.findall(r"`([^`\n]+)`", text)
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
            candidates += [line.removeprefix("$ ").strip() for line in block.splitlines()]
        for cand in candidates:
            cand = cand.strip()
            if not COMMAND.match(cand):
                continue
            script = next(w for w in cand.split() if w.startswith(("bench/", "scripts/")))
            if script == "scripts/project_tools.py":
                continue  # the helper named in prose, not a command
            assert (ROOT / script).is_file(), f"{doc.name} documents {cand!r}: no such script"
            found.setdefault(cand, str(doc.relative_to(ROOT)))
    return sorted(found.items())


def shell_env(**extra: str) -> dict[str, str]:
    """A non-activated shell: no VIRTUAL_ENV, and no venv bin/ (of this checkout or any other)
    on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "GPUHOST_SETUP_CHECK")}
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not (Path(p).parent / "pyvenv.cfg").is_file()
    )
    env.update(extra)
    return env


COMMANDS = documented_commands()


def test_the_readme_commands_are_found():
    # docs/numbers.md name these three; finding fewer means the parser broke.
    spelled = {c for c, _ in COMMANDS}
    assert {
        ".venv/bin/python bench/python_env.py",
        ".venv/bin/python bench/rolling_update.py",
        "bench/nccl-allreduce.sh OUT.json -e nccl_verify_python=/opt/torch/.venv/bin/python",
    } <= spelled, spelled


def test_the_test_shell_has_no_venv_tools():
    env = shell_env()
    for tool in ("ansible-config", "ansible-playbook", "molecule", "gpuhost"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool


@pytest.mark.parametrize(("command", "where"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_documented_command_runs_as_written(command, where):
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=shell_env(GPUHOST_SETUP_CHECK="1"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, f"{where}: {command}\n{out}"
    if proc.returncode == 0:
        assert re.search(r": setup ok \(tools from .*/\.venv/bin\)$", proc.stdout.strip()), out
        return
    # Only a piece outside the venv may be missing here (docker, a base image), and it is said
    # in one line.
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, f"{where}: {command}\n{out}"
    said = MESSAGE.match(lines[0])
    assert said, lines[0]
    assert not set(said.group("what").split(", ")) & project_tools.VENV_TOOLS, lines[0]


@pytest.fixture(scope="module")
def bare_clone(tmp_path_factory) -> Path:
    """bench/ and scripts/ of a fresh clone before `make venv`: no .venv."""
    clone = tmp_path_factory.mktemp("clone")
    for sub in ("bench", "scripts"):
        shutil.copytree(ROOT / sub, clone / sub)
    return clone


@pytest.mark.parametrize(("command", "where"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_without_a_venv_each_says_run_make_venv_first(bare_clone, command, where):
    # No .venv/bin/python on a fresh clone: the same script under the system python3.
    command = re.sub(r"^\.venv/bin/python3? ", "python3 ", command)
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=bare_clone,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 2, f"{command}\n{proc.stdout}{proc.stderr}"
    assert len(lines) == 1 and MESSAGE.match(lines[0]), proc.stderr
    assert "run `make venv`" in lines[0], lines[0]


def test_venv_bins_prefers_the_running_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    repo = tmp_path / "repo"
    (repo / ".venv" / "bin").mkdir(parents=True)
    bins = project_tools.venv_bins(str(venv / "bin" / "python"), repo)
    assert bins == [venv / "bin", repo / ".venv" / "bin"]
    # The system interpreter is no venv: only the checkout's .venv.
    assert project_tools.venv_bins("/usr/bin/python3", repo) == [repo / ".venv" / "bin"]
    path = project_tools.tool_path("/usr/bin:/bin:/usr/bin", bins)
    assert path.split(os.pathsep) == [
        str(venv / "bin"),
        str(repo / ".venv" / "bin"),
        "/usr/bin",
        "/bin",
    ]


def test_message_names_what_to_run_first():
    assert (
        project_tools.message(
            "bench/x.py", ["molecule", "docker-daemon", "image:gpuhost/debian:13"]
        )
        == "bench/x.py: needs molecule, docker-daemon, image:gpuhost/debian:13; run `make venv` "
        "then `make docker` then `make images` first"
    )
    code, rc = project_tools.shell("bench/x.sh", ["no-such-tool-gpuhost"], {"PATH": "/nonexistent"})
    assert rc == 2
    assert code.endswith("exit 2") and "install no-such-tool-gpuhost first" in code
