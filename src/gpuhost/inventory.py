"""Which hosts of a group an inventory and a --limit pattern select, as Ansible reads them.

One place for it: `gpuhost rebuild`/`vm` pick the VMs (group proxmox_vms), `gpuhost update`/
`rollback` name the workers a rollout never reached (group gpu_hosts).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

_SSH_CONNECTIONS = (None, "", "ssh", "smart", "paramiko", "paramiko_ssh")
_COMMENTED_ADDRESS = re.compile(r"^\s*#\s*ansible_host\s*[:=]")


def explain(exc: BaseException) -> str:
    """An Ansible exception as Ansible prints it: the message and, for a YAML error, the
    `Origin: FILE:LINE:COLUMN` and the source lines (on an exception of the chain)."""
    message = str(getattr(exc, "message", "") or exc)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        context = getattr(current, "_formatted_source_context", None)
        if isinstance(context, str) and context.strip() and context not in message:
            return f"{message}\n{context.strip()}"
        current = current.__cause__ or current.__context__
    return message


class InventoryParseError(Exception):
    """An inventory source no plugin could read; the message names the file and line."""


class NoHostsMatched(Exception):
    """--limit selects no host; the message lists the inventory's hosts."""


@contextlib.contextmanager
def _parse_failures() -> Iterator[list[tuple[str, BaseException | None]]]:
    """Ansible's InventoryManager only warns (on stderr) when a source fails to parse and
    goes on with an empty inventory; the failures are collected here instead."""
    from ansible.inventory import manager as inventory_manager

    display = inventory_manager.display
    failures: list[tuple[str, BaseException | None]] = []
    keep_error, keep_warning = display.error_as_warning, display.warning

    def error_as_warning(msg: str, exception: BaseException, *args: object, **kw: object) -> None:
        failures.append((str(msg), exception))

    def warning(msg: str, *args: object, **kwargs: object) -> None:
        text = str(msg)
        if text.startswith("Unable to parse ") or text.startswith("No inventory was parsed"):
            failures.append((text, None))
        elif not text.startswith("Could not match supplied host pattern"):  # --limit: below
            keep_warning(msg, *args, **kwargs)

    display.error_as_warning, display.warning = error_as_warning, warning
    try:
        yield failures
    finally:
        display.error_as_warning, display.warning = keep_error, keep_warning


def load(inventories: list[Path]):
    """(InventoryManager, DataLoader) for the inventories; InventoryParseError when a
    source cannot be read, with Ansible's error for it (file, line, the source)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    with _parse_failures() as failures:
        manager = InventoryManager(loader=loader, sources=[str(p) for p in inventories])
    unreadable = [m.removeprefix("Unable to parse ") for m, e in failures if e is None]
    if unreadable:
        errors = [explain(e) for _, e in failures if e is not None]
        # The plugin that names a line is the one that read the file as its format.
        located = [e for e in errors if re.search(r"Origin: [^<\n]+:\d+", e)] or errors
        detail = f"\n{located[0]}" if located else ""
        raise InventoryParseError(f"cannot parse {unreadable[0]}{detail}")
    return manager, loader


def _variables(loader, manager):
    """A VariableManager for reading inventory variables in this process. It reads no facts, so
    it gets ansible-core's memory cache: the fact cache plugin ansible.cfg names
    (gpuhost.gpu.factfile) lives in a collection, which would need Ansible's collection loader
    installed in this process for every later import of collection code."""
    from ansible import constants
    from ansible.vars.manager import VariableManager

    configured = constants.CACHE_PLUGIN
    constants.CACHE_PLUGIN = "memory"
    try:
        return VariableManager(loader=loader, inventory=manager)
    finally:
        constants.CACHE_PLUGIN = configured


def hosts_in_group(inventories: list[Path], group: str, limit: str | None) -> list[str]:
    """Hosts of `group` that `limit` (an Ansible pattern, None for all) matches, in
    inventory order."""
    manager, _ = load(inventories)
    # Ansible warns "Could not match supplied host pattern" when the pattern is evaluated
    # (in get_hosts, not subset): the CLI says it once, in its own words (below).
    with _parse_failures():
        if limit:
            manager.subset(limit)
        return [h.name for h in manager.get_hosts(group)]


def connection_targets(inventories: list[Path], limit: str | None) -> list[str]:
    """`address:port` of every host the inventories and `limit` select, as Ansible will
    connect to it (ansible_host, else the name; ansible_port, else none given), with the
    inventories' group_vars/host_vars read: what two runs must not share (locking.py)."""
    manager, loader = load(inventories)
    with _parse_failures():
        if limit:
            manager.subset(limit)
        selected = manager.get_hosts("all")
    if limit and not selected and limit not in ("localhost", "127.0.0.1"):
        names = list(manager.hosts) or ["none"]
        shown = ", ".join(sorted(names)[:20]) + (" ..." if len(names) > 20 else "")
        raise NoHostsMatched(
            f"--limit {limit!r} matches no host of inventory "
            f"{', '.join(map(str, inventories))}; its hosts: {shown}"
        )
    variables = _variables(loader, manager)
    targets = set()
    for host in selected:
        found = variables.get_vars(host=host, include_hostvars=False)
        address, port = str(found.get("ansible_host") or host.name), found.get("ansible_port")
        if "{{" in address:  # a template: the name is what the inventory says for sure
            address = host.name
        port = "" if port is None or "{{" in str(port) else str(port)
        targets.add(f"{address.lower()}:{port}")
    return sorted(targets)


