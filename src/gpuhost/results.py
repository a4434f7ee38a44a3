"""After a verify or bench run: the facts it set into report.json, the bench JSON lines
beside it (runs/<ts>/bench/<host>.jsonl), report.md rendered, and the bench verdict."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhost import bench, record, redaction, report, rundir, runfacts


def finish(rep: dict) -> runfacts.Run:
    """Facts into report.json, the bench lines beside it, report.md rendered."""
    run_dir = Path(rep["run_dir"])
    facts = redaction.redact(runfacts.facts_from_events(run_dir))
    rep["facts"] = {
        h: {k: v for k, v in f.items() if k in runfacts.REPORT_FACTS} for h, f in facts.items()
    }
    if rep["command"] == "verify":
        rep["no_server"] = runfacts.hosts_without_server(run_dir)
    for host, host_facts in rep["facts"].items():
        lines = (host_facts.get("gpuhost_bench") or {}).get("results") or []
        if lines:
            (run_dir / "bench").mkdir(mode=0o700, exist_ok=True)
            text = "".join(json.dumps(line) + "\n" for line in lines)
            (run_dir / "bench" / f"{host}.jsonl").write_text(text, encoding="utf-8")
    record.write_report(rundir.RunDir(run_dir), rep)
    run = runfacts.with_history(runfacts.load_run(run_dir))
    rep["report_md"] = str(report.write(run))
    record.write_report(rundir.RunDir(run_dir), rep)
    return run


def judge_bench(run: runfacts.Run, rep: dict, *, fail_on_regression: bool) -> int:
    """Points and baseline comparisons into the report; a regression fails the run only
    with --fail-on-regression. Returns the number of regressed levels."""
    rep["bench"] = {}
    regressions = 0
    for host in run.hosts:
        points = report.bench_points(run, host)
        if not points:
            continue
        fact = run.facts.get(host, {}).get("gpuhost_bench") or {}
        comparisons = bench.compare(points, fact.get("baseline") or {})
        regressions += sum(c.regression for c in comparisons)
        rep["bench"][host] = {
            "points": [p.__dict__ for p in points],
            "comparisons": [c.as_dict() for c in comparisons],
        }
    rep["regressions"] = regressions
    if fail_on_regression and regressions and rep["status"] == "successful":
        rep["status"] = "failed"
        rep["error"] = (
            f"{regressions} level(s) more than {bench.REGRESSION_THRESHOLD:.0%} below the "
            "baseline (--fail-on-regression)"
        )
    return regressions
