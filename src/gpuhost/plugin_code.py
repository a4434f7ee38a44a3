"""The one way the CLI runs the collection's own code (plugins/module_utils, plugins/plugin_utils),
so that the CLI and the plugins decide with the same functions: the secret names (redaction.py),
the finding shape (findings.py), the models lock (commands/models.py).

plugins/module_utils holds what modules run on a managed host; plugins/plugin_utils the
controller-only code (action and filter plugins, the CLI). `module_utils(name)` and
`plugin_utils(name)` load from one folder each, through the one loader below.

A module is imported as collection code when the collection is installed
(ansible_collections.gpuhost.gpu), else loaded from the checkout this package runs from (an
editable install, as `make venv` does), or from the project root the caller names. Only
modules that import nothing else of the collection can be loaded from a file.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE = "ansible_collections.gpuhost.gpu.plugins."
CHECKOUT = Path(__file__).resolve().parents[2]


def _load(folder: str, name: str, root: Path | str | None) -> ModuleType:
    """plugins/<folder>/<name>.py: the installed collection's, else the checkout's; with root,
    that project's file (its own copy, whatever is installed)."""
    if root is None:
        try:
            return importlib.import_module(f"{_PACKAGE}{folder}.{name}")
        except ImportError:
            pass
    path = Path(root or CHECKOUT) / "plugins" / folder / f"{name}.py"
    key = f"gpuhost._plugin_code.{folder}.{name}" + ("" if root is None else f"@{path}")
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"{path} not found: gpuhost runs from its checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def module_utils(name: str, root: Path | str | None = None) -> ModuleType:
    """plugins/module_utils/<name>.py: code the modules also run on a managed host."""
    return _load("module_utils", name, root)


def plugin_utils(name: str, root: Path | str | None = None) -> ModuleType:
    """plugins/plugin_utils/<name>.py: controller-only code (action and filter plugins)."""
    return _load("plugin_utils", name, root)
