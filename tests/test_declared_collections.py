"""Every collection gpuhost calls is declared where its users get collections from.

The product (roles, playbooks, plugins, ansible.cfg) calls modules, module groups, callbacks
and connections of other collections by their FQCN. An installed gpuhost.gpu gets only what
galaxy.yml's `dependencies` name; a clone's Galaxy users get requirements.yml; AWX users the
execution environment. A reference to a collection none of them declares works here (the
`ansible` package carries everything) and breaks for those users, as community.proxmox did.
Test-side files (molecule, tests, inventories) need their collections in requirements.yml.
"""

from __future__ import annotations

import re
from pathlib import Path

import ansible_collections
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
OWN = {"ansible.builtin", "gpuhost.gpu"}
PRODUCT = ["roles", "playbooks", "plugins", "meta", "site.yml", "ansible.cfg"]
TEST_SIDE = ["molecule", "tests", "inventory", ".config", "bench"]
SUFFIXES = {".yml", ".yaml", ".py", ".j2", ".cfg", ".sh"}


def installed_collections() -> set[str]:
    """namespace.name of every collection the `ansible` package installed here."""
    found = set()
    for base in map(Path, ansible_collections.__path__):
        for manifest in base.glob("*/*/MANIFEST.json"):
            found.add(f"{manifest.parent.parent.name}.{manifest.parent.name}")
    return found


def references(paths: list[Path], known: set[str], root: Path = ROOT) -> dict[str, set[str]]:
    """collection -> files that name one of its content items (`ns.name.item`)."""
    pattern = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z_][a-z0-9_]*")
    out: dict[str, set[str]] = {}
    for top in paths:
        files = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in files:
            if path.suffix not in SUFFIXES and path.name != "ansible.cfg":
                continue
            if "fixtures" in path.parts or not path.is_file() or path == Path(__file__).resolve():
                continue
            for ns, name in pattern.findall(path.read_text(errors="replace")):
                coll = f"{ns}.{name}"
                if coll in known and coll not in OWN:
                    out.setdefault(coll, set()).add(str(path.relative_to(root)))
    return out


def declared() -> dict[str, set[str]]:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    reqs = yaml.safe_load((ROOT / "requirements.yml").read_text())
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    return {
        "galaxy.yml dependencies": set(galaxy.get("dependencies") or {}),
        "requirements.yml": {c["name"] for c in reqs["collections"]},
        "execution-environment.yml": {
            c["name"]
            for c in ee["dependencies"]["galaxy"]["collections"]
            if c.get("type") != "file"
        },
    }


KNOWN = installed_collections()


def test_the_scan_sees_what_the_roles_call():
    """The scanner is not blind: it finds the modules the roles are known to call."""
    found = references([ROOT / p for p in PRODUCT], KNOWN)
    assert "roles/proxmox_vm/tasks/main.yml" in found["community.proxmox"]
    assert "roles/nvidia_driver/tasks/activate.yml" in found["community.general"]
    assert "ansible.cfg" in found["ansible.posix"]  # callbacks_enabled = ansible.posix...


def test_the_scan_flags_a_planted_call(tmp_path):
    (tmp_path / "task.yml").write_text("- name: x\n  community.mysql.mysql_db: {name: x}\n")
    (tmp_path / "note.yml").write_text("# see ansible.builtin.copy and gpuhost.gpu.site\n")
    found = references([tmp_path], KNOWN | {"community.mysql"}, root=tmp_path)
    assert found == {"community.mysql": {"task.yml"}}


@pytest.mark.parametrize(
    "where", ["galaxy.yml dependencies", "requirements.yml", "execution-environment.yml"]
)
def test_every_collection_the_product_calls_is_declared(where):
    found = references([ROOT / p for p in PRODUCT], KNOWN)
    missing = {c: sorted(f) for c, f in found.items() if c not in declared()[where]}
    assert not missing, f"{where} does not declare {missing}"


def test_every_collection_the_tests_call_is_in_requirements():
    found = references([ROOT / p for p in TEST_SIDE], KNOWN)
    missing = {c: sorted(f) for c, f in found.items() if c not in declared()["requirements.yml"]}
    assert not missing, f"requirements.yml does not declare {missing}"


def test_the_declarations_agree_on_versions():
    """One floor per collection: galaxy.yml, requirements.yml and the EE say the same."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]
    reqs = {
        c["name"]: c.get("version")
        for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    }
    ee = {
        c["name"]: c.get("version")
        for c in yaml.safe_load((ROOT / "execution-environment.yml").read_text())["dependencies"][
            "galaxy"
        ]["collections"]
        if c.get("type") != "file"
    }
    for name, floor in galaxy.items():
        assert reqs.get(name) == floor, (name, reqs.get(name), floor)
        assert ee.get(name) == floor, (name, ee.get(name), floor)
