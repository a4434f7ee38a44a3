"""The gpuhost commands: one module per command, listed once in REGISTRY.

A command module has
    add_arguments(parser: argparse.ArgumentParser) -> None
    run(args: argparse.Namespace, ctx: base.Context) -> int   the exit code
    NAME: str     the subcommand (`gpuhost NAME ...`); default: the module's name
    HELP: str     one line for `gpuhost --help`; default: its docstring's first line

To add a command: write gpuhost/commands/<name>.py (base.py has the shared options and the
run/record/summary steps), import it here and add it to REGISTRY.
"""

from __future__ import annotations

from types import ModuleType

from gpuhost.commands import (
    adopt,
    bench,
    check,
    doctor,
    models,
    provision,
    rebuild,
    report,
    rollback,
    update,
    verify,
    vm,
)

# The order is the order of `gpuhost --help`.
REGISTRY: tuple[ModuleType, ...] = (
    provision,
    check,
    verify,
    bench,
    report,
    update,
    rollback,
    doctor,
    adopt,
    models,
    rebuild,
    vm,
)


def load() -> list[ModuleType]:
    return list(REGISTRY)


def name_of(command: ModuleType) -> str:
    return getattr(command, "NAME", command.__name__.rsplit(".", 1)[-1])


def help_of(command: ModuleType) -> str:
    doc = (command.__doc__ or "").strip().splitlines()
    return getattr(command, "HELP", doc[0] if doc else "")