def _hosts_vars(inventories: list[Path], hosts: list[str]):
    """(name, its variables as the inventory sets them) for each of `hosts` it knows."""
    manager, loader = load(inventories)
    variables = _variables(loader, manager)
    for name in hosts:
        host = manager.get_host(name)
        if host is not None:
            yield name, variables.get_vars(host=host, include_hostvars=False)


def serving_groups(inventories: list[Path], hosts: list[str]) -> dict[str, str]:
    """{host: its serving group} for the `hosts` whose inventory sets sglang_server_group (a
    group of hosts that are one SGLang server, docs/multi-node.md); hosts on their own are left
    out. The name as the inventory writes it; a templated one is left out (not known here)."""
    groups = {}
    for name, found in _hosts_vars(inventories, hosts):
        group = str(found.get("sglang_server_group") or "")
        if group and "{{" not in group:
            groups[name] = group
    return groups


def address_hints(inventories: list[Path], hosts: list[str]) -> dict[str, str]:
    """For hosts reached over ssh that have no ansible_host: what to fix. ssh then tries
    the inventory name itself ("Could not resolve hostname gpu-host-1"), which is seldom
    meant; the example inventories ship with ansible_host commented out."""

    hints = {}
    for name, found in _hosts_vars(inventories, hosts):
        if found.get("ansible_host") or found.get("ansible_connection") not in _SSH_CONNECTIONS:
            continue
        source = str(found.get("inventory_file") or ", ".join(map(str, inventories)))
        hint = (
            f"{name} has no ansible_host in the inventory, so ssh tried the name {name!r} "
            f"itself; set ansible_host (its address) for it in {source}"
        )
        line = commented_address_line(Path(source), name)
        if line:
            hint += f" (line {line} holds a commented-out ansible_host: uncomment and fill it)"
        hints[name] = hint
    return hints


def commented_address_line(path: Path, host: str) -> int | None:
    """The line number of the commented-out `ansible_host:` under `host` in a YAML
    inventory file (the first one after the line that names the host)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    start = next((n for n, text in enumerate(lines) if text.strip() == f"{host}:"), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    for number, text in enumerate(lines[start + 1 :], start + 2):
        if _COMMENTED_ADDRESS.match(text):
            return number
        code = text.strip() and not text.lstrip().startswith("#")
        if code and len(text) - len(text.lstrip()) <= indent:
            return None  # the next host or group: none under this one
    return None
