"""The CLI's view of the project's one secret-name list (plugins/module_utils/
gpuhost_secrets.py): the same patterns and redact() the plugins use.

It is imported as collection code when the collection is installed
(ansible_collections.gpuhost.gpu), else loaded from the checkout this package runs from
(an editable install, as `make venv` does).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "gpuhost_secrets"
_COLLECTION = "ansible_collections.gpuhost.gpu.plugins.module_utils." + _NAME
_CHECKOUT = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / f"{_NAME}.py"


def _load() -> ModuleType:
    try:
        return importlib.import_module(_COLLECTION)
    except ImportError:
        pass
    spec = importlib.util.spec_from_file_location(f"gpuhost._{_NAME}", _CHECKOUT)
    if spec is None or spec.loader is None or not _CHECKOUT.is_file():
        raise ImportError(f"{_CHECKOUT} not found: gpuhost runs from its checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_secrets = _load()

REDACTED: str = _secrets.REDACTED
SECRET_NAME = _secrets.SECRET_NAME
is_secret_name = _secrets.is_secret_name
redact = _secrets.redact
