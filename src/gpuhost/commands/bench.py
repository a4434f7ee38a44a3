"""`gpuhost bench`: sglang.bench_serving over a concurrency sweep (playbooks/bench.yml),
compared with the serving profile's baseline."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from rich.text import Text

from gpuhost import bench, record, report, results, rundir, summary
from gpuhost.commands import base
from gpuhost.errors import GpuhostError

NAME = "bench"
HELP = "run sglang.bench_serving over a concurrency sweep and compare with the baseline"


def levels(text: str) -> list[int]:
    try:
        found = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise GpuhostError(f"--concurrency {text!r}: expected numbers like 1,8,16,32,64") from None
    if not found or min(found) < 1:
        raise GpuhostError(f"--concurrency {text!r}: every level must be >= 1")
    return found


def load_baseline(value: str) -> dict:
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=True)
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


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    base.default_playbook(args, ctx, "bench.yml")
    baseline = load_baseline(args.baseline) if args.baseline else None
    request = base.request_from_args(args, ctx, NAME)
    wanted = {
        "verify_bench_concurrency": levels(args.concurrency) if args.concurrency else None,
        "verify_bench_input_len": args.input_len,
        "verify_bench_output_len": args.output_len,
        "verify_bench_prompts_per_concurrency": args.prompts_per_concurrency,
        "verify_bench_baseline": baseline,
    }
    request.extra_vars.update({k: v for k, v in wanted.items() if v is not None})
    rep = base.execute(ctx, request, json_output=args.json)
    run_facts = results.finish(rep)
    results.judge_bench(run_facts, rep, fail_on_regression=args.fail_on_regression)
    record.write_report(rundir.RunDir(Path(rep["run_dir"])), rep)
    run_facts.report = rep
    report.write(run_facts)  # again: the verdict on regressions is part of the status
    if args.json:
        return base.print_json(rep)
    summary.print_summary(ctx.out, rep, show_changes=False)
    for host, data in rep["bench"].items():
        summary.print_bench(ctx.out, host, run_facts, data)
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
