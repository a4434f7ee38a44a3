"""`gpuhost rebuild` and `gpuhost vm create|destroy`: GPU VMs on Proxmox (issue 13).

rebuild runs playbooks/rebuild.yml for each VM of group proxmox_vms that --limit matches,
one VM at a time, stopping at the first failure: the spec against Proxmox's rules and the
cluster's live state (read-only, docs/proxmox.md), node checks, drain from the routers,
destroy (the model disk is parked on its keeper VM), assert gone, create, boot, wait for
SSH, the whole site.yml, verify, re-add to the routers. It asks before destroying anything
unless --yes. The model disk is kept unless --delete-model-disk. Each run record
(runs/<ts>/report.json) gets `stage_times`, read from the run's job events.

Secrets: the Proxmox token secret comes from Vault or GPUHOST_PROXMOX_TOKEN_SECRET in the
environment; --vault-password-file and --ask-vault-pass reach ansible-playbook through the
environment (ANSIBLE_VAULT_PASSWORD_FILE), never through argv.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from datetime import datetime
from pathlib import Path

from rich.text import Text

from gpuhost import inventory, record, runfacts
from gpuhost.commands.base import Context, emit, execute
from gpuhost.errors import EXIT_USAGE, GpuhostError
from gpuhost.project import parse_extra_vars, resolve_inventories
from gpuhost.rundir import RunDir
from gpuhost.runner import RunRequest

NAME = "rebuild"
HELP = "destroy and re-create a GPU VM on Proxmox (model disk kept) up to a verified server"
VM_GROUP = "proxmox_vms"

# Stages of playbooks/rebuild.yml, by the task or play that starts each (in order).
_STAGE_STARTS = [
    ("spec checks", "Check the VM spec against Proxmox and the cluster before anything changes"),
    ("node reachable", "Reach the Proxmox node over SSH"),
    ("host checks", "Check the Proxmox node's passthrough setup (read-only, as root on the node)"),
    ("drain", "Drain this worker from the routers"),
    ("destroy", "Destroy the VM, keeping its model disk"),
    ("create + boot", "Create and boot the VM"),
    ("wait for SSH", "Wait for SSH on the new VM"),
    ("site: preflight", "Preflight"),
    ("site: host", "Host base layer"),
    ("site: runtime", "Runtime"),
    ("site: serve", "Serve"),
    ("site: router", "Router"),
    ("site: verify", "Verify the SGLang server"),
    ("re-add to routers", "Put the rebuilt workers back into the routers"),
]


def add_vault_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--vault-password-file", help="file (or client script) with the vault password"
    )
    group.add_argument("--ask-vault-pass", action="store_true", help="ask for the vault password")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--inventory", action="append", required=True, metavar="INVENTORY")
    parser.add_argument(
        "-l", "--limit", required=True, help=f"the VM(s) to rebuild (hosts of group {VM_GROUP})"
    )
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VAR")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask before destroying")
    parser.add_argument("--json", action="store_true", help="print report.json, no table")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument(
        "--delete-model-disk",
        action="store_true",
        help="rebuild, vm destroy: destroy the model disk too (proxmox_vm_destroy_model_disk); "
        "a rebuild then makes a new empty one, so a change of its slot, storage or size is "
        "allowed; default: keep it",
    )
    add_vault_arguments(parser)


def vm_add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "destroy"])
    add_arguments(parser)


def select_vms(inventories: list[Path], limit: str) -> list[str]:
    """Hosts of group proxmox_vms that --limit matches, in inventory order."""
    return inventory.hosts_in_group(inventories, VM_GROUP, limit)


def confirmation_text(verb: str, vms: list[str], delete_model_disk: bool) -> str:
    names = ", ".join(vms)
    if verb == "rebuild":
        disk = (
            "its model disk is destroyed too (--delete-model-disk): models are downloaded again"
            if delete_model_disk
            else "the model disk is kept"
        )
        return f"This destroys and re-creates: {names} ({disk})."
    if delete_model_disk:
        return f"This destroys: {names}, and its model disk (--delete-model-disk)."
    return f"This destroys: {names} (the model disk is kept)."


def _confirm(
    ctx: Context, verb: str, vms: list[str], assume_yes: bool, delete_model_disk: bool = False
) -> None:
    if assume_yes:
        return
    if not sys.stdin.isatty():
        disk = " and its model disk" if delete_model_disk else ""
        raise GpuhostError(
            f"{verb} {', '.join(vms)}{disk} needs confirmation: pass --yes", EXIT_USAGE
        )
    ctx.err.print(Text(confirmation_text(verb, vms, delete_model_disk)))
    answer = input("Type 'yes' to go on: ")
    if answer.strip() != "yes":
        raise GpuhostError("nothing done", EXIT_USAGE)


def _vault_env(args: argparse.Namespace, ctx: Context) -> None:
    """Hand the vault password to ansible-playbook through its environment only."""
    if args.vault_password_file:
        path = Path(args.vault_password_file).expanduser().resolve()
        if not path.is_file():
            raise GpuhostError(f"--vault-password-file: no such file: {path}", EXIT_USAGE)
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = str(path)
    elif args.ask_vault_pass:
        os.environ["GPUHOST_VAULT_PASSWORD"] = getpass.getpass("Vault password: ")
        client = ctx.project.root / "scripts" / "vault-password-from-env"
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = str(client)


def stage_times(artifacts: Path) -> list[dict]:
    """[{stage, seconds}] of a rebuild run, from ansible-runner's job events."""
    events = sorted(runfacts.job_events(artifacts), key=lambda e: e.get("counter", 0))
    marks, end = [], None
    for event in events:
        created = event.get("created")
        if not created:
            continue
        when = datetime.fromisoformat(created)
        data = event.get("event_data", {})
        names = (data.get("task", ""), data.get("play", ""))
        if event.get("event") in ("playbook_on_task_start", "playbook_on_play_start"):
            for stage, start in _STAGE_STARTS:
                key = data.get("play") if event["event"] == "playbook_on_play_start" else names[0]
                if key == start and stage not in {m[0] for m in marks}:
                    marks.append((stage, when))
        if event.get("event") == "playbook_on_stats":
            end = when
    out = []
    for i, (stage, start) in enumerate(marks):
        stop = marks[i + 1][1] if i + 1 < len(marks) else end
        if stop:
            out.append({"stage": stage, "seconds": round((stop - start).total_seconds(), 1)})
    return out


