"""Role boundaries (issue 16): a role reads another role only through what that role
publishes (its `gpuhost_*` fact, its public `<role>_*` variables, its `tasks_from` entries),
never through its internal `_<role>_*` names; the health gate and the venv install each
exist once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
SOURCES = [
    p
    for p in (ROOT / "roles").rglob("*")
    if p.is_file() and p.suffix in (".yml", ".yaml", ".j2") and "molecule" not in p.parts
]


def _internal_names(text: str, role: str) -> set[str]:
    return set(re.findall(rf"(?<![\w.]){re.escape('_' + role + '_')}\w+", text))


@pytest.mark.parametrize("role", ROLES)
def test_no_role_reads_another_roles_internal_names(role):
    found = {}
    for path in SOURCES:
        owner = path.relative_to(ROOT / "roles").parts[0]
        if owner == role:
            continue
        names = _internal_names(path.read_text(encoding="utf-8"), role)
        if names:
            found[str(path.relative_to(ROOT))] = sorted(names)
    assert not found, f"internal names of role {role} used outside it: {found}"


def _files_with(pattern: str) -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for p in SOURCES + sorted((ROOT / "playbooks").rglob("*.yml"))
        if re.search(pattern, p.read_text(encoding="utf-8"))
    )


def test_one_health_gate():
    assert _files_with(r"gpuhost\.gpu\.sglang_wait:") == ["roles/sglang_server/tasks/gate.yml"]


def test_one_way_to_install_a_venv_from_a_lock():
    assert _files_with(r"- sync\b|ansible\.builtin\.pip:") == ["roles/python_env/tasks/venv.yml"]


def test_gpu_facts_are_read_by_preflight_only():
    # preflight reads them on every run; a play without preflight includes its tasks_from
    # facts (read when missing). nccl re-reads once the driver is loaded (its own decision).
    assert _files_with(r"gpuhost\.gpu\.gpu_facts:") == [
        "roles/nccl/tasks/preflight.yml",
        "roles/preflight/tasks/facts.yml",
        "roles/preflight/tasks/main.yml",
    ]


# Entry points (issue 29): a role that another role or a playbook calls into names those
# entries in its meta/argument_specs.yml; nothing calls an undeclared task file.
INCLUDERS = ("include_role", "import_role")
CALLERS = sorted(
    [p for p in SOURCES if p.suffix in (".yml", ".yaml") and "tasks" in p.parts]
    + sorted((ROOT / "playbooks").glob("*.yml"))
    + [ROOT / "site.yml"]
)


def _tasks(node):
    """Every task mapping in a play or task list, blocks, rescues and always included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(node.get(key))


def _calls(path: Path) -> list[tuple[str, str]]:
    """(role, entry) for each include_role/import_role in the file; a templated tasks_from is
    expanded over its loop's literal list, and one that cannot be expanded is an error."""
    calls = []
    for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
        for key, args in task.items():
            if key.split(".")[-1] not in INCLUDERS or not isinstance(args, dict):
                continue
            role = args["name"].split(".")[-1]
            entry = str(args.get("tasks_from", "main")).removesuffix(".yml")
            if "{{" in entry:
                loop_var = (task.get("loop_control") or {}).get("loop_var", "item")
                loop = task.get("loop")
                assert isinstance(loop, list) and entry == f"{{{{ {loop_var} }}}}", (
                    f"{path.name}: tasks_from {entry!r} of role {role} is not a "
                    "loop over a literal list of entries: declare what it can call"
                )
                calls += [(role, str(e)) for e in loop]
            else:
                calls.append((role, entry))
    return calls


def _declared(role: str) -> set[str]:
    specs = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    return set(yaml.safe_load(specs.read_text(encoding="utf-8"))["argument_specs"])


def test_every_called_entry_point_is_declared():
    undeclared = sorted(
        f"{path.relative_to(ROOT)} -> {role}:{entry}"
        for path in CALLERS
        for role, entry in _calls(path)
        if entry not in _declared(role)
    )
    assert not undeclared, (
        f"task files called but not declared in meta/argument_specs.yml: {undeclared}"
    )


def test_the_entry_point_reader_sees_loops_and_refuses_what_it_cannot_expand(tmp_path):
    play = tmp_path / "tasks.yml"
    play.write_text(
        "- name: Loop\n  ansible.builtin.include_role:\n    name: gpuhost.gpu.nccl\n"
        "    tasks_from: '{{ _phase }}'\n  loop: [preflight, secret]\n"
        "  loop_control: {loop_var: _phase}\n"
        "- name: Block\n  block:\n    - name: Plain\n"
        "      include_role: {name: base, tasks_from: dpkg.yml}\n"
    )
    calls = _calls(play)
    assert calls == [("nccl", "preflight"), ("nccl", "secret"), ("base", "dpkg")]
    assert "secret" not in _declared("nccl")
    play.write_text(
        "- name: Opaque\n  ansible.builtin.include_role:\n    name: nccl\n"
        "    tasks_from: '{{ what }}'\n"
    )
    with pytest.raises(AssertionError, match="not a loop over a literal list"):
        _calls(play)


def test_no_role_calls_another_roles_task_file_by_path():
    found = [
        str(p.relative_to(ROOT))
        for p in CALLERS
        for task in _tasks(yaml.safe_load(p.read_text(encoding="utf-8")))
        for key, args in task.items()
        if key.split(".")[-1] in ("include_tasks", "import_tasks")
        and "roles/" in str(args.get("file", args) if isinstance(args, dict) else args)
    ]
    assert not found, found


def test_the_routed_worker_rule_is_one_check_in_rolling_update():
    """Whether a worker serves behind a router (and so provisioning must not take it down) is
    decided in roles/rolling_update/tasks/routed.yml alone; sglang_server and nvidia_driver
    call its entries `routed` and `refuse` and say only what their change would do."""
    readers = _files_with(r"groups\[rolling_update_router_group\]")
    assert "roles/rolling_update/tasks/routed.yml" in readers
    assert all(r.startswith("roles/rolling_update/") for r in readers), readers
    assert _files_with(r"provisioning never") == ["roles/rolling_update/tasks/refuse.yml"]
    callers = {
        str(p.relative_to(ROOT)) for p in CALLERS if ("rolling_update", "refuse") in _calls(p)
    }
    assert callers == {
        "roles/nvidia_driver/tasks/change.yml",
        "roles/sglang_server/tasks/routed_replay.yml",
    }
