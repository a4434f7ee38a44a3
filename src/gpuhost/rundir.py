"""The run record's directory: runs/<UTC timestamp>/.

Layout of one run:
    runs/<ts>/runner/      ansible-runner private_data_dir (artifacts/ansible/ holds stdout,
                           job_events/, rc, status, command)
    runs/<ts>/facts/       the run's jsonfile fact cache
    runs/<ts>/report.json  what `gpuhost report` and --json read
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuhost.errors import GpuhostError


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def runner_dir(self) -> Path:
        return self.path / "runner"

    @property
    def facts_dir(self) -> Path:
        return self.path / "facts"

    @property
    def report_path(self) -> Path:
        return self.path / "report.json"


def create_run_dir(root: Path) -> RunDir:
    """A fresh runs/<UTC timestamp>/; a second run within the same second gets a suffix."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuhostError(f"cannot create the runs directory {root}: {exc.strerror}") from None
    for attempt in range(100):
        path = root / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            # 0700: artifacts hold host details and facts that are nobody else's business.
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        run_dir = RunDir(path)
        run_dir.runner_dir.mkdir(mode=0o700)
        run_dir.facts_dir.mkdir(mode=0o700)
        return run_dir
    raise GpuhostError(f"cannot create a run directory under {root}")
