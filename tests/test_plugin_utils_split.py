"""plugins/module_utils holds only what the modules run on a managed host; controller-only code
(action and filter plugins, the CLI) lives in plugins/plugin_utils (issue 29).

Ansible ships a module's module_utils imports to the host with it, so a module must never
import plugin_utils (it is not sent), a module_utils file must not either (the same), and a
module_utils file that no module reaches, directly or through another module_utils file, is
controller code in the wrong folder. Imports are read with `ast`, as written.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
PREFIX = "ansible_collections.gpuhost.gpu.plugins."


def _imports(path: Path, folder: str) -> set[str]:
    """The files of plugins/<folder> that path imports (names without .py), in any form:
    `from ...<folder>.x import y`, `from ...<folder> import x`, `import ...<folder>.x`, or
    relative (`from .x import y` inside that folder, `from ..<folder>.x import y`)."""
    package = PREFIX + folder
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative to the file's package, plugins.<its folder>
                here = (PREFIX + path.parent.name).split(".")
                module = ".".join(here[: len(here) - node.level + 1] + ([module] if module else []))
            modules = [(module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            if module == package:
                found.update(names)
            elif module.startswith(package + "."):
                found.add(module[len(package) + 1 :].split(".")[0])
    return found


def _files(folder: str) -> dict[str, Path]:
    return {p.stem: p for p in sorted((PLUGINS / folder).glob("*.py")) if p.stem != "__init__"}


def reachable_module_utils() -> set[str]:
    """module_utils files a module imports, directly or through other module_utils files."""
    utils = _files("module_utils")
    todo = [n for m in _files("modules").values() for n in _imports(m, "module_utils")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in utils:
            continue
        seen.add(name)
        todo.extend(_imports(utils[name], "module_utils"))
    return seen


def test_no_module_imports_plugin_utils():
    bad = {
        name: sorted(found)
        for name, path in _files("modules").items()
        if (found := _imports(path, "plugin_utils"))
    }
    assert not bad, f"modules import controller-only plugin_utils (not sent to a host): {bad}"


def test_no_module_utils_imports_plugin_utils():
    bad = {
        name: sorted(found)
        for name, path in _files("module_utils").items()
        if (found := _imports(path, "plugin_utils"))
    }
    assert not bad, f"module_utils import plugin_utils (not sent to a host): {bad}"


def test_every_module_utils_file_is_reached_from_a_module():
    stray = sorted(set(_files("module_utils")) - reachable_module_utils())
    assert not stray, (
        f"controller-only code in plugins/module_utils (move it to plugin_utils): {stray}"
    )


def test_the_module_utils_imported_exist():
    """A name the walk follows that is no file (a typo, a file moved away) is reported here,
    not silently dropped from the reachable set."""
    utils = _files("module_utils")
    missing = {
        f"{path.parent.name}/{path.name}": sorted(found - set(utils))
        for folder in ("modules", "module_utils")
        for path in _files(folder).values()
        if (found := _imports(path, "module_utils")) - set(utils)
    }
    assert not missing, missing


def test_the_checks_see_a_violation(tmp_path, monkeypatch):
    """The checks can fail: a module importing plugin_utils, a module_utils file importing
    plugin_utils and a module_utils file no module reaches are each found."""
    for folder, files in _files_of_a_planted_tree().items():
        (tmp_path / folder).mkdir()
        for name, text in files.items():
            (tmp_path / folder / f"{name}.py").write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PLUGINS", tmp_path)
    assert _imports(tmp_path / "modules" / "m.py", "plugin_utils") == {"gpuhost_p"}
    assert _imports(tmp_path / "module_utils" / "gpuhost_a.py", "plugin_utils") == {"gpuhost_p"}
    assert _imports(tmp_path / "module_utils" / "gpuhost_b.py", "plugin_utils") == {"gpuhost_q"}
    assert reachable_module_utils() == {"gpuhost_a", "gpuhost_b", "gpuhost_c"}
    assert set(_files("module_utils")) - reachable_module_utils() == {"gpuhost_stray"}


def _files_of_a_planted_tree() -> dict[str, dict[str, str]]:
    mu = PREFIX + "module_utils"
    pu = PREFIX + "plugin_utils"
    return {
        "modules": {
            "m": f"from {mu}.gpuhost_a import x\nfrom {pu} import gpuhost_p\n",
        },
        "module_utils": {
            "gpuhost_a": f"from {mu} import gpuhost_b as b\nimport {pu}.gpuhost_p\n",
            "gpuhost_b": "from .gpuhost_c import X\nfrom ..plugin_utils.gpuhost_q import Z\n",
            "gpuhost_c": "X = 1\n",
            "gpuhost_stray": "Y = 2\n",
        },
        "plugin_utils": {"gpuhost_p": "Z = 3\n", "gpuhost_q": "Z = 4\n"},
    }
