"""Every setting's default is defined exactly once (issue 16, item 8).

The rule (docs/ARCHITECTURE.md "Settings"): a setting that only its own role reads lives only
in roles/<role>/defaults/main.yml; a setting that another role reads (role defaults are not
visible in another play, nor through hostvars) is shared and lives only in
group_vars/all/<owner role>.yml, which every playbook loads. The gpuhost_* settings belong to
no role and live in group_vars/all/gpuhost.yml. These tests read the real roles and fail when
a key is defined in both places, when a role reads another role's setting that is not
shared, when a shared setting is read by its role alone, or when a reader carries a second
copy of a shared default (`| default(...)`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GROUP_VARS = ROOT / "group_vars" / "all"
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
# What a role reads: its tasks, handlers, vars, defaults, templates and validation rules.
READ_PARTS = ("tasks", "handlers", "vars", "defaults", "templates")
# Python that reads another host's settings through hostvars (the router play reads each
# worker's port); each name listed must appear in its file and be shared.
HOSTVARS_READERS = {
    "plugins/filter/gpuhost_router.py": {"sglang_server_port"},
    # Every node of a serving group reads the others' group settings (hostvars).
    "plugins/plugin_utils/gpuhost_serving_group.py": {
        "sglang_server_group",
        "sglang_server_node_rank",
        "sglang_server_group_address",
        "sglang_server_dist_init_port",
    },
}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _shared() -> dict[str, dict]:
    return {p.stem: _load(p) for p in sorted(GROUP_VARS.glob("*.yml"))}


def _defaults(role: str) -> dict:
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return _load(path) if path.exists() else {}


def _options(role: str) -> set[str]:
    path = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    if not path.exists():
        return set()
    return set(_load(path)["argument_specs"]["main"].get("options") or {})


def _owner(name: str) -> str | None:
    """The role whose prefix the name carries (the longest matching role name)."""
    owners = [r for r in ROLES if name.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def _reads(text: str) -> set[str]:
    """Names a YAML or Jinja text reads: words outside comments that are not keys being set
    (`name:`), not filter or module names (`gpuhost.gpu.name`) and not internal (`_name`)."""
    text = re.sub(r"{#.*?#}", "", text, flags=re.S)
    text = "\n".join(
        line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#")
    )
    return set(re.findall(r"(?<![\w.])([a-z][a-z0-9_]*)(?!\w)(?!:)", text))


def _public(names: set[str], role: str) -> set[str]:
    """The public settings of other roles among names."""
    out = set()
    for name in names:
        owner = _owner(name)
        if owner and owner != role and name in _options(owner):
            out.add(name)
    return out


def _cross_reads() -> dict[str, set[str]]:
    """Setting -> the files outside its owner role that read it."""
    found: dict[str, set[str]] = {}
    for role in ROLES:
        files = [p for part in READ_PARTS for p in (ROOT / "roles" / role / part).rglob("*")]
        files.append(ROOT / "roles" / role / "meta" / "constraints.yml")
        for path in files:
            if not path.is_file() or path.suffix not in (".yml", ".j2"):
                continue
            for name in _public(_reads(path.read_text()), role):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    for rel, names in HOSTVARS_READERS.items():
        text = (ROOT / rel).read_text()
        for name in names:
            assert name in text, f"{rel} no longer reads {name}: update HOSTVARS_READERS"
            found.setdefault(name, set()).add(rel)
    return found


def test_group_vars_files_are_gpuhost_or_a_role_and_carry_its_prefix():
    for owner, values in _shared().items():
        assert owner == "gpuhost" or owner in ROLES, f"group_vars/all/{owner}.yml: no such role"
        bad = [k for k in values if not k.startswith(owner + "_")]
        assert not bad, f"group_vars/all/{owner}.yml holds settings of another owner: {bad}"


@pytest.mark.parametrize("role", ROLES)
def test_no_setting_is_defined_both_in_group_vars_and_a_role_default(role):
    shared = {k for values in _shared().values() for k in values}
    both = sorted(shared & set(_defaults(role)))
    assert not both, (
        f"roles/{role}/defaults/main.yml repeats shared settings of group_vars/all: {both}"
    )


def test_every_setting_read_across_roles_is_shared():
    shared = {k for values in _shared().values() for k in values}
    missing = {n: sorted(f) for n, f in _cross_reads().items() if n not in shared}
    assert not missing, (
        "settings read outside their role must be defined in group_vars/all/<role>.yml "
        f"(role defaults are not visible there): {missing}"
    )


def test_every_shared_setting_is_read_outside_its_role():
    """Otherwise it belongs in its role's defaults: group_vars/all holds only shared ones."""
    reads = _cross_reads()
    for owner, values in _shared().items():
        if owner == "gpuhost":
            continue
        alone = sorted(k for k in values if k not in reads)
        assert not alone, (
            f"group_vars/all/{owner}.yml: only role {owner} reads {alone}; "
            f"move them to roles/{owner}/defaults/main.yml"
        )


def test_no_second_copy_of_a_shared_default():
    shared = sorted(k for values in _shared().values() for k in values)
    pattern = re.compile(r"\b(" + "|".join(shared) + r")\s*\|\s*default\(")
    sources = [
        p
        for d in ("roles", "playbooks", "molecule")
        for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in (".yml", ".j2")
    ]
    found = {
        str(p.relative_to(ROOT)): sorted(set(pattern.findall(p.read_text())))
        for p in sources
        if pattern.search(p.read_text())
    }
    assert not found, f"shared settings are always defined; drop these fallbacks: {found}"


def test_the_scanner_can_fail():
    """A role reading another role's setting is seen; keys set, comments, filters are not."""
    text = (
        "# sglang_server_port in a comment\n"
        'x: "{{ sglang_server_port }}"\n'
        "sglang_server_host: set here, not read\n"
        'y: "{{ v | gpuhost.gpu.sglang_server_flags }}"\n'
    )
    assert _public(_reads(text), "verify") == {"sglang_server_port"}
    assert _public(_reads(text), "sglang_server") == set()


PLAY = """\
---
- name: A playbook of a user's own that applies a gpuhost role
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: Validate as the role does first
      gpuhost.gpu.validate:
        roles: [verify]
"""


def _own_playbook(tmp_path: Path, with_group_vars: bool):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n        here:\n"
        "          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    if with_group_vars:
        (tmp_path / "group_vars").symlink_to(GROUP_VARS.parent)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.yml", "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )


def test_a_playbook_without_the_shared_settings_is_told_what_to_load(tmp_path):
    out = _own_playbook(tmp_path, with_group_vars=False)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "sglang_server_port: not defined" in text, text
    assert "group_vars/all/sglang_server.yml" in text, text


def test_the_same_playbook_beside_the_shared_settings_passes(tmp_path):
    out = _own_playbook(tmp_path, with_group_vars=True)
    assert out.returncode == 0, out.stdout + out.stderr
