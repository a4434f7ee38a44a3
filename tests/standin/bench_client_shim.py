"""TEST DOUBLE for one package `__init__` of sglang, used only by tests/test_bench_e2e.py.

The end-to-end bench test runs the real `python -m sglang.bench_serving` (sglang
0.5.10.post1, installed with --no-deps) from a small venv on the controller. bench_serving
imports `sglang.srt.utils.network.NetworkAddress` (and calls it: it builds the server's URL).
Importing that submodule first runs the package's `sglang/srt/utils/__init__.py`, which only
re-exports `sglang.srt.utils.common` (`from sglang.srt.utils.common import *`), and that
module imports torch (about 2.5 GB with its CUDA wheels) and the GPU stack. bench_serving
uses none of the re-exported names.

This finder makes `sglang.srt.utils` an empty package whose search path is the real
directory: `sglang.srt.utils.network` and every other submodule are sglang's own files,
unchanged; only the re-exporting `__init__` does not run. The test copies this file into the
venv's site-packages with a `.pth` line that imports it, so it is active in that venv only.
Nothing else of sglang is replaced.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

NAME = "sglang.srt.utils"


class _EmptyPackage(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module):
        module.__doc__ = "sglang.srt.utils without its __init__ (test double, see " + __file__ + ")"


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != NAME or not path:
            return None
        for entry in path:
            directory = os.path.join(entry, "utils")
            if os.path.isfile(os.path.join(directory, "__init__.py")):
                spec = importlib.machinery.ModuleSpec(name, _EmptyPackage(), is_package=True)
                spec.submodule_search_locations = [directory]
                return spec
        return None


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
