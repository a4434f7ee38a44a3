# Copyright: gpuhost contributors
# Apache-2.0
"""Callback plugin: load the collection's filter and action plugins once, before the first task.

ansible-playbook forks a worker process per task. A worker that templates a
`gpuhost.gpu.*` filter makes ansible-core's Jinja plugin loader import every file under
plugins/filter (it looks for the name in each), and a worker that runs a gpuhost action
imports that action and what it imports; all of that is lost when the worker exits, so the
next task's worker does it again (~0.1 s of controller CPU each time). Loaded here, in the
main process before any worker is forked, each worker inherits them already imported.
Nothing about a run's result depends on it: with it off, the same plugins load in each worker.
"""

from __future__ import annotations

from pathlib import Path

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader

DOCUMENTATION = r"""
---
name: warm
type: aggregate
short_description: Import gpuhost.gpu's filter and action plugins once, before the workers fork
description:
  - Loads the collection's filter plugins and action plugins in the controller's main process
    when the playbook starts, so the per-task worker processes inherit them.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""

_PLUGINS = Path(__file__).resolve().parents[1]
_COLLECTION = "gpuhost.gpu"
# Any filter of the collection (plugins/filter/gpuhost_findings.py).
FILTER_NAME = "merge_findings"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuhost.gpu.warm"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        # One name is enough: to find a collection's filter the loader imports every file of
        # its plugins/filter (ansible-core's Jinja2Loader.get_with_context).
        filter_loader.get(f"{_COLLECTION}.{FILTER_NAME}")
        for path in sorted((_PLUGINS / "action").glob("*.py")):
            action_loader.get(f"{_COLLECTION}.{path.stem}", class_only=True)
