"""The collection tarball carries the collection and nothing that is a user's (issue 34).

A clone is where a user keeps their inventory, vault files and .env files; `ansible-galaxy
collection build` from that clone must leave them out (galaxy.yml's build_ignore). The test
plants each kind in a copy of the repository, builds the tarball there and reads its member
list: the planted files are absent, the roles, playbooks and plugins are present.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
# What a user of a clone writes there (README "Point it at a real host"), and must never ship.
PLANTED = {
    "inventory/mine/hosts.yml": "gpu_hosts:\n  hosts:\n    gpu1: {ansible_host: 10.1.2.3}\n",
    "inventory/mine/group_vars/gpu_hosts/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n6162\n",
    "group_vars/all/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n6364\n",
    "vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n6566\n",
    ".env": "HF_TOKEN=hf_planted_secret\n",
    "roles/sglang_server/.env": "HF_TOKEN=hf_planted_secret\n",
    "host_vars/gpu1.yml": "ansible_host: 10.1.2.3\n",
}
# Not part of the collection and large (or another person's work in progress): not copied.
NOT_COPIED = {".git", ".venv", ".cache", ".collections", ".device", ".whl", "runs", "molecule"}


def _build(base: Path, galaxy: dict | None = None) -> set[str]:
    """Copy the repository to base/clone, plant PLANTED there (galaxy.yml replaced by
    `galaxy` when given), build the tarball and return its member names."""
    clone = base / "clone"
    clone.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in NOT_COPIED:
            continue
        dest = clone / entry.name
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(
                entry, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(entry, dest, follow_symlinks=False)
    for rel, text in PLANTED.items():
        path = clone / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if galaxy is not None:
        (clone / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
    out = base / "dist"
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-galaxy")),
            "collection",
            "build",
            "--output-path",
            str(out),
            str(clone),
        ],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob(f"gpuhost-gpu-{GALAXY['version']}.tar.gz")
    with tarfile.open(tarball) as tar:
        return {m.name for m in tar.getmembers()}


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> set[str]:
    return _build(tmp_path_factory.mktemp("build"))


@pytest.mark.parametrize("rel", sorted(PLANTED))
def test_a_users_file_in_the_clone_is_not_in_the_tarball(members, rel):
    assert rel not in members
    # Nor anything else under the user's inventory.
    assert not [m for m in members if m.startswith("inventory/")]


def test_no_env_or_vault_file_anywhere_in_the_tarball(members):
    names = [Path(m).name for m in members]
    assert not [n for n in names if n == ".env" or n.startswith(".env.") or "vault" in n]


def test_the_collection_itself_is_in_the_tarball(members):
    expected = {
        "MANIFEST.json",
        "FILES.json",
        "playbooks/site.yml",
        "playbooks/preflight.yml",
        "roles/preflight/tasks/main.yml",
        "roles/python_env/tasks/main.yml",
        "roles/sglang_server/tasks/main.yml",
        "plugins/modules/gpu_facts.py",
        "plugins/module_utils/gpuhost_python_env.py",
        "plugins/plugin_utils/gpuhost_profile_fit.py",
        "plugins/filter/gpuhost_findings.py",
        "plugins/action/validate.py",
    }
    assert expected <= members, sorted(expected - members)
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    shipped = {m.split("/")[1] for m in members if m.startswith("roles/") and m.count("/") >= 2}
    assert roles <= shipped, sorted(roles - shipped)


def test_without_build_ignore_the_planted_files_would_ship(tmp_path):
    """The test can fail: it is galaxy.yml's build_ignore that keeps the planted files out.
    With the patterns for users' files dropped, the same build ships every one of them."""
    users = {"inventory", "host_vars", "*vault*", ".env", "*/.env", ".env.*", "*/.env.*", "*.env"}
    assert users <= set(GALAXY["build_ignore"])
    galaxy = {**GALAXY, "build_ignore": [p for p in GALAXY["build_ignore"] if p not in users]}
    shipped = _build(tmp_path, galaxy)
    assert set(PLANTED) <= shipped, sorted(set(PLANTED) - shipped)
