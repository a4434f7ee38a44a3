"""`gpuhost adopt -i INV`: find SGLang servers gpuhost did not start and propose the settings
that reproduce them (read-only; docs/adopt.md, issue 31 item 1).

Runs playbooks/adopt.yml, always in check mode (nothing on a host can change), through the
same run record, progress and summary as every other command. With --apply (item 3) it then
runs playbooks/adopt_apply.yml on the hosts with exactly one server (refusing all when a host
has none or several, before any change): the gated cutover to the managed unit, with the way
back; --apply --check is its dry run. The proposal of each host
(the cacheable fact gpuhost_adopt) is written as <run dir>/adopt/<host>.yml: the settings,
ready for host_vars, under a comment that lists every flag, variable and package as kept,
dropped or changed with its reason. Exit 0 when a server was found and proposed on every
host, 1 when a host has none (or the run failed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import textwrap
from pathlib import Path

import yaml
from rich.text import Text

from gpuhost import record, rundir, runfacts, summary
from gpuhost.commands import base
from gpuhost.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gpuhost.plugin_code import plugin_utils
from gpuhost.project import resolve_playbook

NAME = "adopt"
HELP = (
    "find hand-started SGLang servers and propose the settings that reproduce them "
    "(read-only; writes <run dir>/adopt/<host>.yml); --apply cuts over to the managed unit"
)
FACT = "gpuhost_adopt"
APPLIED = "gpuhost_adopt_apply"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
# What could end a comment line and start YAML of its own (YAML's line breaks include NEL,
# LS and PS): the host's strings (a flag's value, a path) are shown escaped.
_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _shown(text: object) -> str:
    return _BREAKS.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base.add_run_arguments(parser, check_flag=False)
    parser.add_argument(
        "--apply",
        action="store_true",
        help="then cut over: converge beside the old server, stop it, start the managed unit, "
        "gate it; the old command comes back when the gate fails (docs/adopt.md)",
    )
    parser.add_argument(
        "-C", "--check", action="store_true", help="with --apply: a dry run, change nothing"
    )


def _comment(text: str, indent: str = "#   ") -> list[str]:
    return textwrap.wrap(_shown(text), 96, initial_indent=indent, subsequent_indent="#     ")


def render(host: str, proposal: dict) -> str:
    """The host_vars file of one proposal: a comment saying what each item became and why,
    then the settings."""
    lines = [
        _shown(
            f"# gpuhost adopt: {host}, pid {proposal['pid']} (user {proposal['user']}), "
            f"{proposal['model']}"
        ),
        _shown(
            f"# Profile: {proposal['profile'] or '(inline: sglang_server_flags)'}; checked "
            f"against sglang {proposal['sglang_version']}. Paste the settings below into "
            f"host_vars/{host}.yml."
        ),
        "# Nothing was changed on the host; the old server keeps running.",
        "#",
        "# Every flag, variable and package of the server:",
    ]
    for entry in proposal["items"]:
        to = f" -> {entry['to']}" if "to" in entry else ""
        head = f"{entry['status']:<8}{entry['kind']} {entry['name']}={entry['value']}{to}"
        lines.append(_shown(f"# {head}"))
        lines += _comment(entry["reason"])
    if proposal.get("not_read"):
        lines += ["#", "# Not read on the host (the proposal is made without it):"]
        for problem in proposal["not_read"]:
            lines += _comment(problem, "# - ")
    if proposal["todo"]:
        lines += ["#", "# To do before provision:"]
        for todo in proposal["todo"]:
            lines += _comment(todo, "# - ")
    lines += ["#", "# What the managed server does differently:"]
    for difference in proposal["differences"]:
        lines += _comment(difference, "# - ")
    body = yaml.safe_dump(proposal["inventory"], sort_keys=True, default_flow_style=False)
    return "\n".join(lines) + "\n---\n" + body


def write(run_dir: Path, facts: dict[str, dict]) -> dict[str, list[str]]:
    """<run dir>/adopt/<host>.yml (and <host>-pid<N>.yml for a second server): host -> paths."""
    folder = run_dir / "adopt"
    written: dict[str, list[str]] = {}
    for host, found in sorted(facts.items()):
        servers = (found.get(FACT) or {}).get("servers") or []
        paths = []
        for index, proposal in enumerate(servers):
            folder.mkdir(exist_ok=True)
            stem = _SAFE.sub("_", host) + (f"-pid{proposal['pid']}" if index else "")
            path = folder / f"{stem}.yml"
            path.write_text(render(host, proposal), encoding="utf-8")
            paths.append(str(path))
        written[host] = paths
    return written


def _table(ctx: base.Context, facts: dict[str, dict], written: dict[str, list[str]]) -> None:
    table = summary.report_table("Hand-started SGLang servers")
    for column in ("host", "pid", "model", "profile", "kept", "dropped", "changed"):
        table.add_column(column, no_wrap=column == "host")
    for host, found in sorted(facts.items()):
        for proposal in (found.get(FACT) or {}).get("servers") or []:
            counts = proposal["counts"]
            # Text, not markup: a model path from the host is shown as it is.
            table.add_row(*(Text(_shown(cell)) for cell in (
                host, proposal["pid"], proposal["model"], proposal["profile"] or "(inline)",
                counts["kept"], counts["dropped"], counts["changed"],
            )))  # fmt: skip
    ctx.out.print(table)
    for host, paths in sorted(written.items()):
        for path in paths:
            ctx.out.print(Text(_shown(f"Proposal for {host}: {path}")))


def _applied(ctx: base.Context, proposals: dict[str, dict], facts: dict[str, dict]) -> None:
    """What --apply did on each host: the settings from the proposal, the old pid, the unit,
    the port, what clients must change."""
    for host, proposal in sorted(proposals.items()):
        done = (facts.get(host) or {}).get(APPLIED) or {}
        settings = ", ".join(sorted(proposal["inventory"]))
        ctx.out.print(Text(_shown(f"{host}: settings from the proposal: {settings}")))
        if not done:
            ctx.out.print(Text(f"{host}: the cutover did not run (see the failures above)"))
            continue
        if done.get("check_mode"):
            ctx.out.print(Text(_shown(f"{host}: check mode: pid {done['old_pid']} left running")))
        elif done.get("ok"):
            ctx.out.print(
                Text(
                    _shown(
                        f"{host}: pid {done['old_pid']} stopped (SIG{done['stopped'].get('signal')}"
                        f", GPU memory {done['stopped'].get('gpu')}); {done['service']} active "
                        f"and gated on port {done['port']}"
                    )
                )
            )
        for line in done.get("clients") or []:
            ctx.out.print(Text(_shown(f"{host}: for clients: {line}")))


def record_pins(lock, proposals: dict[str, dict], done: dict[str, dict]) -> list[str]:
    """After a cutover, the host's models lock (sglang_server_models_lock, by default
    <inventory dir>/models.lock.yml) records the commit each adopted server serves for the
    branch it asked for, so every later run, host and rebuild serves that commit until
    `gpuhost models update`. An entry the lock has already wins (the first writer wins, as for
    a resolve) and a different commit is said. Only hosts whose cutover passed its gate and
    whose pinning is on; lines for the summary."""
    lines = []
    for host, proposal in sorted(proposals.items()):
        pin = proposal.get("lock_pin") or {}
        applied = (done.get(host) or {}).get(APPLIED) or {}
        path = applied.get("models_lock") or ""
        if not pin or not applied.get("ok") or not path:
            continue
        got = lock.pin(
            path, pin["model"], pin["branch"], lambda _m, _b, sha=pin["sha"]: {"sha": sha}
        )
        where = f"{pin['model']} {pin['branch']}"
        if got["sha"] != pin["sha"]:
            lines.append(
                f"{host}: the models lock pins {where} to {got['sha']}, not {pin['sha']} which "
                "this host serves (its sglang_server_revision): `gpuhost models update` or the "
                "host's setting decides"
            )
        else:
            state = "recorded" if got["pinned"] == "new" else "already pinned"
            lines.append(f"{host}: models lock: {where} -> {pin['sha']} ({state}, {path})")
    return lines


def apply(args: argparse.Namespace, ctx: base.Context, written: dict, facts: dict) -> int:
    """The cutover on every host with one server; all are refused when one has none or
    several (nothing changed yet)."""
    decide = plugin_utils("gpuhost_adopt_apply", ctx.project.root)
    found = {host: (f.get(FACT) or {}).get("servers") or [] for host, f in facts.items()}
    for host in written:
        found.setdefault(host, [])
    chosen, refused = decide.targets(found)
    if refused or not chosen:
        ctx.err.print(Text(_shown(decide.refusal(refused or {"(all)": "no host"})), style="red"))
        return EXIT_FAILED
    args.playbook = str(ctx.project.root / "playbooks" / "adopt_apply.yml")
    request = base.request_from_args(args, ctx, NAME)
    targets = {h: {"file": written[h][0], "pid": p["pid"]} for h, p in chosen.items()}
    request = dataclasses.replace(
        request,
        playbook=resolve_playbook(args.playbook, ctx.project),
        limit=",".join(sorted(chosen)),
        check=bool(args.check),
        extra_vars={**request.extra_vars, "gpuhost_adopt_targets": targets},
    )
    rep = base.execute(ctx, request, json_output=args.json)
    done = runfacts.facts_from_events(Path(rep["run_dir"]), names=(APPLIED,))
    rep["adopt_apply"] = {host: (done.get(host) or {}).get(APPLIED) for host in chosen}
    if not args.check:
        lock = plugin_utils("gpuhost_models_lock", ctx.project.root)
        rep["adopt_lock"] = record_pins(lock, chosen, done)
    record.write_report(rundir.RunDir(Path(rep["run_dir"])), rep)
    code = base.emit(ctx, rep, json_output=args.json, show_findings=False)
    if not args.json:
        _applied(ctx, chosen, done)
        for line in rep.get("adopt_lock") or []:
            ctx.out.print(Text(_shown(line)))
    return code


def run(args: argparse.Namespace, ctx: base.Context) -> int:
    if args.check and not args.apply:
        ctx.err.print(Text("--check goes with --apply: gpuhost adopt alone changes nothing"))
        return EXIT_USAGE
    base.default_playbook(args, ctx, "adopt.yml")
    request = base.request_from_args(args, ctx, NAME)
    request.check = True  # read-only by construction, whatever the playbook holds
    # --tags / --skip-tags select stages of the cutover (adopt_apply.yml); the look is whole.
    request.tags = request.skip_tags = None
    rep = base.execute(ctx, request, json_output=args.json)
    run_dir = Path(rep["run_dir"])
    facts = runfacts.facts_from_events(run_dir, names=(FACT,))
    written = write(run_dir, facts)
    rep["adopt"] = written
    record.write_report(rundir.RunDir(run_dir), rep)
    if args.apply and record.STATUS_EXIT[rep["status"]] == EXIT_OK:
        if not args.json:
            _table(ctx, facts, written)
        return apply(args, ctx, written, facts)
    code = base.emit(ctx, rep, json_output=args.json, show_findings=False)
    if code != EXIT_OK:
        return code
    none = sorted(host for host, paths in written.items() if not paths)
    if not args.json:
        _table(ctx, facts, written)
        if none:
            ctx.err.print(
                Text(
                    f"No hand-started SGLang server found on {', '.join(none)} (a process "
                    "running sglang.launch_server outside gpuhost's unit): nothing to propose.",
                    style="yellow",
                )
            )
    return EXIT_FAILED if none or not written else EXIT_OK
