"""pytest setup shared by the tests.

The plugins are collection code (the repository root is the collection gpuhost.gpu), so the
tests import them as Ansible does: `ansible_collections.gpuhost.gpu.plugins...`. That name
resolves through `.collections/ansible_collections/gpuhost/gpu`, a link to the repository
root that pyproject.toml puts on pytest's `pythonpath`; nothing here patches import paths.
"""

import atexit
import os
import shutil
import tempfile

# gpuhost takes one lock per target host in the user's lock directory (src/gpuhost/locking.py):
# the suite's runs against `localhost` or a test host name would wait on, or fail beside, a real
# gpuhost run or a second test session on this machine. Each session locks in its own directory
# (0700, as gpuhost requires); tests/gpuhost_fakes.cli_env passes it to the console script.
if "GPUHOST_LOCK_DIR" not in os.environ:
    os.environ["GPUHOST_LOCK_DIR"] = tempfile.mkdtemp(prefix="gpuhost-test-locks-")
    atexit.register(shutil.rmtree, os.environ["GPUHOST_LOCK_DIR"], True)
