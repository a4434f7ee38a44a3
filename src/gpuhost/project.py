"""Find the project (site.yml + ansible.cfg), the Ansible tools, and validate user paths.

Everything here runs before a run directory is created, so a typo costs no artifacts and
exits 2 with a message that names the bad value.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuhost.errors import GpuhostError

PROJECT_ENV = "GPUHOST_PROJECT_DIR"
RUNS_ENV = "GPUHOST_RUNS_DIR"


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def ansible_cfg(self) -> Path:
        return self.root / "ansible.cfg"

    @property
    def site(self) -> Path:
        return self.root / "site.yml"


def find_project(cli_value: str | None) -> Project:
    """--project-dir beats GPUHOST_PROJECT_DIR beats the checkout this package runs from."""
    if cli_value:
        root, origin = Path(cli_value), "--project-dir"
    elif os.environ.get(PROJECT_ENV):
        root, origin = Path(os.environ[PROJECT_ENV]), PROJECT_ENV
    else:
        # src/gpuhost/project.py -> the checkout root; the package is installed editable.
        root, origin = Path(__file__).resolve().parents[2], "the package location"
    root = root.expanduser().resolve()
    missing = [name for name in ("site.yml", "ansible.cfg") if not (root / name).is_file()]
    if missing:
        raise GpuhostError(
            f"project dir {root} (from {origin}) has no {' or '.join(missing)}; "
            f"pass --project-dir or set {PROJECT_ENV} to the gpuhost checkout"
        )
    return Project(root)


def runs_root(project: Project, cli_value: str | None) -> Path:
    value = cli_value or os.environ.get(RUNS_ENV)
    return Path(value).expanduser().resolve() if value else project.root / "runs"


def ansible_bin_dir() -> Path:
    """Directory holding ansible-playbook, checked before anything runs.

    ansible-runner starts ansible-playbook by name; the one beside this interpreter wins so
    that a venv's ansible-core is used even when the venv is not activated.
    """
    if importlib.util.find_spec("ansible_runner") is None:
        raise GpuhostError(
            f"ansible-runner is not installed for {sys.executable}; "
            "install gpuhost with its dependencies (pip install -e .)"
        )
    if importlib.util.find_spec("ansible") is None:
        raise GpuhostError(
            f"ansible-core is not installed for {sys.executable}; "
            "install gpuhost with its dependencies (pip install -e .)"
        )
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.parent
    found = shutil.which("ansible-playbook")
    if found is None:
        raise GpuhostError("ansible-playbook is not on PATH nor beside " + sys.executable)
    return Path(found).parent


def resolve_inventories(values: list[str]) -> list[Path]:
    """Inventory paths must exist: ansible-runner would take a missing path for inline
    inventory text, and ansible itself runs a no-op on an unreadable inventory."""
    paths = []
    for value in values:
        path = Path(value).expanduser()
        if not path.exists():
            raise GpuhostError(f"inventory not found: {value}")
        paths.append(path.resolve())
    return paths


def resolve_playbook(value: str | None, project: Project) -> Path:
    """A relative --playbook is tried against the current directory, then the project."""
    if value is None:
        path = project.site
    else:
        path = Path(value).expanduser()
        if not path.is_absolute() and not path.exists():
            path = project.root / path
    if not path.is_file():
        raise GpuhostError(f"playbook not found: {value or path}")
    return path.resolve()


def parse_extra_vars(values: list[str]) -> tuple[dict[str, object], list[Path]]:
    """-e key=value (string, as ansible does), -e '{"json": ...}', or -e @file."""
    variables: dict[str, object] = {}
    files: list[Path] = []
    for value in values:
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            if not path.is_file():
                raise GpuhostError(f"extra-vars file not found: {value[1:]}")
            files.append(path.resolve())
        elif value.lstrip().startswith("{"):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise GpuhostError(f"-e {value!r} is not valid JSON: {exc}") from None
            variables.update(parsed)
        elif "=" in value and value.split("=", 1)[0].strip():
            key, _, val = value.partition("=")
            variables[key.strip()] = val
        else:
            raise GpuhostError(f"-e {value!r}: expected key=value, a JSON object or @file")
    return variables, files
