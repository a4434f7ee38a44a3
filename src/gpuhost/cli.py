"""`gpuhost` entry point: argument parsing, dispatch and exit codes.

Every failure reaches the user as a message and an exit code (errors.py), never as a
Python traceback; GPUHOST_DEBUG=1 shows the traceback of an internal error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from rich.console import Console
from rich.text import Text

from gpuhost import __version__, models
from gpuhost.commands import COMMANDS, Command, Context
from gpuhost.errors import EXIT_INTERRUPTED, EXIT_USAGE, GpuhostError
from gpuhost.project import PROJECT_ENV, RUNS_ENV, find_project, runs_root
from gpuhost.rollout import COMMANDS as ROLLOUT_COMMANDS
from gpuhost.stages import COMMANDS as STAGE_COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuhost",
        description="Provision a GPU host from bare OS to a tuned, verified SGLang server.",
        epilog="Exit codes: 0 success, 1 a host/task/check failed, 2 usage or environment "
        "error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"gpuhost {__version__}")
    parser.add_argument(
        "--project-dir",
        help=f"checkout holding site.yml and ansible.cfg (default: ${PROJECT_ENV}, "
        "else the checkout gpuhost is installed from)",
    )
    parser.add_argument(
        "--runs-dir", help=f"where run records go (default: ${RUNS_ENV}, else <project>/runs)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    models_cmd = Command(
        "models", "show or move the pinned model revisions", models.add_arguments, models.run
    )
    for command in [*COMMANDS, *STAGE_COMMANDS, *ROLLOUT_COMMANDS, models_cmd]:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(handler=command.handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    err = Console(stderr=True, highlight=False)
    try:
        args = build_parser().parse_args(argv)
        project = find_project(args.project_dir)
        out = Console(highlight=False)
        if not out.is_terminal and "COLUMNS" not in os.environ:
            # A log file has no width; rich's 80-column guess would cut host names.
            out.width = 160
        ctx = Context(
            project=project,
            runs_root=runs_root(project, args.runs_dir),
            out=out,
            err=err,
            argv=["gpuhost", *argv],
        )
        return args.handler(args, ctx)
    except GpuhostError as exc:
        err.print(Text(f"gpuhost: error: {exc.message}", style="bold red"), soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print(Text("gpuhost: interrupted", style="bold red"))
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("GPUHOST_DEBUG"):
            traceback.print_exc()
        err.print(
            Text(f"gpuhost: internal error: {type(exc).__name__}: {exc}", style="bold red"),
            soft_wrap=True,
        )
        err.print(Text("set GPUHOST_DEBUG=1 to see where it happened", style="dim"))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
