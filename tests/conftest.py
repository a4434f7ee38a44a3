"""pytest setup shared by the tests.

The plugins are collection code (the repository root is the collection gpuhost.gpu), so the
tests import them as Ansible does: `ansible_collections.gpuhost.gpu.plugins...`. That name
resolves through `.collections/ansible_collections/gpuhost/gpu`, a link to the repository
root that pyproject.toml puts on pytest's `pythonpath`; nothing here patches import paths.
"""
