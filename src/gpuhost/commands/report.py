"""`gpuhost report`: render a past run as report.md, or two runs side by side."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.markdown import Markdown
from rich.text import Text

from gpuhost import compare, report, runfacts
from gpuhost.commands import base
from gpuhost.errors import EXIT_OK

NAME = "report"
HELP = "render a past run as report.md (or two side by side with --compare)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def _load(value: str, ctx: base.Context) -> runfacts.Run:
    return runfacts.with_history(runfacts.load_run(runfacts.resolve_run(value, ctx.runs_root)))


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    if args.compare:
        a, b = _load(args.compare[0], ctx), _load(args.compare[1], ctx)
        out = Path(args.output).expanduser() if args.output else b.path / f"compare-{a.name}.md"
        text = compare.render_compare(a, b, out.parent)
    else:
        one = _load(args.run, ctx)
        text = report.render(one)
        out = Path(args.output).expanduser() if args.output else one.path / "report.md"
    out.write_text(text, encoding="utf-8")
    if args.plain:
        sys.stdout.write(report.markdown_to_terminal(text))
    else:
        ctx.out.print(Markdown(report.markdown_to_terminal(text)))
    ctx.err.print(Text(f"written: {out}", style="dim"))
    return EXIT_OK
