"""Run one playbook through the ansible-runner Python API and collect its events."""

from __future__ import annotations

import os
import shlex
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpuhost.errors import GpuhostError
from gpuhost.events import EventCollector
from gpuhost.project import Project
from gpuhost.record import RunDir

# ansible-runner's artifact folder name under runs/<ts>/runner/artifacts/.
ARTIFACT_IDENT = "ansible"


@dataclass
class RunRequest:
    """What a gpuhost command asks Ansible to do; also what the report records."""

    command: str
    playbook: Path
    inventories: list[Path]
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    extra_vars: dict[str, object] = field(default_factory=dict)
    extra_var_files: list[Path] = field(default_factory=list)
    verbosity: int = 0


@dataclass
class RunOutcome:
    rc: int
    runner_status: str  # ansible-runner's: successful, failed, canceled, timeout
    started_at: datetime
    finished_at: datetime
    collector: EventCollector
    interrupted: bool = False

    @property
    def duration_s(self) -> float:
        return round((self.finished_at - self.started_at).total_seconds(), 3)


def _cmdline(request: RunRequest) -> str:
    args: list[str] = []
    if request.check:
        # Check mode without diff says "changed" but not what: the summary wants both.
        args += ["--check", "--diff"]
    if request.skip_tags:
        args += ["--skip-tags", request.skip_tags]
    for path in request.extra_var_files:
        args += ["-e", f"@{path}"]
    return shlex.join(args)


def run_playbook(
    project: Project,
    request: RunRequest,
    run_dir: RunDir,
    collector: EventCollector,
    ansible_bin: Path,
) -> RunOutcome:
    """Blocks until the playbook ends; Ctrl-C cancels it and returns a canceled outcome.

    ansible-runner runs in a worker thread so the main thread stays free to take Ctrl-C:
    ansible-playbook runs in its own session (a pty) and never sees the terminal's SIGINT,
    so gpuhost must cancel it through ansible-runner's cancel_callback. ansible-runner kills
    ansible-playbook; a module already running on a host runs to its end, as with any
    interrupted Ansible run.
    """
    import ansible_runner  # deferred: a missing ansible-runner is reported as exit 2 earlier

    cancel = threading.Event()
    box: dict[str, object] = {}
    env = {
        "ANSIBLE_CONFIG": str(project.ansible_cfg),
        "PATH": os.pathsep.join([str(ansible_bin), os.environ.get("PATH", "")]),
        # The stdout artifact is for people reading it later, not for a terminal.
        "ANSIBLE_NOCOLOR": "1",
    }
    kwargs = {
        "private_data_dir": str(run_dir.runner_dir),
        "project_dir": str(project.root),
        "playbook": str(request.playbook),
        "inventory": [str(p) for p in request.inventories],
        "limit": request.limit,
        "tags": request.tags,
        "extravars": request.extra_vars or None,
        "cmdline": _cmdline(request) or None,
        "verbosity": request.verbosity or None,
        "envvars": env,
        "ident": ARTIFACT_IDENT,
        # ansible-runner joins this onto its artifact dir; an absolute path puts the
        # fact cache at runs/<ts>/facts (it would override ANSIBLE_CACHE_PLUGIN_CONNECTION).
        "fact_cache": str(run_dir.facts_dir),
        "fact_cache_type": "jsonfile",
        # A short poll so a cancel takes effect within a second, not pexpect's default 5.
        "settings": {"pexpect_timeout": 1},
        "quiet": True,
        "event_handler": collector.handle,
        "cancel_callback": cancel.is_set,
    }

    done = threading.Event()

    def work() -> None:
        try:
            box["runner"] = ansible_runner.run(**kwargs)
        except BaseException as exc:  # surfaced below as a message, not a thread traceback
            box["error"] = exc
        finally:
            done.set()

    started = datetime.now(UTC)
    threading.Thread(target=work, name="ansible-runner", daemon=True).start()
    interrupted = False
    # Event.wait, not Thread.join: on Python 3.11 a join interrupted by Ctrl-C can leave
    # is_alive() False while the thread still runs.
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt:
            # Further Ctrl-C presses only repeat the request; the kill is already coming.
            interrupted = True
            cancel.set()
    finished = datetime.now(UTC)
    if "error" in box:
        raise GpuhostError(f"ansible-runner could not run the playbook: {box['error']}")
    runner = box["runner"]
    return RunOutcome(
        rc=runner.rc if isinstance(runner.rc, int) else -1,
        runner_status=str(runner.status),
        started_at=started,
        finished_at=finished,
        collector=collector,
        interrupted=interrupted or runner.status == "canceled",
    )
