"""Run one playbook through the ansible-runner Python API and collect its events."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpuhost import environment, handover, signals
from gpuhost.errors import GpuhostError
from gpuhost.events import EventCollector
from gpuhost.project import Project
from gpuhost.redaction import Scrubber, is_secret_name
from gpuhost.rundir import RunDir

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
    interrupted_by: str = ""  # SIGINT (Ctrl-C), SIGTERM or SIGHUP

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
    env: dict[str, str],
    scrubber: Scrubber | None = None,
) -> RunOutcome:
    """Blocks until the playbook ends; Ctrl-C (or SIGTERM, SIGHUP) cancels it and returns a
    canceled outcome. `env` is the whole environment ansible-playbook gets (environment.py);
    its secret-named variables and the -e values reach it through handover.py, never
    through ansible-runner (which writes what it gets into the run record). `scrubber`
    removes secrets from each event before ansible-runner writes it (redaction.Scrubber).

    ansible-runner runs the playbook in its own thread (run_async) so this thread stays free
    to take Ctrl-C: ansible-playbook runs in its own session (a pty) and never sees the
    terminal's SIGINT, so gpuhost stops it (Cancel) through ansible-runner's
    cancel_callback. A module already running on a host runs to its end, as with any
    interrupted Ansible run.
    """
    cancel = Cancel()
    scrubber = scrubber or Scrubber()
    with handover.serving(run_dir.runner_dir / "bin", env, request.extra_vars) as shim_env:
        plain = {k: v for k, v in env.items() if k not in handover.secret_env(env)}
        return _run(project, request, run_dir, collector, {**plain, **shim_env}, cancel, scrubber)


def _run(
    project: Project,
    request: RunRequest,
    run_dir: RunDir,
    collector: EventCollector,
    env: dict[str, str],
    cancel: Cancel,
    scrubber: Scrubber,
) -> RunOutcome:
    import ansible_runner  # deferred: a missing ansible-runner is reported as exit 2 earlier

    kwargs = {
        "private_data_dir": str(run_dir.runner_dir),
        "project_dir": str(project.root),
        "playbook": str(request.playbook),
        "inventory": [str(p) for p in request.inventories],
        "limit": request.limit,
        "tags": request.tags,
        "cmdline": _cmdline(request) or None,
        "verbosity": request.verbosity or None,
        # The run's fact cache at runs/<ts>/facts, in the plugin ansible.cfg names
        # (fact_caching: gpuhost.gpu.factfile, jsonfile's files decoded once per run).
        "envvars": {**env, "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(run_dir.facts_dir)},
        # Settings, env vars and the command line are handed over in memory, not written
        # under runner/env/; the -e values go through handover.py.
        "suppress_env_files": True,
        "ident": ARTIFACT_IDENT,
        # Not "jsonfile" (its default): ansible-runner would then set ANSIBLE_CACHE_PLUGIN to
        # its own jsonfile and the connection to its artifacts, over ansible.cfg and the above.
        "fact_cache_type": "",
        # A short poll so a cancel takes effect within a second, not pexpect's default 5.
        "settings": {"pexpect_timeout": 1},
        "quiet": True,
        "event_handler": cancel.watching(scrubber.watching(collector.handle)),
        "status_handler": _minimal_env,
        "cancel_callback": cancel.due,
    }
    crashed: list[BaseException] = []
    started = datetime.now(UTC)
    with _thread_errors(crashed):
        try:
            thread, runner = ansible_runner.run_async(**kwargs)
        except Exception as exc:  # ansible-runner's setup, before anything ran
            raise GpuhostError(f"ansible-runner could not run the playbook: {exc}") from None
        interrupted_by = _wait(thread, cancel)
    finished = datetime.now(UTC)
    if crashed:
        raise GpuhostError(f"ansible-runner could not run the playbook: {crashed[0]}")
    return RunOutcome(
        rc=runner.rc if isinstance(runner.rc, int) else -1,
        runner_status=str(runner.status),
        started_at=started,
        finished_at=finished,
        collector=collector,
        interrupted=bool(interrupted_by) or runner.status == "canceled",
        interrupted_by=interrupted_by,
    )


class Cancel:
    """Stops ansible-playbook the way Ansible wants to be stopped, then harder.

    ansible-runner's own cancel SIGKILLs ansible-playbook's process group, but Ansible's
    workers run in sessions of their own (WorkerProcess calls setsid), so a task in flight
    would go on without its parent. On a cancel request gpuhost sends ansible-playbook
    SIGTERM, which Ansible forwards to its workers before it ends; only if it is still
    there after GRACE_S does ansible-runner's kill follow. ansible-playbook's pid is the
    `pid` of the events it emits.
    """

    GRACE_S = 15.0

    def __init__(self) -> None:
        self.pid: int | None = None
        self.requested_at: float | None = None
        self.signalled = False

    def watching(self, handler: Callable[[dict], bool]) -> Callable[[dict], bool]:
        def handle(event: dict) -> bool:
            if self.pid is None and isinstance(event.get("pid"), int):
                self.pid = event["pid"]
            return handler(event)

        return handle

    def request(self) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    def due(self) -> bool:
        """ansible-runner's cancel_callback (polled each second from its thread): True
        when ansible-runner should kill the process group now."""
        if self.requested_at is None:
            return False
        if self.pid is not None and not self.signalled:
            self.signalled = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        return time.monotonic() - self.requested_at > self.GRACE_S


def _wait(thread: threading.Thread, cancel: Cancel) -> str:
    """Wait for ansible-runner's thread; Ctrl-C, SIGTERM or SIGHUP (signals.py) ask it to
    cancel. Returns the first signal's name, or "" when none came.

    Polls is_alive() instead of join(): on Python 3.11 a join interrupted by Ctrl-C can leave
    is_alive() False while the thread still runs.
    """
    interrupted_by = ""
    while thread.is_alive():
        try:
            time.sleep(0.2)
        except KeyboardInterrupt as exc:
            # Further signals only repeat the request; the kill is already coming.
            interrupted_by = interrupted_by or signals.name_of(exc)
            cancel.request()
    return interrupted_by


def _minimal_env(status: dict, runner_config: object) -> None:
    """ansible-runner's status_handler. On `starting`, before it writes the `command`
    artifact and starts ansible-playbook, the environment it built (the caller's whole
    environment plus its own and ours) is cut down to ours (environment.py) and what
    ansible-runner set itself, less every variable with a secret's name (an inherited
    HF_TOKEN too): those reach ansible-playbook through handover.py only."""
    if status.get("status") != "starting":
        return
    env = runner_config.env
    for key in list(env):
        inherited = key in os.environ and env[key] == os.environ[key]
        if (inherited and not environment.kept(key)) or is_secret_name(key):
            del env[key]


@contextmanager
def _thread_errors(found: list[BaseException]) -> Iterator[None]:
    """An exception in ansible-runner's thread is kept for a message, not printed as a
    thread traceback."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            found.append(args.exc_value)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous
