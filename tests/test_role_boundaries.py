"""Role boundaries (issue 16): a role reads another role only through what that role
publishes (its `gpuhost_*` fact, its public `<role>_*` variables, its `tasks_from` entries),
never through its internal `_<role>_*` names; the health gate and the venv install each
exist once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
