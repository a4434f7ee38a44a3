"""Every module under plugins/modules imports on the controller with the collection names of
its module_utils, the names it has on a host. Ansible builds a module's payload from those
imports; a broken or renamed one otherwise shows only when a play runs the module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MODULES = sorted((Path(__file__).resolve().parents[1] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_imports_and_documents_itself(path):
    spec = importlib.util.spec_from_file_location(f"gpuhost_module_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
    for block in ("DOCUMENTATION", "RETURN"):
        assert str(getattr(module, block, "")).strip(), f"{path.name} has no {block}"


DOCUMENTED = sorted(
    p
    for folder in ("modules", "action")
    for p in (Path(__file__).resolve().parents[1] / "plugins" / folder).glob("*.py")
)


@pytest.mark.parametrize("path", DOCUMENTED, ids=[f"{p.parent.name}/{p.stem}" for p in DOCUMENTED])
def test_documentation_blocks_are_yaml(path):
    """ansible-doc and ansible-lint parse these blocks; a ': ' in a plain scalar breaks them."""
    import ast

    import yaml

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in (
            "DOCUMENTATION",
            "EXAMPLES",
            "RETURN",
        ):
            yaml.safe_load(node.value.value)
