"""`gpuhost models`: show and move the pinned model revisions of an inventory.

The pins live in <inventory dir>/models.lock.yml (plugins/plugin_utils/gpuhost_models_lock.py
writes them the first time a profile's branch is resolved). `gpuhost models show -i INV`
prints them; `gpuhost models update -i INV [--model M]` asks the hub where each pinned branch
is now and moves the pins; the next provision or rolling update then serves the new sha, and
`gpuhost check --fail-on-drift` shows the hosts still serving the old one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpuhost.errors import EXIT_USAGE, GpuhostError
from gpuhost.plugin_code import plugin_utils

HELP = "show or move the pinned model revisions of an inventory (models.lock.yml)"

LOCK_NAME = "models.lock.yml"
DEFAULT_ENDPOINT = "https://huggingface.co"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show", "update"], help="show the pins, or move them")
    parser.add_argument(
        "-i",
        "--inventory",
        required=True,
        help=f"inventory directory (or a file in it) whose {LOCK_NAME} holds the pins",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="only this model (repeatable; default: every pinned model)",
    )
    parser.add_argument(
        "--hub-endpoint",
        default=None,
        help=f"hub base URL (default: $HF_ENDPOINT, else {DEFAULT_ENDPOINT})",
    )


def _lock_module(ctx):
    """The project's gpuhost_models_lock (plugins/plugin_utils), loaded from its file: the CLI
    uses the same code as the action plugin, from the checkout it runs."""
    return plugin_utils("gpuhost_models_lock", ctx.project.root)


def lock_path(inventory: str) -> Path:
    path = Path(inventory).expanduser()
    if not path.exists():
        raise GpuhostError(f"--inventory: {inventory} does not exist", EXIT_USAGE)
    return (path if path.is_dir() else path.parent).resolve() / LOCK_NAME


def run(args: argparse.Namespace, ctx) -> int:
    lock = _lock_module(ctx)
    path = lock_path(args.inventory)
    try:
        models = lock.read_lock(path)
    except ValueError as exc:
        raise GpuhostError(str(exc), EXIT_USAGE) from exc
    wanted = set(args.model)
    unknown = wanted - set(models)
    if unknown:
        raise GpuhostError(
            f"--model: {', '.join(sorted(unknown))} not pinned in {path}; pinned: "
            f"{', '.join(sorted(models)) or 'nothing yet (the first provision pins)'}",
            EXIT_USAGE,
        )
    if args.action == "show" or not models:
        if not models:
            ctx.out.print(f"{path}: no pins yet (the first provision of a profile pins its branch)")
        for model in sorted(models):
            for branch, entry in sorted(models[model].items()):
                pinned_at = entry.get("pinned_at")
                ctx.out.print(f"{model}@{branch}  {entry['sha']}  (pinned {pinned_at})")
        return 0
    endpoint = args.hub_endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    token = os.environ.get("HF_TOKEN") or None

    def resolve(repo, revision):
        return lock.hub_revision(endpoint, repo, revision, token=token)

    try:
        changes = lock.update(path, resolve, only=wanted or None)
    except lock.HubError as exc:
        raise GpuhostError(f"the hub did not answer, no pin was moved: {exc}") from exc
    for change in changes:
        moved = change["old"] != change["new"]
        ctx.out.print(
            f"{change['model']}@{change['branch']}  "
            + (f"{change['old']} -> {change['new']}" if moved else f"{change['old']} (unchanged)")
        )
    if any(c["old"] != c["new"] for c in changes):
        ctx.out.print(
            "Provision or roll out to serve the new weights; `gpuhost check --fail-on-drift` "
            "lists the hosts still on the old sha."
        )
    return 0
