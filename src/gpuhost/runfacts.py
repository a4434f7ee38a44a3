"""Read a past run back: its report.json, the gpuhost_* facts it set, its bench JSON lines.

Facts come from the job events in the run's artifacts, not from the jsonfile fact cache:
ansible-core 2.19 writes that cache as a tagged payload only its own deserializer reads
(see events.py). Each run has its own fact cache, so a `gpuhost bench` run knows nothing of
the GPUs that `gpuhost provision` read; `with_history` fills such gaps from the newest
earlier run of the same runs directory that has them, and says which run that was.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from gpuhost.errors import GpuhostError
from gpuhost.events import with_items

FACT_PREFIX = "gpuhost_"
# The facts a report shows; a later run's value of one of these replaces an earlier run's.
REPORT_FACTS = (
    "gpuhost_gpu",
    "gpuhost_host",
    "gpuhost_nccl",
    "gpuhost_sglang",
    "gpuhost_sglang_server",
    "gpuhost_python_env",
    "gpuhost_verify",
    "gpuhost_bench",
    "gpuhost_findings",
)
# Taken from an earlier run when this one lacks them (the report names that run): the host,
# its settings and the last verification. Bench results never are: a bench table always
# belongs to the run that measured it.
HISTORY_FACTS = (
    "gpuhost_gpu",
    "gpuhost_host",
    "gpuhost_nccl",
    "gpuhost_sglang",
    "gpuhost_python_env",
    "gpuhost_verify",
)
_EVENT_FILE = re.compile(r"^(\d+)-")


@dataclass
class Run:
    path: Path
    report: dict
    facts: dict[str, dict] = field(default_factory=dict)  # host -> fact name -> value
    borrowed: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> fact -> run name
    bench_lines: dict[str, list[dict]] = field(default_factory=dict)  # host -> JSON lines
    # When each run the facts come from started (this run and the ones borrowed from).
    started: dict[str, datetime | None] = field(default_factory=dict)  # run name -> time

    @property
    def name(self) -> str:
        return self.path.name

    def source(self, host: str, fact: str) -> str:
        """The run a host's fact comes from: an earlier one's name, else this run's."""
        return self.borrowed.get(host, {}).get(fact, self.name)

    def age(self, source: str) -> str | None:
        """How much older the run `source` is than this one, in words (None: this run, or
        a run without a start time)."""
        then, now = self.started.get(source), self.started.get(self.name)
        if source == self.name or then is None or now is None:
            return None
        return f"{_ago(now - then)} before this run"

    def source_text(self, source: str) -> str:
        """`run <name> (<age>)`, or `this run`."""
        if source == self.name:
            return "this run"
        age = self.age(source)
        return f"run {source}" + (f" ({age})" if age else "")

    @property
    def hosts(self) -> list[str]:
        return sorted(set(self.report.get("hosts") or {}) | set(self.facts))


