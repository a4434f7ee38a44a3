"""show or move the pinned model revisions of an inventory (models.lock.yml)

The command's logic is gpuhost.models; this module lists it in the registry.
"""

from __future__ import annotations

from gpuhost.models import add_arguments, run

__all__ = ["add_arguments", "run"]
