# Copyright: gpuhost contributors
# Apache-2.0
"""Ansible's `serial` as gpuhost reads it, once for the rolling playbooks' planning
(gpuhost_serving_group.batches) and the CLI's --serial: a count >= 1 or a percentage 1%..100%.

Imports nothing else of the collection: the CLI loads it from its file (gpuhost.plugin_code).
"""

from __future__ import annotations

import re


class SerialError(ValueError):
    """A serial value that is neither a count >= 1 nor a percentage 1%..100%."""


def per_batch(serial, units: int) -> int:
    """Units a batch for Ansible's `serial` (a count >= 1, or "N%" of `units`, N 1..100, at
    least one); the one reading of a serial value for the playbooks' planning and the CLI."""
    text = str(serial).strip()
    found = re.fullmatch(r"(\d+)(%?)", text)
    number = int(found.group(1)) if found else 0
    if number < 1 or (found and found.group(2) and number > 100):
        raise SerialError(f"serial: got {serial!r}; allowed: a count >= 1 or 1%..100%")
    if found.group(2):
        return max(1, units * number // 100)
    return number