def _ago(delta: timedelta) -> str:
    minutes = max(0, int(delta.total_seconds() // 60))
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes // 60} h {minutes % 60} min"
    return f"{minutes // (24 * 60)} days"


def started_at(report: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(str(report.get("started_at")))
    except ValueError:
        return None


def resolve_run(value: str, runs_root: Path) -> Path:
    """A run directory from a path, a name under the runs root, or `latest`."""
    candidates = [Path(value).expanduser(), runs_root / value]
    for path in candidates:
        if (path / "report.json").is_file():
            return path.resolve()
    raise GpuhostError(
        f"no run record at {value!r} (looked for report.json in {candidates[0]} and "
        f"{candidates[1]}); list them with: ls {runs_root}"
    )


def job_events(artifacts: Path) -> list[dict]:
    """ansible-runner's job events under an artifacts directory (<ident>/job_events/*.json),
    in the order they happened; a file that does not parse is left out. The one reader of
    job events: facts (below), the timeline's stages and a rebuild's stage times use it."""
    files = list(Path(artifacts).glob("*/job_events/*.json"))

    def order(path: Path) -> tuple[int, str]:
        match = _EVENT_FILE.match(path.name)
        return (int(match.group(1)) if match else 0, path.name)

    events = []
    for path in sorted(files, key=order):
        try:
            event = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def run_events(run_dir: Path) -> list[dict]:
    """The job events of a gpuhost run record (runs/<ts>/runner/artifacts)."""
    return job_events(run_dir / "runner" / "artifacts")


# role verify's public decision (roles/verify/tasks/main.yml, roles/verify/README.md):
# false when the server's unit is absent and verify_when_no_server is skip, so nothing was
# verified on that host.
SERVER_INSTALLED_FACT = "verify_server_installed"


def hosts_without_server(run_dir: Path) -> list[str]:
    """Hosts where role verify found no server installed (its last decision in the run)."""
    found = facts_from_events(run_dir, names=(SERVER_INSTALLED_FACT,))
    return sorted(
        host
        for host, facts in found.items()
        if str(facts.get(SERVER_INSTALLED_FACT)).lower() in ("false", "no", "0")
    )


def facts_from_events(run_dir: Path, names: tuple[str, ...] = ()) -> dict[str, dict]:
    """host -> {gpuhost_* fact (or one of `names`): last value set in the run}."""
    facts: dict[str, dict] = {}
    for event in run_events(run_dir):
        if event.get("event") != "runner_on_ok":
            continue
        data = event.get("event_data") or {}
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        host = data.get("host")
        if not host:
            continue
        for result in with_items(res):
            found = result.get("ansible_facts")
            if isinstance(found, dict):
                for name, value in found.items():
                    if name.startswith(FACT_PREFIX) if not names else name in names:
                        facts.setdefault(host, {})[name] = value
    return facts


def run_facts(run_dir: Path) -> tuple[dict[str, dict], datetime | None]:
    """The facts a run recorded in report.json (gpuhost verify/bench), else its events; and
    when the run started."""
    try:
        report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = {}
    report = report if isinstance(report, dict) else {}
    stored = report.get("facts")
    facts = stored if isinstance(stored, dict) else facts_from_events(run_dir)
    return facts, started_at(report)


def _bench_lines(run_dir: Path) -> dict[str, list[dict]]:
    lines: dict[str, list[dict]] = {}
    for path in sorted((run_dir / "bench").glob("*.jsonl")):
        rows = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            raw = raw.strip()
            if raw.startswith("{"):
                try:
                    rows.append(json.loads(raw))
                except ValueError:
                    continue
        lines[path.stem] = rows
    return lines


def load_run(run_dir: Path) -> Run:
    try:
        report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GpuhostError(f"cannot read {run_dir / 'report.json'}: {exc}") from None
    run = Run(path=run_dir, report=report)
    run.started[run.name] = started_at(report)
    stored = report.get("facts")
    run.facts = stored if isinstance(stored, dict) else facts_from_events(run_dir)
    run.bench_lines = _bench_lines(run_dir)
    # Older records without a bench/ folder still carry the lines in the fact.
    for host, facts in run.facts.items():
        bench = facts.get("gpuhost_bench")
        if host not in run.bench_lines and isinstance(bench, dict) and bench.get("results"):
            run.bench_lines[host] = list(bench["results"])
    return run


def with_history(run: Run, max_runs: int = 50) -> Run:
    """Fill host/settings facts this run lacks from earlier runs beside it (newest first)."""
    earlier = sorted(
        (p for p in run.path.parent.iterdir() if p.is_dir() and p.name < run.name),
        reverse=True,
    )[:max_runs]
    for host in run.hosts:
        missing = [f for f in HISTORY_FACTS if f not in run.facts.get(host, {})]
        for path in earlier:
            if not missing:
                break
            if not (path / "report.json").is_file():
                continue
            facts, started = run_facts(path)
            older = facts.get(host, {})
            for name in [m for m in missing if m in older]:
                run.started[path.name] = started
                run.facts.setdefault(host, {})[name] = older[name]
                run.borrowed.setdefault(host, {})[name] = path.name
                missing.remove(name)
    return run