def _run_one(ctx, args, playbook: str, command: str, host: str, extra: dict, files) -> dict:
    request = RunRequest(
        command=command,
        playbook=ctx.project.root / playbook,
        inventories=resolve_inventories(args.inventory),
        limit=host,
        extra_vars=extra,
        extra_var_files=files,
        verbosity=args.verbose,
    )
    return execute(ctx, request, json_output=args.json)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """gpuhost rebuild -i INV -l VM [--yes]"""
    inventories = resolve_inventories(args.inventory)
    vms = select_vms(inventories, args.limit)
    if not vms:
        raise GpuhostError(f"no host of group {VM_GROUP} matches --limit {args.limit}", EXIT_USAGE)
    _confirm(ctx, "rebuild", vms, args.yes, args.delete_model_disk)
    _vault_env(args, ctx)
    extra, files = parse_extra_vars(args.extra_vars)
    if args.delete_model_disk:
        extra["proxmox_vm_destroy_model_disk"] = True
    code = 0
    for vm in vms:
        report = _run_one(ctx, args, "playbooks/rebuild.yml", "rebuild", vm, extra, files)
        report["stage_times"] = stage_times(Path(report["artifacts"]))
        record.write_report(RunDir(Path(report["run_dir"])), report)
        code = emit(ctx, report, json_output=args.json, show_findings=False)
        if not args.json:
            for stage in report["stage_times"]:
                ctx.out.print(f"  {stage['stage']:<22} {stage['seconds']:>8.1f} s")
        if code:
            break  # one VM at a time: a failed rebuild stops the rest
    return code


def vm_run(args: argparse.Namespace, ctx: Context) -> int:
    """gpuhost vm create|destroy -i INV -l VM"""
    inventories = resolve_inventories(args.inventory)
    vms = select_vms(inventories, args.limit)
    if not vms:
        raise GpuhostError(f"no host of group {VM_GROUP} matches --limit {args.limit}", EXIT_USAGE)
    if args.action == "destroy":
        _confirm(ctx, "destroy", vms, args.yes, args.delete_model_disk)
    _vault_env(args, ctx)
    extra, files = parse_extra_vars(args.extra_vars)
    if args.action == "destroy" and args.delete_model_disk:
        extra["proxmox_vm_destroy_model_disk"] = True
    playbook = "playbooks/vm.yml" if args.action == "create" else "playbooks/vm_destroy.yml"
    report = _run_one(ctx, args, playbook, f"vm {args.action}", ",".join(vms), extra, files)
    return emit(ctx, report, json_output=args.json, show_findings=False)
