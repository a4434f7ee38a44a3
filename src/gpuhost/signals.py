"""SIGTERM and SIGHUP are handled like Ctrl-C.

A service manager stopping gpuhost, a closed terminal or `kill` must not leave
ansible-playbook running on (changing hosts with nobody watching) nor skip the cleanup of
the run record. While a signal handler from here is installed, each of the three raises
`Interrupted` (a KeyboardInterrupt) in the main thread, so one path handles them all:
runner.py cancels ansible-playbook through ansible-runner, the run record is scrubbed and
written, and the CLI exits 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP; `name` says which."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _raise(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def handled() -> Iterator[None]:
    """Around the CLI's work (main thread only): the three signals raise Interrupted; the
    previous handlers come back afterwards (main() may be called in-process, by tests)."""
    if not _main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def name_of(exc: KeyboardInterrupt) -> str:
    return exc.name if isinstance(exc, Interrupted) else "SIGINT"


@contextmanager
def deferred() -> Iterator[None]:
    """Hold the three signals back while the run record is cleaned up and written; the
    first that arrived meanwhile raises when the block ends (the record is complete)."""
    if not _main_thread():
        yield
        return
    pending: list[int] = []
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if pending:
        raise Interrupted(signal.Signals(pending[0]).name)
