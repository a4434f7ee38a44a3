"""`gpuhost verify`, `gpuhost bench` and `gpuhost report`.

verify and bench run their playbook through commands.execute (the same run record,
progress and summary as provision), then read the facts the run set (gpuhost_verify,
gpuhost_bench) from its events, keep them in report.json, write the bench JSON lines to
runs/<ts>/bench/<host>.jsonl and render runs/<ts>/report.md with its plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from rich import box
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from gpuhost import bench, compare, findings, record, report, runfacts, summary
from gpuhost.commands import Command, Context, add_run_arguments, execute, request_from_args
from gpuhost.errors import EXIT_OK, GpuhostError


def _secret_value(key: object, value: object) -> bool:
    # `api_key_set: true` names a key but holds none: only strings can be secrets.
    return record.is_secret_name(str(key)) and isinstance(value, str)


def _redacted(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: (record.REDACTED if _secret_value(k, v) else _redacted(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _playbook(args: argparse.Namespace, ctx: Context, name: str) -> None:
    if not args.playbook:
        args.playbook = str(ctx.project.root / "playbooks" / name)


def _finish(ctx: Context, rep: dict, json_output: bool) -> runfacts.Run:
    """Facts into report.json, the bench lines beside it, report.md rendered."""
    run_dir = Path(rep["run_dir"])
    facts = _redacted(runfacts.facts_from_events(run_dir))
    rep["facts"] = {
        h: {k: v for k, v in f.items() if k in runfacts.REPORT_FACTS} for h, f in facts.items()
    }
    for host, host_facts in rep["facts"].items():
        lines = (host_facts.get("gpuhost_bench") or {}).get("results") or []
        if lines:
            (run_dir / "bench").mkdir(mode=0o700, exist_ok=True)
            text = "".join(json.dumps(line) + "\n" for line in lines)
            (run_dir / "bench" / f"{host}.jsonl").write_text(text, encoding="utf-8")
    record.write_report(record.RunDir(run_dir), rep)
    run = runfacts.with_history(runfacts.load_run(run_dir))
    rep["report_md"] = str(report.write(run))
    record.write_report(record.RunDir(run_dir), rep)
    return run


def _print_verify(ctx: Context, run: runfacts.Run) -> None:
    for host in run.hosts:
        verify = run.facts.get(host, {}).get("gpuhost_verify")
        if not verify:
            continue
        server = verify.get("server") or {}
        standin = " - STAND-IN server (a test double, not SGLang)" if server.get("standin") else ""
        ctx.out.print(Text(f"Verification of {host}{standin}", style="bold"))
        findings.print_findings(ctx.out, {host: findings.normalize(verify.get("findings") or [])})
        for q in verify.get("questions") or []:
            mark = (
                Text("pass", style="green") if q.get("passed") else Text("FAIL", style="bold red")
            )
            got = " ".join(str(q.get("error") or q.get("got") or "").split())[:100]
            ctx.out.print(
                Text.assemble(
                    "  ", mark, f"  {q.get('prompt')}  expected {q.get('expected')!r}, got {got!r}"
                ),
                soft_wrap=True,
            )


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    _playbook(args, ctx, "verify.yml")
    request = request_from_args(args, ctx, "verify")
    rep = execute(ctx, request, json_output=args.json)
    run = _finish(ctx, rep, args.json)
    if args.json:
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
        return record.STATUS_EXIT[rep["status"]]
    summary.print_summary(ctx.out, rep, show_changes=True)
    _print_verify(ctx, run)
    ctx.out.print(Text(f"Report: {rep['report_md']}", style="dim"))
    summary.print_footer(ctx.out, rep)
    return record.STATUS_EXIT[rep["status"]]


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise GpuhostError(f"--concurrency {text!r}: expected numbers like 1,8,16,32,64") from None
    if not levels or min(levels) < 1:
        raise GpuhostError(f"--concurrency {text!r}: every level must be >= 1")
    return levels


def _load_baseline(value: str) -> dict:
    """--baseline: a profile (its expected_baseline) or a file that is the baseline itself."""
    path = Path(value).expanduser()
    if not path.is_file():
        raise GpuhostError(f"--baseline: no such file: {value}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise GpuhostError(f"--baseline {value}: not YAML: {exc}") from None
    data = data.get("expected_baseline", data) if isinstance(data, dict) else {}
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise GpuhostError(f"--baseline {value}: no expected_baseline.points list")
    return data


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, check_flag=True)
    parser.add_argument("--concurrency", help="levels, comma-separated (default 1,8,16,32,64)")
    parser.add_argument("--input-len", type=int, help="prompt tokens (default 256)")
    parser.add_argument("--output-len", type=int, help="answer tokens (default 256)")
    parser.add_argument(
        "--prompts-per-concurrency",
        type=int,
        help="prompts per level = concurrency x this (default 4, at least 8)",
    )
    parser.add_argument(
        "--baseline",
        help="profile or baseline YAML to compare with "
        "(default: the serving profile's expected_baseline)",
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        # argparse formats help with %: the percent sign is doubled.
        help=f"exit 1 when a level is more than "
        f"{bench.REGRESSION_THRESHOLD * 100:.0f}%% below the baseline",
    )


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


def cmd_bench(args: argparse.Namespace, ctx: Context) -> int:
    _playbook(args, ctx, "bench.yml")
    baseline = _load_baseline(args.baseline) if args.baseline else None
    request = request_from_args(args, ctx, "bench")
    wanted = {
        "verify_bench_concurrency": _levels(args.concurrency) if args.concurrency else None,
        "verify_bench_input_len": args.input_len,
        "verify_bench_output_len": args.output_len,
        "verify_bench_prompts_per_concurrency": args.prompts_per_concurrency,
        "verify_bench_baseline": baseline,
    }
    request.extra_vars.update({k: v for k, v in wanted.items() if v is not None})
    rep = execute(ctx, request, json_output=args.json)
    run = _finish(ctx, rep, args.json)
    judge_bench(run, rep, fail_on_regression=args.fail_on_regression)
    record.write_report(record.RunDir(Path(rep["run_dir"])), rep)
    run.report = rep
    report.write(run)  # again: the verdict on regressions is part of the status
    if args.json:
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
        return record.STATUS_EXIT[rep["status"]]
    summary.print_summary(ctx.out, rep, show_changes=False)
    for host, data in rep["bench"].items():
        _print_bench(ctx, host, run, data)
    if (Path(rep["run_dir"]) / report.PLOT_NAME).is_file():
        ctx.out.print(Text(f"Plot: {Path(rep['run_dir']) / report.PLOT_NAME}", style="dim"))
    ctx.out.print(Text(f"Report: {rep['report_md']}", style="dim"))
    if rep["regressions"]:
        if args.fail_on_regression:
            ctx.out.print(Text(str(rep["error"]), style="bold red"), soft_wrap=True)
        else:
            ctx.out.print(
                Text(
                    f"{rep['regressions']} level(s) regressed; --fail-on-regression makes "
                    "that exit 1",
                    style="bold yellow",
                ),
                soft_wrap=True,
            )
    summary.print_footer(ctx.out, rep)
    return record.STATUS_EXIT[rep["status"]]


def _print_bench(ctx: Context, host: str, run: runfacts.Run, data: dict) -> None:
    standin = (run.facts.get(host, {}).get("gpuhost_sglang") or {}).get("standin")
    title = f"bench_serving on {host}" + (
        " (against the STAND-IN, a test double)" if standin else ""
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold")
    for _, name, _ in bench.COLUMNS:
        table.add_column(name, justify="right")
    for point in report.bench_points(run, host):
        table.add_row(*point.row())
    ctx.out.print(table)
    comparisons = [
        bench.Comparison(
            **{
                **c,
                "expected_range": tuple(c["expected_range"]) if c.get("expected_range") else None,
            }
        )
        for c in data["comparisons"]
    ]
    if not comparisons:
        ctx.out.print(Text("  no baseline point at these lengths and levels", style="dim"))
        return
    table = Table(
        title="against the baseline", title_justify="left", box=box.SIMPLE_HEAD, header_style="bold"
    )
    for name in bench.COMPARISON_HEADER:
        table.add_column(name, justify="right")
    for c in comparisons:
        row = bench.comparison_row(c)
        table.add_row(*row[:-1], Text(row[-1], style="bold red" if c.regression else "green"))
    ctx.out.print(table)


def cmd_report(args: argparse.Namespace, ctx: Context) -> int:
    if args.compare:
        a = runfacts.with_history(
            runfacts.load_run(runfacts.resolve_run(args.compare[0], ctx.runs_root))
        )
        b = runfacts.with_history(
            runfacts.load_run(runfacts.resolve_run(args.compare[1], ctx.runs_root))
        )
        out = Path(args.output).expanduser() if args.output else b.path / f"compare-{a.name}.md"
        text = compare.render_compare(a, b, out.parent)
        out.write_text(text, encoding="utf-8")
    else:
        run = runfacts.with_history(
            runfacts.load_run(runfacts.resolve_run(args.run, ctx.runs_root))
        )
        text = report.render(run)
        out = Path(args.output).expanduser() if args.output else run.path / "report.md"
        out.write_text(text, encoding="utf-8")
    if args.plain:
        sys.stdout.write(report.markdown_to_terminal(text))
    else:
        ctx.out.print(Markdown(report.markdown_to_terminal(text)))
    ctx.err.print(Text(f"written: {out}", style="dim"))
    return EXIT_OK


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        nargs="?",
        default="latest",
        help="run directory or its name under the runs dir (default: latest)",
    )
    parser.add_argument(
        "--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="put two runs side by side"
    )
    parser.add_argument("-o", "--output", help="write the Markdown here instead of the run dir")
    parser.add_argument("--plain", action="store_true", help="print the Markdown source as is")


COMMANDS = [
    Command(
        "verify",
        "check the running server: health, served name, known answers, TTFT, parsers",
        lambda p: add_run_arguments(p, check_flag=True),
        cmd_verify,
    ),
    Command(
        "bench",
        "run sglang.bench_serving over a concurrency sweep and compare with the baseline",
        add_bench_arguments,
        cmd_bench,
    ),
    Command(
        "report",
        "render a past run as report.md (or two side by side with --compare)",
        add_report_arguments,
        cmd_report,
    ),
]
