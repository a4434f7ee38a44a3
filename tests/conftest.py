"""Lets the tests import module_utils as `ansible.module_utils.gpuhost_*`.

That is the name a module uses for them on a host, and the only one Ansible's module bundler
follows: a module_utils file that a module ships names its siblings that way (for example
gpuhost_nvsmi imports ansible.module_utils.gpuhost_nvsmi_topo), so those imports have to
resolve here too. Ansible resolves them from the `module_utils` setting in ansible.cfg; the
tests add plugins/module_utils to the package's search path instead. Controller-side
module_utils (imported by filter and action plugins) stay top-level `gpuhost_*` modules, with
plugins/module_utils on sys.path (gpuhost_fakes.py and the tests that need it).
"""

from __future__ import annotations

from pathlib import Path

import ansible.module_utils

_MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "plugins" / "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)
