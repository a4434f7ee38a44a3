# Copyright: gpuhost contributors
# Apache-2.0
"""Tensor parallelism against a GPU count: one rule, one message.

Used by the validator (the TP settings against preflight_expected_gpu_count, before any
change) and by the preflight checks (against the GPUs the host really has), so both say
the same thing and name the variable to change. Pure, stdlib only.
"""

from __future__ import annotations

WHY = "tensor parallelism splits every layer evenly over the GPUs"


def divisors(count):
    return ", ".join(str(d) for d in range(1, count + 1) if count % d == 0) or "none"


def tp_misfit(name, tp, count, count_label):
    """The message when TP size `tp` (setting `name`) does not divide `count` GPUs, else None.

    0 for either means "not set / not known": nothing to say.
    """
    if tp <= 0 or count <= 0 or count % tp == 0:
        return None
    allowed = f"a divisor of {count_label} ({count}): {divisors(count)}"
    return f"{name}: got {tp}; allowed: {allowed} - {WHY}"
