"""The gpuhost commands: one module per command, listed once in REGISTRY.

A command module has
    NAME: str                                     the subcommand (`gpuhost NAME ...`)
    HELP: str                                     one line for `gpuhost --help`
    add_arguments(parser: argparse.ArgumentParser) -> None
    run(args: argparse.Namespace, ctx: base.Context) -> int   the exit code

To add a command: write gpuhost/commands/<name>.py with those four names (base.py has the
shared options and the run/record/summary steps) and add "<name>" to REGISTRY.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# The order is the order of `gpuhost --help`.
REGISTRY = ("provision", "check", "verify", "bench", "report", "update", "rollback")


def load() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in REGISTRY]
